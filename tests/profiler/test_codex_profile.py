"""``llmbridge profile run --provider codex`` end to end: the real Codex CLI.

The pinned CLI (tests/e2e, @openai/codex) works in a fresh workspace per iteration
against a gateway whose model is scripted: it calls Codex's shell tool when the
request offers it, so the command really runs in Codex's sandbox and the workspace
check sees the file it wrote. Every HTTP exchange is kept, so the tokens the
profiler records per prompt are compared with what the gateway reported for that
prompt's requests, and a resumed second prompt is checked to be one thread.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.events import StreamEvent
from llmbridge.core.request import ChatRequest
from tests.e2e.test_codex import MODEL, recorded_gateway
from tests.profiler.cli_fixtures import profile_run

SHELL = "exec_command"
COMMAND = "echo hello > hello.txt"


class ShellOnce(ScriptedBackend):
    """A request offering the shell tool and carrying no tool result gets the shell
    call; one carrying its result gets the final text; a prompt with "again" in it
    gets a plain answer."""

    def __init__(self) -> None:
        super().__init__("scripted", default=Script(text=["Done."]))

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        last_user = next(m.text for m in reversed(request.messages) if m.role == "user")
        tool_round = any(m.role == "tool" for m in request.messages[-2:])
        offered = any(tool.name == SHELL for tool in request.tools)
        if "again" in last_user:
            self.enqueue(Script(text=["Still ", "there."]))
        elif offered and not tool_round:
            self.enqueue(Script(text=[], tool_calls=[(SHELL, {"cmd": COMMAND})]))
        else:
            self.enqueue(Script(text=["Wrote hello.txt."]))
        async for event in super().chat(request):
            yield event


def _usage(call: Any) -> dict[str, int]:
    (done,) = [e for e in call.sse_events() if e.get("type") == "response.completed"]
    usage: dict[str, int] = done["response"]["usage"]
    return usage


def test_codex_run_in_a_workspace(tmp_path: Path) -> None:
    codex = Path(__file__).resolve().parents[1] / "e2e" / "node_modules" / ".bin" / "codex"
    spec = {
        "models": [MODEL],
        "iterations": 2,
        "timeout": 120,
        "codex": {
            "command": str(codex),
            "permission": "allow",
            "instructions": "You are a coding agent. Run shell commands with exec_command.",
            "args": ["--disable", "multi_agent", "--disable", "goals", "--disable", "apps"],
        },
        "prices": {MODEL: {"input": 1.0, "output": 2.0}},
        "scenarios": [
            {
                "id": "hello",
                "prompts": ["Create hello.txt", "Is it there again?"],
                "workspace": {"files": {"README.md": "# demo\n"}},
                "checks": [
                    {"file_exists": "hello.txt"},
                    {"file_contains": {"path": "hello.txt", "text": "hello"}},
                    {"tool_called": "command_execution"},
                    {"contains": "Still there."},
                    {"completes": True},
                ],
            }
        ],
    }
    backend = ShellOnce()
    with recorded_gateway(backend) as (server, recorder):
        records = profile_run(tmp_path, spec, provider="codex", gateway_url=server.url)
    assert len(records) == 2
    calls = recorder.calls("/v1/responses")
    # Per iteration: the tool call, the answer after it, then the resumed prompt's answer.
    assert [e.status for e in recorder.exchanges] == [200] * 6
    assert len(calls) == 6
    for number, record in enumerate(records):
        assert record["provider"] == "codex" and record["model"] == MODEL
        assert record["passed"], record
        assert record["invariant_problems"] == []
        first, second = record["prompts"]
        assert [first["completion_reason"], second["completion_reason"]] == ["stop", "stop"]
        assert first["text"] == "Wrote hello.txt." and second["text"] == "Still there."
        (tool,) = first["tool_calls"]
        assert tool["name"] == "command_execution" and tool["status"] == "completed"
        assert tool["duration_ms"] >= 0
        # The prompt's tokens are what the gateway reported for its own requests.
        own = calls[3 * number : 3 * number + 2], calls[3 * number + 2 : 3 * number + 3]
        for prompt, prompt_calls in zip((first, second), own, strict=True):
            usages = [_usage(call) for call in prompt_calls]
            assert prompt["tokens"]["input"] == sum(u["input_tokens"] for u in usages)
            assert prompt["tokens"]["output"] == sum(u["output_tokens"] for u in usages)
            price = prompt["tokens"]["input"] * 1e-6 + prompt["tokens"]["output"] * 2e-6
            assert abs(prompt["cost"]["total_usd"] - price) < 1e-12
        # One thread: the second prompt's request carries the first prompt's turn.
        resumed = calls[3 * number + 2].body()["input"]
        assert isinstance(resumed, list)
        assert any(item.get("type") == "function_call" for item in resumed)
        events = record["trace"]["events"]
        boundaries = [e for e in events if e["type"] == "turn_boundary"]
        assert [b["turn"] for b in boundaries] == [0, 1]
        assert [b["tokens"]["total"] for b in boundaries] == [
            first["tokens"]["total"],
            second["tokens"]["total"],
        ]
        kinds = [e["type"] for e in events if e["type"] in ("tool_call", "tool_result")]
        assert kinds == ["tool_call", "tool_result"]
        checks = {c["name"]: c["passed"] for c in record["checks"]}
        assert all(checks.values()), checks
    out = tmp_path / "out"  # where profile_run wrote the report
    summary = json.loads((out / "summary.json").read_text())
    assert [(s["provider"], s["scenario"], s["passed"]) for s in summary] == [("codex", "hello", 2)]
    assert "| codex | hello |" in (out / "report.md").read_text()


def test_a_call_the_sandbox_refused_is_named_in_the_trace(tmp_path: Path) -> None:
    """``deny`` is the read-only sandbox: the scripted write fails there. Codex 0.169.0
    usually prints no item for a call its sandbox refused; the provider then finds it in
    Codex's rollout and says so in the trace rather than leave the trace short. On a
    busy machine Codex sometimes does print the item (a failed ``command_execution``):
    then the trace has the call itself, and nothing is said missing."""
    codex = Path(__file__).resolve().parents[1] / "e2e" / "node_modules" / ".bin" / "codex"
    spec = {
        "models": [MODEL],
        "codex": {"command": str(codex), "permission": "deny"},
        "scenarios": [
            {
                "id": "refused",
                "prompt": "Create hello.txt",
                "checks": [{"file_exists": "hello.txt"}],
            }
        ],
    }
    backend = ShellOnce()
    with recorded_gateway(backend) as (server, _):
        (record,) = profile_run(tmp_path, spec, provider="codex", gateway_url=server.url)
    # The model got the refusal back and answered; the file is not there.
    assert [m.role for m in backend.requests[1].messages][-1] == "tool"
    assert "Read-only file system" in backend.requests[1].messages[-1].parts[0].content
    assert not record["passed"]
    assert {c["name"]: c["passed"] for c in record["checks"]} == {"file_exists: hello.txt": False}
    (prompt,) = record["prompts"]
    assert prompt["completion_reason"] == "stop"
    missing = (
        "1 tool call(s) in Codex's rollout are not among the items codex exec --json "
        "printed: not in this trace"
    )
    errors = [e["error"] for e in record["trace"]["events"] if e["type"] == "error"]
    if prompt["tool_calls"]:  # Codex printed the refused call this time
        (call,) = prompt["tool_calls"]
        assert (call["name"], call["status"]) == ("command_execution", "error")
        assert missing not in errors
    else:
        assert errors[-1] == missing

"""Claude Code end to end: the real CLI, pinned in ``tests/e2e/package.json`` (the
current release, and the previous pin under the npm alias ``claude-code-previous``, both
run by the tests that take ``claude``) and installed by ``make test``, with
``ANTHROPIC_BASE_URL`` pointing at the gateway on loopback. It runs fully offline:
``HOME`` is a fresh temporary directory and non-essential traffic (telemetry, update
checks) is switched off.

What Claude Code sends, even with ``--bare``: ``POST /v1/messages?beta=true`` with
``stream: true``, ``thinking``, a ``max_tokens`` far beyond the embedded model's whole
context, and a ``<system-reminder>`` (today's date) before the prompt.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.events import StreamEvent
from llmbridge.core.request import ChatRequest
from llmbridge.gateway.app import create_app
from llmbridge.gateway.config import load_config
from tests.conftest import RunningServer, running_gateway
from tests.e2e.cli_harness import (
    PINS,
    TIMEOUT,
    CliRun,
    ToolLoopBackend,
    check_installed,
    clean_environment,
    failure_report,
    recorded_gateway,
    run_cli,
    tool_round,
)
from tests.e2e.clients import BIN, COMPAT, NODE_MODULES, expected_version
from tests.e2e.mcp_gateway import (
    FINAL_TEXT as MCP_FINAL_TEXT,
)
from tests.e2e.mcp_gateway import (
    GATEWAY_TOOL,
    McpServed,
    McpToolBackend,
    calls_in,
    check_the_tool_ran,
    mcp_gateway,
)
from tests.e2e.recording import Recorder
from tests.e2e.relaying import paths_served, relaying_gateway

CLAUDE = BIN / "claude"
PINNED: str = expected_version("@anthropic-ai/claude-code")  # the newest under make compat
PREVIOUS: str = PINS["claude-code-previous"].rpartition("@")[2]  # npm:@anthropic-ai/...@X
BINARIES = {
    PINNED: CLAUDE,
    PREVIOUS: NODE_MODULES / "claude-code-previous" / "bin" / "claude.exe",
}
RELEASES = [PINNED] if COMPAT else [PINNED, PREVIOUS]
"""The releases the ``claude`` fixture runs each test on: the current pin and the previous
one; under ``make compat`` only the newest release (the compatibility table says the
previous pin was not run)."""


# -- the CLI --------------------------------------------------------------------------


def _environment(home: Path, base_url: str, **extra: str) -> dict[str, str]:
    """Claude Code's variables in a clean environment (cli_harness.clean_environment):
    the gateway, any key, and non-essential traffic and updates off."""
    variables = {
        "CLAUDE_CODE_TMPDIR": str(home / "tmp"),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "anything",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    return clean_environment(home, **{**variables, **extra})


@dataclass(frozen=True)
class Claude:
    path: Path
    version: str


def _installed(version: str, tmp_path_factory: pytest.TempPathFactory) -> Claude:
    """A pinned CLI. Missing or stale means the suite was not set up: fail, never skip."""
    binary = BINARIES[version]
    home = tmp_path_factory.mktemp("claude-version")
    check_installed(
        "Claude Code",
        binary,
        pinned=version,
        accepts=lambda printed: printed.startswith(version + " "),
        env=_environment(home, "http://127.0.0.1:9"),
        cwd=home,
    )
    return Claude(binary, version)


@pytest.fixture(scope="session", params=RELEASES)
def claude(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Claude:
    """Each pinned CLI in turn: the current release and the previous pin."""
    version: str = request.param
    return _installed(version, tmp_path_factory)


@pytest.fixture(scope="session")
def current_claude(tmp_path_factory: pytest.TempPathFactory) -> Claude:
    """The current release only."""
    return _installed(PINNED, tmp_path_factory)


def run_claude(claude: Path, home: Path, base_url: str, args: list[str], **env: str) -> CliRun:
    """``claude <args>`` in ``home``, against the gateway at ``base_url``."""
    return run_cli("Claude Code", claude, args, env=_environment(home, base_url, **env), cwd=home)


# -- the zero-configuration gateway: the embedded model answers ---------------------


@pytest.mark.embedded
def test_prints_the_embedded_models_answer(claude: Claude, tmp_path: Path) -> None:
    """``claude -p`` on the zero-config gateway prints what the embedded model said.

    Temperature 0 (through ``CLAUDE_CODE_EXTRA_BODY``, which Claude Code merges into
    every request body) makes the answer repeatable: at llama.cpp's default sampling
    the date reminder Claude Code puts before the question distracts the 135M model,
    and now and then it loops until the context is full (minutes, since Claude Code asks
    for 64000 tokens). What it says at temperature 0 still depends on the CPU and the
    llama.cpp build ("Català: Català ..." on one machine), so the answer is
    compared with what the same request gives, not streamed, from a fresh gateway.
    """
    recorder = Recorder(create_app(load_config(None)))
    args = [
        "-p",
        "What is the capital of France?",
        "--bare",
        "--system-prompt",
        "Answer in one short sentence.",
        "--tools",
        "",
    ]
    with RunningServer(recorder) as server:
        run = run_claude(
            claude.path, tmp_path, server.url, args, CLAUDE_CODE_EXTRA_BODY='{"temperature": 0}'
        )

    assert run.returncode == 0, run.report()
    calls = recorder.messages_calls()
    assert len(calls) == 1, run.report()
    call = calls[0]
    assert call.status == 200, f"{call.response.decode(errors='replace')}\n{run.report()}"
    assert call.query == "beta=true", run.report()
    body = call.body()
    # What the gateway has to cope with: streaming, thinking, no tools, and far more
    # output tokens than the model's whole 8k context.
    assert body["stream"] is True
    assert "thinking" in body
    assert body["tools"] == []
    assert isinstance(body["max_tokens"], int) and body["max_tokens"] > 8192
    assert call.headers["user-agent"].startswith(f"claude-cli/{claude.version} ")

    answer = call.streamed_text().strip()
    assert answer, run.report()
    assert run.stdout.strip() == answer, run.report()
    # The same request through the non-streaming /v1/messages of a fresh zero-config
    # gateway (a fresh model, as this one was when Claude Code asked): the same answer.
    with RunningServer(create_app(load_config(None))) as fresh:
        replayed = httpx.post(
            fresh.url + "/v1/messages",
            json={**body, "stream": False},
            headers={"anthropic-version": "2023-06-01"},
            timeout=TIMEOUT,
        )
    assert replayed.status_code == 200, replayed.text
    blocks = replayed.json()["content"]
    text = "".join(b["text"] for b in blocks if b["type"] == "text").strip()
    assert text == answer, f"not streamed: {text!r}\n{run.report()}"


# -- a scripted backend asks for a Bash call; Claude Code runs it --------------------

MARKER_COMMAND = "echo llmbridge-e2e-$((6*7))"
MARKER = "llmbridge-e2e-42"  # only a shell that ran the command prints 42
FINAL_TEXT = "The command printed the marker."


def test_runs_the_bash_command_the_model_asks_for(claude: Claude, tmp_path: Path) -> None:
    # Replies by what the request holds, so extra requests Claude Code might make
    # (titles, summaries) cannot take the scripted turns.
    call = {"command": MARKER_COMMAND, "description": "Print a marker"}
    backend = ToolLoopBackend("Bash", call, [FINAL_TEXT])
    args = [
        "-p",
        "Run the marker command",
        "--bare",
        "--system-prompt",
        "You run shell commands for the user.",
        "--tools",
        "Bash",
        "--allowedTools",
        "Bash",
    ]
    with running_gateway({"scripted": backend}) as server:
        run = run_claude(claude.path, tmp_path, server.url, args)

    report = failure_report(run, received=backend.requests)
    assert run.returncode == 0, report
    assert FINAL_TEXT in run.stdout, report
    assert len(backend.requests) >= 2, report
    with_bash = [r for r in backend.requests if any(t.name == "Bash" for t in r.tools)]
    assert len(with_bash) >= 2, report
    assert [t.name for t in with_bash[0].tools] == ["Bash"], report  # --tools Bash: only Bash

    # The request after the Bash call: the assistant's call, then the tool's output.
    follow_up = next((r for r in with_bash if any(m.role == "tool" for m in r.messages)), None)
    assert follow_up is not None, report
    sent_call, result = tool_round(follow_up, report)
    assert sent_call.name == "Bash" and sent_call.arguments["command"] == MARKER_COMMAND, report
    assert not result.is_error, report
    assert MARKER in result.content, report


# -- the current release's own request, without --bare -----------------------------


def test_the_current_releases_full_request_is_mapped(
    current_claude: Claude, tmp_path: Path
) -> None:
    """Claude Code 2.1.332 as people run it (no ``--bare``): its whole tool set with
    deferred (tool search) tools, a ``role: "system"`` turn carrying the per-turn
    effort, adaptive thinking with ``display: "omitted"``. Every exchange succeeds,
    and the backend (no tool search) gets the loaded tools only, the effort, and no
    empty system turn."""
    backend = ScriptedBackend(
        "scripted", models=("qwen3:8b",), default=Script(thinking=["hm"], text=["ok"])
    )
    with recorded_gateway(backend, "claude-*", "qwen3:8b") as (server, recorder):
        run = run_claude(current_claude.path, tmp_path, server.url, ["-p", "Say ok"])
    report = failure_report(run, received=backend.requests)
    assert run.returncode == 0, report
    assert "ok" in run.stdout, report
    assert all(e.status is not None and e.status < 400 for e in recorder.exchanges), [
        (e.method, e.path, e.status) for e in recorder.exchanges
    ]
    calls = recorder.messages_calls()
    body = calls[-1].body()
    sent_tools = body["tools"]
    assert isinstance(sent_tools, list)
    deferred = {t["name"] for t in sent_tools if t.get("defer_loading") is True}
    loaded = [t["name"] for t in sent_tools if t.get("defer_loading") is not True]
    assert deferred, "2.1.332 defers some tools (tool search); the test needs one"
    assert body["thinking"] == {"type": "adaptive", "display": "omitted"}

    seen = backend.requests[-1]
    assert [t.name for t in seen.tools] == loaded, report
    assert not deferred & {t.name for t in seen.tools}, report
    assert seen.thinking is not None and seen.thinking.effort == "medium", report
    assert all(m.text for m in seen.messages if m.role == "system"), report
    # display "omitted": the backend's reasoning is not shown.
    assert "thinking_delta" not in calls[-1].response.decode(), report


# -- through OpenCode: a backend without tools, so tool calling is emulated -----------


class DecidingModel(ScriptedBackend):
    """OpenCode's model provider: it answers the gateway's tool decision prompt
    (features/tool_emulation.py) with a Bash call, then, once the prompt shows the
    command's output, with the final answer. OpenCode itself is offered no tools."""

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        prompt = request.messages[-1].text if request.messages else ""
        if "Available tools:" in prompt and "Bash" in prompt:
            if f"[Bash result: {MARKER}" in prompt:
                decision = {"action": "answer", "content": FINAL_TEXT}
            else:
                arguments = {"command": MARKER_COMMAND, "description": "Print a marker"}
                decision = {"action": "tool_call", "tool_name": "Bash", "arguments": arguments}
            self.enqueue(Script(text=[json.dumps(decision)]))
        async for event in super().chat(request):
            yield event


def test_runs_the_bash_command_an_opencode_model_decides_on(
    current_claude: Claude, tmp_path: Path
) -> None:
    from tests.e2e.opencode import gateway_over_opencode

    model = DecidingModel("model", models=("scripted",), default=Script(text=["(not scripted)"]))
    args = ["-p", "Run the marker command", "--bare", "--tools", "Bash", "--allowedTools", "Bash"]
    with gateway_over_opencode(
        {"model": model},
        {"scripted": {"context": 32768, "output": 1024}},
        default_model="gw/scripted",
        routes=[{"name": "scripted", "backend": "model"}],
    ) as (server, opencode):
        run = run_claude(current_claude.path, tmp_path, server.url, args)
    report = failure_report(run, received=model.requests, receiver="the model")
    assert run.returncode == 0, report
    assert FINAL_TEXT in run.stdout, report
    decisions = [r for r in model.requests if "Available tools:" in r.messages[-1].text]
    assert len(decisions) >= 2, report
    assert all(r.tools == () for r in model.requests), report  # OpenCode offered no tools
    assert f"[Bash result: {MARKER}" in decisions[-1].messages[-1].text, report
    assert opencode.server.restarts == 0


# -- a gateway MCP tool, through --mcp-config ----------------------------------------

MCP_TOOL = f"mcp__gw__{GATEWAY_TOOL}"  # Claude Code's name: mcp__<server in its config>__<tool>
SEARCH_TOOL = "ToolSearch"  # 2.1.332's own tool search: a client tool every backend gets


def _mcp_config(home: Path, served: McpServed) -> Path:
    """``--mcp-config``: the gateway's ``/mcp`` as the HTTP server ``gw``, with the key."""
    config = home / "mcp.json"
    server = {"type": "http", "url": served.mcp_url, "headers": served.bearer()}
    config.write_text(json.dumps({"mcpServers": {"gw": server}}), encoding="utf-8")
    return config


@pytest.mark.parametrize("tool_search", ["default", "false"])
def test_calls_a_gateway_mcp_tool(current_claude: Claude, tmp_path: Path, tool_search: str) -> None:
    """Claude Code 2.1.332 with the gateway's ``/mcp`` in ``--mcp-config`` (keys on, a
    database key for both APIs) calls ``files__read_text_file`` on server-filesystem
    as ``mcp__gw__files__read_text_file`` when the model asks.

    By default (a custom base URL) it keeps MCP tools behind its own tool search: the
    first request names them only in a system message and offers ``ToolSearch``; the
    model searches, Claude Code answers with a ``tool_reference`` block and sends the
    tool (``defer_loading: true``) from then on, which the gateway passes to the backend
    as a tool (dialects/anthropic/request.py). ``ENABLE_TOOL_SEARCH=false`` sends every
    MCP tool in full from the first request."""
    arguments = {"path": ""}  # set once the note's path is known
    backend = McpToolBackend(MCP_TOOL, arguments, search=SEARCH_TOOL)
    env = {} if tool_search == "default" else {"ENABLE_TOOL_SEARCH": tool_search}
    with mcp_gateway(backend, "claude-*", "scripted", tmp_path) as served:
        arguments["path"] = str(served.note)
        args = ["-p", "Read the note", "--strict-mcp-config", "--allowedTools", MCP_TOOL]
        args += ["--mcp-config", str(_mcp_config(tmp_path, served))]
        run = run_claude(
            current_claude.path,
            tmp_path,
            served.server.url,
            args,
            ANTHROPIC_API_KEY=served.key,
            **env,
        )
    report = failure_report(run, exchanges=served.exchange_lines(), received=backend.requests)
    assert run.returncode == 0, report
    assert MCP_FINAL_TEXT in run.stdout, report
    assert all(e.status is not None and e.status < 400 for e in served.recorder.exchanges), report
    check_the_tool_ran(served, backend.requests, MCP_TOOL, report)

    calls = served.recorder.messages_calls()
    first = calls[0].body()["tools"]
    assert isinstance(first, list)
    wire = {tool["name"]: tool for tool in first}
    if tool_search == "default":
        # Named, not sent: the backend first sees only the search tool.
        assert MCP_TOOL not in wire and SEARCH_TOOL in wire, report
        assert MCP_TOOL in json.dumps(calls[0].body()["messages"]), report
        assert MCP_TOOL not in {t.name for t in backend.requests[0].tools}, report
        searched = calls[1].body()["tools"]
        assert isinstance(searched, list)
        (loaded,) = [t for t in searched if t["name"] == MCP_TOOL]
        assert loaded.get("defer_loading") is True, loaded
        assert [c.name for c in calls_in(backend.requests[-1])] == [SEARCH_TOOL, MCP_TOOL]
    else:
        assert SEARCH_TOOL not in wire and "defer_loading" not in wire[MCP_TOOL], report
        assert [c.name for c in calls_in(backend.requests[-1])] == [MCP_TOOL], report
    assert len(calls) == len(backend.requests) == (3 if tool_search == "default" else 2), report


# -- the pass-through path: an Anthropic backend relays Claude Code's requests ----------


def test_runs_the_tool_loop_on_the_pass_through_path(
    current_claude: Claude, tmp_path: Path
) -> None:
    """Claude Code in front of a gateway whose backend speaks Anthropic Messages (another
    gateway, serving the scripted tool loop): each of its requests is relayed as bytes
    (docs/PASSTHROUGH.md), and the Bash round trip works as on the translated path."""
    call = {"command": MARKER_COMMAND, "description": "Print a marker"}
    backend = ToolLoopBackend("Bash", call, [FINAL_TEXT])
    args = ["-p", "Run the marker command", "--bare", "--tools", "Bash", "--allowedTools", "Bash"]
    with (
        running_gateway({"scripted": backend}) as inner,
        relaying_gateway(inner.url, "anthropic") as (front, recorder),
    ):
        # Thinking off: with it on, a tool turn must open with the thinking block
        # Anthropic signed, which a scripted model behind a gateway cannot have, so
        # the follow-up would be translated (sent without thinking, as Anthropic asks).
        run = run_claude(
            current_claude.path, tmp_path, front.url, args, CLAUDE_CODE_DISABLE_THINKING="1"
        )
    report = failure_report(run, received=backend.requests)
    assert run.returncode == 0, report
    assert FINAL_TEXT in run.stdout, report
    served = paths_served(recorder)
    assert len(served) >= 2 and set(served) == {"passthrough"}, (served, report)
    follow_up = next(r for r in backend.requests if any(m.role == "tool" for m in r.messages))
    _, result = tool_round(follow_up, report)
    assert MARKER in result.content, report

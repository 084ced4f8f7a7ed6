"""``llmbridge profile run`` end to end: the real OpenCode server, and the agent service.

OpenCode (the pinned ``opencode serve``) gets its model from a gateway serving a
scripted backend, so each step's output is exact; the agent service gets the same
model through the gateway's OpenAI route. Each run writes traces, a summary and
reports that are checked here; one run also sends its spans to an OTLP receiver.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.cli import cli
from tests.conftest import RunningServer, running_gateway
from tests.e2e.opencode import opencode_binary


@pytest.fixture(scope="module")
def model() -> ScriptedBackend:
    return ScriptedBackend("model", models=("scripted",))


@pytest.fixture(scope="module")
def gateway(model: ScriptedBackend) -> Iterator[RunningServer]:
    with running_gateway({"model": model}, models=[{"name": "scripted", "backend": "model"}]) as gw:
        yield gw


def _write(path: Path, spec: dict[str, Any]) -> Path:
    path.write_text(json.dumps(spec))  # JSON is YAML
    return path


def _run(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, ["profile", "run", *args, "--quiet"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    last = [line for line in result.output.splitlines() if line.startswith("{")][-1]
    out: dict[str, Any] = json.loads(last)
    return out


def _records(out: Path) -> list[dict[str, Any]]:
    lines = (out / "traces.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_opencode_run_writes_traces_metrics_and_reports(
    gateway: RunningServer, model: ScriptedBackend, tmp_path: Path
) -> None:
    model.queue.clear()
    model.enqueue(
        Script(text=["Paris ", "is the capital."]),
        Script(text=["Paris."]),
        Script(
            text=[], tool_calls=[("bash", {"command": "echo hi > out.txt", "description": "x"})]
        ),
        Script(text=["Wrote out.txt."]),
        Script(text=["too ", "late"], chunk_delay=20),
    )
    spec = {
        "models": ["gw/scripted"],
        "iterations": 1,
        "timeout": 60,
        "opencode": {
            "endpoint": {"url": gateway.url + "/v1", "limits": {"context": 32768, "output": 1024}},
            "permission": "allow",
        },
        "prices": {"gw/scripted": {"input": 1.0, "output": 2.0}},
        "scenarios": [
            {
                "id": "capital",
                "system": "Answer in one sentence.",
                "prompts": ["What is the capital of France?", "Say it shorter."],
                "checks": [{"contains": "Paris"}, {"completes": True}],
            },
            {"id": "shell", "prompt": "Write hi to out.txt", "checks": [{"tool_called": "bash"}]},
            {
                "id": "slow",
                "prompt": "Take your time.",
                "timeout": 2,
                "checks": [{"completes": True}],
            },
        ],
    }
    out = tmp_path / "out"
    result = _run(
        str(_write(tmp_path / "s.yaml", spec)),
        "--provider",
        "opencode",
        "--out",
        str(out),
        "--opencode-command",
        opencode_binary(),
    )
    assert result == {"out": str(out), "iterations": 3, "passed": 2}
    records = {r["scenario"]: r for r in _records(out)}

    capital = records["capital"]
    assert capital["passed"] and capital["invariant_problems"] == []
    assert [p["text"] for p in capital["prompts"]] == ["Paris is the capital.", "Paris."]
    first = capital["prompts"][0]
    assert first["completion_reason"] == "stop" and first["tokens"]["input"] > 0
    assert first["timing"]["ttft_ms"] is not None and first["timing"]["total_ms"] > 0
    assert first["cost"]["source"] == "price_table" and first["cost"]["total_usd"] > 0
    assert "Answer in one sentence." in model.requests[0].messages[0].text  # the system text
    assert [e["type"] for e in capital["trace"]["events"]] == [
        "turn_boundary",
        "text_output",
        "turn_boundary",
        "text_output",
    ]
    root = capital["spans"][0]
    assert root["attributes"]["gen_ai.operation.name"] == "invoke_agent"
    assert root["attributes"]["gen_ai.request.model"] == "gw/scripted"
    assert root["attributes"]["gen_ai.usage.input_tokens"] > 0

    shell = records["shell"]
    assert shell["passed"]
    call = shell["prompts"][0]["tool_calls"][0]
    assert call["name"] == "bash" and call["status"] == "completed"
    tool_span = next(s for s in shell["spans"] if s["name"] == "execute_tool bash")
    assert tool_span["attributes"]["gen_ai.tool.call.id"] == call["call_id"]

    slow = records["slow"]
    assert not slow["passed"] and slow["prompts"][0]["completion_reason"] == "timeout"
    assert "did not finish within 2 s" in slow["error"]

    summary = {s["scenario"]: s for s in json.loads((out / "summary.json").read_text())}
    assert summary["capital"]["pass_rate"] == 1.0 and summary["slow"]["pass_rate"] == 0.0
    assert summary["slow"]["completion_reasons"] == {"timeout": 1}
    page = (out / "report.html").read_text()
    # Duration, tokens and cost charts (the price table gives a cost), a timeline per iteration.
    assert page.count('class="chart"') == 3 and "capital" in page
    assert page.count('class="timeline"') == len(records)
    assert "| capital | gw/scripted | default | 1/1 (100%) |" in (out / "report.md").read_text()


def test_permission_requests_are_answered_by_the_policy(
    gateway: RunningServer, model: ScriptedBackend, tmp_path: Path
) -> None:
    """``ask-reject``: OpenCode asks before running bash; the provider refuses."""
    model.queue.clear()
    model.enqueue(
        Script(text=[], tool_calls=[("bash", {"command": "echo hi > x.txt", "description": "x"})]),
        Script(text=["I was not allowed."]),
    )
    spec = {
        "models": ["gw/scripted"],
        "opencode": {"endpoint": {"url": gateway.url + "/v1"}, "permission": "ask-reject"},
        "scenarios": [
            {"id": "refused", "prompt": "Write x.txt", "checks": [{"tool_called": "bash"}]}
        ],
    }
    out = tmp_path / "out"
    _run(
        str(_write(tmp_path / "s.yaml", spec)),
        "--out",
        str(out),
        "--opencode-command",
        opencode_binary(),
    )
    (record,) = _records(out)
    (call,) = record["prompts"][0]["tool_calls"]
    assert call["status"] == "error" and "reject" in (call["error"] or "").lower()
    assert any(e["type"] == "error" and e.get("tool") == "bash" for e in record["trace"]["events"])


class _OTLPReceiver:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.app = Starlette(routes=[Route("/v1/traces", self._receive, methods=["POST"])])

    async def _receive(self, request: Request) -> Response:
        self.bodies.append(await request.body())
        return Response(b"", media_type="application/x-protobuf")


def test_otlp_export_without_the_otlp_extra_is_one_line_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a plain install (no ``otlp`` extra) runs it: every OpenTelemetry module ``None``
    in ``sys.modules``, so importing one fails and ``find_spec`` finds none."""
    loaded = [name for name in sys.modules if name.startswith("opentelemetry.")]
    for name in {"opentelemetry", "opentelemetry.sdk", *loaded}:
        monkeypatch.setitem(sys.modules, name, None)
    spec = {"models": ["scripted"], "scenarios": [{"id": "hi", "prompt": "Say hello."}]}
    out = tmp_path / "out"
    arguments = [str(_write(tmp_path / "s.yaml", spec)), "--provider", "agent", "--out", str(out)]
    result = CliRunner().invoke(
        cli, ["profile", "run", *arguments, "--otlp-endpoint", "http://127.0.0.1:9/v1/traces"]
    )
    assert result.output.splitlines() == [
        "Error: --otlp-endpoint needs the OpenTelemetry exporter: pip install 'llmbridge[otlp]'"
    ]
    assert result.exit_code == 1
    assert not out.exists()  # refused before anything ran


def test_agent_service_run_with_otlp_export(
    gateway: RunningServer, model: ScriptedBackend, tmp_path: Path
) -> None:
    model.queue.clear()
    model.enqueue(Script(text=["Bonjour", " !"]), Script(text=["Au revoir."]))
    spec = {
        "models": ["scripted"],
        "prices": {"scripted": {"input": 1.0, "output": 2.0}},
        "agent": {"persona": {"name": "french", "prompt": "Always answer in French."}},
        "scenarios": [
            {
                "id": "greet",
                "prompts": ["Say hello.", "Say goodbye."],
                "checks": [{"contains": "revoir"}, {"completes": True}],
            }
        ],
    }
    receiver = _OTLPReceiver()
    out = tmp_path / "out"
    with RunningServer(receiver.app) as collector:
        result = _run(
            str(_write(tmp_path / "s.yaml", spec)),
            "--provider",
            "agent",
            "--gateway-url",
            gateway.url,
            "--out",
            str(out),
            "--otlp-endpoint",
            collector.url + "/v1/traces",
        )
    assert result["passed"] == 1
    (record,) = _records(out)
    assert [p["text"] for p in record["prompts"]] == ["Bonjour !", "Au revoir."]
    assert record["invariant_problems"] == []
    assert [e["type"] for e in record["trace"]["events"]] == [
        "turn_boundary",
        "text_output",
        "turn_boundary",
        "text_output",
    ]
    # Each prompt's priced cost rides on its step, as its tokens do (the HTML timeline).
    boundaries = [e for e in record["trace"]["events"] if e["type"] == "turn_boundary"]
    assert [b["cost_usd"] for b in boundaries] == [
        p["cost"]["total_usd"] for p in record["prompts"]
    ]
    assert all(p["cost"]["total_usd"] > 0 for p in record["prompts"])
    assert "Always answer in French." in model.requests[-1].messages[0].text
    assert receiver.bodies and b"invoke_agent" in b"".join(receiver.bodies)

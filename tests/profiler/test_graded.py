"""The optional model-graded scanner: off by default; with
``--grade-model`` the model is asked through the gateway, with a JSON schema for its
answer, and what it says becomes ``graded`` findings beside the deterministic ones; a
grader that fails adds nothing and the run stands.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.cli import cli
from llmbridge.core.events import StreamEvent
from llmbridge.core.request import ChatRequest
from tests.conftest import RunningServer, running_gateway

VERDICT = {"findings": [{"kind": "gave up", "message": "It stopped before writing the file."}]}


class AgentAndGrader(ScriptedBackend):
    """The agent's requests get a plain reply; the grader's (its instructions say "You
    review") get ``answer``, and are kept."""

    def __init__(self) -> None:
        super().__init__("model", models=("scripted",), default=Script(text=["Sure."]))
        self.answer = json.dumps(VERDICT)
        self.graded: list[ChatRequest] = []

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        if request.messages and "You review" in request.messages[0].text:
            self.graded.append(request)
            self.enqueue(Script(text=[self.answer]))
        async for event in super().chat(request):
            yield event


@pytest.fixture(scope="module")
def backend() -> AgentAndGrader:
    return AgentAndGrader()


@pytest.fixture(scope="module")
def gateway(backend: AgentAndGrader) -> Iterator[RunningServer]:
    with running_gateway(
        {"model": backend}, models=[{"name": "scripted", "backend": "model"}]
    ) as server:
        yield server


def _run(tmp_path: Path, gateway: RunningServer, *extra: str) -> list[dict[str, Any]]:
    spec = {
        "models": ["scripted"],
        "iterations": 2,
        "scenarios": [{"id": "task", "prompt": "Write the file.", "checks": [{"completes": True}]}],
    }
    scenarios = tmp_path / "s.yaml"
    scenarios.write_text(json.dumps(spec))
    out = tmp_path / "out"
    args = ["profile", "run", str(scenarios), "--provider", "agent", "--quiet"]
    args += ["--gateway-url", gateway.url, "--out", str(out), *extra]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]


def test_off_by_default(gateway: RunningServer, backend: AgentAndGrader, tmp_path: Path) -> None:
    backend.graded.clear()
    records = _run(tmp_path, gateway)
    assert backend.graded == []
    assert all(r["findings"] == [] for r in records)


def test_the_graders_findings_join_each_record(
    gateway: RunningServer, backend: AgentAndGrader, tmp_path: Path
) -> None:
    backend.graded.clear()
    records = _run(tmp_path, gateway, "--grade-model", "scripted")
    assert len(backend.graded) == 2
    request = backend.graded[0]
    assert request.response_format is not None
    assert "USER: Write the file." in request.messages[-1].text
    for record in records:
        assert record["findings"] == [
            {
                "kind": "graded",
                "message": "gave up: It stopped before writing the file.",
                "evidence": ["scripted"],
            }
        ]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "### graded (2 of 2 iterations)" in report


def test_a_grader_that_answers_badly_adds_nothing(
    gateway: RunningServer, backend: AgentAndGrader, tmp_path: Path
) -> None:
    backend.answer = "I cannot help with that."
    try:
        records = _run(tmp_path, gateway, "--grade-model", "scripted")
    finally:
        backend.answer = json.dumps(VERDICT)
    assert [r["passed"] for r in records] == [True, True]
    assert all(r["findings"] == [] for r in records)


def test_the_grader_needs_a_gateway(tmp_path: Path) -> None:
    scenarios = tmp_path / "s.yaml"
    scenarios.write_text(json.dumps({"models": ["m"], "scenarios": [{"id": "x", "prompt": "y"}]}))
    result = CliRunner().invoke(
        cli, ["profile", "run", str(scenarios), "--provider", "agent", "--grade-model", "m"]
    )
    assert result.exit_code == 2 and "--grade-model needs --gateway-url" in result.output

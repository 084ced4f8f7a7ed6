"""ATIF export and ``profile import``: every iteration of a run is
written as an ATIF trajectory that validates against the format's schema, and
``profile import`` reads trajectories back into the same records, reports and
findings (a round trip), and reads a trajectory another tool wrote.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.cli import cli
from llmbridge.profiler.records.atif import ATIF_SCHEMA, from_atif, to_atif
from llmbridge.profiler.records.findings import scan
from llmbridge.profiler.records.records import IterationRecord
from tests.conftest import RunningServer, running_gateway
from tests.profiler.test_codex import _replay

VALIDATOR = jsonschema.Draft202012Validator(ATIF_SCHEMA)


def _valid(trajectory: dict[str, Any]) -> None:
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in VALIDATOR.iter_errors(trajectory)]
    assert errors == []


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningServer]:
    backend = ScriptedBackend(
        "model", models=("scripted",), default=Script(text=["Fine, ", "thanks."])
    )
    with running_gateway(
        {"model": backend}, models=[{"name": "scripted", "backend": "model"}]
    ) as gw:
        yield gw


def _cli(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, ["profile", *args, "--quiet"])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.output.strip().splitlines()[-1]))


def _essentials(record: dict[str, Any]) -> dict[str, Any]:
    """What a trajectory keeps of a record."""
    prompts = record["prompts"]
    return {
        **{k: record[k] for k in ("scenario", "model", "mode", "provider", "iteration")},
        **{k: record[k] for k in ("passed", "inputs", "checks", "findings", "session_id")},
        "reasons": [p["completion_reason"] for p in prompts],
        "tokens": [p["tokens"] for p in prompts],
        "cost": [p["cost"]["total_usd"] for p in prompts],
        "events": [(e["type"], e.get("tool"), e.get("text")) for e in record["trace"]["events"]],
    }


def test_a_run_exports_valid_trajectories_that_import_back_to_the_same_run(
    gateway: RunningServer, tmp_path: Path
) -> None:
    spec = {
        "models": ["scripted"],
        "iterations": 2,
        "prices": {"scripted": {"input": 1.0, "output": 2.0}},
        "scenarios": [
            {"id": "chat", "prompts": ["How are you?", "And now?"], "checks": [{"completes": True}]}
        ],
    }
    scenarios = tmp_path / "s.yaml"
    scenarios.write_text(json.dumps(spec))
    run = tmp_path / "run"
    _cli(
        "run",
        str(scenarios),
        "--provider",
        "agent",
        "--gateway-url",
        gateway.url,
        "--out",
        str(run),
    )
    files = sorted((run / "trajectories").glob("*.json"))
    assert len(files) == 2
    for path in files:
        trajectory = json.loads(path.read_text())
        _valid(trajectory)
        assert [s["source"] for s in trajectory["steps"]] == ["user", "agent", "user", "agent"]
        assert trajectory["steps"][0]["message"] == "How are you?"
        assert trajectory["steps"][1]["message"] == "Fine, thanks."
        assert trajectory["final_metrics"]["total_completion_tokens"] > 0
        assert trajectory["final_metrics"]["total_cost_usd"] > 0

    imported = tmp_path / "imported"
    assert _cli("import", str(run / "trajectories"), "--out", str(imported)) == {
        "out": str(imported),
        "iterations": 2,
        "passed": 2,
    }
    original = [json.loads(line) for line in (run / "traces.jsonl").read_text().splitlines()]
    again = [json.loads(line) for line in (imported / "traces.jsonl").read_text().splitlines()]
    assert [_essentials(r) for r in again] == [_essentials(r) for r in original]
    # The imported run is a run: its summary and reports, and compare reads it.
    assert json.loads((imported / "summary.json").read_text())[0]["passed"] == 2
    assert "| agent | chat | scripted |" in (imported / "report.md").read_text()
    result = CliRunner().invoke(cli, ["profile", "compare", str(run), str(imported)])
    assert result.exit_code == 0, result.output


async def test_tool_calls_and_their_failures_survive_the_round_trip(tmp_path: Path) -> None:
    (result,), trace, _ = await _replay("shell_failed", tmp_path)
    record = IterationRecord(
        scenario="shell",
        model="m",
        mode="default",
        iteration=3,
        session_id="thread-1",
        prompts=[result],
        checks=[],
        passed=False,
        trace=trace.to_dict(),
        provider="codex",
        inputs=["Run the script."],
    )
    record.findings = [f.to_json() for f in scan(record, record.inputs)]
    exported = to_atif(record)
    _valid(exported)
    (agent_step,) = [s for s in exported["steps"] if s.get("tool_calls")]
    (call,) = agent_step["tool_calls"]
    assert call["function_name"] == "command_execution"
    (observed,) = agent_step["observation"]["results"]
    assert (
        observed["source_call_id"] == call["tool_call_id"] and "exit code 3" in observed["content"]
    )

    back = from_atif(json.loads(json.dumps(exported)))
    assert to_atif(back) == exported  # a fixed point: nothing is lost or invented
    assert [c.status for c in back.prompts[0].metrics.tool_calls] == ["error"]
    assert [f["kind"] for f in back.findings] == [f["kind"] for f in record.findings]
    assert [f.kind for f in scan(back, back.inputs)] == [f["kind"] for f in record.findings]


def _foreign() -> dict[str, Any]:
    """A trajectory another tool wrote: no llmbridge fields, a failed call."""
    return {
        "schema_version": "ATIF-v1.4",
        "session_id": "other-tool-run-7",
        "agent": {"name": "some-agent", "version": "2.0", "model_name": "big-model"},
        "steps": [
            {"step_id": 1, "source": "system", "message": "You are a coding agent."},
            {"step_id": 2, "source": "user", "message": "Fix the build."},
            {
                "step_id": 3,
                "source": "agent",
                "message": "",
                "tool_calls": [
                    {"tool_call_id": "a", "function_name": "bash", "arguments": {"cmd": "make"}}
                ],
                "observation": {"results": [{"source_call_id": "a", "content": "make: ok"}]},
                "metrics": {"prompt_tokens": 120, "completion_tokens": 30, "cached_tokens": 100},
            },
            {"step_id": 4, "source": "agent", "message": "The build passes."},
        ],
    }


def test_a_trajectory_another_tool_wrote_is_imported(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps(_foreign()))
    out = tmp_path / "out"
    assert _cli("import", str(path), "--out", str(out))["passed"] == 1
    (record,) = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    assert record["provider"] == "some-agent" and record["scenario"] == "other-tool-run-7"
    assert record["inputs"] == ["Fix the build."]
    (prompt,) = record["prompts"]
    assert prompt["tokens"]["input"] == 20 and prompt["tokens"]["cache_read"] == 100
    assert prompt["text"] == "The build passes."
    assert [t["name"] for t in prompt["tool_calls"]] == ["bash"]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda t: t.pop("agent"), "'agent' is a required property"),
        (lambda t: t["steps"][2].update(source="robot"), "at steps/2/source"),
        (lambda t: t["steps"][1].update(metrics={"prompt_tokens": 1}), "at steps/1"),
    ],
)
def test_a_file_that_is_not_a_trajectory_is_named_with_what_is_wrong(
    tmp_path: Path, change: Any, said: str
) -> None:
    trajectory = _foreign()
    change(trajectory)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(trajectory))
    result = CliRunner().invoke(cli, ["profile", "import", str(path), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert f"{path}: not an ATIF trajectory" in result.output and said in result.output
    assert "Traceback" not in result.output

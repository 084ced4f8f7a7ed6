"""The findings detectors: each fires on its fixture and not on its
clean twin, and the report groups what they found.

The traces are what the providers' mappings produce (``TraceBuilder``'s events: a
failed call is an ``error`` event with the call's id); the failing and the passing
command of the Codex fixtures go through the real Codex mapping.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmbridge.profiler.records.findings import FINDING_KINDS, scan
from llmbridge.profiler.records.records import IterationRecord, summarise
from llmbridge.profiler.records.types import (
    CompletionReason,
    CostMetrics,
    PromptMetrics,
    PromptResult,
    TimingMetrics,
    TokenMetrics,
)
from llmbridge.profiler.report.html_report import html_report
from llmbridge.profiler.report.report import markdown_report
from tests.profiler.test_codex import _replay


def _prompt(text: str = "Done.", reason: CompletionReason = "stop", error: str | None = None):  # type: ignore[no-untyped-def]
    metrics = PromptMetrics(TokenMetrics(10, 5), TimingMetrics(100.0, 900.0), (), CostMetrics())
    return PromptResult(text, metrics, reason, error)


def _record(events: list[dict[str, Any]], **changes: Any) -> IterationRecord:
    values: dict[str, Any] = {
        "scenario": "task",
        "model": "m",
        "mode": "default",
        "iteration": 0,
        "session_id": "s",
        "prompts": [_prompt()],
        "checks": [],
        "passed": True,
        "trace": {"session_id": "s", "events": events},
        "provider": "codex",
    }
    return IterationRecord(**{**values, **changes})


def _call(call_id: str, tool: str, arguments: Any) -> dict[str, Any]:
    return {
        "type": "tool_call",
        "turn": 0,
        "tool": tool,
        "call_id": call_id,
        "arguments": arguments,
    }


def _ok(call_id: str, tool: str) -> dict[str, Any]:
    return {"type": "tool_result", "turn": 0, "tool": tool, "call_id": call_id, "text": "ok"}


def _fail(call_id: str, tool: str, error: str = "exit code 1") -> dict[str, Any]:
    return {"type": "error", "turn": 0, "tool": tool, "call_id": call_id, "error": error}


_ANSWER = {"type": "text_output", "turn": 0, "text": "Here is what I did."}


def _kinds(record: IterationRecord, prompts: tuple[str, ...] = ("Fix the bug.",)) -> list[str]:
    return [finding.kind for finding in scan(record, prompts)]


def _repeat(outcome: Any, times: int, arguments: Any) -> list[dict[str, Any]]:
    events = []
    for n in range(times):
        events += [_call(f"c{n}", "Bash", arguments), outcome(f"c{n}", "Bash")]
    return [*events, _ANSWER]


def test_a_loop_of_the_same_failing_call() -> None:
    command = {"command": "python3 missing.py"}
    assert "loop" in _kinds(_record(_repeat(_fail, 3, command)))
    # Twins: the same call succeeding three times; failing calls that differ; two failures.
    assert "loop" not in _kinds(_record(_repeat(_ok, 3, command)))
    varied = [
        e for n in range(3) for e in (_call(f"c{n}", "Bash", {"n": n}), _fail(f"c{n}", "Bash"))
    ]
    assert "loop" not in _kinds(_record([*varied, _ANSWER]))
    assert "loop" not in _kinds(_record(_repeat(_fail, 2, command)))


async def test_a_session_that_ends_on_a_failing_command(tmp_path: Path) -> None:
    (result,), trace, _ = await _replay("shell_failed", tmp_path / "failed")
    failing = _record(trace.to_dict()["events"], prompts=[result])
    (finding,) = [f for f in scan(failing, ("Run it.",)) if f.kind == "ends_failing"]
    assert "failing command" in finding.message and "exit code 3" in finding.evidence[1]
    (result,), trace, _ = await _replay("shell", tmp_path / "passed")
    assert "ends_failing" not in _kinds(_record(trace.to_dict()["events"], prompts=[result]))


def test_a_failing_test_run_is_named_as_such() -> None:
    events = [_call("c1", "Bash", {"command": "pytest -q"}), _fail("c1", "Bash"), _ANSWER]
    (finding,) = [f for f in scan(_record(events), ()) if f.kind == "ends_failing"]
    assert "failing test run" in finding.message
    fixed = [*events[:2], _call("c2", "Bash", {"command": "pytest -q"}), _ok("c2", "Bash")]
    assert "ends_failing" not in _kinds(_record([*fixed, _ANSWER]))


def test_a_high_tool_failure_rate() -> None:
    calls = [(f"c{n}", {"file": f"f{n}"}) for n in range(4)]
    half = [
        e
        for n, (cid, a) in enumerate(calls)
        for e in (_call(cid, "Read", a), (_fail if n % 2 else _ok)(cid, "Read"))
    ]
    assert "tool_failures" in _kinds(_record([*half, _ANSWER]))
    one = [
        e
        for n, (cid, a) in enumerate(calls)
        for e in (_call(cid, "Read", a), (_fail if n == 0 else _ok)(cid, "Read"))
    ]
    assert "tool_failures" not in _kinds(_record([*one, _ANSWER]))


@pytest.mark.parametrize(
    "refusal",
    [
        # The pinned CLIs' own wording (their binaries and tests/profiler/test_claude_code.py).
        "Permission to use Bash has been denied because Claude Code is running in don't ask mode.",
        "The user rejected permission to use this specific tool call.",
        'Tool "run_shell_command" requires user confirmation, which is not supported in '
        "non-interactive mode.",
    ],
)
def test_a_call_the_permission_policy_refused(refusal: str) -> None:
    events = [_call("c1", "Bash", {"command": "rm x"}), _fail("c1", "Bash", refusal), _ANSWER]
    assert "permission_refused" in _kinds(_record(events))
    denied_by_os = [*events[:1], _fail("c1", "Bash", "rm: cannot remove 'x': Permission denied")]
    assert "permission_refused" not in _kinds(_record([*denied_by_os, _ANSWER]))


def test_a_full_context_window() -> None:
    error = "This model's maximum context length is 8192 tokens; the request has 12400."
    full = _record([], prompts=[_prompt("", "error", error)], error=error, passed=False)
    assert "context_exhausted" in _kinds(full)
    cut = _record([_ANSWER], prompts=[_prompt("Here is", "length")])
    assert "context_exhausted" in _kinds(cut)
    assert "context_exhausted" not in _kinds(_record([_ANSWER]))


def test_test_files_edited_in_a_task_that_did_not_ask() -> None:
    edit = _call("c1", "Edit", {"file_path": "tests/test_parser.py", "old": "==", "new": "!="})
    events = [edit, _ok("c1", "Edit"), _ANSWER]
    assert "test_files_edited" in _kinds(_record(events), ("Fix the parser bug.",))
    assert "test_files_edited" not in _kinds(_record(events), ("Fix the parser and its tests.",))
    source = _call("c1", "Edit", {"file_path": "src/parser.py", "old": "==", "new": "!="})
    assert "test_files_edited" not in _kinds(_record([source, _ok("c1", "Edit"), _ANSWER]))
    patch = _call("c2", "apply_patch", {"input": "*** Update File: src/test_x.py\n@@\n-a\n+b"})
    assert "test_files_edited" in _kinds(_record([patch, _ok("c2", "apply_patch"), _ANSWER]))


def test_a_session_that_stopped_without_answering() -> None:
    silent = [_call("c1", "Bash", {"command": "ls"}), _ok("c1", "Bash")]
    assert "no_answer" in _kinds(_record(silent, prompts=[_prompt("")]))
    assert "no_answer" not in _kinds(_record([*silent, _ANSWER]))
    # A failure is reported as the failure, not as a missing answer.
    failed = _record(silent, prompts=[_prompt("", "error", "backend down")], error="backend down")
    assert "no_answer" not in _kinds(failed)


def test_a_clean_session_has_no_findings_and_one_that_never_started_has_none() -> None:
    clean = [_call("c1", "Bash", {"command": "ls"}), _ok("c1", "Bash"), _ANSWER]
    assert scan(_record(clean), ("List the files.",)) == []
    assert scan(_record([], started=False, prompts=[]), ()) == []


def test_the_reports_group_findings_across_iterations() -> None:
    command = {"command": "python3 missing.py"}
    records = []
    for n, events in enumerate([_repeat(_fail, 3, command), _repeat(_fail, 4, command), [_ANSWER]]):
        record = _record(events, iteration=n)
        record.findings = [f.to_json() for f in scan(record, ("Run it.",))]
        records.append(record)
    summary = summarise(records)
    # Three failing calls are under the failure rate's minimum of four; four are not.
    assert summary[0]["findings"] == {"loop": 2, "ends_failing": 2, "tool_failures": 1}
    markdown = markdown_report(summary, records)
    assert "## Findings" in markdown and "### loop (2 of 3 iterations)" in markdown
    assert "codex task [m default] #1: the same failing call 4 times" in markdown
    page = html_report(summary, records)
    assert "<h2>Findings</h2>" in page and page.count('<li class="finding">') == 5
    # Written and read back with the record (traces.jsonl, --resume).
    again = IterationRecord.from_json(json.loads(json.dumps(records[0].to_json())))
    assert again.findings == records[0].findings


def test_every_kind_is_documented() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "PROFILER.md").read_text()
    for kind in FINDING_KINDS:
        assert f"`{kind}`" in doc

"""Findings: what went wrong in an iteration, read from its trace, beyond pass or fail
(loops, failing tests left behind, refused permissions...).

Each detector is deterministic, reads one ``IterationRecord`` (its trace's events,
its prompts' results) and the scenario's prompts, and says what it saw with the
evidence (call ids, an excerpt):

- ``loop``: the same failing tool call (same tool, same arguments) ``LOOP_REPEATS``
  times or more: an agent retrying what cannot work;
- ``ends_failing``: the session's last tool call failed and it was a command (a
  failing test run said as such): the agent stopped on a red result;
- ``tool_failures``: at least ``FAILURE_RATE`` of the calls failed, over at least
  ``FAILURE_MIN_CALLS`` calls;
- ``permission_refused``: a call the agent's permission policy refused (the CLIs'
  own wording: Claude Code's "has been denied", OpenCode's "rejected permission",
  Gemini CLI's "requires user confirmation");
- ``context_exhausted``: a prompt or a call failed because the context window was
  full (the gateway's and the backends' wording), or a reply was cut at its limit;
- ``test_files_edited``: a write or edit of a test file when no prompt of the
  scenario mentions tests;
- ``no_answer``: the session ended with no text after its last tool call (or none
  at all) and no error: it stopped without answering.

``graded`` findings come from the optional model-graded scanner (run/graded.py), not from
``scan``.

A finding is a pointer, not a verdict: the report groups them across runs so a loop
that happens in one iteration of ten is seen, and each carries what to look at.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

from llmbridge.profiler.records.records import IterationRecord

__all__ = ["FINDING_KINDS", "Finding", "FindingKind", "scan"]

FindingKind = Literal[
    "loop",
    "ends_failing",
    "tool_failures",
    "permission_refused",
    "context_exhausted",
    "test_files_edited",
    "no_answer",
    "graded",
]
FINDING_KINDS: tuple[FindingKind, ...] = get_args(FindingKind)

LOOP_REPEATS = 3
"""Identical failing calls that make a loop."""
FAILURE_RATE = 0.5
FAILURE_MIN_CALLS = 4
EXCERPT = 160
"""Characters of a call's arguments or an error kept as evidence."""

_COMMAND_TOOLS = re.compile(r"bash|shell|command|exec|terminal|run", re.IGNORECASE)
_TEST_RUN = re.compile(
    r"\b(pytest|unittest|npm (run )?test|yarn test|pnpm test|go test|cargo test|jest|vitest"
    r"|mocha|rspec|make (check|test))\b"
)
_REFUSED = re.compile(
    r"has been denied|denied automatically|rejected permission|requires user confirmation"
    r"|not been granted|haven't granted|permission prompt|approval (was )?(denied|rejected)"
    r"|denied by (the )?(user|policy)|blocked by policy",
    re.IGNORECASE,
)
_CONTEXT_FULL = re.compile(
    r"context[ _-]?(length|window)|maximum context|prompt is too long|too many tokens"
    r"|context_length_exceeded|exceeds the (model's )?context",
    re.IGNORECASE,
)
_EDIT_TOOLS = re.compile(r"write|edit|patch|replace|create", re.IGNORECASE)
_TEST_PATH = re.compile(
    r"(^|[/\s\"'])(tests?/|test_[\w-]+\.\w+|[\w-]+_test\.\w+|[\w-]+\.(test|spec)\.\w+)"
)
_MENTIONS_TESTS = re.compile(r"\btests?\b|\btesting\b|\bspec\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing an iteration's trace shows went wrong."""

    kind: FindingKind
    message: str
    """One line, for the report."""
    evidence: tuple[str, ...] = ()
    """What to look at: call ids, excerpts."""

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "evidence": list(self.evidence)}


def _excerpt(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= EXCERPT else text[: EXCERPT - 1] + "…"


def _events(record: IterationRecord) -> list[dict[str, Any]]:
    trace = record.trace or {}
    events = trace.get("events")
    return [e for e in events if isinstance(e, dict)] if isinstance(events, list) else []


def _calls(events: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Each tool call with its outcome (a ``tool_result`` or an ``error`` event with its
    call id), in the order of the calls."""
    outcomes = {
        e["call_id"]: e
        for e in events
        if e.get("type") in ("tool_result", "error") and e.get("call_id")
    }
    return [
        (e, outcomes.get(e.get("call_id") or "")) for e in events if e.get("type") == "tool_call"
    ]


def _failed(outcome: dict[str, Any] | None) -> bool:
    return outcome is not None and outcome.get("type") == "error"


def _loops(calls: list[tuple[dict[str, Any], dict[str, Any] | None]]) -> list[Finding]:
    groups: dict[str, list[str]] = {}
    for call, outcome in calls:
        if _failed(outcome):
            key = f"{call.get('tool')} {json.dumps(call.get('arguments'), sort_keys=True)}"
            groups.setdefault(key, []).append(str(call.get("call_id")))
    return [
        Finding(
            "loop",
            f"the same failing call {len(ids)} times: {_excerpt(key)}",
            tuple(ids),
        )
        for key, ids in groups.items()
        if len(ids) >= LOOP_REPEATS
    ]


def _ends_failing(calls: list[tuple[dict[str, Any], dict[str, Any] | None]]) -> list[Finding]:
    if not calls:
        return []
    call, outcome = calls[-1]
    if not _failed(outcome) or not _COMMAND_TOOLS.search(str(call.get("tool") or "")):
        return []
    arguments = _excerpt(call.get("arguments"))
    what = "a failing test run" if _TEST_RUN.search(arguments) else "a failing command"
    assert outcome is not None
    error = _excerpt(outcome.get("error") or outcome.get("text") or "")
    return [
        Finding(
            "ends_failing",
            f"the session ended on {what}: {arguments}",
            (str(call["call_id"]), error),
        )
    ]


def _tool_failures(calls: list[tuple[dict[str, Any], dict[str, Any] | None]]) -> list[Finding]:
    failed = [str(call.get("call_id")) for call, outcome in calls if _failed(outcome)]
    if len(calls) < FAILURE_MIN_CALLS or len(failed) / len(calls) < FAILURE_RATE:
        return []
    return [
        Finding(
            "tool_failures",
            f"{len(failed)} of {len(calls)} tool calls failed",
            tuple(failed),
        )
    ]


def _refusals(events: list[dict[str, Any]]) -> list[Finding]:
    refused = [
        e
        for e in events
        if e.get("type") == "error" and _REFUSED.search(str(e.get("error") or e.get("text") or ""))
    ]
    if not refused:
        return []
    tools = sorted({str(e.get("tool") or "?") for e in refused})
    return [
        Finding(
            "permission_refused",
            f"{len(refused)} call(s) refused by the permission policy ({', '.join(tools)})",
            tuple(_excerpt(e.get("error") or e.get("text")) for e in refused),
        )
    ]


def _context(record: IterationRecord, events: list[dict[str, Any]]) -> list[Finding]:
    errors = [str(e.get("error") or "") for e in events if e.get("type") == "error"]
    errors += [p.error or "" for p in record.prompts]
    full = [_excerpt(text) for text in errors if _CONTEXT_FULL.search(text)]
    cut = sum(p.completion_reason == "length" for p in record.prompts)
    if full:
        return [Finding("context_exhausted", "the context window was full", tuple(full))]
    if cut:
        return [Finding("context_exhausted", f"{cut} reply(ies) cut at the token limit")]
    return []


def _test_edits(
    calls: list[tuple[dict[str, Any], dict[str, Any] | None]], prompts: Sequence[str]
) -> list[Finding]:
    if any(_MENTIONS_TESTS.search(prompt) for prompt in prompts):
        return []
    edits = [
        call
        for call, _ in calls
        if _EDIT_TOOLS.search(str(call.get("tool") or ""))
        and _TEST_PATH.search(json.dumps(call.get("arguments"), default=str))
    ]
    if not edits:
        return []
    return [
        Finding(
            "test_files_edited",
            f"{len(edits)} edit(s) of test files in a task that did not ask for them",
            tuple(_excerpt(call.get("arguments")) for call in edits),
        )
    ]


def _no_answer(record: IterationRecord, events: list[dict[str, Any]]) -> list[Finding]:
    if record.error or not record.prompts or any(p.error for p in record.prompts):
        return []
    last_call = max((i for i, e in enumerate(events) if e.get("type") == "tool_call"), default=-1)
    answered = any(
        e.get("type") == "text_output" and str(e.get("text") or "").strip()
        for e in events[last_call + 1 :]
    )
    if answered or (not events and record.prompts[-1].text.strip()):
        return []
    return [Finding("no_answer", "the session stopped without answering after its last step")]


def scan(record: IterationRecord, prompts: Sequence[str]) -> list[Finding]:
    """Every finding in ``record``; ``prompts``: what the scenario asked (the test-file
    detector reads them). An iteration that never started has none."""
    if not record.started:
        return []
    events = _events(record)
    calls = _calls(events)
    return [
        *_loops(calls),
        *_ends_failing(calls),
        *_tool_failures(calls),
        *_refusals(events),
        *_context(record, events),
        *_test_edits(calls, prompts),
        *_no_answer(record, events),
    ]

"""The trace builder on real OpenCode sessions (tests/fixtures/opencode-sessions/).

Each fixture was captured from the pinned ``opencode serve`` by
``python -m tests.profiler.capture``. Its normalised events are compared with a
committed snapshot (``<name>.trace.json``) and checked against the invariants; the
paths seed 004 singles out get their own assertions. After recapturing, refresh the
snapshots with ``UPDATE_SNAPSHOTS=1 pytest tests/profiler/test_trace.py`` and review
the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from llmbridge.profiler.records.trace import build_trace, check_invariants, normalize
from llmbridge.profiler.records.types import TokenMetrics, TraceEvent

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "opencode-sessions"
NAMES = sorted(p.stem for p in FIXTURES.glob("*.json") if not p.stem.endswith(".trace"))


def _messages(name: str) -> list[dict[str, Any]]:
    fixture = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    messages: list[dict[str, Any]] = fixture["messages"]
    return messages


def _events(name: str) -> tuple[TraceEvent, ...]:
    return normalize(_messages(name))


def test_the_fixtures_cover_seed_004s_list() -> None:
    assert set(NAMES) >= {
        "single_turn",
        "multi_tool",
        "split_reasoning",
        "tool_error",
        "reasoning_text_boundary",
        "empty_response",
        "timeout",
        "multi_turn",
    }


@pytest.mark.parametrize("name", NAMES)
def test_snapshot(name: str) -> None:
    events = [e.to_dict() for e in _events(name)]
    snapshot = FIXTURES / f"{name}.trace.json"
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        snapshot.write_text(json.dumps(events, indent=1, ensure_ascii=False) + "\n", "utf-8")
    assert snapshot.exists(), f"no snapshot for {name}: run with UPDATE_SNAPSHOTS=1 and review it"
    assert events == json.loads(snapshot.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", NAMES)
def test_invariants_hold(name: str) -> None:
    trace = build_trace(name, _messages(name))
    assert check_invariants(trace) == []
    assert trace.summary.turns == sum(e.type == "turn_boundary" for e in trace.events)
    assert all(turn.events[0].type == "turn_boundary" for turn in trace.turns)


def _kinds(name: str) -> list[str]:
    return [e.type for e in _events(name)]


def test_single_turn() -> None:
    events = _events("single_turn")
    assert _kinds("single_turn") == ["turn_boundary", "text_output"]
    assert events[1].text == "The capital of France is Paris."
    boundary = events[0]
    assert boundary.status == "stop" and boundary.duration_ms is not None
    assert boundary.tokens is not None and boundary.tokens.output > 0


def test_multi_tool_pairs_every_call_with_its_result() -> None:
    events = _events("multi_tool")
    assert _kinds("multi_tool") == [
        "turn_boundary",
        "tool_call",
        "tool_result",
        "tool_call",
        "tool_result",
        "turn_boundary",
        "tool_call",
        "tool_result",
        "turn_boundary",
        "text_output",
    ]
    calls = [e for e in events if e.type == "tool_call"]
    assert [c.tool for c in calls] == ["read", "read", "bash"]
    results = {e.call_id: e for e in events if e.type == "tool_result"}
    assert all(c.call_id in results for c in calls)
    assert "2 notes.txt" in (results[calls[2].call_id].text or "")
    assert all((results[c.call_id].duration_ms or -1) >= 0 for c in calls)


def test_split_reasoning_parts_are_merged() -> None:
    messages = _messages("split_reasoning")
    parts = [p["type"] for m in messages for p in m["parts"]]
    assert parts.count("reasoning") == 2  # OpenCode stored two consecutive parts
    reasoning = [e for e in _events("split_reasoning") if e.type == "reasoning"]
    assert len(reasoning) == 1
    assert reasoning[0].text == "First, the capital question. Paris is the answer."


def test_reasoning_text_boundaries_are_kept() -> None:
    events = _events("reasoning_text_boundary")
    assert _kinds("reasoning_text_boundary") == [
        "turn_boundary",
        "reasoning",
        "text_output",
        "reasoning",
    ]
    assert events[1].text == "The user wants two answers. "
    assert events[3].text == "Now the second one."


def test_a_tool_error_mid_stream_then_recovery() -> None:
    events = _events("tool_error")
    assert _kinds("tool_error") == [
        "turn_boundary",
        "tool_call",
        "error",
        "turn_boundary",
        "text_output",
    ]
    error = events[2]
    assert error.tool == "read" and error.call_id == events[1].call_id
    assert error.error is not None and "not found" in error.error.lower()
    trace = build_trace("t", _messages("tool_error"))
    assert trace.summary.tool_errors == 1


def test_an_empty_response_has_no_text_output() -> None:
    assert _kinds("empty_response") == ["turn_boundary"]


def test_a_timeout_is_an_aborted_turn() -> None:
    events = _events("timeout")
    assert events[-1].type == "error"
    assert events[-1].error is not None and "Aborted" in events[-1].error
    assert not any(e.type == "text_output" for e in events)


def test_multi_turn_has_a_turn_per_reply() -> None:
    trace = build_trace("m", _messages("multi_turn"))
    assert [e.text for e in trace.events if e.type == "text_output"] == [
        "Hello! How can I help?",
        "You said hello.",
    ]
    assert trace.summary.turns == 2
    assert trace.summary.tokens == trace.turns[0].tokens + trace.turns[1].tokens


def test_the_invariants_catch_broken_traces() -> None:
    broken = normalize(_messages("multi_tool"))
    without_result = tuple(e for e in broken if e.type != "tool_result")
    trace = build_trace("x", [])
    from llmbridge.profiler.records.trace import build_summary, group_turns

    turns = group_turns(without_result)
    problems = check_invariants(
        type(trace)("x", without_result, turns, build_summary(without_result, turns))
    )
    assert len([p for p in problems if "has no result" in p]) == 3
    headless = (TraceEvent("text_output", 0, text="orphan"),)
    turns = group_turns(headless)
    problems = check_invariants(type(trace)("x", headless, turns, build_summary(headless, turns)))
    assert problems == ["turn 0 does not open with a turn boundary"]
    negative = (TraceEvent("turn_boundary", 0, tokens=TokenMetrics(input=-1)),)
    turns = group_turns(negative)
    problems = check_invariants(type(trace)("x", negative, turns, build_summary(negative, turns)))
    assert problems == ["negative tokens in turn 0"]

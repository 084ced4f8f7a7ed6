"""OpenCode session messages as the profiler's ``TraceEvent`` stream (seed 004's
trace builder), grouped into turns, with the invariants every trace must meet.

Each assistant message is one LLM step and one turn: it opens with a
``turn_boundary`` carrying the step's time, tokens and reported cost. Its parts become events in
order: ``reasoning`` (consecutive reasoning parts, which OpenCode may split, are
merged; a reasoning part after text stays separate, so reasoning/text boundaries are
kept), ``text_output`` (empty text is no output), ``tool_call`` followed by its
``tool_result``, or by an ``error`` when the tool failed or never finished (a timeout
or an abort), and an ``error`` for a step that failed. ``step-start`` and
``step-finish`` parts carry nothing the message does not.

Unlike the anchor implementation (ghx), timings come from the parts' and tools' own
``time`` fields and tokens from each step's ``tokens``, not from character counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from llmbridge.profiler.records.types import (
    SessionTrace,
    TokenMetrics,
    TraceEvent,
    TraceSummary,
    TraceTurn,
)

__all__ = [
    "build_summary",
    "build_trace",
    "check_invariants",
    "error_text",
    "group_turns",
    "message_tokens",
    "normalize",
]

Message = dict[str, Any]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int:
    # Negative counts are kept, not clamped: check_invariants reports them.
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def message_tokens(info: dict[str, Any]) -> TokenMetrics:
    tokens = _dict(info.get("tokens"))
    cache = _dict(tokens.get("cache"))
    return TokenMetrics(
        input=_int(tokens.get("input")),
        output=_int(tokens.get("output")),
        reasoning=_int(tokens.get("reasoning")),
        cache_read=_int(cache.get("read")),
        cache_write=_int(cache.get("write")),
    )


def _span(time: Any) -> tuple[float | None, float | None]:
    """(start, duration) in ms from an OpenCode ``time`` object."""
    t = _dict(time)
    start = t.get("start", t.get("created"))
    end = t.get("end", t.get("completed"))
    if not isinstance(start, int | float):
        return None, None
    duration = end - start if isinstance(end, int | float) else None
    return float(start), None if duration is None else float(duration)


def _cost(value: Any) -> float | None:
    """A step's reported cost (OpenCode's ``info.cost``, US dollars), if it has one.

    OpenCode reports 0 for a model it has no price for, so 0 is "not reported", as in
    ``metrics.prompt_result`` (which then prices the prompt from the price table)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def error_text(error: Any) -> str:
    """A message for an OpenCode error object (``{name, data: {message}}``) or string."""
    if isinstance(error, str):
        return error
    err = _dict(error)
    data = _dict(err.get("data"))
    name = str(err.get("name") or "Error")
    message = data.get("message") or err.get("message")
    return f"{name}: {message}" if message else name


def _tool_events(part: dict[str, Any], turn: int) -> list[TraceEvent]:
    state = _dict(part.get("state"))
    status = str(state.get("status") or "pending")
    start, duration = _span(state.get("time"))
    tool, call_id = str(part.get("tool") or "?"), str(part.get("callID") or part.get("id"))
    events = [
        TraceEvent(
            "tool_call",
            turn,
            timestamp_ms=start,
            tool=tool,
            call_id=call_id,
            status=status,
            arguments=state.get("input"),
        )
    ]
    if status == "completed":
        output = state.get("output")
        events.append(
            TraceEvent(
                "tool_result",
                turn,
                timestamp_ms=None if start is None or duration is None else start + duration,
                duration_ms=duration,
                text=output if isinstance(output, str) else None,
                tool=tool,
                call_id=call_id,
                status=status,
            )
        )
    else:
        reason = state.get("error") if status == "error" else f"the tool never finished ({status})"
        events.append(
            TraceEvent(
                "error",
                turn,
                duration_ms=duration,
                tool=tool,
                call_id=call_id,
                status=status,
                error=error_text(reason),
            )
        )
    return events


def _merge_reasoning(previous: TraceEvent, part: dict[str, Any]) -> TraceEvent:
    start, duration = _span(part.get("time"))
    end = None if start is None or duration is None else start + duration
    first = previous.timestamp_ms
    merged = None if first is None or end is None else end - first
    return TraceEvent(
        "reasoning",
        previous.turn,
        timestamp_ms=first,
        duration_ms=merged if merged is not None else previous.duration_ms,
        text=(previous.text or "") + str(part.get("text") or ""),
    )


def _step_events(message: Message, turn: int) -> list[TraceEvent]:
    info = _dict(message.get("info"))
    start, duration = _span(info.get("time"))
    events = [
        TraceEvent(
            "turn_boundary",
            turn,
            timestamp_ms=start,
            duration_ms=duration,
            status=info.get("finish") if isinstance(info.get("finish"), str) else None,
            tokens=message_tokens(info),
            cost_usd=_cost(info.get("cost")),
        )
    ]
    for part in message.get("parts") or []:
        part = _dict(part)
        kind = part.get("type")
        if kind == "reasoning":
            if events[-1].type == "reasoning":
                events[-1] = _merge_reasoning(events[-1], part)
            else:
                at, took = _span(part.get("time"))
                events.append(
                    TraceEvent("reasoning", turn, at, took, text=str(part.get("text") or ""))
                )
        elif kind == "text" and part.get("text") and not part.get("synthetic"):
            at, took = _span(part.get("time"))
            events.append(TraceEvent("text_output", turn, at, took, text=str(part["text"])))
        elif kind == "tool":
            events.extend(_tool_events(part, turn))
    if info.get("error"):
        events.append(TraceEvent("error", turn, error=error_text(info["error"])))
    return events


def normalize(messages: Iterable[Message]) -> tuple[TraceEvent, ...]:
    """The events of a session's messages (``GET /session/{id}/message``), in order."""
    events: list[TraceEvent] = []
    turn = 0
    for message in messages:
        if _dict(message.get("info")).get("role") != "assistant":
            continue
        events.extend(_step_events(message, turn))
        turn += 1
    return tuple(events)


def group_turns(events: Sequence[TraceEvent]) -> tuple[TraceTurn, ...]:
    """Events between one turn boundary and the next, as turns."""
    turns: list[TraceTurn] = []
    current: list[TraceEvent] = []
    for event in events:
        if event.type == "turn_boundary" and current:
            turns.append(_turn(current))
            current = []
        current.append(event)
    if current:
        turns.append(_turn(current))
    return tuple(turns)


def _turn(events: list[TraceEvent]) -> TraceTurn:
    boundary = events[0]
    return TraceTurn(boundary.turn, tuple(events), boundary.tokens or TokenMetrics())


def build_summary(events: Sequence[TraceEvent], turns: Sequence[TraceTurn]) -> TraceSummary:
    tokens = TokenMetrics()
    for turn in turns:
        tokens = tokens + turn.tokens
    boundaries = [e for e in events if e.type == "turn_boundary" and e.timestamp_ms is not None]
    duration = None
    if boundaries and boundaries[-1].duration_ms is not None:
        first, last = boundaries[0], boundaries[-1]
        assert first.timestamp_ms is not None and last.timestamp_ms is not None
        duration = last.timestamp_ms + (last.duration_ms or 0.0) - first.timestamp_ms
    return TraceSummary(
        turns=len(turns),
        tool_calls=sum(e.type == "tool_call" for e in events),
        tool_errors=sum(e.type == "error" and e.tool is not None for e in events),
        errors=sum(e.type == "error" for e in events),
        tokens=tokens,
        duration_ms=duration,
    )


def build_trace(session_id: str, messages: Iterable[Message]) -> SessionTrace:
    """The trace of an OpenCode session from its messages."""
    events = normalize(messages)
    turns = group_turns(events)
    return SessionTrace(session_id, events, turns, build_summary(events, turns))


def check_invariants(trace: SessionTrace) -> list[str]:
    """What is wrong with ``trace`` (empty when it is sound): every tool call has a
    result or an error, every turn opens with its boundary and turns count up, no
    token count is negative."""
    problems: list[str] = []
    open_calls: dict[str, str] = {}
    for event in trace.events:
        if event.type == "tool_call" and event.call_id:
            open_calls[event.call_id] = event.tool or "?"
        elif event.type in ("tool_result", "error") and event.call_id:
            open_calls.pop(event.call_id, None)
    problems += [f"tool call {cid} ({tool}) has no result" for cid, tool in open_calls.items()]
    for expected, turn in enumerate(trace.turns):
        if turn.index != expected:
            problems.append(f"turn {turn.index} found where turn {expected} was expected")
        if not turn.events or turn.events[0].type != "turn_boundary":
            problems.append(f"turn {turn.index} does not open with a turn boundary")
        if any(e.turn != turn.index for e in turn.events):
            problems.append(f"turn {turn.index} holds events of another turn")
    for event in trace.events:
        if event.tokens is not None and min(event.tokens.to_dict().values()) < 0:
            problems.append(f"negative tokens in turn {event.turn}")
        if event.duration_ms is not None and event.duration_ms < 0:
            problems.append(f"negative duration in turn {event.turn} ({event.type})")
    return problems

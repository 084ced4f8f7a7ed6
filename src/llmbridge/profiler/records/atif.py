"""Iterations as ATIF trajectories, and ATIF trajectories back as iterations.

ATIF, the Agent Trajectory Interchange Format (Harbor's RFC 0001, v1.4), is a JSON
object per session: ``schema_version``, ``session_id``, ``agent``, ``steps`` and
``final_metrics``. ``to_atif`` writes an iteration as one:

- a ``user`` step per prompt the scenario sent (``IterationRecord.inputs``), each
  before the model steps that answered it (``PromptResult.metrics.timing.steps_ms``
  says how many);
- an ``agent`` step per model step of the trace (a ``turn_boundary`` and what
  followed it): its text as ``message``, its reasoning as ``reasoning_content``, its
  tool calls, their results (or errors) as the ``observation``, and its tokens and
  cost as ``metrics`` (``prompt_tokens`` counts the cached ones too, as ATIF says);
- ``final_metrics`` summed over the steps, and under ``extra.llmbridge`` what ATIF has
  no field for (scenario, mode, provider, iteration, pass, checks, findings, each
  prompt's completion reason), so ``from_atif`` gives the same record back.

``from_atif`` reads any ATIF trajectory, not only ours: without ``extra.llmbridge`` the
scenario is the session id, each user step a prompt, and the iteration passes when no
observation is an error. ``ATIF_SCHEMA`` is the RFC's schema as JSON Schema
(``atif-v1.4.schema.json`` beside this module), which the tests validate against.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from llmbridge.profiler.records.input_files import InputValueError
from llmbridge.profiler.records.records import IterationRecord
from llmbridge.profiler.records.scenarios import CheckResult
from llmbridge.profiler.records.types import (
    CompletionReason,
    CostMetrics,
    PromptMetrics,
    PromptResult,
    TimingMetrics,
    TokenMetrics,
    ToolCallRecord,
)

__all__ = ["ATIF_SCHEMA", "ATIF_VERSION", "check_time_ms", "from_atif", "timestamp_ms", "to_atif"]

ATIF_VERSION = "ATIF-v1.4"
ATIF_SCHEMA: dict[str, Any] = json.loads(
    (Path(__file__).with_name("atif-v1.4.schema.json")).read_text(encoding="utf-8")
)
_REASONS: tuple[CompletionReason, ...] = ("stop", "length", "timeout", "error", "tool_limit")


_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
_LATEST = datetime(3000, 1, 1, tzinfo=UTC)
_EARLIEST_MS = _EARLIEST.timestamp() * 1000
_LATEST_MS = _LATEST.timestamp() * 1000


def _iso(ms: float | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def check_time_ms(ms: float) -> float:
    """``ms`` (Unix milliseconds) if it falls from 1970 up to the year 3000, else
    ``InputValueError``: no session ran outside that, and a time near the end of
    ``datetime``'s range (year 9999) overflows it once a step's duration is added."""
    if not _EARLIEST_MS <= ms < _LATEST_MS:
        raise InputValueError(f"the time {ms!r} ms is not between 1970 and the year 3000")
    return ms


def timestamp_ms(stamp: Any) -> float | None:
    """An ISO 8601 time as Unix milliseconds (``None`` when it is not one; a time
    without a zone is UTC's); ``InputValueError`` when it falls outside
    ``check_time_ms``'s range."""
    if not isinstance(stamp, str):
        return None
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    if not _EARLIEST <= moment < _LATEST:
        raise InputValueError(f"the time {stamp!r} is not between 1970 and the year 3000")
    return moment.timestamp() * 1000


def _model_steps(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The trace's events cut at each ``turn_boundary``: one list per model step, its
    boundary first (events before the first boundary start a step of their own)."""
    steps: list[list[dict[str, Any]]] = []
    for event in events:
        if event.get("type") == "turn_boundary" or not steps:
            steps.append([])
        steps[-1].append(event)
    return steps


def _result_content(event: dict[str, Any]) -> str:
    """A call's result as ATIF's ``content``: its output, or its error then its output."""
    text = str(event.get("text") or "")
    if event.get("type") != "error":
        return text
    error = str(event.get("error") or "")
    return f"{error}\n{text}" if error and text else error or text


def _agent_step(events: list[dict[str, Any]], model: str) -> dict[str, Any]:
    """One model step's events as an ATIF agent step. ``extra.llmbridge.layout`` keeps
    the events' order (text may follow a tool's result within one step, as in a Codex
    turn) and the errors that belong to no call, which ATIF has no place for."""
    boundary = events[0] if events[0].get("type") == "turn_boundary" else {}
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    layout: list[list[Any]] = []
    for event in events:
        kind = event.get("type")
        if kind == "text_output":
            piece = str(event.get("text") or "")
            texts.append(piece)
            layout.append(["text", len(piece)])
        elif kind == "reasoning":
            piece = str(event.get("text") or "")
            thoughts.append(piece)
            layout.append(["reasoning", len(piece)])
        elif kind == "tool_call":
            call_id = str(event.get("call_id") or f"call-{len(calls)}")
            calls.append(
                {
                    "tool_call_id": call_id,
                    "function_name": str(event.get("tool") or "?"),
                    "arguments": event["arguments"]
                    if isinstance(event.get("arguments"), dict)
                    else {"value": event.get("arguments")},
                }
            )
            layout.append(["call", call_id])
        elif kind in ("tool_result", "error") and event.get("call_id"):
            results.append(event)
            layout.append(["result", str(event["call_id"])])
        elif kind == "error":
            layout.append(["error", str(event.get("error") or event.get("text") or "")])
    step: dict[str, Any] = {"source": "agent", "model_name": model, "message": "".join(texts)}
    if (stamp := _iso(boundary.get("timestamp_ms"))) is not None:
        step["timestamp"] = stamp
    if thinking := "".join(thoughts):
        step["reasoning_content"] = thinking
    if calls:
        step["tool_calls"] = calls
    if results:
        step["observation"] = {
            "results": [
                {"source_call_id": str(r["call_id"]), "content": _result_content(r)}
                for r in results
            ]
        }
    tokens = boundary.get("tokens") or {}
    metrics: dict[str, Any] = {}
    if tokens:
        metrics = {
            "prompt_tokens": int(tokens.get("input", 0)) + int(tokens.get("cache_read", 0)),
            "completion_tokens": int(tokens.get("output", 0)) + int(tokens.get("reasoning", 0)),
            "cached_tokens": int(tokens.get("cache_read", 0)),
        }
    if boundary.get("cost_usd") is not None:
        metrics["cost_usd"] = float(boundary["cost_usd"])
    if metrics:
        step["metrics"] = metrics
    step["extra"] = {
        "llmbridge": {
            "duration_ms": boundary.get("duration_ms"),
            "failed_calls": [str(r["call_id"]) for r in results if r.get("type") == "error"],
            "tokens": tokens,
            "layout": layout,
        }
    }
    return step


def _steps(record: IterationRecord) -> list[dict[str, Any]]:
    """User and agent steps in order (module docstring)."""
    events = (record.trace or {}).get("events") or []
    model_steps = [_agent_step(s, record.model) for s in _model_steps(list(events))]
    counts = [len(p.metrics.timing.steps_ms) for p in record.prompts]
    inputs = record.inputs or [""] * len(record.prompts)
    steps: list[dict[str, Any]] = []
    if len(counts) == len(inputs) and sum(counts) == len(model_steps):
        taken = 0
        for text, count in zip(inputs, counts, strict=True):
            steps.append({"source": "user", "message": text})
            steps += model_steps[taken : taken + count]
            taken += count
    elif len(model_steps) == len(inputs):  # one model step per prompt
        for text, model_step in zip(inputs, model_steps, strict=True):
            steps += [{"source": "user", "message": text}, model_step]
    else:  # nothing says where each prompt began
        steps = [{"source": "user", "message": text} for text in inputs] + model_steps
    return [{"step_id": n, **step} for n, step in enumerate(steps, 1)]


def to_atif(record: IterationRecord, *, agent_version: str = "") -> dict[str, Any]:
    """``record`` as an ATIF trajectory (module docstring)."""
    steps = _steps(record)
    metrics = [s.get("metrics", {}) for s in steps]
    return {
        "schema_version": ATIF_VERSION,
        "session_id": record.session_id or f"{record.scenario}-{record.iteration}",
        "agent": {
            "name": record.provider or "unknown",
            "version": agent_version or "unknown",
            "model_name": record.model,
        },
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": sum(m.get("prompt_tokens", 0) for m in metrics),
            "total_completion_tokens": sum(m.get("completion_tokens", 0) for m in metrics),
            "total_cached_tokens": sum(m.get("cached_tokens", 0) for m in metrics),
            "total_cost_usd": sum(p.metrics.cost.total_usd for p in record.prompts),
            "total_steps": len(steps),
        },
        "extra": {
            "llmbridge": {
                "scenario": record.scenario,
                "mode": record.mode,
                "iteration": record.iteration,
                "passed": record.passed,
                "error": record.error,
                "checks": [c.model_dump() for c in record.checks],
                "findings": record.findings,
                "prompts": [
                    {
                        "completion_reason": p.completion_reason,
                        "error": p.error,
                        "ttft_ms": p.metrics.timing.ttft_ms,
                        "total_ms": p.metrics.timing.total_ms,
                        "cost": p.metrics.cost.total_usd,
                        "cost_source": p.metrics.cost.source,
                        "cache_write": p.metrics.tokens.cache_write,
                    }
                    for p in record.prompts
                ],
            }
        },
    }


def _boundary(step: dict[str, Any], extra: dict[str, Any], turn: int) -> dict[str, Any]:
    """The ``turn_boundary`` event that opens an agent step: its time and its tokens
    (ours as they were; another tool's from ATIF's metrics) and cost."""
    metrics = step.get("metrics") or {}
    tokens = extra.get("tokens")
    if tokens is None and metrics:
        prompt, cached = int(metrics.get("prompt_tokens", 0)), int(metrics.get("cached_tokens", 0))
        tokens = {
            "input": prompt - cached,
            "output": int(metrics.get("completion_tokens", 0)),
            "cache_read": cached,
        }
    boundary: dict[str, Any] = {"type": "turn_boundary", "turn": turn}
    if (at := timestamp_ms(step.get("timestamp"))) is not None:
        boundary["timestamp_ms"] = at
    if extra.get("duration_ms") is not None:
        boundary["duration_ms"] = extra["duration_ms"]
    if tokens:
        boundary["tokens"] = tokens
    if metrics.get("cost_usd") is not None:
        boundary["cost_usd"] = metrics["cost_usd"]
    return boundary


def _events_of(step: dict[str, Any], turn: int) -> list[dict[str, Any]]:
    """A trace's events for one ATIF agent step, in ``layout``'s order when the step has
    one (ours), else reasoning, message, then each call and its result."""
    extra = (step.get("extra") or {}).get("llmbridge") or {}
    events = [_boundary(step, extra, turn)]
    failed = set(extra.get("failed_calls") or [])
    calls = {str(c["tool_call_id"]): c for c in step.get("tool_calls") or []}
    results = {
        str(r.get("source_call_id")): r
        for r in (step.get("observation") or {}).get("results") or []
    }
    layout = extra.get("layout")
    if not isinstance(layout, list):
        layout = [["reasoning", len(step.get("reasoning_content") or "")]]
        layout.append(["text", len(step.get("message") or "")])
        for call_id in calls:
            layout += [["call", call_id]] + ([["result", call_id]] if call_id in results else [])
    sources = {
        "text": str(step.get("message") or ""),
        "reasoning": str(step.get("reasoning_content") or ""),
    }
    # Where each source's next piece starts: slicing off the rest after every piece
    # would copy the step's text once per piece (quadratic in a long step).
    taken = {"text": 0, "reasoning": 0}
    for kind, value in layout:
        if kind in ("text", "reasoning"):
            start = taken[kind]
            taken[kind] = start + value
            piece = sources[kind][start : start + value]
            if piece:
                events.append(
                    {
                        "type": "text_output" if kind == "text" else "reasoning",
                        "turn": turn,
                        "text": piece,
                    }
                )
        elif kind == "call" and value in calls:
            call = calls[value]
            events.append(
                {
                    "type": "tool_call",
                    "turn": turn,
                    "tool": call["function_name"],
                    "call_id": value,
                    "status": "called",
                    "arguments": call.get("arguments"),
                }
            )
        elif kind == "result" and value in results:
            content = str(results[value].get("content") or "")
            tool = calls[value]["function_name"] if value in calls else "?"
            outcome: dict[str, Any] = {"turn": turn, "tool": tool, "call_id": value}
            if value in failed:
                outcome.update(type="error", error=content)
            else:
                outcome.update(type="tool_result", text=content)
            events.append(outcome)
        elif kind == "error":
            events.append({"type": "error", "turn": turn, "error": str(value)})
    return events


def from_atif(data: dict[str, Any]) -> IterationRecord:
    """An ATIF trajectory as an iteration record (module docstring). ``KeyError`` or
    ``TypeError`` for what is not one (validate against ``ATIF_SCHEMA`` first)."""
    ours = (data.get("extra") or {}).get("llmbridge") or {}
    agent = data["agent"]
    events: list[dict[str, Any]] = []
    inputs: list[str] = []
    per_prompt: list[list[dict[str, Any]]] = []
    turn = 0  # the agent steps so far: each opens with one turn_boundary
    for step in data["steps"]:
        if step["source"] == "user":
            inputs.append(str(step.get("message") or ""))
            per_prompt.append([])
        elif step["source"] == "agent":
            if not per_prompt:
                per_prompt.append([])
            per_prompt[-1].append(step)
            events += _events_of(step, turn)
            turn += 1
    described = ours.get("prompts") or []
    prompts = []
    for n, steps in enumerate(per_prompt):
        about = described[n] if n < len(described) else {}
        prompts.append(_prompt_result(steps, about))
    failed = any(e["type"] == "error" for e in events)
    model = str(agent.get("model_name") or "")
    return IterationRecord(
        scenario=str(ours.get("scenario") or data["session_id"]),
        model=model,
        mode=str(ours.get("mode") or "default"),
        iteration=int(ours.get("iteration") or 0),
        session_id=str(data["session_id"]),
        prompts=prompts,
        checks=[CheckResult.model_validate(c) for c in ours.get("checks") or []],
        passed=bool(ours["passed"]) if "passed" in ours else not failed,
        error=ours.get("error"),
        trace={"session_id": data["session_id"], "events": events},
        provider=str(agent.get("name") or ""),
        findings=list(ours.get("findings") or []),
        inputs=inputs,
    )


def _prompt_result(steps: list[dict[str, Any]], about: dict[str, Any]) -> PromptResult:
    tokens = TokenMetrics()
    calls: list[ToolCallRecord] = []
    for step in steps:
        metrics = step.get("metrics") or {}
        extra = (step.get("extra") or {}).get("llmbridge") or {}
        own = extra.get("tokens") or {}
        uncached = int(metrics.get("prompt_tokens", 0)) - int(metrics.get("cached_tokens", 0))
        tokens = tokens + TokenMetrics(
            input=int(own.get("input", uncached)),
            output=int(own.get("output", metrics.get("completion_tokens", 0))),
            reasoning=int(own.get("reasoning", 0)),
            cache_read=int(own.get("cache_read", metrics.get("cached_tokens", 0))),
            cache_write=int(own.get("cache_write", 0)),
        )
        failed = set(extra.get("failed_calls") or [])
        for call in step.get("tool_calls") or []:
            cid = str(call["tool_call_id"])
            calls.append(
                ToolCallRecord(
                    str(call["function_name"]), cid, "error" if cid in failed else "completed"
                )
            )
    reason = about.get("completion_reason")
    durations = [
        float(((s.get("extra") or {}).get("llmbridge") or {}).get("duration_ms") or 0.0)
        for s in steps
    ]
    text = str(steps[-1].get("message") or "") if steps else ""
    cost = about.get("cost")
    if cost is None:
        cost = sum(float((s.get("metrics") or {}).get("cost_usd") or 0.0) for s in steps)
    named = about.get("cost_source")
    source: Literal["backend", "price_table", "none"] = (
        named if named in ("backend", "price_table", "none") else "backend" if cost else "none"
    )
    return PromptResult(
        text=text,
        metrics=PromptMetrics(
            tokens=tokens,
            timing=TimingMetrics(
                ttft_ms=about.get("ttft_ms"),
                total_ms=float(about.get("total_ms") or sum(durations)),
                steps_ms=tuple(durations),
            ),
            tool_calls=tuple(calls),
            cost=CostMetrics(total_usd=float(cost), source=source),
        ),
        completion_reason=reason if reason in _REASONS else "stop",
        error=about.get("error"),
    )

"""What an iteration record must hold for the reports to read it: ``check_record`` on a
record's JSON form (a line of ``traces.jsonl``, ``IterationRecord.to_json``).

A record the profiler wrote always passes. One read back from a file someone may have
edited (``profile run --resume``), or built from a trajectory another tool wrote
(``profile import``), is checked before anything is written from it, so a value the
summary, the reports or the trajectories could not use (a trace whose ``events`` is a
string, a turn that is not a number, a time outside ``atif.timestamp_ms``'s range) is
an error naming the file, the line and the field, and never a traceback half-way
through writing a run directory.
"""

from __future__ import annotations

import math
from typing import Any

from llmbridge.profiler.records.atif import check_time_ms
from llmbridge.profiler.records.input_files import InputValueError

__all__ = ["check_record"]


def _fail(where: str, value: Any, wanted: str) -> InputValueError:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return InputValueError(f"{where}: {shown} is not {wanted}")


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(where, value, "an object")
    return value


def _list(value: Any, where: str) -> list[Any] | tuple[Any, ...]:
    if not isinstance(value, list | tuple):  # a tuple: a record's to_json before it is text
        raise _fail(where, value, "a list")
    return value


def _text(value: Any, where: str, *, optional: bool = False) -> None:
    if not (isinstance(value, str) or (optional and value is None)):
        raise _fail(where, value, "a string" + (" or null" if optional else ""))


def _integer(value: Any, where: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _fail(where, value, "an integer")


def _number(value: Any, where: str, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise _fail(where, value, "a finite number" + (" or null" if optional else ""))


def _counts(value: Any, where: str) -> None:
    for key, count in _object(value, where).items():
        _integer(count, f"{where}.{key}")


def _prompt(value: Any, where: str) -> None:
    prompt = _object(value, where)
    _text(prompt.get("text"), f"{where}.text")
    _text(prompt.get("completion_reason"), f"{where}.completion_reason")
    _text(prompt.get("error"), f"{where}.error", optional=True)
    _counts(prompt.get("tokens"), f"{where}.tokens")
    timing = _object(prompt.get("timing"), f"{where}.timing")
    _number(timing.get("total_ms"), f"{where}.timing.total_ms")
    _number(timing.get("ttft_ms"), f"{where}.timing.ttft_ms", optional=True)
    for n, took in enumerate(_list(timing.get("steps_ms") or [], f"{where}.timing.steps_ms")):
        _number(took, f"{where}.timing.steps_ms[{n}]")
    for tool, took in _object(timing.get("tools_ms") or {}, f"{where}.timing.tools_ms").items():
        _number(took, f"{where}.timing.tools_ms.{tool}")
    for n, call in enumerate(_list(prompt.get("tool_calls"), f"{where}.tool_calls")):
        call = _object(call, f"{where}.tool_calls[{n}]")
        for key in ("name", "call_id", "status"):
            _text(call.get(key), f"{where}.tool_calls[{n}].{key}")
        _number(call.get("duration_ms"), f"{where}.tool_calls[{n}].duration_ms", optional=True)
    cost = _object(prompt.get("cost"), f"{where}.cost")
    for key, usd in cost.items():
        if key != "source":
            _number(usd, f"{where}.cost.{key}")


_EVENT_NUMBERS = ("duration_ms", "cost_usd")
_EVENT_TEXTS = ("type", "text", "tool", "call_id", "status", "error")


def _event(value: Any, where: str) -> None:
    event = _object(value, where)
    _text(event.get("type"), f"{where}.type")
    if "turn" in event:
        _integer(event["turn"], f"{where}.turn")
    for key in _EVENT_TEXTS[1:]:
        _text(event.get(key), f"{where}.{key}", optional=True)
    for key in _EVENT_NUMBERS:
        _number(event.get(key), f"{where}.{key}", optional=True)
    if event.get("timestamp_ms") is not None:
        _number(event["timestamp_ms"], f"{where}.timestamp_ms")
        try:
            check_time_ms(event["timestamp_ms"])
        except InputValueError as exc:
            raise InputValueError(f"{where}.timestamp_ms: {exc.reason}") from exc
    if event.get("tokens") is not None:
        _counts(event["tokens"], f"{where}.tokens")


def check_record(data: Any) -> None:
    """``InputValueError`` naming the first field of ``data`` (a record's JSON form)
    that the reports could not read (module docstring)."""
    record = _object(data, "the record")
    for key in ("scenario", "model", "mode", "session_id"):
        _text(record.get(key), key)
    _text(record.get("provider", ""), "provider")
    _integer(record.get("iteration"), "iteration")
    if not isinstance(record.get("passed"), bool):
        raise _fail("passed", record.get("passed"), "true or false")
    if not isinstance(record.get("started", True), bool):
        raise _fail("started", record.get("started"), "true or false")
    _text(record.get("error"), "error", optional=True)
    _text(record.get("workspace"), "workspace", optional=True)
    for n, prompt in enumerate(_list(record.get("prompts"), "prompts")):
        _prompt(prompt, f"prompts[{n}]")
    for n, check in enumerate(_list(record.get("checks"), "checks")):
        _object(check, f"checks[{n}]")
    if record.get("trace") is not None:
        trace = _object(record["trace"], "trace")
        for n, event in enumerate(_list(trace.get("events") or [], "trace.events")):
            _event(event, f"trace.events[{n}]")
    for n, span in enumerate(_list(record.get("spans") or [], "spans")):
        _object(span, f"spans[{n}]")
    for n, problem in enumerate(
        _list(record.get("invariant_problems") or [], "invariant_problems")
    ):
        _text(problem, f"invariant_problems[{n}]")
    for n, finding in enumerate(_list(record.get("findings") or [], "findings")):
        finding = _object(finding, f"findings[{n}]")
        _text(finding.get("kind"), f"findings[{n}].kind")
        _text(finding.get("message"), f"findings[{n}].message")
        for m, item in enumerate(_list(finding.get("evidence") or [], f"findings[{n}].evidence")):
            _text(item, f"findings[{n}].evidence[{m}]")
    for n, text in enumerate(_list(record.get("inputs") or [], "inputs")):
        _text(text, f"inputs[{n}]")

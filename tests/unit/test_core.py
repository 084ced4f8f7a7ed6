"""The neutral core: the parts manager's state machine, accumulate and replay."""

from __future__ import annotations

from llmbridge.core.accumulate import accumulate_sync
from llmbridge.core.errors import (
    BackendError,
    BackendHTTPError,
    ConflictError,
    ContextLengthError,
    InternalError,
    InvalidRequestError,
    MethodNotAllowedError,
    ModelNotFoundError,
    ServiceUnavailableError,
    error_for_status,
)
from llmbridge.core.events import (
    PartDelta,
    PartEnd,
    PartStart,
    ResponseEnd,
    ResponseStart,
    StreamEvent,
    TextDelta,
)
from llmbridge.core.messages import TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.parts_manager import PartsManager
from llmbridge.core.replay import events_from_response
from llmbridge.core.response import StopReason, Usage
from llmbridge.core.tool_arguments import parse_tool_arguments


def run(*steps: list[StreamEvent], manager: PartsManager) -> list[StreamEvent]:
    events: list[StreamEvent] = [ResponseStart(id="r", model="m", created=0.0)]
    for step in steps:
        events.extend(step)
    events.extend(manager.finish())
    events.append(ResponseEnd(stop_reason=StopReason.END_TURN))
    return events


def test_one_part_open_at_a_time_in_order() -> None:
    pm = PartsManager()
    events = run(
        pm.thinking("a"),
        pm.thinking("b"),
        pm.text("x"),
        pm.text(""),
        pm.text("y"),
        pm.tool_call("f", {"k": 1}),
        manager=pm,
    )
    kinds = [(type(e).__name__, getattr(e, "index", None)) for e in events]
    assert kinds == [
        ("ResponseStart", None),
        ("PartStart", 0),
        ("PartDelta", 0),
        ("PartDelta", 0),
        ("PartEnd", 0),
        ("PartStart", 1),
        ("PartDelta", 1),
        ("PartDelta", 1),
        ("PartEnd", 1),
        ("PartStart", 2),
        ("PartDelta", 2),
        ("PartEnd", 2),
        ("ResponseEnd", None),
    ]
    response = accumulate_sync(events)
    assert response.message.parts[0] == ThinkingPart("ab")
    assert response.message.parts[1] == TextPart("xy")
    call = response.message.parts[2]
    assert isinstance(call, ToolCallPart) and call.arguments == {"k": 1}
    assert pm.saw_tool_call


def test_fragments_with_the_same_index_but_new_ids_are_separate_calls() -> None:
    pm = PartsManager()
    events = run(
        pm.tool_call_fragment(0, "call_a", "f", '{"x":'),
        pm.tool_call_fragment(0, None, None, "1}"),
        pm.tool_call_fragment(0, "call_b", "g", "{}"),
        pm.tool_call_fragment(1, None, "h", '{"y": 2}'),
        manager=pm,
    )
    calls = [p for p in accumulate_sync(events).message.parts if isinstance(p, ToolCallPart)]
    assert [(c.id, c.name, c.arguments) for c in calls[:2]] == [
        ("call_a", "f", {"x": 1}),
        ("call_b", "g", {}),
    ]
    assert calls[2].name == "h" and calls[2].arguments == {"y": 2} and calls[2].id


def test_unparseable_arguments_are_kept_not_dropped() -> None:
    assert parse_tool_arguments('{"a": 1}') == ({"a": 1}, None)
    assert parse_tool_arguments('"{\\"a\\": 1}"') == ({"a": 1}, None)  # encoded twice
    assert parse_tool_arguments("{broken") == ({}, "{broken")
    assert parse_tool_arguments("") == ({}, None)


def test_signature_attaches_to_thinking() -> None:
    pm = PartsManager()
    events = run(pm.thinking("t"), pm.signature("sig"), pm.text("ok"), manager=pm)
    parts = accumulate_sync(events).message.parts
    assert parts[0] == ThinkingPart("t", signature="sig")


def test_replay_accumulates_back_to_the_same_response() -> None:
    pm = PartsManager()
    events = run(pm.thinking("hm"), pm.text("hi"), pm.tool_call("f", {"a": [1]}), manager=pm)
    events[-1] = ResponseEnd(stop_reason=StopReason.TOOL_USE, usage=Usage(3, 4))
    original = accumulate_sync(events)
    again = accumulate_sync(events_from_response(original))
    assert again == original


def test_text_deltas_carry_exact_text() -> None:
    pm = PartsManager()
    deltas = [e for e in pm.text("é🌍") if isinstance(e, PartDelta)]
    assert deltas == [PartDelta(0, TextDelta("é🌍"))]
    assert isinstance(pm.finish()[0], PartEnd)
    assert not [e for e in pm.text("") if isinstance(e, PartStart)]


def test_error_statuses() -> None:
    assert ModelNotFoundError("x").status_code == 404
    assert ContextLengthError("too long").status_code == 400
    assert BackendHTTPError("e", backend_status=500).status_code == 502
    assert BackendHTTPError("e", backend_status=429).status_code == 429
    assert BackendHTTPError("e", backend_status=529).status_code == 503
    assert BackendHTTPError("e", backend_status=418).status_code == 400
    assert ConflictError("id taken").status_code == 409
    assert ConflictError("id taken").code == "conflict"
    # A database that is down is no model backend: no breaker, no fallback.
    assert ServiceUnavailableError("db down").status_code == 503
    assert not isinstance(ServiceUnavailableError("db down"), BackendError)


def test_a_framework_status_becomes_the_class_of_the_tree() -> None:
    """starlette's HTTPException statuses (gateway/app.py): the tree's class where it
    has one, else a 4xx InvalidRequestError or an InternalError keeping the status."""
    assert type(error_for_status(405, "no")) is MethodNotAllowedError
    assert type(error_for_status(409, "no")) is ConflictError
    assert type(error_for_status(503, "no")) is ServiceUnavailableError
    teapot = error_for_status(418, "short and stout")
    assert type(teapot) is InvalidRequestError and teapot.status_code == 418
    gateway = error_for_status(502, "bad gateway")
    assert type(gateway) is InternalError and gateway.status_code == 502
    assert error_for_status(400, "bad").message == "bad"


def test_usage_merged_keeps_the_latest_and_plus_sums_two_calls() -> None:
    start = Usage(input_tokens=10, cache_read_input_tokens=4)
    end = Usage(input_tokens=12, output_tokens=5, reasoning_tokens=2)
    # One call's events: a later report of a count replaces an earlier one.
    assert start.merged(end) == Usage(12, 5, 4, None, 2)
    # Two calls on one request: their counts add; a count neither knows stays unknown.
    assert start.plus(end) == Usage(22, 5, 4, None, 2)
    assert Usage().plus(Usage()) == Usage()

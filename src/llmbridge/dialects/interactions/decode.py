"""Google's Interactions replies as neutral events: the ``gemini_interactions``
backend's side (the client side of the dialect).

``decode_chat_stream`` reads the server-sent events of a streamed create (input from
``dialects.framing.aiter_sse``; ``stream.py`` documents the grammar) through one
``PartsManager``: ``model_output`` text deltas are text, ``thought_summary`` deltas
thinking, a ``thought_signature`` the thinking's signature (tagged with the backend's
name, ``steps.INTERACTIONS``), a ``function_call`` step a tool call (whole in its
``step.start``, or its ``arguments_delta`` fragments), and ``step.stop`` closes the
part. ``interaction.completed`` ends the reply with its usage and a stop reason from
its ``status``; an ``error`` event is a ``StreamError`` (the error mapped by its code:
``resource_exhausted`` rate limited, ``unavailable`` unavailable...). Steps of Google's
own tools cannot occur (the backend declares functions only) and are skipped.

``decode_chat_response`` reads a whole ``Interaction`` the same way, one step a part.

Malformed output (an event that is not a JSON object, a step of the wrong type, a
stream that ends before ``interaction.completed``) raises ``BackendProtocolError``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from httpx_sse import ServerSentEvent

from llmbridge.core.errors import BackendHTTPError, BackendProtocolError
from llmbridge.core.events import (
    ResponseEnd,
    ResponseStart,
    StreamError,
    StreamEvent,
    UsageUpdate,
)
from llmbridge.core.ids import new_id
from llmbridge.core.messages import Message, Part, TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.parts_manager import PartsManager
from llmbridge.core.response import ChatResponse, StopReason
from llmbridge.dialects.fields import ReplyFields, nonempty_str, object_or_empty
from llmbridge.dialects.gemini.response import decode_error as decode_google_error
from llmbridge.dialects.interactions.response import decode_usage
from llmbridge.dialects.interactions.steps import INTERACTIONS

__all__ = ["decode_chat_response", "decode_chat_stream", "decode_stream_error"]

_FIELDS = ReplyFields(lambda field, expected: f"the Interactions reply's {field} is not {expected}")

_STOPS = {
    "completed": StopReason.END_TURN,
    "requires_action": StopReason.TOOL_USE,
    "incomplete": StopReason.MAX_TOKENS,
    "budget_exceeded": StopReason.MAX_TOKENS,
    "cancelled": StopReason.ERROR,
    "failed": StopReason.ERROR,
}


def decode_stream_error(error: object) -> BackendHTTPError:
    """The core error for an ``error`` event's ``{"code": "unavailable", "message"}``
    (or a Google error object with a numeric ``code``)."""
    body = object_or_empty(error)
    code = body.get("code")
    if isinstance(code, str):
        return decode_google_error({"status": code.upper(), "message": body.get("message")})
    return decode_google_error(body)


def _stop_reason(status: object, saw_tool_call: bool) -> StopReason:
    if saw_tool_call and status in (None, "completed", "requires_action"):
        return StopReason.TOOL_USE
    return _STOPS.get(status if isinstance(status, str) else "", StopReason.END_TURN)


class _StepReader:
    """Steps and deltas into part events, one ``PartsManager`` for the reply."""

    def __init__(self, origin: str | None) -> None:
        self.origin = origin
        self.parts = PartsManager()
        self.signed = False
        """The open thought has a signature started (later deltas continue it)."""
        self.whole = False
        """The open call came with its arguments (fragments after them are repeats)."""

    def step(self, step: dict[str, Any], field: str) -> list[StreamEvent]:
        """A whole step (``step.start``'s, or one of a reply's ``steps``)."""
        kind = step.get("type")
        events = self.parts.finish()  # each step is its own part
        self.signed = self.whole = False
        if kind == "model_output":
            for position, content in enumerate(_FIELDS.optional_list(step.get("content"), field)):
                item = _FIELDS.required_object(content, f"{field}.content[{position}]")
                if item.get("type") == "text":
                    text = _FIELDS.required_string(item.get("text"), f"{field}.content.text")
                    events.extend(self.parts.text(text))
        elif kind == "thought":
            for content in _FIELDS.optional_list(step.get("summary"), f"{field}.summary"):
                item = object_or_empty(content)
                if item.get("type") == "text" and isinstance(item.get("text"), str):
                    events.extend(self.parts.thinking(item["text"]))
            signature = _FIELDS.optional_string(step.get("signature"), f"{field}.signature")
            if signature:
                events.extend(self.signature(signature))
        elif kind == "function_call":
            name = _FIELDS.required_string(step.get("name"), f"{field}.name")
            call_id = nonempty_str(step.get("id")) or new_id("call_")
            arguments = step.get("arguments")
            events.extend(self.parts.tool_call_fragment(None, call_id, name, None))
            if arguments is not None:
                args = _FIELDS.required_object(arguments, f"{field}.arguments")
                if args:
                    self.whole = True
                    events.extend(self.parts.tool_call_fragment(None, call_id, None, _json(args)))
        return events

    def signature(self, signature: str) -> list[StreamEvent]:
        tagged = signature if self.signed else INTERACTIONS.carry(self.origin, signature)
        self.signed = True
        return self.parts.signature(tagged)

    def delta(self, delta: dict[str, Any]) -> list[StreamEvent]:
        kind = delta.get("type")
        if kind == "text":
            return self.parts.text(_FIELDS.required_string(delta.get("text"), "delta.text"))
        if kind == "thought_summary":
            content = object_or_empty(delta.get("content"))
            text = content.get("text")
            return self.parts.thinking(text) if isinstance(text, str) else []
        if kind == "thought_signature":
            signature = _FIELDS.optional_string(delta.get("signature"), "delta.signature")
            return self.signature(signature) if signature else []
        if kind == "arguments_delta" and not self.whole:
            fragment = _FIELDS.optional_string(delta.get("arguments"), "delta.arguments")
            return self.parts.tool_call_fragment(None, None, None, fragment) if fragment else []
        return []  # annotations, and deltas of steps the backend never asks for

    def stop(self) -> list[StreamEvent]:
        self.signed = self.whole = False
        return self.parts.finish()


def _json(value: dict[str, Any]) -> str:
    return orjson.dumps(value).decode()


async def decode_chat_stream(
    events: AsyncIterator[ServerSentEvent], *, origin: str | None = None
) -> AsyncIterator[StreamEvent]:
    """Neutral events from a streamed create; ``origin`` is the backend's name, which
    its thought signatures are tagged with.

    Raises:
        BackendProtocolError: an event is not a JSON object, a field has the wrong
            type, or the stream ended before ``interaction.completed``.
    """
    reader = _StepReader(origin)
    started = False
    async for sse in events:
        data = sse.data.strip()
        if not data:
            continue
        if data == "[DONE]":
            break
        body = _loads(data)
        kind = body.get("event_type")
        if kind == "error":
            yield StreamError(decode_stream_error(body.get("error")))
            return
        if not started:
            started = True
            interaction = object_or_empty(body.get("interaction"))
            yield ResponseStart(
                id=nonempty_str(interaction.get("id")) or new_id("int_"),
                model=nonempty_str(interaction.get("model")) or "",
                created=time.time(),
            )
        if kind == "step.start":
            for event in reader.step(_FIELDS.required_object(body.get("step"), "step"), "step"):
                yield event
        elif kind == "step.delta":
            for event in reader.delta(_FIELDS.required_object(body.get("delta"), "delta")):
                yield event
        elif kind == "step.stop":
            for event in reader.stop():
                yield event
        elif kind == "interaction.completed":
            interaction = _FIELDS.required_object(body.get("interaction"), "interaction")
            for event in reader.stop():
                yield event
            usage = decode_usage(interaction.get("usage"))
            yield UsageUpdate(usage)
            stop = _stop_reason(interaction.get("status"), reader.parts.saw_tool_call)
            yield ResponseEnd(stop_reason=stop, usage=usage)
            return
    raise BackendProtocolError("the Interactions stream ended before interaction.completed")


def decode_chat_response(body: object, *, origin: str | None = None) -> ChatResponse:
    """The core reply for a whole ``Interaction``.

    Raises:
        BackendProtocolError: the body is not an object, or a step is malformed.
    """
    interaction = _FIELDS.required_object(body, "body")
    reader = _StepReader(origin)
    for index, step in enumerate(_FIELDS.optional_list(interaction.get("steps"), "steps")):
        reader.step(_FIELDS.required_object(step, f"steps[{index}]"), f"steps[{index}]")
    reader.stop()
    parts: list[Part] = [
        p for p in reader.parts.parts if isinstance(p, TextPart | ThinkingPart | ToolCallPart)
    ]
    return ChatResponse(
        id=nonempty_str(interaction.get("id")) or new_id("int_"),
        model=nonempty_str(interaction.get("model")) or "",
        message=Message("assistant", tuple(parts)),
        stop_reason=_stop_reason(interaction.get("status"), reader.parts.saw_tool_call),
        usage=decode_usage(interaction.get("usage")),
        created=time.time(),
    )


def _loads(data: str) -> dict[str, Any]:
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise BackendProtocolError(
            f"the Interactions stream sent an event that is not JSON: {data[:200]!r}"
        ) from exc
    if not isinstance(body, dict):
        raise BackendProtocolError("the Interactions stream sent an event that is not an object")
    return body

"""A Responses server's replies as neutral values: llmbridge as a Responses client.

``decode_chat_stream`` reads the server-sent events of ``POST /v1/responses`` with
``stream: true`` (the grammar in ``stream.py``, as OpenAI, Ollama >= 0.13, vLLM and
another llmbridge send it) through ``core.parts_manager.PartsManager``:

- ``response.output_text.delta`` (and ``refusal.delta``) is text;
  ``response.reasoning_summary_text.delta`` is thinking (summaries after the first
  joined by a blank line); ``response.reasoning_text.delta`` too, from servers that
  stream the raw reasoning (gpt-oss on vLLM or Ollama), when the item has no summary;
- a reasoning item with ``encrypted_content`` (in ``response.output_item.done``) is
  carried whole in the thinking part's signature, tagged with the backend it came
  from (``carried.py``), so the backend gets it back byte for byte; a ``compaction``
  item (the answer to Codex's ``compaction_trigger``) is an empty thinking part whose
  signature carries it the same way;
- ``function_call`` items open a tool call, ``response.function_call_arguments.delta``
  extends it; a ``custom_tool_call`` is a call whose one argument, ``input``, is its
  freeform text (``tools.py``);
- an item's ``.done`` events carry its whole value: used when the server sent no
  deltas for it (some servers only send the item whole);
- ``response.completed`` ends the stream with its ``usage`` (``end_turn``, or
  ``tool_use`` when there was a call); ``response.incomplete`` is ``max_tokens``
  (``content_filter`` when that was the reason);
- ``error`` and ``response.failed`` are the server's own in-band failure: a
  ``StreamError`` (``code`` kept, ``rate_limit_exceeded`` as 429, a refused prompt as
  400). Output that breaks the grammar, or a stream that ends before its terminal
  event, raises ``BackendProtocolError``.

``ResponseStart`` is held back until the first output item (or the end): a server that
accepts the request, then fails it before producing anything (OpenAI sends
``response.created`` then ``response.failed`` for its own faults) yields the failure
first, which the serving layer treats as a failure before the reply (an HTTP error,
retried or sent to a fallback) rather than as a broken stream.

``decode_chat_response`` reads the same ``response`` object returned without
streaming.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
from httpx_sse import ServerSentEvent

from llmbridge.core.errors import BackendError, BackendProtocolError, LLMBridgeError
from llmbridge.core.events import (
    PartEnd,
    ResponseEnd,
    ResponseStart,
    StreamError,
    StreamEvent,
)
from llmbridge.core.ids import new_id
from llmbridge.core.messages import Message, Part, TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.parts_manager import PartsManager
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.core.tool_arguments import parse_tool_arguments
from llmbridge.dialects.fields import (
    ReplyFields,
    int_or_none,
    nonempty_str,
    object_or_empty,
    str_or_none,
)
from llmbridge.dialects.openai.response import reply_created
from llmbridge.dialects.responses.carried import PROVIDER, carry_item
from llmbridge.dialects.responses.tools import CUSTOM_INPUT

__all__ = [
    "INCOMPLETE_STOP",
    "decode_chat_response",
    "decode_chat_stream",
    "decode_usage",
    "in_band_error",
]

INCOMPLETE_STOP = {"content_filter": StopReason.CONTENT_FILTER}
"""``incomplete_details.reason`` -> stop reason; anything else is ``max_tokens``."""
_INCOMPLETE = INCOMPLETE_STOP
_ERROR_STATUS = {
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "invalid_prompt": 400,
    "context_length_exceeded": 400,
}
"""The status of an in-band failure by its ``code``; others are 502 (the backend failed)."""

_COMPACTION_TYPES = frozenset({"compaction", "compaction_summary"})
"""A compaction item's types (``compaction_summary``: its older name, which Codex reads too)."""

_FIELDS = ReplyFields(
    lambda field, expected: f"the Responses backend's '{field}' is not {expected}"
)
"""Readers of events' fields, named ``<event type>.<key>``."""


def decode_usage(value: object) -> Usage:
    """A ``usage`` object; missing or malformed counts stay unknown. ``input_tokens``
    includes the cached ones, as in the core (OpenAI's counting)."""
    if not isinstance(value, dict):
        return Usage()
    details = object_or_empty(value.get("input_tokens_details"))
    output = object_or_empty(value.get("output_tokens_details"))
    return Usage(
        input_tokens=int_or_none(value.get("input_tokens")),
        output_tokens=int_or_none(value.get("output_tokens")),
        cache_read_input_tokens=int_or_none(details.get("cached_tokens")),
        cache_creation_input_tokens=int_or_none(details.get("cache_write_tokens")),
        reasoning_tokens=int_or_none(output.get("reasoning_tokens")),
    )


def in_band_error(error: object, fallback: str) -> LLMBridgeError:
    """The error of an ``error`` event's or a failed response's ``error`` object
    (``fallback``: the message when it has none); its ``code`` kept, its status by it."""
    return _in_band_error(error, fallback).error


def _in_band_error(error: object, fallback: str) -> StreamError:
    """The ``StreamError`` for an ``error`` event's or a failed response's ``error``."""
    payload = error if isinstance(error, dict) else {}
    code = str_or_none(payload.get("code")) or str_or_none(payload.get("type"))
    message = nonempty_str(payload.get("message")) or fallback
    status = _ERROR_STATUS.get(code or "", 502)
    return StreamError(BackendError(message, status_code=status, code=code))


# -- streams ------------------------------------------------------------------------


async def decode_chat_stream(
    events: AsyncIterator[ServerSentEvent], *, origin: str | None = None
) -> AsyncIterator[StreamEvent]:
    """Neutral events for a Responses server's stream (rules above). ``origin`` is
    the backend's name, carried with its encrypted reasoning.

    Raises:
        BackendProtocolError: an event is not a JSON object or breaks the grammar, or
            the stream ended before ``response.completed``, ``response.incomplete``,
            ``response.failed`` or ``error``.
    """
    decoder = _StreamDecoder(origin)
    async for sse in events:
        data = sse.data
        if not data or data == "[DONE]":
            continue  # keep-alives; some proxies end every SSE stream with [DONE]
        for event in decoder.feed(sse.event, data):
            yield event
        if decoder.finished:
            return
    raise BackendProtocolError("the Responses stream ended before the response was complete")


@dataclass(slots=True)
class _Item:
    """An output item being streamed."""

    type: str
    streamed: bool = False
    """Deltas arrived for it (its ``.done`` text is then a repeat)."""
    summary: int = 0
    """The ``summary_index`` of the latest summary delta (a reasoning item)."""
    raw_reasoning: bool = False
    """It streams ``reasoning_text`` rather than a summary."""
    custom_input: list[str] = field(default_factory=list)


class _StreamDecoder:
    """The state of one decoded stream: ``feed`` per event."""

    def __init__(self, origin: str | None) -> None:
        self.origin = origin
        self.parts = PartsManager()
        self.items: dict[int, _Item] = {}
        self.current = -1
        """The ``output_index`` of the latest item added."""
        self.response: dict[str, Any] = {}
        self.started = False
        self.finished = False

    def feed(self, name: str, data: str) -> list[StreamEvent]:
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise BackendProtocolError(
                f"the Responses stream sent an event that is not JSON: {data[:200]!r}"
            ) from exc
        if not isinstance(payload, dict):
            raise BackendProtocolError("the Responses stream sent an event that is not an object")
        kind = payload.get("type") or name
        if kind in ("response.created", "response.in_progress", "response.queued"):
            self.response = object_or_empty(payload.get("response")) or self.response
            return []
        if kind == "error":
            self.finished = True
            error = payload.get("error") if isinstance(payload.get("error"), dict) else payload
            return [_in_band_error(error, "the Responses backend reported an error")]
        if kind == "response.failed":
            self.finished = True
            response = object_or_empty(payload.get("response"))
            failure = _in_band_error(
                response.get("error"), "the Responses backend failed the response"
            )
            return [failure]
        if kind in ("response.completed", "response.incomplete"):
            return self._end(
                kind, _FIELDS.required_object(payload.get("response"), f"{kind}.response")
            )
        handler = _HANDLERS.get(kind)
        if handler is None:
            return []  # content_part, annotation, hosted tool progress, newer events
        return handler(self, kind, payload)

    # -- lifecycle --------------------------------------------------------------------

    def _start(self) -> list[StreamEvent]:
        if self.started:
            return []
        self.started = True
        response = self.response
        return [
            ResponseStart(
                id=nonempty_str(response.get("id")) or new_id("resp_"),
                model=str_or_none(response.get("model")) or "",
                created=reply_created(response.get("created_at")),
            )
        ]

    def _end(self, kind: str, response: dict[str, Any]) -> list[StreamEvent]:
        self.finished = True
        self.response = response
        events = self._start() + self._own(self.parts.finish())
        if kind == "response.incomplete":
            reason = str_or_none(object_or_empty(response.get("incomplete_details")).get("reason"))
            stop = _INCOMPLETE.get(reason or "", StopReason.MAX_TOKENS)
        else:
            stop = StopReason.TOOL_USE if self.parts.saw_tool_call else StopReason.END_TURN
        events.append(ResponseEnd(stop_reason=stop, usage=decode_usage(response.get("usage"))))
        return events

    def _own(self, events: list[StreamEvent]) -> list[StreamEvent]:
        """Thinking parts are this backend's: ``provider`` says so."""
        for position, event in enumerate(events):
            if isinstance(event, PartEnd) and isinstance(event.part, ThinkingPart):
                events[position] = PartEnd(event.index, replace(event.part, provider=PROVIDER))
        return events

    def _item(self, kind: str, payload: dict[str, Any], expected: str) -> _Item:
        """The item an event is about (by ``output_index``, else the latest)."""
        index = int_or_none(payload.get("output_index"))
        item = self.items.get(self.current if index is None else index)
        if item is None or item.type != expected:
            raise BackendProtocolError(
                f"the Responses stream sent {kind} for a {expected} item it never added"
            )
        return item

    # -- items ------------------------------------------------------------------------

    def _added(self, kind: str, payload: dict[str, Any]) -> list[StreamEvent]:
        index = _FIELDS.required_int(payload.get("output_index"), f"{kind}.output_index")
        wire = _FIELDS.required_object(payload.get("item"), f"{kind}.item")
        item_type = str_or_none(wire.get("type")) or ""
        self.items[index] = _Item(item_type)
        self.current = index
        events = self._start() + self._own(self.parts.finish())
        if item_type in ("function_call", "custom_tool_call"):
            call_id = _FIELDS.required_string(wire.get("call_id"), f"{item_type}.call_id")
            name = _FIELDS.required_string(wire.get("name"), f"{item_type}.name")
            events += self.parts.tool_call_fragment(index, call_id, name, None)
        return events

    def _done(self, kind: str, payload: dict[str, Any]) -> list[StreamEvent]:
        index = _FIELDS.required_int(payload.get("output_index"), f"{kind}.output_index")
        wire = _FIELDS.required_object(payload.get("item"), f"{kind}.item")
        item_type = str_or_none(wire.get("type")) or ""
        item = self.items.pop(index, None)
        if item is None:  # a server that sends items whole, without .added
            item = _Item(item_type)
            events = self._start() + self._own(self.parts.finish())
        else:
            events = self._start()
        if item_type == "message":
            if not item.streamed:
                events += self.parts.text(_message_text(wire, "message"))
        elif item_type == "reasoning":
            if not item.streamed:
                events += self.parts.thinking(_reasoning_text(wire))
            encrypted = _FIELDS.optional_string(
                wire.get("encrypted_content"), "reasoning.encrypted_content"
            )
            if encrypted:
                events += self.parts.signature(carry_item(self.origin, wire))
        elif item_type in _COMPACTION_TYPES:
            events += self.parts.signature(carry_item(self.origin, _compaction(wire)))
        elif item_type in ("function_call", "custom_tool_call"):
            events += self._call_done(index, item, wire)
        return events + self._own(self.parts.finish())

    def _call_done(self, index: int, item: _Item, wire: dict[str, Any]) -> list[StreamEvent]:
        kind = str(wire.get("type"))
        call_id = _FIELDS.required_string(wire.get("call_id"), f"{kind}.call_id")
        name = _FIELDS.required_string(wire.get("name"), f"{kind}.name")
        if kind == "custom_tool_call":
            text = "".join(item.custom_input) if item.streamed else None
            if text is None:
                text = _FIELDS.optional_string(wire.get("input"), "custom_tool_call.input") or ""
            arguments = orjson.dumps({CUSTOM_INPUT: text}).decode()
        elif item.streamed:
            arguments = ""
        else:
            arguments = (
                _FIELDS.optional_string(wire.get("arguments"), "function_call.arguments") or ""
            )
        return self.parts.tool_call_fragment(index, call_id, name, arguments or None)

    # -- deltas -----------------------------------------------------------------------

    def _text(self, kind: str, payload: dict[str, Any]) -> list[StreamEvent]:
        item = self._item(kind, payload, "message")
        delta = _FIELDS.optional_string(payload.get("delta"), f"{kind}.delta") or ""
        item.streamed = item.streamed or bool(delta)
        return self.parts.text(delta)

    def _summary(self, kind: str, payload: dict[str, Any]) -> list[StreamEvent]:
        item = self._item(kind, payload, "reasoning")
        delta = _FIELDS.optional_string(payload.get("delta"), f"{kind}.delta") or ""
        if not delta or item.raw_reasoning:
            return []
        summary = int_or_none(payload.get("summary_index")) or 0
        # Each summary part is a paragraph; joined by a blank line, as the front's
        # decoder joins the ``summary`` of a reasoning item sent back (request.py).
        events = self.parts.thinking("\n\n") if item.streamed and summary != item.summary else []
        item.streamed, item.summary = True, summary
        return events + self.parts.thinking(delta)

    def _raw_reasoning(self, kind: str, payload: dict[str, Any]) -> list[StreamEvent]:
        item = self._item(kind, payload, "reasoning")
        delta = _FIELDS.optional_string(payload.get("delta"), f"{kind}.delta") or ""
        if not delta or (item.streamed and not item.raw_reasoning):
            return []  # the summary is already streaming: one of the two, not both
        item.streamed = item.raw_reasoning = True
        return self.parts.thinking(delta)

    def _arguments(self, kind: str, payload: dict[str, Any]) -> list[StreamEvent]:
        index = int_or_none(payload.get("output_index"))
        item = self._item(kind, payload, "function_call")
        delta = _FIELDS.optional_string(payload.get("delta"), f"{kind}.delta") or ""
        if not delta:
            return []
        item.streamed = True
        return self.parts.tool_call_fragment(
            self.current if index is None else index, None, None, delta
        )

    def _custom_input(self, kind: str, payload: dict[str, Any]) -> list[StreamEvent]:
        item = self._item(kind, payload, "custom_tool_call")
        delta = _FIELDS.optional_string(payload.get("delta"), f"{kind}.delta") or ""
        item.custom_input.append(delta)
        item.streamed = True
        return []  # the input goes out whole, as a JSON object, at the item's end


_HANDLERS = {
    "response.output_item.added": _StreamDecoder._added,
    "response.output_item.done": _StreamDecoder._done,
    "response.output_text.delta": _StreamDecoder._text,
    "response.refusal.delta": _StreamDecoder._text,
    "response.reasoning_summary_text.delta": _StreamDecoder._summary,
    "response.reasoning_text.delta": _StreamDecoder._raw_reasoning,
    "response.function_call_arguments.delta": _StreamDecoder._arguments,
    "response.custom_tool_call_input.delta": _StreamDecoder._custom_input,
}


# -- whole responses ----------------------------------------------------------------


def decode_chat_response(body: object, *, origin: str | None = None) -> ChatResponse:
    """Read a ``response`` object (``POST /v1/responses`` without streaming).

    Raises:
        BackendProtocolError: the body is not a response object.
        BackendError: the response is ``failed`` (its ``error`` message and code).
    """
    data = _FIELDS.required_object(body, "response")
    status = str_or_none(data.get("status"))
    if status == "failed":
        raise _in_band_error(data.get("error"), "the Responses backend failed the response").error
    parts: list[Part] = []
    for position, wire in enumerate(_FIELDS.optional_list(data.get("output"), "output")):
        parts.extend(_item_parts(_FIELDS.required_object(wire, f"output[{position}]"), origin))
    if status == "incomplete":
        reason = str_or_none(object_or_empty(data.get("incomplete_details")).get("reason"))
        stop = _INCOMPLETE.get(reason or "", StopReason.MAX_TOKENS)
    elif any(isinstance(part, ToolCallPart) for part in parts):
        stop = StopReason.TOOL_USE
    else:
        stop = StopReason.END_TURN
    return ChatResponse(
        id=nonempty_str(data.get("id")) or new_id("resp_"),
        model=str_or_none(data.get("model")) or "",
        message=Message("assistant", tuple(parts)),
        stop_reason=stop,
        usage=decode_usage(data.get("usage")),
        created=reply_created(data.get("created_at")),
    )


def _item_parts(wire: dict[str, Any], origin: str | None) -> list[Part]:
    kind = str_or_none(wire.get("type"))
    if kind == "message":
        text = _message_text(wire, "message")
        return [TextPart(text)] if text else []
    if kind == "reasoning":
        text = _reasoning_text(wire)
        encrypted = _FIELDS.optional_string(
            wire.get("encrypted_content"), "reasoning.encrypted_content"
        )
        signature = carry_item(origin, wire) if encrypted else None
        if not text and signature is None:
            return []
        return [ThinkingPart(text, signature=signature, provider=PROVIDER)]
    if kind in _COMPACTION_TYPES:
        return [
            ThinkingPart("", signature=carry_item(origin, _compaction(wire)), provider=PROVIDER)
        ]
    if kind == "function_call":
        raw = _FIELDS.optional_string(wire.get("arguments"), "function_call.arguments") or ""
        arguments, unparsed = parse_tool_arguments(raw)
        return [_call(wire, kind, arguments, unparsed)]
    if kind == "custom_tool_call":
        text = _FIELDS.optional_string(wire.get("input"), "custom_tool_call.input") or ""
        return [_call(wire, kind, {CUSTOM_INPUT: text}, None)]
    return []  # hosted tools' calls (web_search_call...): run by the server itself


def _call(
    wire: dict[str, Any], kind: str, arguments: dict[str, Any], raw: str | None
) -> ToolCallPart:
    return ToolCallPart(
        id=_FIELDS.required_string(wire.get("call_id"), f"{kind}.call_id"),
        name=_FIELDS.required_string(wire.get("name"), f"{kind}.name"),
        arguments=arguments,
        raw_arguments=raw,
    )


def _compaction(wire: dict[str, Any]) -> dict[str, Any]:
    """A ``compaction`` item as it is carried: its blob checked, its type the current one."""
    _FIELDS.required_string(wire.get("encrypted_content"), "compaction.encrypted_content")
    return {**wire, "type": "compaction"}


def _message_text(wire: dict[str, Any], where: str) -> str:
    texts: list[str] = []
    for part in _FIELDS.optional_list(wire.get("content"), f"{where}.content"):
        part = _FIELDS.required_object(part, f"{where}.content[]")
        if part.get("type") == "refusal":
            texts.append(_FIELDS.optional_string(part.get("refusal"), "refusal.refusal") or "")
        else:
            texts.append(_FIELDS.optional_string(part.get("text"), "output_text.text") or "")
    return "".join(texts)


def _reasoning_text(wire: dict[str, Any]) -> str:
    """A reasoning item's summaries joined by blank lines; its raw ``content`` when it
    has no summary."""
    texts = [
        _FIELDS.optional_string(
            _FIELDS.required_object(s, "reasoning.summary[]").get("text"), "summary_text.text"
        )
        or ""
        for s in _FIELDS.optional_list(wire.get("summary"), "reasoning.summary")
    ]
    if not any(texts):
        texts = [
            _FIELDS.optional_string(
                _FIELDS.required_object(c, "reasoning.content[]").get("text"), "reasoning_text.text"
            )
            or ""
            for c in _FIELDS.optional_list(wire.get("content"), "reasoning.content")
        ]
    return "\n\n".join(text for text in texts if text)

"""Anthropic Messages streaming: neutral events to SSE and a real API's SSE to events.

Anthropic's stream (docs.claude.com/en/api/messages-streaming) is ``message_start``,
then per content block ``content_block_start``, ``content_block_delta``\\*,
``content_block_stop``, then ``message_delta`` and ``message_stop``; every event is
``event: <type>`` plus ``data: {"type": <type>, ...}``, with ``ping`` anywhere.
The core's grammar was modelled on it, so both directions map one event to one.

``encode_chat_stream`` is the gateway's hot path: byte fragments are precomputed and
the JSON of each delta is built with orjson only, no pydantic and no dict per delta.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import orjson
from httpx_sse import ServerSentEvent

from llmbridge.core.errors import BackendError, BackendProtocolError, LLMBridgeError
from llmbridge.core.events import (
    PartDelta,
    PartEnd,
    PartStart,
    Relayed,
    ResponseEnd,
    ResponseStart,
    SignatureDelta,
    StreamError,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    UsageUpdate,
)
from llmbridge.core.ids import new_id
from llmbridge.core.messages import TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.parts_manager import PartsManager
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import StopReason, Usage
from llmbridge.dialects.anthropic.context_management import applied_edits_body, reported_edits
from llmbridge.dialects.anthropic.errors import error_type
from llmbridge.dialects.anthropic.response import (
    anthropic_tool_id,
    decode_stop_reason,
    decode_usage,
    encode_stop_reason,
    message_id,
    thinking_omitted,
    uncached_input_tokens,
)
from llmbridge.dialects.anthropic.types import PROVIDER
from llmbridge.dialects.fields import ReplyFields, object_or_empty, str_or_none
from llmbridge.dialects.framing import sse_event
from llmbridge.dialects.stream_encoding import encoded

__all__ = [
    "StreamEncoder",
    "decode_chat_stream",
    "encode_chat_stream",
    "error_event",
    "in_band_error",
]

# -- encoding -------------------------------------------------------------------------

_DELTA_HEAD = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
_TEXT_DELTA = b',"delta":{"type":"text_delta","text":'
_THINKING_DELTA = b',"delta":{"type":"thinking_delta","thinking":'
_SIGNATURE_DELTA = b',"delta":{"type":"signature_delta","signature":'
_JSON_DELTA = b',"delta":{"type":"input_json_delta","partial_json":'
_DELTA_TAIL = b"}}\n\n"
_STOP_HEAD = b'event: content_block_stop\ndata: {"type":"content_block_stop","index":'
_STOP_TAIL = b"}\n\n"
_MESSAGE_STOP = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'

# What the open block is, on the wire.
_TEXT, _THINKING, _REDACTED, _TOOL, _SKIP = range(5)


def encode_chat_stream(
    events: AsyncIterator[StreamEvent], request: ChatRequest
) -> AsyncIterator[bytes]:
    """Anthropic SSE for a stream of neutral events.

    A ``StreamError`` becomes ``event: error`` and ends the stream; so does a stream
    that stops without ``ResponseEnd``. With ``thinking.display: "omitted"`` thinking
    blocks carry no ``thinking_delta`` (``response.thinking_omitted``).
    """
    encoder = StreamEncoder(request.model, omit_thinking=thinking_omitted(request))
    encoder.context_management = applied_edits_body(request)
    # Escaped: a raw U+2028 would split the line (framing).
    return encoded(
        events,
        encoder.feed,
        lambda: encoder.done,
        lambda: error_event(BackendProtocolError("the stream ended before it was complete")),
    )


def error_event(err: LLMBridgeError) -> bytes:
    """Anthropic's in-stream error: ``event: error`` with the error JSON (no request id).

    For the gateway too, when a stream fails after its first byte.
    """
    body = {
        "type": "error",
        "error": {"type": error_type(err), "message": err.message},
    }
    return sse_event(body, event="error")


class StreamEncoder:
    """The state of one encoded stream: which block is open, usage so far."""

    __slots__ = (
        "context_management",
        "done",
        "index",
        "input_tokens",
        "model",
        "omit_thinking",
        "open",
        "pending_text",
        "saw_tool_call",
        "signature",
        "started",
        "stop_override",
        "usage",
        "wire_index",
    )

    def __init__(self, model: str, *, omit_thinking: bool = False) -> None:
        self.model = model
        self.omit_thinking = omit_thinking
        self.started = False
        self.done = False
        self.input_tokens: int | None = None
        self.usage = Usage()
        self.index = -1
        self.wire_index = b""
        self.open: int | None = None
        self.pending_text = False
        self.signature: list[str] = []
        self.saw_tool_call = False
        self.stop_override: str | None = None
        """The stop reason to send whatever the end says (the MCP loop's ``pause_turn``)."""
        self.context_management: dict[str, Any] | None = None
        """``message_delta``'s ``context_management``: what the gateway's context
        editing cleared (``context_management.applied_edits_body``)."""

    def whole_block(self, block: dict[str, Any], input_json: str | None = None) -> bytes:
        """A block the core has no part for (the MCP loop's ``mcp_tool_use`` and
        ``mcp_tool_result``): started, its input as one ``input_json_delta``, stopped."""
        out = self._start() + self._close(None) + self._block_start(block)
        if input_json is not None:
            out += (
                _DELTA_HEAD + self.wire_index + _JSON_DELTA + orjson.dumps(input_json) + _DELTA_TAIL
            )
        return out + _STOP_HEAD + self.wire_index + _STOP_TAIL

    def feed(self, event: StreamEvent) -> bytes:
        if isinstance(event, PartDelta):
            return self._delta(event)
        if isinstance(event, PartStart):
            return self._start() + self._open(event)
        if isinstance(event, PartEnd):
            return self._close(event)
        if isinstance(event, UsageUpdate):
            self.usage = self.usage.merged(event.usage)
            return b""
        if isinstance(event, ResponseStart):
            return b"" if self.started else self._start(event)
        if isinstance(event, ResponseEnd):
            return self._start() + self._close(None) + self._end(event)
        if isinstance(event, Relayed):
            return b""  # the pass-through path writes its bytes itself (Exchange.relay)
        self.done = True
        return error_event(event.error)

    # -- message ----------------------------------------------------------------------

    def _start(self, event: ResponseStart | None = None) -> bytes:
        if self.started:
            return b""
        self.started = True
        if event is not None:
            self.input_tokens = event.input_tokens
        message: dict[str, Any] = {
            "id": message_id(event.id) if event is not None else new_id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": self.input_tokens or 0,
                "output_tokens": 0,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        }
        return sse_event({"type": "message_start", "message": message}, event="message_start")

    def _end(self, event: ResponseEnd) -> bytes:
        self.done = True
        usage = self.usage.merged(event.usage)
        # Claude Code keeps message_start's input_tokens unless message_delta carries
        # one (the claudish proxy found it so), and message_start often only had an estimate.
        # Anthropic counts input_tokens without the cached ones (response.py).
        if usage.input_tokens is None:
            usage = usage.merged(Usage(input_tokens=self.input_tokens))
        input_tokens = uncached_input_tokens(usage)
        wire_usage: dict[str, int] = {
            "input_tokens": input_tokens or 0,
            "output_tokens": usage.output_tokens or 0,
        }
        if usage.cache_creation_input_tokens is not None:
            wire_usage["cache_creation_input_tokens"] = usage.cache_creation_input_tokens
        if usage.cache_read_input_tokens is not None:
            wire_usage["cache_read_input_tokens"] = usage.cache_read_input_tokens
        delta = {
            "type": "message_delta",
            "delta": {
                "stop_reason": self.stop_override
                or encode_stop_reason(event.stop_reason, self.saw_tool_call),
                "stop_sequence": event.stop_sequence,
            },
            "usage": wire_usage,
        }
        # What the gateway cleared, or else what an Anthropic backend said it cleared.
        context_management = self.context_management or reported_edits(event.provider_details)
        if context_management is not None:
            delta["context_management"] = context_management
        return sse_event(delta, event="message_delta") + _MESSAGE_STOP

    # -- blocks -----------------------------------------------------------------------

    def _open(self, event: PartStart) -> bytes:
        out = self._close(None)
        part = event.part
        if isinstance(part, TextPart):
            # Opened lazily, at the first non-empty delta: an empty text block before
            # a tool call confuses clients (claude-code-proxy always sent one).
            self.open, self.pending_text = _TEXT, True
            if part.text:
                out += self._delta(PartDelta(event.index, TextDelta(part.text)))
            return out
        block: dict[str, Any]
        if isinstance(part, ThinkingPart) and part.redacted:
            self.open = _REDACTED
            block = {"type": "redacted_thinking", "data": part.redacted}
        elif isinstance(part, ThinkingPart):
            self.open, self.signature = _THINKING, []
            block = {"type": "thinking", "thinking": "", "signature": ""}
        elif isinstance(part, ToolCallPart):
            self.open, self.saw_tool_call = _TOOL, True
            block = {
                "type": "tool_use",
                "id": anthropic_tool_id(part.id),
                "name": part.name,
                "input": {},
            }
        else:
            self.open = _SKIP  # images and tool results are not assistant output
            return out
        out += self._block_start(block)
        if isinstance(part, ThinkingPart) and part.text and not part.redacted:
            out += self._delta(PartDelta(event.index, ThinkingDelta(part.text)))
        return out

    def _block_start(self, block: dict[str, Any]) -> bytes:
        self.index += 1
        self.wire_index = str(self.index).encode()
        start = {"type": "content_block_start", "index": self.index, "content_block": block}
        return sse_event(start, event="content_block_start")

    def _delta(self, event: PartDelta) -> bytes:
        delta = event.delta
        if isinstance(delta, TextDelta):
            if self.open != _TEXT or not delta.text:
                return b""
            head = b""
            if self.pending_text:
                self.pending_text = False
                head = self._block_start({"type": "text", "text": ""})
            return (
                head
                + _DELTA_HEAD
                + self.wire_index
                + _TEXT_DELTA
                + orjson.dumps(delta.text)
                + _DELTA_TAIL
            )
        if isinstance(delta, ThinkingDelta):
            if self.open != _THINKING or not delta.text or self.omit_thinking:
                return b""
            return (
                _DELTA_HEAD
                + self.wire_index
                + _THINKING_DELTA
                + orjson.dumps(delta.text)
                + _DELTA_TAIL
            )
        if isinstance(delta, SignatureDelta):
            if self.open == _THINKING:
                self.signature.append(delta.signature)
            return b""
        # Tool arguments are sent whole at the block's end, parsed (see ``_close``).
        return b""

    def _close(self, event: PartEnd | None) -> bytes:
        open_, self.open = self.open, None
        if open_ is None or open_ == _SKIP or (open_ == _TEXT and self.pending_text):
            self.pending_text = False
            return b""
        out = b""
        part = event.part if event is not None else None
        if open_ == _THINKING:
            # Anthropic sends the signature once, just before content_block_stop; the
            # SDK keeps only the last signature_delta, so it must not be split.
            signature = part.signature if isinstance(part, ThinkingPart) else None
            signature = signature or "".join(self.signature)
            if signature:
                out += (
                    _DELTA_HEAD
                    + self.wire_index
                    + _SIGNATURE_DELTA
                    + orjson.dumps(signature)
                    + _DELTA_TAIL
                )
        elif open_ == _TOOL and isinstance(part, ToolCallPart) and part.arguments:
            # One input_json_delta with the parsed arguments rather than the backend's
            # fragments: the SDK (and Claude Code) parse partial JSON as it arrives
            # and fail the whole stream on a small model's broken or double-encoded
            # arguments, which the core has already repaired by PartEnd.
            out += (
                _DELTA_HEAD
                + self.wire_index
                + _JSON_DELTA
                + orjson.dumps(orjson.dumps(part.arguments).decode())
                + _DELTA_TAIL
            )
        return out + _STOP_HEAD + self.wire_index + _STOP_TAIL


# -- decoding -------------------------------------------------------------------------


async def decode_chat_stream(
    events: AsyncIterator[ServerSentEvent],
) -> AsyncIterator[StreamEvent]:
    """Neutral events from a real Anthropic API's SSE stream.

    Raises:
        BackendProtocolError: an event is not JSON, misses a field, or the stream
            ends before ``message_stop``. An ``error`` event is yielded as
            ``StreamError`` instead, and ends the stream.
    """
    decoder = _Decoder()
    async for sse in events:
        for event in decoder.feed(sse):
            yield event
        if decoder.finished:
            return
    raise BackendProtocolError("the Anthropic stream ended before message_stop")


_ERROR_STATUS = {"overloaded_error": 503, "rate_limit_error": 429, "timeout_error": 504}


def in_band_error(data: dict[str, Any]) -> BackendError:
    """The error an ``event: error`` frame's data (``{"type": "error", "error": ...}``)
    reports, with the status its type stands for (502 for one not listed)."""
    error = object_or_empty(data.get("error"))
    error_type = str(error.get("type") or "api_error")
    message = str(error.get("message") or "the Anthropic backend reported an error")
    return BackendError(message, status_code=_ERROR_STATUS.get(error_type, 502), code=error_type)


class _Decoder:
    """The state of one decoded stream."""

    def __init__(self) -> None:
        self.parts = PartsManager()
        self.started = False
        self.finished = False
        self.usage = Usage()
        self.stop_reason: object = None
        self.stop_sequence: str | None = None
        self.context_management: dict[str, Any] | None = None
        """``message_delta``'s report of the API's context editing, for the client."""
        self.blocks: dict[int, tuple[str, str]] = {}
        """Open blocks by Anthropic index: their type and (for tool_use) id."""
        self.next_index = 0
        self.open_index = -1
        """The index given here to PartsManager's open part."""

    def feed(self, sse: ServerSentEvent) -> list[StreamEvent]:
        if sse.event == "ping" or not sse.data:
            return []
        try:
            data = orjson.loads(sse.data)
        except orjson.JSONDecodeError as exc:
            raise BackendProtocolError(
                f"the Anthropic stream sent an event that is not JSON: {sse.data[:200]!r}"
            ) from exc
        if not isinstance(data, dict):
            raise _malformed(sse.event, "its data is not an object")
        kind = data.get("type") or sse.event
        if kind == "error":
            return [self._error(data)]
        if kind == "message_start":
            return self._message_start(data)
        if not self.started and kind != "ping":
            raise _malformed(kind, "it came before message_start")
        if kind == "content_block_start":
            return self._block_start(data)
        if kind == "content_block_delta":
            return self._block_delta(data)
        if kind == "content_block_stop":
            index = _FIELDS.required_int(data.get("index"), "content_block_stop.index")
            self.blocks.pop(index, None)
            return self._renumber(self.parts.finish())
        if kind == "message_delta":
            return self._message_delta(data)
        if kind == "message_stop":
            return self._message_stop()
        return []  # ping, and event types newer than this module

    def _message_start(self, data: dict[str, Any]) -> list[StreamEvent]:
        message = _FIELDS.required_object(data.get("message"), "message_start.message")
        message_id_ = _FIELDS.required_string(message.get("id"), "message_start.message.id")
        if self.started:
            return []
        self.started = True
        self.usage = decode_usage(message.get("usage"))
        return [
            ResponseStart(
                id=message_id_,
                model=str(message.get("model") or ""),
                created=time.time(),
                input_tokens=self.usage.input_tokens,
            )
        ]

    def _block_start(self, data: dict[str, Any]) -> list[StreamEvent]:
        index = _FIELDS.required_int(data.get("index"), "content_block_start.index")
        block = _FIELDS.required_object(
            data.get("content_block"), "content_block_start.content_block"
        )
        events = self._renumber(self.parts.finish())
        kind = block.get("type")
        if kind == "text":
            self.blocks[index] = ("text", "")
            text = _FIELDS.optional_string(block.get("text"), "text.text") or ""
            events += self._renumber(self.parts.text(text))
        elif kind == "thinking":
            self.blocks[index] = ("thinking", "")
            thinking = _FIELDS.optional_string(block.get("thinking"), "thinking.thinking") or ""
            signature = _FIELDS.optional_string(block.get("signature"), "thinking.signature")
            events += self._renumber(self.parts.thinking(thinking))
            events += self._renumber(self.parts.signature(signature or ""))
        elif kind == "redacted_thinking":
            self.blocks[index] = ("redacted_thinking", "")
            data_ = _FIELDS.required_string(block.get("data"), "redacted_thinking.data")
            part = ThinkingPart("", redacted=data_, provider=PROVIDER)
            events += [PartStart(self.next_index, part), PartEnd(self.next_index, part)]
            self.next_index += 1
        elif kind == "tool_use":
            call_id = _FIELDS.required_string(block.get("id"), "tool_use.id")
            name = _FIELDS.required_string(block.get("name"), "tool_use.name")
            self.blocks[index] = ("tool_use", call_id)
            events += self._renumber(self.parts.tool_call_fragment(index, call_id, name, None))
            if isinstance(block.get("input"), dict) and block["input"]:
                arguments = orjson.dumps(block["input"]).decode()
                events += self._renumber(
                    self.parts.tool_call_fragment(index, call_id, None, arguments)
                )
        else:
            # server_tool_use, web_search_tool_result...: run by the API itself.
            self.blocks[index] = ("ignored", "")
        return events

    def _block_delta(self, data: dict[str, Any]) -> list[StreamEvent]:
        index = _FIELDS.required_int(data.get("index"), "content_block_delta.index")
        delta = _FIELDS.required_object(data.get("delta"), "content_block_delta.delta")
        block = self.blocks.get(index)
        if block is None:
            raise _malformed("content_block_delta", f"block {index} was never started")
        kind = delta.get("type")
        if kind == "text_delta":
            text = _FIELDS.optional_string(delta.get("text"), "text_delta.text") or ""
            return self._renumber(self.parts.text(text))
        if kind == "thinking_delta":
            thinking = _FIELDS.optional_string(delta.get("thinking"), "thinking_delta.thinking")
            return self._renumber(self.parts.thinking(thinking or ""))
        if kind == "signature_delta":
            signature = _FIELDS.optional_string(delta.get("signature"), "signature_delta.signature")
            return self._renumber(self.parts.signature(signature or ""))
        if kind == "input_json_delta" and block[0] == "tool_use":
            field = "input_json_delta.partial_json"
            fragment = _FIELDS.optional_string(delta.get("partial_json"), field) or ""
            return self._renumber(self.parts.tool_call_fragment(index, block[1], None, fragment))
        return []  # citations_delta and newer kinds

    def _message_delta(self, data: dict[str, Any]) -> list[StreamEvent]:
        delta = data.get("delta")
        if isinstance(delta, dict):
            self.stop_reason = delta.get("stop_reason")
            self.stop_sequence = str_or_none(delta.get("stop_sequence"))
        if isinstance(data.get("context_management"), dict):
            self.context_management = data["context_management"]
        events = self._renumber(self.parts.finish())
        # message_delta usage is cumulative: it replaces, it does not add.
        self.usage = self.usage.merged(decode_usage(data.get("usage"), self.usage))
        events.append(UsageUpdate(self.usage))
        return events

    def _message_stop(self) -> list[StreamEvent]:
        self.finished = True
        events = self._renumber(self.parts.finish())
        stop_reason = decode_stop_reason(self.stop_reason)
        if self.stop_reason is None and self.parts.saw_tool_call:
            stop_reason = StopReason.TOOL_USE
        details = None
        if self.context_management is not None:
            details = {PROVIDER: {"context_management": self.context_management}}
        events.append(
            ResponseEnd(
                stop_reason=stop_reason,
                usage=self.usage,
                stop_sequence=self.stop_sequence,
                provider_details=details,
            )
        )
        return events

    def _error(self, data: dict[str, Any]) -> StreamError:
        self.finished = True
        return StreamError(in_band_error(data))

    def _renumber(self, events: list[StreamEvent]) -> list[StreamEvent]:
        """Give PartsManager's parts their place among the redacted blocks made here.

        Thinking parts are Anthropic's own: they get ``provider="anthropic"``, which is
        what lets their signatures go back to Anthropic later.
        """
        out: list[StreamEvent] = []
        for event in events:
            if isinstance(event, PartStart):
                self.open_index = self.next_index
                self.next_index += 1
            if isinstance(event, PartStart | PartDelta | PartEnd):
                index = self.open_index
                if isinstance(event, PartEnd) and isinstance(event.part, ThinkingPart):
                    event = PartEnd(index, replace(event.part, provider=PROVIDER))
                elif event.index != index:
                    event = replace(event, index=index)
            out.append(event)
        return out


_MALFORMED = "the Anthropic stream sent a malformed {} event: {}"


def _malformed(kind: object, detail: str) -> BackendProtocolError:
    return BackendProtocolError(_MALFORMED.format(kind, detail))


def _field_wording(field: str, expected: str) -> str:
    kind, _, key = field.partition(".")
    return _MALFORMED.format(kind, f"{key!r} is not {expected}")


_FIELDS = ReplyFields(_field_wording)
"""Readers of events' and blocks' fields, each named ``<event or block type>.<key>``
(``text_delta.text``) and worded ``malformed text_delta event: 'text' is not a string``."""

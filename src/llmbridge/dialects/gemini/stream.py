"""Gemini streams: neutral events to ``streamGenerateContent`` chunks, and back.

Gemini streams a reply as a sequence of whole ``GenerateContentResponse`` objects, each
carrying only that chunk's new parts (a text delta is ``{"text": delta}``), the last one
the ``finishReason`` and the full ``usageMetadata``. With ``?alt=sse`` each is an SSE
``data:`` event (``\\r\\n\\r\\n`` between them, as Google sends); without it the body is
one JSON array of them, which the Google SDKs for other languages read. There is no
end-of-stream sentinel: the stream ends with the body.

``encode_chat_stream`` (SSE) and ``encode_chat_stream_array`` serve the gateway's
Gemini front. A function call goes out whole at its ``PartEnd`` with ``args`` an
object (Gemini never streams arguments; tool healing may rewrite them at ``PartEnd``).
A ``StreamError`` after the start is Google's error object as the last event (or the
array's last element), then the stream ends cleanly.

``decode_chat_stream`` reads Google's SSE for the ``gemini`` backend, through the same
``PartReader`` as a whole reply (``response.py``), with the quirks of the real API: a
``functionCall`` and text in one candidate, a ``finishReason`` in a chunk of its own,
``usageMetadata`` on every chunk (the last wins), a candidate cut short by ``SAFETY``
with no content, thought parts and signatures on any part, calls without ``id``, and an
``{"error": {...}}`` object mid-stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
from httpx_sse import ServerSentEvent

from llmbridge.core.errors import BackendProtocolError, LLMBridgeError
from llmbridge.core.events import (
    PartDelta,
    PartEnd,
    PartStart,
    ResponseEnd,
    ResponseStart,
    SignatureDelta,
    StreamError,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    UsageUpdate,
)
from llmbridge.core.messages import TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import Usage
from llmbridge.dialects.framing import escape_line_breaks
from llmbridge.dialects.gemini.errors import error_body
from llmbridge.dialects.gemini.response import (
    ReplyReader,
    client_sent_ids,
    decode_error,
    encode_finish_reason,
    encode_function_call,
    encode_usage,
    response_id,
    signature_part,
    thoughts_shown,
    wire_signature,
)
from llmbridge.dialects.stream_encoding import ENDED_EARLY, encoded

__all__ = ["decode_chat_stream", "encode_chat_stream", "encode_chat_stream_array", "error_frame"]

_dumps = orjson.dumps

# -- encoding -------------------------------------------------------------------------

_PARTS_HEAD = b'{"candidates":[{"content":{"role":"model","parts":['
_TEXT_HEAD = _PARTS_HEAD + b'{"text":'
_THOUGHT_TAIL = b',"thought":true}'


def encode_chat_stream(
    events: AsyncIterator[StreamEvent], request: ChatRequest
) -> AsyncIterator[bytes]:
    """``alt=sse``: one ``data: <GenerateContentResponse>`` event per chunk.

    A stream that stops with neither ``ResponseEnd`` nor ``StreamError`` ends with an
    error event rather than as if the reply were complete.
    """
    encoder = _Encoder(request, array=False)
    return encoded(
        events,
        encoder.feed,
        lambda: encoder.done,
        lambda: encoder.feed(StreamError(_truncated())),
        escape=False,  # the encoder escapes what it frames
    )


def encode_chat_stream_array(
    events: AsyncIterator[StreamEvent], request: ChatRequest
) -> AsyncIterator[bytes]:
    """Without ``alt=sse``: one JSON array, ``[`` chunk ``,\\r\\n`` chunk ... ``]``,
    written as the chunks come; a failure is the error object as its last element."""
    encoder = _Encoder(request, array=True)
    return encoded(
        events,
        encoder.feed,
        lambda: encoder.done,
        lambda: encoder.feed(StreamError(_truncated())) + b"]",
        escape=False,  # the encoder escapes what it frames
        closing=b"]",
    )


def error_frame(error: LLMBridgeError) -> bytes:
    """The SSE event a failed stream ends with: Google's error object, as ``_Encoder``
    writes it (the pass-through path's error after the first byte)."""
    return b"data: " + escape_line_breaks(_dumps(error_body(error, ""))) + b"\r\n\r\n"


def _truncated() -> BackendProtocolError:
    return BackendProtocolError(ENDED_EARLY)


class _Encoder:
    """The state of one encoded stream; ``feed`` gives each event's bytes, framed (SSE
    events, or array elements with their separators), or ``b""``."""

    __slots__ = (
        "_array",
        "_envelope",
        "_last_thought",
        "_pending",
        "_separator",
        "_show",
        "_signature",
        "_tail",
        "_usage",
        "_with_ids",
        "done",
        "model",
    )

    def __init__(self, request: ChatRequest, *, array: bool) -> None:
        self.model = request.model
        self._array = array
        self._separator = b"["
        self._show = thoughts_shown(request)
        self._with_ids = client_sent_ids(request)
        self._envelope = b""
        """``,"modelVersion":...,"responseId":...}``, once started."""
        self._tail = b""
        """What closes a chunk's parts: ``]},"index":0}]`` and the envelope."""
        self._usage = Usage()
        self._signature: list[str] = []
        """Signature deltas of the open thinking part."""
        self._pending: str | None = None
        """A signature waiting for the next non-thinking part."""
        self._last_thought = False
        """The last part sent was thought text (a signature may close it)."""
        self.done = False

    def feed(self, event: StreamEvent) -> bytes:
        if self.done:
            return b""
        if isinstance(event, PartDelta) and self._tail:  # the hot path
            return self._delta(event)
        if isinstance(event, StreamError):
            self.done = True
            return self._frame(_dumps(error_body(event.error, "")))
        if not self._tail:
            self._start(event)
        if isinstance(event, PartDelta):
            return self._delta(event)
        if isinstance(event, PartStart):
            return self._part_start(event)
        if isinstance(event, PartEnd):
            return self._part_end(event)
        if isinstance(event, UsageUpdate):
            self._usage = self._usage.merged(event.usage)
        elif isinstance(event, ResponseEnd):
            return self._end(event)
        return b""

    def _frame(self, chunk: bytes) -> bytes:
        # Raw U+2028 would split the line for line-splitting readers (framing).
        chunk = escape_line_breaks(chunk)
        if not self._array:
            return b"data: " + chunk + b"\r\n\r\n"
        separator, self._separator = self._separator, b",\r\n"
        return separator + chunk

    def _start(self, event: StreamEvent) -> None:
        start = event if isinstance(event, ResponseStart) else None
        if start is not None and start.input_tokens is not None:
            self._usage = Usage(input_tokens=start.input_tokens)
        resp_id = response_id(start.id if start is not None else "")
        self._envelope = (
            b',"modelVersion":' + _dumps(self.model) + b',"responseId":' + _dumps(resp_id) + b"}"
        )
        self._tail = b']},"index":0}]' + self._envelope

    def _text(self, text: str) -> bytes:
        if not text:
            return b""
        if self._pending is not None:
            return self._parts([{"text": text}])
        self._last_thought = False
        return self._frame(_TEXT_HEAD + _dumps(text) + b"}" + self._tail)

    def _thought(self, text: str) -> bytes:
        if not text or not self._show:
            return b""
        self._last_thought = True
        return self._frame(_TEXT_HEAD + _dumps(text) + _THOUGHT_TAIL + self._tail)

    def _delta(self, event: PartDelta) -> bytes:
        delta = event.delta
        if isinstance(delta, TextDelta):
            return self._text(delta.text)
        if isinstance(delta, ThinkingDelta):
            return self._thought(delta.text)
        if isinstance(delta, SignatureDelta):
            self._signature.append(delta.signature)
        # Function call arguments go out whole, from the finished part (``_part_end``).
        return b""

    def _part_start(self, event: PartStart) -> bytes:
        part = event.part
        if isinstance(part, TextPart):
            return self._text(part.text)
        if isinstance(part, ThinkingPart):
            self._signature = []
            # A signature still waiting belongs to the thinking before this one: it
            # goes out now, before this part's text could be taken as its own.
            return self._parts([]) + self._thought(part.text)
        return b""

    def _part_end(self, event: PartEnd) -> bytes:
        part = event.part
        if isinstance(part, ThinkingPart):
            signature = part.signature or "".join(self._signature)
            self._signature = []
            flushed = b""
            if signature:
                flushed = self._parts([])  # (none waits: PartStart sent it)
                self._pending = signature
            return flushed
        if isinstance(part, ToolCallPart):
            return self._parts([encode_function_call(part, self._with_ids)])
        return b""

    def _parts(self, parts: list[dict[str, Any]], *, end: bytes = b"") -> bytes:
        """A chunk with ``parts``, the waiting signature on the first of them (or on a
        part of its own when there is none); ``end`` closes the last chunk instead of
        ``_tail``. ``b""`` when there is nothing to send."""
        if self._pending is not None:
            if parts:
                parts[0]["thoughtSignature"] = wire_signature(self._pending)
            else:
                parts = [signature_part(self._pending, thought=self._last_thought)]
            self._pending = None
        if not parts and not end:
            return b""
        if parts:
            self._last_thought = parts[-1].get("thought") is True
        body = b",".join(_dumps(part) for part in parts)
        return self._frame(_PARTS_HEAD + body + (end or self._tail))

    def _end(self, event: ResponseEnd) -> bytes:
        self.done = True
        usage = self._usage.merged(event.usage)
        end = (
            b']},"finishReason":'
            + _dumps(encode_finish_reason(event.stop_reason))
            + b',"index":0}],"usageMetadata":'
            + _dumps(encode_usage(usage))
            + self._envelope
        )
        return self._parts([], end=end)


# -- decoding -------------------------------------------------------------------------


async def decode_chat_stream(
    events: AsyncIterator[ServerSentEvent], *, origin: str | None = None
) -> AsyncIterator[StreamEvent]:
    """Neutral events from Google's ``streamGenerateContent?alt=sse`` stream (input from
    ``dialects.framing.aiter_sse``); ``origin`` is the backend's name, which its thought
    signatures are tagged with.

    An ``{"error": {...}}`` chunk is yielded as ``StreamError`` (the error mapped by its
    code: 429 ``RESOURCE_EXHAUSTED`` rate limited, 503 unavailable...) and ends the
    stream.

    Raises:
        BackendProtocolError: a chunk is not a JSON object or has a field of the wrong
            type, or the stream ended before a ``finishReason``.
    """
    reader = ReplyReader(origin)
    async for sse in events:
        data = sse.data.strip()
        if not data:
            continue
        body = _loads(data)
        if "error" in body and "candidates" not in body:
            yield StreamError(decode_error(body["error"]))
            return
        for event in reader.chunk(body):
            yield event
    if not reader.started:
        raise BackendProtocolError("the Gemini stream ended before its first chunk")
    if reader.finish_reason is None:
        raise BackendProtocolError("the Gemini stream ended before a finishReason")
    for event in reader.end():
        yield event


def _loads(data: str) -> dict[str, Any]:
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise BackendProtocolError(
            f"the Gemini stream sent a chunk that is not JSON: {data[:200]!r}"
        ) from exc
    if not isinstance(body, dict):
        raise BackendProtocolError("the Gemini stream sent a chunk that is not a JSON object")
    return body

"""OpenAI chat-completion streams (server-sent events), both directions.

``encode_chat_stream`` turns neutral events into ``chat.completion.chunk`` SSE bytes
for the gateway's OpenAI front. It is the per-chunk hot path, so it writes bytes
directly: the part of every chunk that never changes (id, object, created, model) is
built once, and each delta costs one ``orjson.dumps`` of a small dict.

``decode_chat_stream`` reads an OpenAI-compatible server's stream into neutral events
through ``PartsManager``. It copes with the quirks of real servers: reasoning under
``reasoning_content`` or ``reasoning``, parallel tool calls that all claim index 0
(Ollama, ollama/ollama#16212), content and ``finish_reason`` in one chunk, a
``finish_reason`` of ``stop`` after tool calls, and usage in a trailing
``choices: []`` chunk (platform.openai.com/docs/api-reference/chat-streaming). It
reads a legacy ``/v1/completions`` stream too: its chunks carry ``choices[].text``
where chat chunks carry ``choices[].delta``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import orjson
from httpx_sse import ServerSentEvent

from llmbridge.core.errors import BackendError, BackendProtocolError, LLMBridgeError
from llmbridge.core.events import (
    PartDelta,
    PartEnd,
    PartStart,
    ResponseEnd,
    ResponseStart,
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
from llmbridge.core.stream import EventBatches, decoded_reads
from llmbridge.dialects.fields import ReplyFields, int_or_none, nonempty_str, str_or_none
from llmbridge.dialects.framing import SSE_DONE, SSEParser, sse_event
from llmbridge.dialects.openai.errors import error_body
from llmbridge.dialects.openai.response import (
    decode_usage,
    encode_usage,
    finish_reason_for,
    reply_created,
    response_id,
    stop_reason_for,
)
from llmbridge.dialects.stream_encoding import ENDED_EARLY, encoded

__all__ = [
    "decode_chat_batches",
    "decode_chat_stream",
    "decode_chat_stream_bytes",
    "encode_chat_stream",
    "error_chunk",
    "in_band_error",
    "response_start",
]

_dumps = orjson.dumps

# -- encode: events -> SSE bytes ----------------------------------------------------


class _ChunkWriter:
    """Builds the SSE bytes of one response's chunks."""

    __slots__ = ("_close", "_open", "_prefix", "_suffix")

    def __init__(self, request: ChatRequest, chunk_id: str, created: int) -> None:
        self._prefix = (
            b'data: {"id":'
            + _dumps(chunk_id)
            + b',"object":"chat.completion.chunk","created":'
            + str(created).encode()
            + b',"model":'
            + _dumps(request.model)
            + b","
        )
        # OpenAI: with include_usage, every chunk but the usage chunk says "usage": null.
        self._suffix = b',"usage":null}\n\n' if request.include_usage else b"}\n\n"
        self._open = self._prefix + b'"choices":[{"index":0,"delta":'
        self._close = b',"logprobs":null,"finish_reason":null}]' + self._suffix

    def delta(self, delta: dict[str, Any]) -> bytes:
        return self._open + _dumps(delta) + self._close

    def finish(self, finish_reason: str) -> bytes:
        return (
            self._open
            + b'{},"logprobs":null,"finish_reason":'
            + _dumps(finish_reason)
            + b"}]"
            + self._suffix
        )

    def usage(self, usage: Usage) -> bytes:
        return self._prefix + b'"choices":[],"usage":' + _dumps(encode_usage(usage)) + b"}\n\n"


def encode_chat_stream(
    events: AsyncIterator[StreamEvent], request: ChatRequest
) -> AsyncIterator[bytes]:
    """SSE ``chat.completion.chunk`` bytes for an event stream, ending in ``[DONE]``.

    The first chunk carries ``role: "assistant"``; text goes out as ``content``,
    thinking as ``reasoning_content``, tool calls as ``tool_calls`` indexed from 0:
    id and name when the part starts, the whole arguments in one fragment when it
    ends. The last choice chunk has an empty delta and the ``finish_reason``; with
    ``request.include_usage`` a ``choices: []`` usage chunk follows. A ``StreamError``
    becomes ``data: {"error": ...}`` and the stream ends with ``[DONE]``.
    """
    encoder = _StreamEncoder(request)
    # Escaped: a raw U+2028 would split the line (framing). A stream that stops with
    # neither ResponseEnd nor StreamError says so rather than end as if it were complete.
    return encoded(
        events,
        encoder.encode,
        lambda: encoder.finished,
        lambda: error_chunk(BackendProtocolError(ENDED_EARLY)),
    )


class _StreamEncoder:
    """The state of one encoded stream: ``encode`` returns the bytes for each event."""

    __slots__ = ("_request", "_tool_index", "_usage", "_writer", "finished")

    def __init__(self, request: ChatRequest) -> None:
        self._request = request
        self._writer: _ChunkWriter | None = None
        self._tool_index = -1  # OpenAI numbers tool calls, not parts
        self._usage = Usage()
        self.finished = False

    def encode(self, event: StreamEvent) -> bytes:
        writer = self._writer
        if writer is not None and isinstance(event, PartDelta):  # the hot path
            return self._part_delta(writer, event)
        if isinstance(event, StreamError):
            self.finished = True
            return error_chunk(event.error)
        head = b""
        if writer is None:
            writer, head = self._start(event)
        if isinstance(event, PartDelta):
            return head + self._part_delta(writer, event)
        if isinstance(event, PartStart):
            return head + self._part_start(writer, event)
        if isinstance(event, PartEnd):
            return head + self._part_end(writer, event)
        if isinstance(event, UsageUpdate):
            self._usage = self._usage.merged(event.usage)
        elif isinstance(event, ResponseEnd):
            return head + self._end(writer, event)
        return head

    def _start(self, event: StreamEvent) -> tuple[_ChunkWriter, bytes]:
        start = event if isinstance(event, ResponseStart) else None
        created = int(start.created) if start and start.created else int(time.time())
        writer = _ChunkWriter(self._request, response_id(start.id if start else ""), created)
        self._writer = writer
        return writer, writer.delta({"role": "assistant", "content": ""})

    def _part_delta(self, writer: _ChunkWriter, event: PartDelta) -> bytes:
        delta = event.delta
        if isinstance(delta, TextDelta):
            return writer.delta({"content": delta.text}) if delta.text else b""
        if isinstance(delta, ThinkingDelta):
            return writer.delta({"reasoning_content": delta.text}) if delta.text else b""
        # Tool arguments go out whole at the part's end (see ``_part_end``); signatures
        # have no OpenAI spelling.
        return b""

    def _part_start(self, writer: _ChunkWriter, event: PartStart) -> bytes:
        part = event.part
        if isinstance(part, ToolCallPart):
            self._tool_index += 1
            call = {
                "index": self._tool_index,
                "id": part.id,
                "type": "function",
                "function": {"name": part.name, "arguments": ""},
            }
            return writer.delta({"tool_calls": [call]})
        if isinstance(part, TextPart) and part.text:
            return writer.delta({"content": part.text})
        if isinstance(part, ThinkingPart) and part.text:
            return writer.delta({"reasoning_content": part.text})
        return b""

    def _part_end(self, writer: _ChunkWriter, event: PartEnd) -> bytes:
        part = event.part
        if not isinstance(part, ToolCallPart) or self._tool_index < 0:
            return b""
        # A call's arguments go out once, whole, from the finished part, never as the
        # backend's ToolArgsDelta fragments: tool healing (features.tool_healing)
        # rewrites the arguments at PartEnd, so fragments already sent could
        # contradict them (a doubly-escaped string, broken JSON). OpenAI clients
        # concatenate the fragments of a call by index, so one fragment is valid.
        arguments = part.raw_arguments
        if arguments is None:
            arguments = _dumps(part.arguments).decode()
        return self._arguments(writer, arguments)

    def _arguments(self, writer: _ChunkWriter, fragment: str) -> bytes:
        call = {"index": self._tool_index, "function": {"arguments": fragment}}
        return writer.delta({"tool_calls": [call]})

    def _end(self, writer: _ChunkWriter, event: ResponseEnd) -> bytes:
        self.finished = True
        usage = self._usage.merged(event.usage)
        chunk = writer.finish(finish_reason_for(event.stop_reason, self._tool_index >= 0))
        if self._request.include_usage:
            chunk += writer.usage(usage)
        return chunk + SSE_DONE


def error_chunk(error: LLMBridgeError) -> bytes:
    """The in-stream error a client gets, and the stream's end."""
    return sse_event(error_body(error, "")) + SSE_DONE


# -- decode: SSE events -> events ---------------------------------------------------


async def decode_chat_stream(
    events: AsyncIterator[ServerSentEvent],
) -> AsyncIterator[StreamEvent]:
    """Neutral events for an OpenAI-compatible server's chat stream.

    An in-band error (a ``data`` payload with an ``error`` key, or ``event: error``)
    is yielded as ``StreamError`` and ends the stream.

    Raises:
        BackendProtocolError: a chunk is not a JSON object or has the wrong shape, or
            the stream ended with neither a ``finish_reason`` nor ``[DONE]``.
    """
    decoder = _StreamDecoder()
    async for sse in events:
        for event in decoder.sse(sse):
            yield event
        if decoder.stopped:
            break
    for event in decoder.end():
        yield event


def decode_chat_stream_bytes(chunks: AsyncIterator[bytes]) -> EventBatches:
    """``decode_chat_stream`` of the SSE bytes as they arrive, parsed in place
    (``framing.SSEParser``), each read's events handed over together
    (``core.stream.EventBatches``): the backends' path, on every chunk (a hot path)."""
    return EventBatches(decode_chat_batches(chunks))


async def decode_chat_batches(
    chunks: AsyncIterator[bytes],
) -> AsyncGenerator[list[StreamEvent], None]:
    """The events of each read of the SSE bytes, a list a read (none for a read that
    completes no event). A malformed chunk raises after the events before it are
    handed over, so what the client was sent before the failure stays the same."""
    decoder = _StreamDecoder()
    parser = SSEParser()

    def decode(chunk: bytes, batch: list[StreamEvent]) -> bool:
        for sse in parser.feed(chunk):
            batch += decoder.sse(sse)
            if decoder.stopped:
                return True
        return False

    async for batch in decoded_reads(chunks, decode):
        yield batch
    if not decoder.stopped:
        last: list[StreamEvent] = []
        for sse in parser.finish():
            last += decoder.sse(sse)
        if last:
            yield last
    end = decoder.end()  # raises for a stream that stopped before its end
    if end:
        yield end


class _StreamDecoder:
    """The state of one decoded stream: ``chunk`` per data chunk, ``end`` at the end."""

    __slots__ = (
        "_finish_reason",
        "_parts",
        "_started",
        "_stop_sequence",
        "_usage",
        "done",
        "failed",
        "stopped",
    )

    def __init__(self) -> None:
        self._parts = PartsManager()
        self._started = False
        self._finish_reason: str | None = None
        self._stop_sequence: str | None = None
        self._usage = Usage()
        self.done = False
        """``data: [DONE]`` arrived."""
        self.stopped = False
        """Nothing more is read: ``[DONE]`` or an in-band error arrived."""
        self.failed = False
        """An in-band error ended the stream (``end`` then adds nothing)."""

    def sse(self, sse: ServerSentEvent) -> list[StreamEvent]:
        """The events of one SSE event of the stream (``stopped`` after the last)."""
        if sse.event == "error":
            return self._fail(in_band_error(_loads_lenient(sse.data)))
        data = sse.data.strip()
        if sse.event != "message" or not data:
            return []  # named events other than errors, keep-alives
        if data == "[DONE]":
            self.done = self.stopped = True
            return []
        chunk = _loads(data)
        error = chunk.get("error")
        if error is not None:
            return self._fail(in_band_error(error))
        return self.chunk(chunk)

    def _fail(self, error: BackendError) -> list[StreamEvent]:
        self.stopped = self.failed = True
        return [StreamError(error)]

    def chunk(self, chunk: dict[str, Any]) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        if not self._started:
            self._started = True
            events.append(response_start(chunk))
        if chunk.get("usage") is not None:
            self._usage = self._usage.merged(decode_usage(chunk["usage"]))
        # The hot path (every chunk): plain type checks; the readers only for what is
        # not the usual type (None, or a malformed value they name).
        choices = chunk.get("choices")
        if choices.__class__ is not list:
            choices = _FIELDS.optional_list(choices, "choices")
        for choice in choices:
            if choice.__class__ is not dict:
                choice = _FIELDS.required_object(choice, "choices[]")
            if choice.get("index", 0) != 0:
                continue  # llmbridge asks for one choice
            # The delta first: a chunk may carry content and finish_reason together.
            delta = choice.get("delta")
            if delta is None and "text" in choice:
                # A legacy /v1/completions chunk (dialects/openai/completions.py).
                delta = {"content": choice["text"]}
            events.extend(_delta_events(self._parts, delta))
            reason = choice.get("finish_reason")
            if reason is not None:
                self._finish_reason = str(reason)
                # vLLM names the stop string that ended generation (non-standard).
                matched = str_or_none(choice.get("stop_reason"))
                if matched is not None and reason == "stop":
                    self._stop_sequence = matched
        return events

    def end(self) -> list[StreamEvent]:
        if self.failed:
            return []  # the StreamError was the last event
        if not self._started:
            raise BackendProtocolError("the backend's stream ended before its first chunk")
        if not self.done and self._finish_reason is None:
            raise BackendProtocolError("the backend's stream ended before it finished")
        events = self._parts.finish()
        stop_sequence = self._stop_sequence
        if self._parts.saw_tool_call:  # whatever the last chunk said
            stop_reason, stop_sequence = StopReason.TOOL_USE, None
        elif stop_sequence is not None:
            stop_reason = StopReason.STOP_SEQUENCE
        else:
            stop_reason = stop_reason_for(self._finish_reason)
        events.append(
            ResponseEnd(stop_reason=stop_reason, usage=self._usage, stop_sequence=stop_sequence)
        )
        return events


def _string(delta: dict[str, Any], key: str) -> str | None:
    """``delta[key]``: a string, or ``None`` when absent; another type raises (named)."""
    value = delta.get(key)
    if value is None or value.__class__ is str:
        return value
    return _FIELDS.optional_string(value, key)


def _delta_events(parts: PartsManager, delta: object) -> list[StreamEvent]:
    if delta is None:
        return []
    if delta.__class__ is not dict:
        delta = _FIELDS.required_object(delta, "delta")
    assert isinstance(delta, dict)
    events: list[StreamEvent] = []
    # reasoning_content: DeepSeek, LiteLLM; reasoning: vLLM >= 0.11, Ollama. Servers
    # in transition send both with the same text, so take one, not their sum.
    reasoning = _string(delta, "reasoning_content") or _string(delta, "reasoning")
    if reasoning:
        events.extend(parts.thinking(reasoning))
    content = _string(delta, "content")
    if content:
        events.extend(parts.text(content))
    calls = delta.get("tool_calls")
    if calls is None:  # most chunks: text only
        return events
    for call in _FIELDS.optional_list(calls, "delta.tool_calls"):
        call = _FIELDS.required_object(call, "delta.tool_calls[]")
        function = _FIELDS.optional_object(call.get("function"), "delta.tool_calls[].function")
        arguments = function.get("arguments")
        if arguments is not None and not isinstance(arguments, str):
            arguments = _dumps(arguments).decode()  # an object, as some servers send
        events.extend(
            parts.tool_call_fragment(
                int_or_none(call.get("index")),
                _FIELDS.optional_string(call.get("id"), "id") or None,  # "": the call continues
                _FIELDS.optional_string(function.get("name"), "name") or None,
                arguments,
            )
        )
    return events


def response_start(chunk: dict[str, Any]) -> ResponseStart:
    return ResponseStart(
        id=nonempty_str(chunk.get("id")) or new_id("chatcmpl-"),
        model=str_or_none(chunk.get("model")) or "",
        created=reply_created(chunk.get("created")),
    )


_FIELDS = ReplyFields(lambda field, expected: f"the backend's '{field}' is not {expected}")
"""Readers of a chunk's fields (``the backend's 'content' is not a string``)."""


def _loads(data: str) -> dict[str, Any]:
    try:
        chunk = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise BackendProtocolError(
            f"the backend sent a stream chunk that is not JSON: {data[:200]!r}"
        ) from exc
    if not isinstance(chunk, dict):
        raise BackendProtocolError("the backend sent a stream chunk that is not a JSON object")
    return chunk


def _loads_lenient(data: str) -> object:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return data


def in_band_error(payload: object) -> BackendError:
    """The error a server reported inside its stream (``{"error": ...}`` or ``event: error``)."""
    if isinstance(payload, dict) and "error" in payload:
        payload = payload["error"]
    code: str | None = None
    if isinstance(payload, dict):
        message = payload.get("message")
        raw_code = payload.get("code")
        code = str(raw_code) if raw_code is not None else None
        text = nonempty_str(message) or str(payload)
    else:
        text = str(payload) if payload else "the backend reported an error"
    return BackendError(text, code=code)

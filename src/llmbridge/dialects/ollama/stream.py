"""Ollama NDJSON streams <-> neutral stream events.

``encode_chat_stream`` writes what an Ollama client reads from ``/api/chat`` (or
``/api/generate``); ``decode_chat_stream`` reads a real Ollama server's ``/api/chat``
stream. ``ChatFrameDecoder`` is the frame-by-frame state machine behind the decoder,
shared with ``response.decode_chat_response`` (a non-streamed reply is one frame).

Quirks handled here, each seen in the wild:

- Tool calls arrive whole, in any frame, including the final ``done: true`` one
  (QuantumNous/new-api#7252).
- Every call of a parallel batch may carry ``function.index`` 0 (ollama/ollama#16212),
  so each whole call becomes its own part with its own id.
- ``done_reason`` is ``stop`` even when the model called a tool, so the stop reason
  is ``tool_use`` whenever any frame carried a tool call.
- An in-band ``{"error": "..."}`` line ends a stream that already started.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import orjson

from llmbridge.core.errors import BackendError, BackendProtocolError
from llmbridge.core.events import (
    PartDelta,
    PartEnd,
    ResponseEnd,
    ResponseStart,
    StreamError,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    UsageUpdate,
)
from llmbridge.core.ids import new_id
from llmbridge.core.messages import ToolCallPart
from llmbridge.core.parts_manager import PartsManager
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import StopReason, Timings, Usage
from llmbridge.core.stream import decoded_reads
from llmbridge.dialects.fields import ReplyFields, int_or_none, nonempty_str, str_or_none
from llmbridge.dialects.framing import dumps, escape_line_breaks, ndjson_line
from llmbridge.dialects.ollama.types import done_reason, metrics, parse_rfc3339, rfc3339
from llmbridge.dialects.stream_encoding import ENDED_EARLY, encoded

__all__ = [
    "ChatFrameDecoder",
    "NDJSONLines",
    "decode_chat_batches",
    "decode_chat_stream",
    "done_end",
    "encode_chat_stream",
    "error_frame",
    "split_ndjson_lines",
]

# -- encoding -------------------------------------------------------------------------


def encode_chat_stream(
    events: AsyncIterator[StreamEvent], request: ChatRequest, *, generate: bool = False
) -> AsyncIterator[bytes]:
    """Neutral events as the NDJSON lines of ``/api/chat`` (or ``/api/generate``).

    Text and thinking deltas become one line each; a tool call is sent whole when its
    part ends (``/api/generate`` has no tool calls, so there they are skipped); the
    last line has ``done: true``, ``done_reason`` and the metrics. A ``StreamError``,
    or events that stop without an end, become the last line: on ``/api/chat`` seed
    000's error frame (``error_frame``), on ``/api/generate`` Ollama's own
    ``{"error": "..."}``. Run by ``stream_encoding.encoded``, which escapes the line
    breaks JSON allows in a string (U+2028...) and joins a read's lines in one write.
    """
    encoder = _StreamEncoder(request.model, generate)
    return encoded(events, encoder.encode, encoder.is_finished, encoder.unfinished)


class _StreamEncoder:
    """One ``/api/chat`` (or ``/api/generate``) stream's state: its lines event by event."""

    __slots__ = (
        "created_at",
        "finished",
        "generate",
        "model",
        "tail",
        "text_head",
        "thinking_head",
        "tool_index",
        "usage",
    )

    def __init__(self, model: str, generate: bool) -> None:
        self.model = model
        self.generate = generate
        self.usage = Usage()
        self.tool_index = 0
        self.finished = False
        self._dated(rfc3339(time.time()))

    def _dated(self, created_at: str) -> None:
        # Text and thinking lines differ only in the delta: built around it once.
        self.created_at = created_at
        self.text_head, self.thinking_head, self.tail = _delta_frame_parts(
            self.model, created_at, self.generate
        )

    def is_finished(self) -> bool:
        return self.finished

    def encode(self, event: StreamEvent) -> bytes:
        if event.__class__ is PartDelta:  # the common event first
            delta = event.delta
            if delta.__class__ is TextDelta:
                return self.text_head + dumps(delta.text) + self.tail if delta.text else b""
            if delta.__class__ is ThinkingDelta and delta.text:
                return self.thinking_head + dumps(delta.text) + self.tail
            return b""
        if isinstance(event, PartEnd):
            if isinstance(event.part, ToolCallPart) and not self.generate:
                self.tool_index += 1
                return _tool_call_line(self.model, self.created_at, event.part, self.tool_index - 1)
        elif isinstance(event, ResponseStart):
            if event.created:
                self._dated(rfc3339(event.created))
            if event.input_tokens is not None:
                self.usage = Usage(input_tokens=event.input_tokens)
        elif isinstance(event, UsageUpdate):
            self.usage = self.usage.merged(event.usage)
        elif isinstance(event, ResponseEnd):
            self.finished = True
            final: dict[str, Any] = {"model": self.model, "created_at": self.created_at}
            if self.generate:
                final["response"] = ""
            else:
                final["message"] = {"role": "assistant", "content": ""}
            final["done_reason"] = done_reason(event.stop_reason)
            final["done"] = True
            final.update(metrics(self.usage.merged(event.usage), event.timings))
            return ndjson_line(final)
        elif isinstance(event, StreamError):
            self.finished = True
            return self._failure(event.error.message)
        return b""

    def unfinished(self) -> bytes:
        """The events ended without an end: said rather than leave the client guessing."""
        return escape_line_breaks(self._failure(ENDED_EARLY))

    def _failure(self, message: str) -> bytes:
        return _failure_line(self.model, self.created_at, message, self.generate)


def error_frame(model: str, created_at: str, message: str) -> dict[str, Any]:
    """Seed 000's error frame (its ``convertErrorToOllama``): a final chat frame whose
    message is ``Error: <message>``, with ``done_reason: "error"`` and ``error``.

    Ollama clients that read ``error`` (ollama-python raises ``ResponseError``) and
    clients that only read the message and ``done`` both learn of the failure, and
    the stream is complete by Ollama's rules (it ends with ``done: true``).
    """
    return {
        "model": model,
        "created_at": created_at,
        "message": {"role": "assistant", "content": f"Error: {message}"},
        "done": True,
        "done_reason": "error",
        "error": message,
    }


def _failure_line(model: str, created_at: str, message: str, generate: bool) -> bytes:
    body = {"error": message} if generate else error_frame(model, created_at, message)
    return ndjson_line(body)


def _delta_frame_parts(model: str, created_at: str, generate: bool) -> tuple[bytes, bytes, bytes]:
    head = b'{"model":' + dumps(model) + b',"created_at":' + dumps(created_at)
    if generate:
        return head + b',"response":', head + b',"response":"","thinking":', b',"done":false}\n'
    message = b',"message":{"role":"assistant","content":'
    return (
        head + message,
        head + message + b'"","thinking":',
        b'},"done":false}\n',
    )


def _tool_call_line(model: str, created_at: str, call: ToolCallPart, index: int) -> bytes:
    function = {"index": index, "name": call.name, "arguments": call.arguments}
    return ndjson_line(
        {
            "model": model,
            "created_at": created_at,
            "message": {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": call.id, "function": function}],
            },
            "done": False,
        }
    )


# -- decoding -------------------------------------------------------------------------


async def decode_chat_stream(lines: AsyncIterator[str]) -> AsyncIterator[StreamEvent]:
    """A real Ollama ``/api/chat`` NDJSON stream as neutral events.

    Blank lines are skipped. An ``{"error": ...}`` line is yielded as a
    ``StreamError`` and ends the stream.

    Raises:
        BackendProtocolError: a line is not a JSON object of the expected shape, or
            the stream ended before a ``done: true`` frame.
    """
    decoder = ChatFrameDecoder()
    async for line in lines:
        for event in _line_events(decoder, line):
            yield event
        if decoder.finished:
            return
    raise BackendProtocolError(_NO_DONE_FRAME)


async def decode_chat_batches(
    chunks: AsyncIterator[bytes],
) -> AsyncGenerator[list[StreamEvent], None]:
    """``decode_chat_stream`` of the NDJSON bytes as they arrive, the events of each
    read handed over as one list (``core.stream.EventBatches``): the backend's path.
    A malformed line raises after the events before it are handed over."""
    decoder = ChatFrameDecoder()
    lines = NDJSONLines()

    def decode(chunk: bytes, batch: list[StreamEvent]) -> bool:
        for line in lines.feed(chunk):
            batch += _line_events(decoder, _utf8(line))
            if decoder.finished:
                return True
        return False

    async for batch in decoded_reads(chunks, decode):
        yield batch
    if decoder.finished:
        return
    last = lines.finish()
    if last is not None:
        batch = _line_events(decoder, _utf8(last))
        if batch:
            yield batch
        if decoder.finished:
            return
    raise BackendProtocolError(_NO_DONE_FRAME)


_NO_DONE_FRAME = "Ollama's stream ended before its done frame"


def _line_events(decoder: ChatFrameDecoder, line: str) -> list[StreamEvent]:
    """The events of one NDJSON line (none for a blank one)."""
    if not line or line.isspace():
        return []
    try:
        frame = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise BackendProtocolError(f"Ollama sent a line that is not JSON: {line[:200]!r}") from exc
    return decoder.feed(frame)


async def split_ndjson_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """Split a byte stream into NDJSON lines at ``\\n`` only (``NDJSONLines``).

    Raises:
        BackendProtocolError: a line is not valid UTF-8.
    """
    lines = NDJSONLines()
    async for chunk in chunks:
        for line in lines.feed(chunk):
            yield _utf8(line)
    last = lines.finish()
    if last is not None:
        yield _utf8(last)


class NDJSONLines:
    """A byte stream split into NDJSON lines at ``\\n`` only, as the reads arrive.

    Prefer this to httpx's ``aiter_lines``, which also splits at U+0085, U+2028 and
    U+2029; Go's JSON encoder writes U+0085 raw, so such a character in a reply would
    cut a record in two. Lines are split on bytes and each decoded whole (``_utf8``),
    so multi-byte characters split across reads come out intact.
    """

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines ``chunk`` completes (without their ``\\n``)."""
        if self._pending:
            chunk = self._pending + chunk
        *lines, self._pending = chunk.split(b"\n")
        return lines

    def finish(self) -> bytes | None:
        """The last line, when the stream did not end with ``\\n``."""
        last, self._pending = self._pending, b""
        return last or None


def _utf8(line: bytes) -> str:
    try:
        return line.decode().removesuffix("\r")
    except UnicodeDecodeError as exc:
        raise BackendProtocolError("Ollama sent a line that is not valid UTF-8") from exc


class ChatFrameDecoder:
    """Turns Ollama reply frames (decoded JSON), one at a time, into neutral events.

    Reads ``/api/chat`` frames (``message``) and ``/api/generate`` frames
    (``response``, ``thinking``). ``finished`` is true once a ``done: true`` or an
    error frame was fed.
    """

    __slots__ = ("_parts", "_started", "finished")

    def __init__(self) -> None:
        self._parts = PartsManager()
        self._started = False
        self.finished = False

    def feed(self, frame: object, *, final: bool = False) -> list[StreamEvent]:
        """The events for one frame; ``final`` treats it as the last even without ``done``.

        Raises:
            BackendProtocolError: the frame is not shaped like an Ollama reply.
        """
        if not isinstance(frame, dict):
            raise BackendProtocolError(f"Ollama sent a frame that is not an object: {frame!r:.200}")
        error = frame.get("error")
        if error:
            self.finished = True
            text = error if isinstance(error, str) else orjson.dumps(error).decode()
            return [StreamError(BackendError(text))]
        events: list[StreamEvent] = []
        if not self._started:
            self._started = True
            created = parse_rfc3339(frame.get("created_at"))
            events.append(
                ResponseStart(
                    id=new_id("chatcmpl-"),
                    model=str_or_none(frame.get("model")) or "",
                    created=created if created is not None else time.time(),
                )
            )
        message = frame.get("message")
        if message is not None:
            events.extend(self._message(message))
        else:
            thinking = _FIELDS.optional_string(frame.get("thinking"), "thinking")
            events.extend(self._parts.thinking(thinking or ""))
            response = _FIELDS.optional_string(frame.get("response"), "response")
            events.extend(self._parts.text(response or ""))
        if frame.get("done") is True or final:
            events.extend(self._parts.finish())
            events.append(done_end(frame, self._parts.saw_tool_call))
            self.finished = True
        return events

    def _message(self, message: object) -> list[StreamEvent]:
        # The hot path (every frame): plain type checks; the readers only for what is
        # not a string (None, or a malformed value they name).
        message = (
            message if message.__class__ is dict else _FIELDS.required_object(message, "message")
        )
        thinking = message.get("thinking")
        if thinking.__class__ is not str:
            thinking = _FIELDS.optional_string(thinking, "thinking")
        events = self._parts.thinking(thinking or "")
        text = message.get("content")
        if text.__class__ is not str:
            text = _FIELDS.optional_string(text, "content")
        events.extend(self._parts.text(text or ""))
        calls = message.get("tool_calls")
        if calls is None:  # most frames: text only
            return events
        for call in _FIELDS.optional_list(calls, "tool_calls"):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise BackendProtocolError(f"Ollama sent a malformed tool call: {call!r:.200}")
            events.extend(
                self._parts.tool_call(
                    function["name"], function.get("arguments") or {}, nonempty_str(call.get("id"))
                )
            )
        return events


_FIELDS = ReplyFields(lambda field, expected: f"Ollama sent a '{field}' that is not {expected}")
"""Readers of a frame's fields (``Ollama sent a 'content' that is not a string``)."""


def done_end(frame: dict[str, Any], saw_tool_call: bool) -> ResponseEnd:
    """The end a last frame (``done: true``) says, its counts and timings; the stop
    reason ``tool_use`` where any frame carried a tool call (Ollama says ``stop``)."""
    if saw_tool_call:
        stop = StopReason.TOOL_USE
    elif frame.get("done_reason") == "length":
        stop = StopReason.MAX_TOKENS
    else:
        stop = StopReason.END_TURN
    return ResponseEnd(
        stop_reason=stop,
        usage=Usage(
            input_tokens=int_or_none(frame.get("prompt_eval_count")),
            output_tokens=int_or_none(frame.get("eval_count")),
            cache_read_input_tokens=int_or_none(frame.get("prompt_eval_cached_count")),
        ),
        timings=Timings(
            total_ns=int_or_none(frame.get("total_duration")),
            load_ns=int_or_none(frame.get("load_duration")),
            prompt_eval_ns=int_or_none(frame.get("prompt_eval_duration")),
            eval_ns=int_or_none(frame.get("eval_duration")),
        ),
    )

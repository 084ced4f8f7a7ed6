"""Byte framing: NDJSON lines and SSE events out (encoders), SSE events in (backends).

Encoders build bytes directly with orjson: this is the hot path of every streamed
chunk, so it avoids intermediate ``str`` objects.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
from httpx_sse import ServerSentEvent

__all__ = [
    "SSE_DONE",
    "SSEParser",
    "aiter_sse",
    "dumps",
    "escape_line_breaks",
    "ndjson_line",
    "plain_data_run",
    "sse_event",
]

SSE_DONE = b"data: [DONE]\n\n"
"""OpenAI's end-of-stream sentinel."""


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes (orjson keeps non-ASCII characters as UTF-8)."""
    return orjson.dumps(obj)


# httpx's ``aiter_lines`` splits lines like ``str.splitlines``: at U+0085, U+2028 and
# U+2029 too, and so do the clients that read streams with it (ollama-python NDJSON,
# httpx-sse events). orjson writes those raw inside strings, which would cut a JSON
# record or an SSE data line in two, so every stream encoder escapes them.
_LINE_BREAKS = (
    (b"\xc2\x85", b"\\u0085"),
    (b"\xe2\x80\xa8", b"\\u2028"),
    (b"\xe2\x80\xa9", b"\\u2029"),
)


def escape_line_breaks(data: bytes) -> bytes:
    """``data`` (streamed JSON) with U+0085, U+2028 and U+2029 as JSON escapes."""
    # isascii() is a fast scan; substring tests cost ~10x more, so only non-ASCII pays.
    if not data.isascii() and (b"\xe2\x80" in data or b"\xc2\x85" in data):
        for raw, escaped in _LINE_BREAKS:
            data = data.replace(raw, escaped)
    return data


def ndjson_line(obj: Any) -> bytes:
    """One NDJSON record: compact JSON plus a newline."""
    return orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)


def sse_event(obj: Any, event: str | None = None) -> bytes:
    """One Server-Sent Event whose data is ``obj`` as JSON (one line, so no escaping)."""
    data = orjson.dumps(obj)
    if event is None:
        return b"data: " + data + b"\n\n"
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


def plain_data_run(data: bytes) -> list[Any] | None:
    """The JSON values of ``data`` when it is whole SSE events that are each one
    ``data: `` line of JSON and nothing else (LF line ends), each parsed as it is;
    ``None`` for anything else (a comment, a named event, CR line ends, a cut event, a
    payload that is not JSON, such as ``[DONE]``), for the caller to read an event at a
    time. The OpenAI relay's fast path (dialects/openai/relay.py): how a relayed
    stream's reads come once its backend outpaces the gateway (at 32 streams in flight
    most reads hold many events, at times a whole stream). A line holds no LF (a JSON
    string spells it ``\\n``), so events whose LFs are exactly their blank lines, each
    but the last before ``data: ``, are events of one line each.
    """
    if not (data.startswith(b"data: ") and data.endswith(b"\n\n")):
        return None
    if data.count(b"\n") != 2 * (data.count(b"\n\ndata: ") + 1) or b"\r" in data:
        return None
    loads = orjson.loads
    try:
        return [loads(payload) for payload in data[6:-2].split(b"\n\ndata: ")]
    except orjson.JSONDecodeError:
        return None


class _SSEFields:
    """The fields of the event being read (WHATWG event-stream interpretation)."""

    __slots__ = ("data", "event", "last_id", "retry")

    def __init__(self) -> None:
        self.event = ""
        self.data: list[str] = []
        self.last_id = ""
        self.retry: int | None = None

    def line(self, raw: bytes) -> ServerSentEvent | None:
        """Take one line (terminator stripped); a blank line dispatches the event."""
        if not raw:
            event = None
            if self.data:
                event = ServerSentEvent(
                    event=self.event, data="\n".join(self.data), id=self.last_id, retry=self.retry
                )
            self.event, self.data, self.retry = "", [], None
            return event
        if raw.startswith(b":"):
            return None
        name, _, value = raw.decode("utf-8", errors="replace").partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self.data.append(value)
        elif name == "event":
            self.event = value
        elif name == "id" and "\0" not in value:
            self.last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():  # not "²": int() fails
            self.retry = int(value)
        return None


class SSEParser:
    """Server-Sent Events parsed from bytes as they arrive: ``feed`` each chunk, then
    ``finish`` at the end of the stream; each returns the events completed.

    Lines end with ``\\r\\n``, ``\\n`` or ``\\r``; ``:`` starts a comment; ``data``
    lines join with ``\\n``; a blank line dispatches; an event cut off by the end of
    the stream is discarded, as the specification says. Lines are split on bytes
    before decoding, so a UTF-8 character split across network reads stays whole.

    This framer exists because the backends read with aiohttp (for speed) and the
    maintained SSE parser, httpx-sse, only reads httpx responses; its public
    ``ServerSentEvent`` type is what the dialect decoders consume either way. A decoder
    may feed it directly (one async-generator hop fewer per event than ``aiter_sse``:
    the OpenAI decoder's ``decode_chat_stream_bytes``)."""

    __slots__ = ("_fields", "_pending")

    def __init__(self) -> None:
        self._fields = _SSEFields()
        self._pending = b""

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        pending = self._pending
        if pending:
            chunk = pending + chunk
        if b"\r" in chunk:
            # Rare: CR or CRLF line ends. Hold back an unterminated last line, and a
            # line ending in a lone \r whose \n may start the next chunk.
            lines = chunk.splitlines(keepends=True)
            pending = b""
            if lines and (not lines[-1].endswith((b"\n", b"\r")) or lines[-1].endswith(b"\r")):
                pending = lines.pop()
            lines = [line.rstrip(b"\r\n") for line in lines]
        else:
            # Common: LF only. The piece after the last \n is incomplete (b"" if none).
            lines = chunk.split(b"\n")
            pending = lines.pop()
        self._pending = pending
        fields = self._fields
        data = fields.data
        events: list[ServerSentEvent] = []
        for line in lines:
            if line.startswith(b"data: "):  # the hot path: one per streamed chunk
                data.append(line[6:].decode("utf-8", errors="replace"))
            elif not line and len(data) == 1 and not fields.event:
                # The hot path's end: ``data: {...}`` then a blank line, an unnamed
                # event of one data line, dispatched without ``_SSEFields.line``.
                events.append(ServerSentEvent(data=data[0], id=fields.last_id, retry=fields.retry))
                data = fields.data = []
                fields.retry = None
            else:
                event = fields.line(line)
                data = fields.data  # a blank line starts a new list
                if event is not None:
                    events.append(event)
        return events

    def finish(self) -> list[ServerSentEvent]:
        """The end of the stream: a last line held back for a ``\\n`` that never came."""
        pending, self._pending = self._pending, b""
        if pending.endswith(b"\r"):
            event = self._fields.line(pending.rstrip(b"\r"))
            if event is not None:
                return [event]
        return []


async def aiter_sse(chunks: AsyncIterator[bytes]) -> AsyncIterator[ServerSentEvent]:
    """Parse a Server-Sent Events byte stream into events (``SSEParser``)."""
    parser = SSEParser()
    async for chunk in chunks:
        for event in parser.feed(chunk):
            yield event
    for event in parser.finish():
        yield event

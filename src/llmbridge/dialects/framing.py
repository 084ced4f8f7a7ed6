"""Byte framing shared by the stream encoders: NDJSON lines and SSE events.

Encoders build bytes directly with orjson: this is the hot path of every streamed
chunk, so it avoids intermediate ``str`` objects.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["SSE_DONE", "dumps", "ndjson_line", "sse_event"]

SSE_DONE = b"data: [DONE]\n\n"
"""OpenAI's end-of-stream sentinel."""


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes (orjson keeps non-ASCII characters as UTF-8)."""
    return orjson.dumps(obj)


def ndjson_line(obj: Any) -> bytes:
    """One NDJSON record: compact JSON plus a newline."""
    return orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)


def sse_event(obj: Any, event: str | None = None) -> bytes:
    """One Server-Sent Event whose data is ``obj`` as JSON (one line, so no escaping)."""
    data = orjson.dumps(obj)
    if event is None:
        return b"data: " + data + b"\n\n"
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"

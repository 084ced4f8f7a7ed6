"""The pipe between the gateway and its embedded-model worker process: framing only.

Both directions carry frames: a 5-byte header (payload length as a little-endian
``uint32``, then one kind byte) and the payload. Two kinds exist:

- ``TEXT``: a request id (``uint32``) and UTF-8 text: one streamed token, worker to
  gateway. It is the hot path, so it is binary: packing it is one ``struct.pack`` and
  a concatenation, unpacking one ``unpack_from`` and a decode (no JSON, no pickle).
- ``JSON``: an ``orjson`` object: every command (gateway to worker) and every other
  message (worker to gateway: ``ready``, ``started``, ``done``, ``failed``, ...).

Why frames on a pipe and not ``multiprocessing``: the gateway reads the pipe with an
asyncio protocol, so one ``read()`` hands it every frame the worker wrote since the
last one; ``FrameReader.feed`` splits them, and a burst of tokens costs one wake-up of
the event loop, not one per token. ``multiprocessing.Connection`` is blocking and
pickles every message. ``bench/embedded_worker.py`` measures the cost per token.
"""

from __future__ import annotations

import struct
from typing import Any, Final

import orjson

__all__ = [
    "HEADER",
    "JSON",
    "TEXT",
    "FrameReader",
    "Message",
    "pack_json",
    "pack_text",
]

HEADER: Final = struct.Struct("<IB")
"""Payload length, then the frame kind."""
_ID: Final = struct.Struct("<I")

TEXT: Final = 1
JSON: Final = 2

_MAX_FRAME: Final = 1 << 30
"""Anything longer is a corrupted stream, not a frame (a vector batch is a few MB)."""

Message = dict[str, Any] | tuple[int, str]
"""A decoded frame: a JSON object, or ``(request id, text)`` for a token."""


def pack_json(message: dict[str, Any]) -> bytes:
    payload = orjson.dumps(message)
    return HEADER.pack(len(payload), JSON) + payload


def pack_text(request_id: int, text: str) -> bytes:
    payload = _ID.pack(request_id) + text.encode("utf-8")
    return HEADER.pack(len(payload), TEXT) + payload


class FrameReader:
    """Splits a byte stream into messages; keeps a partial frame for the next feed.

    A partial frame waits in a ``bytearray`` that later reads are appended to, and
    nothing is parsed until it is complete (``_needed``): joining each read to what is
    pending made a 30 MB command cost O(n²) copies, a second of held interpreter."""

    __slots__ = ("_buffer", "_needed")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._needed = 0
        """Bytes the pending frame needs in all (its header alone, while that is short)."""

    def feed(self, data: bytes) -> list[Message]:
        """The complete messages in what has arrived so far (raises ``ValueError`` on a
        corrupted stream)."""
        buffer: bytes | bytearray
        if self._buffer:
            self._buffer += data
            if len(self._buffer) < self._needed:
                return []
            buffer = self._buffer
        else:
            buffer = data
        messages: list[Message] = []
        offset, end = 0, len(buffer)
        header_size = HEADER.size
        needed = header_size
        while end - offset >= header_size:
            length, kind = HEADER.unpack_from(buffer, offset)
            if length > _MAX_FRAME:
                raise ValueError(f"frame of {length} bytes: the stream is corrupted")
            start = offset + header_size
            stop = start + length
            if stop > end:
                needed = stop - offset
                break
            if kind == TEXT:
                (request_id,) = _ID.unpack_from(buffer, start)
                text = buffer[start + 4 : stop].decode("utf-8", errors="replace")
                messages.append((request_id, text))
            elif kind == JSON:
                messages.append(orjson.loads(buffer[start:stop]))
            else:
                raise ValueError(f"unknown frame kind {kind}: the stream is corrupted")
            offset = stop
        if buffer is self._buffer:
            del self._buffer[:offset]
        else:
            self._buffer = bytearray(buffer[offset:])
        self._needed = needed if self._buffer else 0
        return messages

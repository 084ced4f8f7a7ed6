"""A response's head and body in one socket write: ``HeadHoldingTransport``.

uvicorn writes a response's status line and headers the moment the app sends
``http.response.start``, and its body with the next message: two ``write()`` system
calls, two TCP segments, two wake-ups of the client. On loopback a ``write()`` costs
the writer the whole delivery; the second one was a tenth of the gateway's CPU for a
non-streamed request (profiled). The gateway's protocol (gateway/server/read_limits.py)
hands uvicorn this wrapper of the connection's transport instead: once a request's
headers are in, the next write (the response's head) is held, and joined to the write
after it (the body, or a stream's first chunk) when that comes in the same turn of the
event loop, as it does for every response the gateway builds whole. If none comes, it
is written at the end of that turn (``call_soon``): a head is never held longer, so a
stream whose first chunk is slow still shows its status at once, and an interim
``100 Continue`` goes out before the client is asked for its body. Closing, ``write_eof``
and ``writelines`` write what is held first; everything else is the transport's own.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["HeadHoldingTransport"]

_JOIN_LIMIT = 64 * 1024
"""Above this the head and the body go out through ``writelines`` (one vectored write
on uvloop) rather than joined: joining would copy a large body."""


class HeadHoldingTransport:
    """``transport`` with the response head held for the write after it (module
    docstring). Attributes it does not define are the transport's."""

    __slots__ = ("_held", "_hold", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._hold = False
        self._held: bytes | None = None

    def hold_next_write(self) -> None:
        """Hold the next write (a request's headers are in: its response head comes)."""
        self._hold = True

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if len(data) <= _JOIN_LIMIT:
                self._transport.write(held + bytes(data))
            else:
                self._transport.writelines((held, data))
        elif self._hold:
            self._hold = False
            self._held = bytes(data)
            self._loop.call_soon(self._flush)
        else:
            self._transport.write(data)

    def _flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():
                self._transport.write(held)

    def writelines(self, data: Any) -> None:
        self._flush()
        self._transport.writelines(data)

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        held = self._held
        return self._transport.get_write_buffer_size() + (len(held) if held else 0)

    def __getattr__(self, name: str) -> Any:
        # Only for what is not defined here (is_closing, get_extra_info, pause_reading,
        # set_protocol...): the hot path's write is a method of this class.
        return getattr(self._transport, name)

"""Writes made in one turn of the event loop go out as one: ``CoalescingTransport``.

uvicorn writes to the client's socket on every ASGI message: a response's status line
and headers on ``http.response.start``, its body on ``http.response.body``, each chunk of
a stream on its own. On loopback a ``write()`` costs the writer the whole delivery; the
head's separate write was a tenth of the gateway's CPU for a non-streamed request
(issue 26's profile), and under load one read from a backend carries several events,
each a chunk and a write.

The gateway's protocol (gateway/read_limits.py) hands uvicorn this wrapper of the
connection's transport: the first write in a turn of the event loop is held and a flush
is scheduled (``call_soon``); writes made later in the same turn join it; the flush
writes them at once (``writelines``: one vectored write on uvloop). A response built
whole (head and body in one task step) is one write; the chunks a stream produces from
one backend read are one write; and nothing waits longer than the turn it was written
in, so a stream's first chunk, an interim ``100 Continue`` or a lone head still go out
at once. Back-pressure is the transport's own: a slow client fills its buffer at the
flush, uvicorn is told to pause, and the stream's next ``send`` waits
(web/streaming.py). Closing and ``write_eof`` flush first; everything else is the
transport's own.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["CoalescingTransport"]


class CoalescingTransport:
    """``transport`` whose writes in one turn of the event loop go out together (module
    docstring). Attributes it does not define are the transport's."""

    __slots__ = ("_loop", "_pending", "_size", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes | bytearray | memoryview] | None = None
        self._size = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        pending = self._pending
        if pending is None:
            self._pending = [data]
            self._loop.call_soon(self._flush)
        else:
            pending.append(data)
        self._size += len(data)

    def _flush(self) -> None:
        pending = self._pending
        if pending is None:
            return
        self._pending, self._size = None, 0
        if self._transport.is_closing():
            return  # the client is gone: nothing to deliver it to
        if len(pending) == 1:
            self._transport.write(pending[0])
        else:
            self._transport.writelines(pending)

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending, self._size = None, 0
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + self._size

    def __getattr__(self, name: str) -> Any:
        # Only for what is not defined here (is_closing, get_extra_info, pause_reading,
        # set_protocol...): the hot path's write is a method of this class.
        return getattr(self._transport, name)

"""Responses that stop the backend when the client goes away.

``StreamingBody`` streams bytes and, beside it, listens for ``http.disconnect``: the
moment the client leaves, the body iterator is cancelled and closed, which cancels
the backend call all the way down (an HTTP stream to Ollama is closed, the embedded
model's worker stops at the next token). ``run_until_disconnect`` does the same for
non-streaming requests while the reply is being accumulated.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextvars import ContextVar
from typing import Any, TypeVar

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

__all__ = ["SERVER_SEND", "ClientDisconnected", "StreamingBody", "run_until_disconnect"]

SERVER_SEND: ContextVar[Send | None] = ContextVar("llmbridge_server_send", default=None)
"""The server's own ``send`` for the request this task serves, where the app sets it
(the gateway's does: gateway/app.py). ``StreamingBody`` sends its body with it once
the response's start went through the middleware's wrappers, which watch for the start
only: each wrapper is a coroutine call per write otherwise. A context variable, not a
scope entry: the scope holding ``send`` (a method of uvicorn's per-request cycle, which
holds the scope) made a reference cycle of every request, left to the garbage collector
(``bench/memory_plateau.py`` saw 1.3 MB a minute at 100 requests/s)."""

T = TypeVar("T")


class ClientDisconnected(Exception):
    """The client closed the connection before the response was complete."""


async def _wait_for_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def run_until_disconnect(receive: Receive, work: Coroutine[Any, Any, T]) -> T:
    """Await ``work``; if the client disconnects first, cancel it and raise.

    ``work`` runs in the caller's own task, and one watcher task cancels that task
    when ``http.disconnect`` arrives (a second task for ``work`` and an
    ``asyncio.wait`` over both cost a tenth of a non-streamed request's CPU). The
    watcher's cancellation is taken back (``Task.uncancel``), so the caller's later
    timeouts and an outside cancellation (a server shutting down) behave as without
    it; the latter still propagates as ``CancelledError``."""
    caller = asyncio.current_task()
    if caller is None:  # not in a task (never under an ASGI server): plain await
        return await work
    left = False

    def on_disconnect(watcher: asyncio.Task[None]) -> None:
        nonlocal left
        if not watcher.cancelled() and watcher.exception() is None and not caller.done():
            left = True
            caller.cancel()

    watcher = asyncio.get_running_loop().create_task(_wait_for_disconnect(receive))
    watcher.add_done_callback(on_disconnect)
    try:
        result = await work
    except asyncio.CancelledError:
        if left:
            left = False
            if caller.uncancel() == 0:  # only the watcher's: the client left
                raise ClientDisconnected() from None
        raise  # someone else's cancellation (as well)
    except BaseException as exc:
        if left:  # ``work`` turned the watcher's cancellation into an error of its own
            left = False
            caller.uncancel()
            raise ClientDisconnected() from exc
        raise
    finally:
        watcher.remove_done_callback(on_disconnect)
        watcher.cancel()
    if left:  # the watcher fired, but ``work`` swallowed its cancellation and finished
        caller.uncancel()
        raise ClientDisconnected()
    return result


class _Coalescer:
    """Encoded chunks handed from the producer task to the sender, joined per write.

    Under load one network read from the backend carries several events; sending each
    as its own ``http.response.body`` costs a write system call apiece. The producer
    appends whatever the stream yields until it has to wait for the backend; the sender
    then writes everything pending at once. With no load that is one chunk per write,
    so latency is unchanged. ``limit`` bounds the buffer: a slow client makes the
    producer wait instead of reading the backend into memory without end.
    """

    __slots__ = ("done", "error", "pending", "ready", "room", "size")

    def __init__(self) -> None:
        self.pending: list[bytes] = []
        self.size = 0
        self.ready = asyncio.Event()
        self.room = asyncio.Event()
        self.room.set()
        self.done = False
        self.error: BaseException | None = None

    async def produce(self, body: AsyncIterator[bytes], limit: int) -> None:
        first = True
        try:
            async for chunk in body:
                self.pending.append(chunk)
                self.size += len(chunk)
                self.ready.set()
                if first:
                    # The first chunk goes out on its own at once: when the backend
                    # has the whole reply ready, batching would otherwise hold the
                    # client's first token until all of it was read.
                    first = False
                    await asyncio.sleep(0)
                if self.size >= limit:
                    self.room.clear()
                    await self.room.wait()
        except Exception as exc:  # noqa: BLE001 - handed to the sender, which re-raises
            self.error = exc
        finally:
            self.done = True
            self.ready.set()

    def take(self) -> bytes:
        batch = b"".join(self.pending) if len(self.pending) > 1 else self.pending[0]
        self.pending.clear()
        self.size = 0
        self.room.set()
        return batch


class StreamingBody(Response):
    """A streaming response that cancels its body iterator on client disconnect.

    ``on_close`` runs once when the stream ends for any reason, with ``True`` when
    the client disconnected.
    """

    buffer_limit = 256 * 1024
    """Bytes the producer may read ahead of a slow client."""

    def __init__(
        self,
        body: AsyncIterator[bytes],
        *,
        media_type: str,
        headers: dict[str, str] | None = None,
        on_close: Callable[[bool], Awaitable[None]] | None = None,
    ) -> None:
        self.body_iterator = body
        self.status_code = 200
        self.media_type = media_type
        self.background = None
        self.on_close = on_close
        self.init_headers(headers)

    async def _send_body(self, send: Send, send_body: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        flow = _Coalescer()
        producer = asyncio.ensure_future(flow.produce(self.body_iterator, self.buffer_limit))
        try:
            while True:
                await flow.ready.wait()
                flow.ready.clear()
                if flow.pending:
                    await send_body(
                        {"type": "http.response.body", "body": flow.take(), "more_body": True}
                    )
                if flow.done and not flow.pending:
                    break
        finally:
            if not producer.done():
                producer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await producer
        if flow.error is not None:
            raise flow.error
        await send_body({"type": "http.response.body", "body": b"", "more_body": False})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        disconnected = False
        try:
            send_body = SERVER_SEND.get() or send
            await run_until_disconnect(receive, self._send_body(send, send_body))
        except (ClientDisconnected, OSError):
            disconnected = True
        finally:
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
            if self.on_close is not None:
                await self.on_close(disconnected)

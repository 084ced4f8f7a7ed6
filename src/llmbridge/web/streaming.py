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
from typing import Any, TypeVar

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

__all__ = ["SERVER_SEND", "ClientDisconnected", "StreamingBody", "run_until_disconnect"]

SERVER_SEND = "llmbridge.server_send"
"""Where an app keeps the server's own ``send`` in a request's scope (the gateway's
does: gateway/app.py). ``StreamingBody`` sends its chunks with it once the response's
start went through the middleware's wrappers, which watch for the start only: each
wrapper is a coroutine call per chunk otherwise."""

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
    when ``http.disconnect`` arrives (issue 26: a second task for ``work`` and an
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
    finally:
        watcher.remove_done_callback(on_disconnect)
        watcher.cancel()
    if left:  # the watcher fired, but ``work`` swallowed its cancellation and finished
        caller.uncancel()
        raise ClientDisconnected()
    return result


class StreamingBody(Response):
    """A streaming response that cancels its body iterator on client disconnect.

    ``on_close`` runs once when the stream ends for any reason, with ``True`` when
    the client disconnected.
    """

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
        # One send per chunk: the gateway's transport joins the chunks written in one
        # turn of the event loop into one write (gateway/coalesced_writes.py), and a
        # slow client's full buffer makes ``send`` wait, so the backend is read no
        # faster than the client reads (uvicorn's flow control).
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        async for chunk in self.body_iterator:
            await send_body({"type": "http.response.body", "body": chunk, "more_body": True})
        await send_body({"type": "http.response.body", "body": b"", "more_body": False})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        disconnected = False
        try:
            send_body = scope.get(SERVER_SEND, send)
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

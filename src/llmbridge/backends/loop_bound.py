"""``LoopBound``: one connection pool (or any closable resource) per running event loop.

aiohttp sessions, and the httpx clients inside the official SDKs, belong to the event
loop that first used them: a second ``asyncio.run(...)`` that reuses one gets
``RuntimeError: Event loop is closed`` from a pooled connection of the first. The
Python client (seed 003's adapter) is configured once and called from anywhere (a
script that calls ``asyncio.run`` per request, a framework's worker threads), so its
transports keep one resource per loop, made on first use inside that loop.

Each resource is closed with its loop: beside it runs a task that does nothing until
it is cancelled, which ``asyncio.run`` (and ``asyncio.Runner``) does to every task left
when the loop finishes, and then closes the resource in that same loop, so no socket
outlives it. ``aclose`` closes the calling loop's resource at once and asks other
loops that are still running to close theirs. A loop closed without cancelling its
tasks (``loop.close()`` by hand) leaves its resource to the garbage collector.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["LoopBound"]

log = logging.getLogger("llmbridge.backends")

T = TypeVar("T")


class LoopBound(Generic[T]):
    """The resource ``create()`` makes, one per running event loop, closed by ``close``."""

    __slots__ = ("_by_loop", "_close", "_create", "_last")

    def __init__(self, create: Callable[[], T], close: Callable[[T], Awaitable[object]]) -> None:
        self._create = create
        self._close = close
        self._by_loop: dict[asyncio.AbstractEventLoop, tuple[T, asyncio.Task[None]]] = {}
        self._last: tuple[asyncio.AbstractEventLoop, T] | None = None
        """The most recent loop's resource: the gateway's single loop never looks further."""

    def get(self) -> T:
        """The running loop's resource, made now if this loop has none.

        Raises:
            RuntimeError: no event loop is running.
        """
        loop = asyncio.get_running_loop()
        last = self._last
        if last is not None and last[0] is loop:
            return last[1]
        entry = self._by_loop.get(loop)
        if entry is None:
            self._forget_closed_loops()
            resource = self._create()
            closer = loop.create_task(self._close_with_loop(loop, resource))
            entry = self._by_loop[loop] = (resource, closer)
        self._last = (loop, entry[0])
        return entry[0]

    async def aclose(self) -> None:
        """Close the calling loop's resource now; other running loops close theirs."""
        loop = asyncio.get_running_loop()
        for other, (_, closer) in list(self._by_loop.items()):
            if other is loop:
                continue
            if other.is_closed():
                del self._by_loop[other]
            else:  # its closer runs its close in that loop
                other.call_soon_threadsafe(closer.cancel)
        entry = self._by_loop.pop(loop, None)
        self._last = None
        if entry is not None:
            resource, closer = entry
            closer.cancel()
            await self._close(resource)

    async def _close_with_loop(self, loop: asyncio.AbstractEventLoop, resource: T) -> None:
        try:
            await asyncio.Event().wait()  # until the loop ends (or ``aclose``) cancels this
        finally:
            entry = self._by_loop.get(loop)
            if entry is not None and entry[0] is resource:  # else ``aclose`` closed it
                del self._by_loop[loop]
                if self._last is not None and self._last[1] is resource:
                    self._last = None
                try:
                    await self._close(resource)
                except Exception as exc:  # noqa: BLE001 - the loop is ending; nothing to tell
                    log.debug("closing connections as their event loop ended: %r", exc)

    def _forget_closed_loops(self) -> None:
        for loop in [loop for loop in self._by_loop if loop.is_closed()]:
            log.debug("a closed event loop's connections were left to the garbage collector")
            del self._by_loop[loop]

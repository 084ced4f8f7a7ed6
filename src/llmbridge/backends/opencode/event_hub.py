"""One subscription to OpenCode's ``/event`` stream, shared by every request.

OpenCode publishes every session's events on one Server-Sent Events stream per
server. Opening it per request would cost a connection and a ``server.connected``
round trip each time, so the backend keeps one open for its lifetime and hands each
request the events of its own session (filtered by ``sessionID``, as OpenCode's
maintainers advise). A request subscribes before it sends its prompt, so it cannot
miss an early event. Events are de-duplicated by their ``evt_`` id.

When the stream breaks, every subscriber is told (``None`` on its queue): the events
it was waiting for may be lost, so it fails instead of waiting for a completion that
will never be reported. The hub reconnects with a growing pause, and a server
heartbeat (every 10 s) bounds how long a silently dead connection goes unnoticed.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import orjson

from llmbridge.backends.http import HTTPTransport
from llmbridge.core.errors import BackendUnavailableError, LLMBridgeError
from llmbridge.dialects.framing import aiter_sse

__all__ = ["EventHub", "id_time_ms", "session_of"]

log = logging.getLogger("llmbridge.opencode")

Event = dict[str, Any]
_SEEN_IDS = 4096
_MAX_PAUSE = 2.0


def id_time_ms(identifier: str, now_ms: float) -> float | None:
    """When OpenCode made ``identifier`` (``evt_``, ``msg_``, ``prt_``...), in Unix ms.

    OpenCode's ascending ids start with 12 hex digits holding ``ms * 4096 + counter``
    truncated to 48 bits: the low 36 bits of the millisecond clock, which ``now_ms``
    (any time within two years after) completes. ``None`` for another format.
    """
    _, sep, rest = identifier.partition("_")
    try:
        value = int(rest[:12], 16)
    except ValueError:
        return None
    if not sep or len(rest) < 12:
        return None
    low = value >> 12
    return float(now_ms - ((int(now_ms) - low) % (1 << 36)))


def session_of(event: Event) -> str | None:
    """The session an event belongs to, wherever in ``properties`` OpenCode put it."""
    props = event.get("properties")
    if not isinstance(props, dict):
        return None
    sid = props.get("sessionID")
    if isinstance(sid, str):
        return sid
    for key in ("info", "part"):
        inner = props.get(key)
        if isinstance(inner, dict) and isinstance(inner.get("sessionID"), str):
            return str(inner["sessionID"])
    return None


class EventHub:
    """Reads ``/event`` in a background task and routes events to session queues."""

    def __init__(self, transport: Callable[[], HTTPTransport], backend: str) -> None:
        self._transport = transport
        """The current server's transport (a restarted server has a new address)."""
        self._backend = backend
        self._queues: dict[str, asyncio.Queue[Event | None]] = {}
        self._seen: set[str] = set()
        self._seen_order: deque[str] = deque()
        self._connected = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.reconnects = 0
        self.last_error: str | None = None
        """Why the latest attempt to read the stream failed (``None`` once connected)."""

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"{self._backend}-events")

    @property
    def is_connected(self) -> bool:
        return self._connected.is_set()

    async def wait_connected(self, within: float) -> None:
        """Return once the stream is open; ``BackendUnavailableError`` after ``within`` s."""
        if self._connected.is_set():
            return
        self.start()
        try:
            async with asyncio.timeout(within):
                await self._connected.wait()
        except TimeoutError:
            why = f" ({self.last_error})" if self.last_error else ""
            raise BackendUnavailableError(
                f"backend '{self._backend}': OpenCode's event stream did not open "
                f"within {within:g} s{why}",
                backend=self._backend,
            ) from None

    def reconnect(self) -> None:
        """Drop the current stream and open a new one (after a server restart)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._lost()
        self.start()

    @contextmanager
    def subscribe(self, session_id: str) -> Iterator[asyncio.Queue[Event | None]]:
        """The session's events from now on; ``None`` means the stream was lost."""
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        self._queues[session_id] = queue
        try:
            yield queue
        finally:
            if self._queues.get(session_id) is queue:
                del self._queues[session_id]

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._lost()

    # -- the reader -----------------------------------------------------------------

    async def _run(self) -> None:
        pause = 0.1
        while True:
            try:
                await self._read_stream()
                log.warning("backend %s: OpenCode's event stream ended", self._backend)
            except LLMBridgeError as exc:
                self.last_error = exc.message
                log.warning("backend %s: OpenCode's event stream failed: %s", self._backend, exc)
            if self._connected.is_set():
                pause = 0.1  # it had been working: reconnect promptly
            self._lost()
            self.reconnects += 1
            await asyncio.sleep(pause)
            pause = min(pause * 2, _MAX_PAUSE)

    async def _read_stream(self) -> None:
        async with self._transport().stream("event", method="GET") as chunks:
            async for sse in aiter_sse(chunks):
                if not sse.data:
                    continue
                try:
                    event = orjson.loads(sse.data)
                except orjson.JSONDecodeError:
                    log.debug("backend %s: ignored a non-JSON event", self._backend)
                    continue
                if isinstance(event, dict):
                    self._dispatch(event)

    def _dispatch(self, event: Event) -> None:
        kind = event.get("type")
        if kind == "server.connected":
            self.last_error = None
            self._connected.set()
            return
        if kind == "server.instance.disposed":
            self._connected.clear()
            return
        if self._duplicate(event.get("id")):
            return
        sid = session_of(event)
        if sid is not None and (queue := self._queues.get(sid)) is not None:
            queue.put_nowait(event)

    def _duplicate(self, event_id: object) -> bool:
        if not isinstance(event_id, str):
            return False
        if event_id in self._seen:
            return True
        self._seen.add(event_id)
        self._seen_order.append(event_id)
        if len(self._seen_order) > _SEEN_IDS:
            self._seen.discard(self._seen_order.popleft())
        return False

    def _lost(self) -> None:
        self._connected.clear()
        for queue in self._queues.values():
            queue.put_nowait(None)

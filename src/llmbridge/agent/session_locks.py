"""One turn at a time per session, within a process.

A turn stores its question, builds the history from the messages before it, asks the
model and stores the answer. Two turns of one session running at once interleave:
200 concurrent turns stored 200 questions, then 200 answers, and each turn's history
held the other turns' unanswered questions. So turns of one session are
serialised: ``SessionLocks.serialise`` holds the session's ``asyncio.Lock`` from
before the turn's first step (storing the question) until its event stream is
closed (the answer stored, complete or ``incomplete``). ``asyncio.Lock`` wakes its
waiters in arrival order, so turns run in the order they came in; a waiter that is
cancelled (its client left) simply leaves the queue. Turns of different sessions,
and turns that start a new session, never wait for each other.

The lock is per process. Several gateway processes (or the CLI) writing one session
of the same database at the same moment are not serialised with each other; their
messages keep the database's order (ids only grow), as before. Route a session's
turns to one process when that matters. A database lock held for a whole turn
(seconds of generation) would pin a pooled connection per session in flight, which
is why it is not used.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import TypeVar

__all__ = ["SessionLocks"]

E = TypeVar("E")


@dataclass(slots=True)
class _Entry:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0
    """Holders and waiters: the entry goes when the last one leaves."""


class SessionLocks:
    """A lock per session id, kept only while someone holds or waits for it."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    @asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[None]:
        """Hold ``session_id``'s lock (waiting for the turns before it)."""
        entry = self._entries.get(session_id)
        if entry is None:
            entry = self._entries[session_id] = _Entry()
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._entries[session_id]

    async def serialise(
        self, session_id: str | None, events: AsyncGenerator[E, None]
    ) -> AsyncGenerator[E, None]:
        """``events`` (a turn's stream, not started yet), run while holding
        ``session_id``'s lock, which is released once ``events`` is closed. A turn
        without a session id starts a new session: nothing to wait for."""
        if session_id is None:
            async with aclosing(events):
                async for event in events:
                    yield event
            return
        try:
            # The stream is closed (its partial answer stored) before the lock goes.
            async with self.hold(session_id), aclosing(events):
                async for event in events:
                    yield event
        finally:
            await events.aclose()  # not started if the wait was cancelled: runs nothing

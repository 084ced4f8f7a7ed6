"""The embedded model's waiting line: first come, first served, bounded in length and time.

One model serves one generation at a time, so requests wait their turn. An
unbounded line made the last of 20 concurrent requests wait 146 s. So:

- at most ``max_waiting`` requests wait (the one being served is not counted); one
  more is refused at once;
- a request waits at most ``timeout`` seconds for its turn, then is refused.

Both refusals are ``BackendBusyError`` (503, rendered in the caller's dialect) with
``retry_after``: the recent mean time one turn took, rounded up to at least a second,
which is when a place is likely to be free again. The turn itself is not timed:
generation is bounded by ``max_output_tokens`` and by the client, whose disconnect
stops it.

``asyncio.Lock`` gives the order: it wakes waiters in the order they started waiting
and never lets a newcomer overtake a queued waiter. A turn is released by whoever
knows the model is free, the worker's reply that the request ended, not the
coroutine that asked for it (see ``EmbeddedBackend``).
"""

from __future__ import annotations

import asyncio
import math
import time

from llmbridge.core.errors import BackendBusyError

__all__ = ["Turn", "TurnQueue"]

_SMOOTHING = 0.2
"""Weight of the latest turn in the running mean of turn durations."""


class Turn:
    """The model, held by one request until ``release``."""

    __slots__ = ("_queue", "_released", "_started")

    def __init__(self, queue: TurnQueue) -> None:
        self._queue = queue
        self._started = time.monotonic()
        self._released = False

    def release(self) -> None:
        """Give the model to the next waiter (idempotent)."""
        if not self._released:
            self._released = True
            self._queue._done(time.monotonic() - self._started)


class TurnQueue:
    """A FIFO line for one model (module docstring)."""

    def __init__(self, what: str, *, max_waiting: int, timeout: float, backend: str) -> None:
        self.what = what
        """What waits here, for messages: ``generation`` or ``embedding batch``."""
        self.max_waiting = max_waiting
        self.timeout = timeout
        self.backend = backend
        self.waiting = 0
        self.refused = 0
        """Requests refused so far (line full or deadline passed)."""
        self._lock = asyncio.Lock()
        self._mean_turn_s = 1.0

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    async def enter(self) -> Turn:
        """Wait for the model's turn; ``BackendBusyError`` when the line is full or
        the deadline passes first."""
        if (self._lock.locked() or self.waiting) and self.waiting >= self.max_waiting:
            self.refused += 1
            raise BackendBusyError(
                f"the embedded model is busy: {self.waiting} requests are already waiting "
                f"for a {self.what} (the limit is {self.max_waiting}); try again later",
                backend=self.backend,
                retry_after=self.retry_after,
            )
        self.waiting += 1
        try:
            await asyncio.wait_for(self._lock.acquire(), self.timeout)
        except TimeoutError:
            self.refused += 1
            raise BackendBusyError(
                f"the embedded model is busy: this request waited {self.timeout:g} s for a "
                f"{self.what} without getting one; try again later",
                backend=self.backend,
                retry_after=self.retry_after,
            ) from None
        finally:
            self.waiting -= 1
        return Turn(self)

    async def enter_unbounded(self) -> Turn:
        """Wait for the model however long it takes (shutting down: the request being
        served finishes first)."""
        await self._lock.acquire()
        return Turn(self)

    @property
    def retry_after(self) -> float:
        return float(max(1, math.ceil(self._mean_turn_s)))

    def _done(self, held_s: float) -> None:
        self._mean_turn_s += _SMOOTHING * (held_s - self._mean_turn_s)
        self._lock.release()

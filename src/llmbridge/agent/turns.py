"""Turns in flight, so background model calls yield to replies.

A backend such as the embedded model serves one generation at a time (its one KV
cache), and Ollama queues requests per model the same way. A background summary
running there when a user's turn arrives would hold the reply back for a whole
summary. So every turn is registered here for the backend its model resolves to,
and background work on that backend:

- waits until no turn is in flight there (``wait_idle``) before it starts, and
- is cancelled when a turn starts there while it runs (``watch`` gives an event that
  is set at that moment); the work is simply tried again once the backend is idle.

Bookkeeping is synchronous (no ``await`` in ``begin``/``end``), so a turn that ends by
cancellation or by its stream being dropped still ends here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from llmbridge.core.errors import LLMBridgeError

__all__ = ["TurnGate"]


class TurnGate:
    """Counts turns per backend (``resource`` maps a model name to its backend)."""

    def __init__(self, resource: Callable[[str], str] | None = None) -> None:
        self._resource = resource
        self._busy: dict[str, int] = {}
        self._idle: dict[str, asyncio.Event] = {}
        self._watchers: dict[str, set[asyncio.Event]] = {}

    def key(self, model: str) -> str:
        """The backend ``model`` runs on (the model itself when that is unknown)."""
        if self._resource is None:
            return model
        try:
            return self._resource(model)
        except LLMBridgeError:  # an unknown model: its own key; its call fails anyway
            return model

    def _idle_event(self, key: str) -> asyncio.Event:
        event = self._idle.get(key)
        if event is None:
            event = self._idle[key] = asyncio.Event()
            event.set()
        return event

    def begin(self, model: str) -> str:
        """A turn on ``model`` starts: background work on its backend stops."""
        key = self.key(model)
        self._busy[key] = self._busy.get(key, 0) + 1
        self._idle_event(key).clear()
        for watcher in self._watchers.get(key, ()):
            watcher.set()
        return key

    def end(self, key: str) -> None:
        """The turn ``begin`` returned ``key`` for has ended."""
        left = self._busy.get(key, 0) - 1
        if left > 0:
            self._busy[key] = left
            return
        self._busy.pop(key, None)
        self._idle_event(key).set()

    async def wait_idle(self, model: str) -> None:
        """Return once no turn is in flight on ``model``'s backend."""
        key = self.key(model)
        while self._busy.get(key, 0):
            await self._idle_event(key).wait()

    def watch(self, model: str) -> asyncio.Event:
        """An event set when the next turn starts on ``model``'s backend (``unwatch``
        it when done)."""
        event = asyncio.Event()
        self._watchers.setdefault(self.key(model), set()).add(event)
        return event

    def unwatch(self, model: str, event: asyncio.Event) -> None:
        key = self.key(model)
        watchers = self._watchers.get(key)
        if watchers is not None:
            watchers.discard(event)
            if not watchers:
                del self._watchers[key]

"""The one type of a reply's event stream, and of a function that makes one.

Every producer of neutral events (a backend, a feature that wraps a stream, the
serving layer's ``Models.chat``) returns an ``EventStream``: an async iterator of
``StreamEvent`` that can be closed early. A consumer that stops before the end closes
it with ``contextlib.aclosing``, which releases what the producer holds (an upstream
HTTP response, the embedded model's turn) at once rather than at garbage collection.
Async generator functions satisfy the protocol as they are.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Protocol

from llmbridge.core.events import StreamEvent
from llmbridge.core.request import ChatRequest

__all__ = ["ChatFn", "EventStream"]


class EventStream(Protocol):
    """A reply's events, closeable before their end (``contextlib.aclosing``)."""

    def __aiter__(self) -> AsyncIterator[StreamEvent]: ...

    async def __anext__(self) -> StreamEvent: ...

    async def aclose(self) -> None: ...


ChatFn = Callable[[ChatRequest], EventStream]
"""Something that streams the reply to a request: ``Backend.chat``, ``Models.chat``."""

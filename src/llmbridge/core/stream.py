"""The one type of a reply's event stream, and of a function that makes one.

Every producer of neutral events (a backend, a feature that wraps a stream, the
serving layer's ``Models.chat``) returns an ``EventStream``: an async iterator of
``StreamEvent`` that can be closed early. A consumer that stops before the end closes
it with ``contextlib.aclosing``, which releases what the producer holds (an upstream
HTTP response, the embedded model's turn) at once rather than at garbage collection.
Async generator functions satisfy the protocol as they are.

A backend that reads its reply in network reads hands each read's events over at once:
an ``EventBatches`` is an ``EventStream`` like any other, and a layer that knows it
(the exchange's meter, the dialects' encoders) takes the events a list at a time from
``batches()``, one async hop a read through each layer instead of one an event (under
load a read carries tens of events). A layer that does not know it reads it event by
event, as any stream.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Protocol

from llmbridge.core.events import StreamEvent
from llmbridge.core.request import ChatRequest

__all__ = ["ChatFn", "EventBatches", "EventStream", "decoded_reads"]


class EventStream(Protocol):
    """A reply's events, closeable before their end (``contextlib.aclosing``)."""

    def __aiter__(self) -> AsyncIterator[StreamEvent]: ...

    async def __anext__(self) -> StreamEvent: ...

    async def aclose(self) -> None: ...


ChatFn = Callable[[ChatRequest], EventStream]
"""Something that streams the reply to a request: ``Backend.chat``, ``Models.chat``."""


class EventBatches:
    """An ``EventStream`` made of lists of events, each what one read of the reply
    carried (module docstring): ``anext`` gives one event, ``batches()`` the rest a
    list at a time, beginning with what is left of the list ``anext`` took from."""

    __slots__ = ("_batch", "_next", "_source")

    def __init__(self, source: AsyncGenerator[list[StreamEvent], None]) -> None:
        self._source = source
        self._batch: list[StreamEvent] = []
        self._next = 0

    def __aiter__(self) -> EventBatches:
        return self

    async def __anext__(self) -> StreamEvent:
        batch, index = self._batch, self._next
        while index >= len(batch):  # an empty list is skipped, as if it were not there
            batch = self._batch = await anext(self._source)
            index = 0
        self._next = index + 1
        return batch[index]

    def batches(self) -> AsyncIterator[list[StreamEvent]]:
        """The events not yet read, a list at a time (never an empty one)."""
        return _Batches(self)

    async def aclose(self) -> None:
        self._batch = []
        await self._source.aclose()


async def decoded_reads(
    chunks: AsyncIterator[bytes], decode: Callable[[bytes, list[StreamEvent]], bool]
) -> AsyncGenerator[list[StreamEvent], None]:
    """Each read of ``chunks`` decoded into one list of events, for an ``EventBatches``:
    ``decode(read, events)`` appends the read's events and says whether the stream is
    over (nothing more is read; the caller's decoder knows which way it ended). A read
    that fails part-way hands over the events before the failure, then raises, so the
    client is sent what an event-at-a-time decode would have sent it."""
    async for chunk in chunks:
        batch: list[StreamEvent] = []
        try:
            over = decode(chunk, batch)
        except Exception:
            if batch:
                yield batch
            raise
        if batch:
            yield batch
        if over:
            return


class _Batches:
    """``EventBatches.batches()``: an iterator object rather than a generator, so a
    consumer that stops early leaves nothing behind to finalise."""

    __slots__ = ("_events",)

    def __init__(self, events: EventBatches) -> None:
        self._events = events

    def __aiter__(self) -> _Batches:
        return self

    async def __anext__(self) -> list[StreamEvent]:
        events = self._events
        if events._next < len(events._batch):
            rest = events._batch[events._next :] if events._next else events._batch
            events._batch, events._next = [], 0
            return rest
        while not (batch := await anext(events._source)):
            pass
        return batch

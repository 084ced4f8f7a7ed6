"""Events -> complete response: the one path from a stream to a non-streaming reply.

Backends only ever stream; a non-streaming request is the accumulated stream. That
keeps streaming and non-streaming behaviour identical by construction.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable

from llmbridge.core.errors import BackendProtocolError
from llmbridge.core.events import (
    PartEnd,
    ResponseEnd,
    ResponseStart,
    StreamError,
    StreamEvent,
    UsageUpdate,
)
from llmbridge.core.messages import Message, Part
from llmbridge.core.response import ChatResponse, Timings, Usage

__all__ = ["Accumulator", "accumulate", "accumulate_sync"]


class Accumulator:
    """Feed events one by one; ``response()`` gives the result once the stream ended."""

    def __init__(self) -> None:
        self.start: ResponseStart | None = None
        self.parts: list[Part] = []
        self.usage = Usage()
        self.end: ResponseEnd | None = None

    def add(self, event: StreamEvent) -> None:
        """Take one event. A ``StreamError`` raises its error."""
        if isinstance(event, PartEnd):
            self.parts.append(event.part)
        elif isinstance(event, ResponseStart):
            self.start = event
            if event.input_tokens is not None:
                self.usage = self.usage.merged(Usage(input_tokens=event.input_tokens))
        elif isinstance(event, UsageUpdate):
            self.usage = self.usage.merged(event.usage)
        elif isinstance(event, ResponseEnd):
            self.end = event
            self.usage = self.usage.merged(event.usage)
        elif isinstance(event, StreamError):
            raise event.error

    def response(self) -> ChatResponse:
        if self.start is None or self.end is None:
            raise BackendProtocolError("the backend's stream ended before it was complete")
        return ChatResponse(
            id=self.start.id,
            model=self.start.model,
            created=self.start.created or time.time(),
            message=Message(role="assistant", parts=tuple(self.parts)),
            stop_reason=self.end.stop_reason,
            stop_sequence=self.end.stop_sequence,
            usage=self.usage,
            timings=self.end.timings if self.end.timings else Timings(),
            provider_details=self.end.provider_details,
        )


async def accumulate(events: AsyncIterator[StreamEvent]) -> ChatResponse:
    """Drain an event stream into a complete response (raises a stream's error)."""
    acc = Accumulator()
    async for event in events:
        acc.add(event)
    return acc.response()


def accumulate_sync(events: Iterable[StreamEvent]) -> ChatResponse:
    """The same, for an already-collected list of events (tests, fixtures)."""
    acc = Accumulator()
    for event in events:
        acc.add(event)
    return acc.response()

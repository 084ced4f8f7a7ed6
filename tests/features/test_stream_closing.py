"""A consumer that stops early closes the producer at once (core/stream.py).

Each wrapper of a reply's events (tool emulation, tool healing) and each consumer
that stops before the end (the fallback generation's accumulation) closes the stream
it reads with ``contextlib.aclosing``. The producer here is an async generator whose
``finally`` block records that it ran; every test asserts it ran *before* the
consumer returned, not later at garbage collection (the producers are kept
referenced, so only an explicit close can run their ``finally``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing

import pytest

from llmbridge.core.errors import BackendError
from llmbridge.core.events import (
    PartDelta,
    ResponseEnd,
    ResponseStart,
    StreamError,
    StreamEvent,
    TextDelta,
)
from llmbridge.core.messages import Message, TextPart, ToolDefinition
from llmbridge.core.parts_manager import PartsManager
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import StopReason
from llmbridge.core.stream import ChatFn, EventStream
from llmbridge.features.tool_emulation import emulate_tool_calls
from llmbridge.features.tool_healing import heal_tool_calls

TOOL = ToolDefinition("get_time", "The current time", {"type": "object", "properties": {}})
ASK = ChatRequest(model="m", messages=(Message("user", (TextPart("Hello?"),)),), tools=(TOOL,))
ANSWER = '{"action": "chat", "content": "One two three four five six seven"}'


def reply(chunks: list[str], *, fail_after: int | None = None) -> list[StreamEvent]:
    """A reply's events with ``chunks`` as its text; an in-band error after
    ``fail_after`` chunks, then more text that a consumer must never need."""
    parts = PartsManager()
    events: list[StreamEvent] = [ResponseStart(id="r", model="m", created=time.time())]
    for number, chunk in enumerate(chunks):
        if number == fail_after:
            events.append(StreamError(BackendError("broke off mid-reply")))
        events.extend(parts.text(chunk))
    return [*events, *parts.finish(), ResponseEnd(StopReason.END_TURN)]


class Producers:
    """A ``ChatFn`` that plays one scripted reply per call and records, in ``log``,
    when each reply's generator ends (its ``finally`` ran: played out or closed). It
    keeps every generator it made."""

    def __init__(self, log: list[str], *replies: list[StreamEvent]) -> None:
        self.log = log
        self.replies = list(replies)
        self.made: list[EventStream] = []

    def chat(self, request: ChatRequest) -> EventStream:
        stream = self._play(len(self.made), self.replies.pop(0))
        self.made.append(stream)
        return stream

    async def _play(
        self, number: int, events: list[StreamEvent]
    ) -> AsyncGenerator[StreamEvent, None]:
        try:
            for event in events:
                yield event
        finally:
            self.log.append(f"producer {number} ended")


def pieces(text: str, size: int = 3) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def first_text(event: StreamEvent) -> bool:
    return isinstance(event, PartDelta) and isinstance(event.delta, TextDelta)


def emulated(chat: ChatFn) -> EventStream:
    return emulate_tool_calls(chat, ASK)


def healed(chat: ChatFn) -> EventStream:
    return heal_tool_calls(chat(ASK), ASK.tools)


def emulated_then_healed(chat: ChatFn) -> EventStream:
    """The gateway's own composition (gateway/pipeline.py)."""
    return heal_tool_calls(emulate_tool_calls(chat, ASK), ASK.tools)


@pytest.mark.parametrize("wrap", [emulated, healed, emulated_then_healed])
async def test_stopping_after_one_event_closes_the_producer_before_returning(
    wrap: Callable[[ChatFn], EventStream],
) -> None:
    log: list[str] = []
    producers = Producers(log, reply(pieces(ANSWER)))

    async def consume() -> StreamEvent:
        async with aclosing(wrap(producers.chat)) as events:
            async for event in events:
                if first_text(event):
                    break
        log.append("consumer returned")
        return event

    event = await consume()
    assert first_text(event)
    assert log == ["producer 0 ended", "consumer returned"]
    assert len(producers.made) == 1  # still referenced: only aclosing could close it


async def test_an_error_in_the_fallback_generation_closes_its_stream_first() -> None:
    # The decision is no JSON, so the fallback generation runs; its stream breaks off
    # with an in-band error, which stops the accumulation there: that stream must be
    # closed before the error reaches the consumer.
    log: list[str] = []
    producers = Producers(
        log, reply(pieces("no decision here")), reply(pieces("An answer that"), fail_after=2)
    )

    async def consume() -> None:
        try:
            async with aclosing(emulate_tool_calls(producers.chat, ASK)) as events:
                async for _ in events:
                    pass
        except BackendError:
            log.append("consumer saw the error")
            raise

    with pytest.raises(BackendError, match="broke off mid-reply"):
        await consume()
    assert log == ["producer 0 ended", "producer 1 ended", "consumer saw the error"]
    assert len(producers.made) == 2

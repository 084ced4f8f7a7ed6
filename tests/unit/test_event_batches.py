"""A reply read a batch at a time: ``core.stream.EventBatches``, the encoders' loop over
it (``dialects.stream_encoding.encoded``) and the meter's watch of it.

A batch is what one read of the backend carried; it must change nothing a client sees
or the ledger records, only how many async hops each event costs."""

from __future__ import annotations

import functools
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable

import pytest

from llmbridge.core.errors import BackendProtocolError
from llmbridge.core.events import (
    PartDelta,
    PartEnd,
    PartStart,
    ResponseEnd,
    ResponseStart,
    StreamError,
    StreamEvent,
    TextDelta,
)
from llmbridge.core.messages import Message, TextPart
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import StopReason, Usage
from llmbridge.core.stream import EventBatches
from llmbridge.dialects import anthropic, gemini, interactions, ollama, openai, responses
from llmbridge.gateway.exchange.meter import ReplyMeter

START = ResponseStart(id="r1", model="m", created=1.0)
TEXT: list[StreamEvent] = [
    PartStart(0, TextPart("")),
    PartDelta(0, TextDelta("caf\u00e9 ")),
    PartDelta(0, TextDelta("line\u2028break")),  # escaped on the wire, batch or not
    PartEnd(0, TextPart("caf\u00e9 line\u2028break")),
]
END = ResponseEnd(stop_reason=StopReason.END_TURN, usage=Usage(input_tokens=3, output_tokens=2))


async def _batches_of(
    batches: list[list[StreamEvent]], closed: list[bool] | None = None, fail: bool = False
) -> AsyncGenerator[list[StreamEvent], None]:
    try:
        for batch in batches:
            yield batch
        if fail:
            raise BackendProtocolError("the connection dropped")
    finally:
        if closed is not None:
            closed.append(True)


async def _one_by_one(events: list[StreamEvent]) -> AsyncGenerator[StreamEvent, None]:
    for event in events:
        yield event


async def test_events_come_in_order_across_batches_and_empty_ones_are_skipped() -> None:
    stream = EventBatches(_batches_of([[START], [], TEXT[:2], TEXT[2:], [END]]))
    assert [event async for event in stream] == [START, *TEXT, END]


async def test_batches_begin_with_what_is_left_of_the_one_anext_took_from() -> None:
    stream = EventBatches(_batches_of([[START, *TEXT[:2]], [], TEXT[2:], [END]]))
    assert await anext(stream) == START
    assert [batch async for batch in stream.batches()] == [TEXT[:2], TEXT[2:], [END]]


async def test_closing_it_closes_its_source() -> None:
    closed: list[bool] = []
    stream = EventBatches(_batches_of([[START], TEXT], closed))
    await anext(stream)
    await stream.aclose()
    assert closed == [True]


REQUEST = ChatRequest(model="m", messages=(Message(role="user", parts=(TextPart("hi"),)),))
ENCODERS: dict[str, Callable[[AsyncIterator[StreamEvent], ChatRequest], AsyncIterator[bytes]]] = {
    "openai": openai.encode_chat_stream,
    "anthropic": anthropic.encode_chat_stream,
    "responses": responses.encode_chat_stream,
    "gemini": gemini.encode_chat_stream,
    "gemini-array": gemini.encode_chat_stream_array,
    "interactions": interactions.encode_chat_stream,
    "ollama": ollama.encode_chat_stream,
    "ollama-generate": functools.partial(ollama.encode_chat_stream, generate=True),
}
# Ids and times each encoder makes up anew for every stream.
_MADE_UP = re.compile(rb'("(?:id|created|created_at|response_id|item_id)":)("[^"]*"|\d+)')


async def _wire(
    encode: Callable[..., AsyncIterator[bytes]], events: AsyncIterator[StreamEvent]
) -> bytes:
    return _MADE_UP.sub(rb"\1_", b"".join([chunk async for chunk in encode(events, REQUEST)]))


@pytest.mark.parametrize("name", sorted(ENCODERS))
@pytest.mark.parametrize(
    "reads",
    [
        [[START], TEXT, [END]],
        [[START], TEXT[:1], TEXT[1:3], [TEXT[3], END]],
        [[START], [*TEXT, END, PartStart(1, TextPart(""))]],  # nothing after the end
        [[START], TEXT],  # the events stop early: the dialect's error
        [[START], TEXT[:2], [StreamError(BackendProtocolError("it broke"))]],
    ],
    ids=["a-read-each", "split-reads", "past-the-end", "cut-short", "failed"],
)
async def test_each_encoder_writes_the_same_bytes_for_batches_as_for_single_events(
    name: str, reads: list[list[StreamEvent]]
) -> None:
    encode = ENCODERS[name]
    flat = [event for read in reads for event in read]
    by_event = await _wire(encode, _one_by_one(flat))
    assert await _wire(encode, EventBatches(_batches_of(reads))) == by_event
    assert "caf\u00e9".encode() in by_event
    assert b"\xe2\x80\xa8" not in by_event  # U+2028 went out escaped


async def test_the_meter_notes_every_event_of_a_batch_and_a_failure_becomes_a_stream_error() -> (
    None
):
    meter = ReplyMeter()
    source = EventBatches(_batches_of([TEXT[:2], TEXT[2:]], fail=True))
    watched = meter.watch(START, source, backend=None, keep=False)
    assert isinstance(watched, EventBatches)  # handed on a batch at a time
    batches = [batch async for batch in watched.batches()]
    assert batches[:3] == [[START], TEXT[:2], TEXT[2:]]
    [[failure]] = batches[3:]
    assert isinstance(failure, StreamError) and failure.error.message == "the connection dropped"
    assert meter.failure is failure.error
    assert meter.generated.tokens > 0  # the text deltas were counted for billing


async def test_the_meter_hands_a_stream_of_single_events_on_as_it_came() -> None:
    meter = ReplyMeter()
    watched = meter.watch(START, _one_by_one([*TEXT, END]), backend=None, keep=False)
    assert not isinstance(watched, EventBatches)
    assert [event async for event in watched] == [START, *TEXT, END]
    assert meter.usage == END.usage and meter.stop_reason is StopReason.END_TURN

"""The SSE framer the backends use: same events as httpx-sse, however bytes are cut."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from httpx_sse import EventSource, ServerSentEvent

from llmbridge.dialects.framing import aiter_sse

FIXTURES = {
    f"{p.parent.name}/{p.name}": p.read_bytes()
    for p in sorted(Path(__file__).parent.parent.glob("fixtures/streams/*/*.sse"))
}


async def chunked(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


async def framed(data: bytes, size: int) -> list[ServerSentEvent]:
    return [event async for event in aiter_sse(chunked(data, size))]


async def reference(data: bytes) -> list[ServerSentEvent]:
    response = httpx.Response(200, content=data, headers={"content-type": "text/event-stream"})
    return [e async for e in EventSource(response).aiter_sse() if e.data]


@pytest.mark.parametrize("fixture", FIXTURES)
@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 100_000])
async def test_matches_httpx_sse_on_every_fixture(fixture: str, size: int) -> None:
    data = FIXTURES[fixture]
    expected = [(e.event, e.data) for e in await reference(data)]
    assert [(e.event, e.data) for e in await framed(data, size)] == expected


@pytest.mark.parametrize("size", [1, 2, 5, 1000])
async def test_line_endings_comments_and_multiline_data(size: int) -> None:
    data = (
        b": a comment\r\n"
        b"event: one\r\ndata: a\r\ndata: b\r\n\r\n"
        b"data: cr only\r\r"
        b"id: 7\nretry: 100\ndata: \xc3\xa9t\xc3\xa9 \xf0\x9f\x8c\x8d\n\n"
        b"event: lonely\n\n"
    )
    events = await framed(data, size)
    assert [(e.event, e.data) for e in events] == [
        ("one", "a\nb"),
        ("message", "cr only"),  # the specification's default event name
        ("message", "été 🌍"),
    ]
    assert events[2].id == "7" and events[2].retry == 100


async def test_an_event_cut_off_by_the_end_of_the_stream_is_discarded() -> None:
    events = await framed(b"data: complete\n\ndata: cut off", 4)
    assert [e.data for e in events] == ["complete"]
    assert [e.data for e in await framed(b"data: ends with cr\r\r", 100)] == ["ends with cr"]


async def test_a_retry_of_superscript_digits_is_not_a_number() -> None:
    # str.isdigit() is true for "²", which int() refuses: a ValueError mid-stream used to
    # be the result. The specification takes ASCII digits only; anything else is ignored.
    events = await framed("retry: ²\ndata: a\n\nretry: 5\u2075\ndata: b\n\n".encode(), 3)
    assert [(e.data, e.retry) for e in events] == [("a", None), ("b", None)]

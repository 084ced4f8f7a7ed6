"""Test helpers: SSE bytes through a real httpx response and httpx-sse's parser, and the
official ``openai`` client over a mock transport."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import httpx
import httpx2
import openai
from httpx_sse import EventSource, ServerSentEvent

from llmbridge.core.accumulate import accumulate
from llmbridge.core.events import StreamEvent
from llmbridge.core.response import ChatResponse
from llmbridge.dialects.openai.stream import decode_chat_stream

FIXTURES = Path(__file__).parents[2] / "fixtures" / "streams" / "openai"


def fixture_bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def split_every(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


async def _byte_stream(pieces: Iterable[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


def sse_events(pieces: Iterable[bytes]) -> AsyncIterator[ServerSentEvent]:
    """The events httpx-sse parses from a response whose body arrives as ``pieces``."""
    response = httpx.Response(
        200,
        headers={"content-type": "text/event-stream; charset=utf-8"},
        content=_byte_stream(list(pieces)),
    )
    return EventSource(response).aiter_sse()


async def decode_events(pieces: Iterable[bytes]) -> list[StreamEvent]:
    return [event async for event in decode_chat_stream(sse_events(pieces))]


async def decode_response(pieces: Iterable[bytes]) -> ChatResponse:
    return await accumulate(decode_chat_stream(sse_events(pieces)))


async def collect(stream: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in stream])


async def aiter_list(items: Iterable[StreamEvent]) -> AsyncIterator[StreamEvent]:
    for item in items:
        yield item


def official_client(
    body: bytes, *, status: int = 200, content_type: str = "application/json"
) -> openai.AsyncOpenAI:
    """The official client, answered with ``body`` (it is built on ``httpx2``)."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, headers={"content-type": content_type}, content=body)

    return openai.AsyncOpenAI(
        api_key="test",
        base_url="http://llmbridge.test/v1",
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
    )

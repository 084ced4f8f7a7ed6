"""Test helpers: turn SSE bytes into ``ServerSentEvent``s the way a backend reads them.

Bytes go through a real ``httpx.Response`` and ``httpx_sse.EventSource``, in chunks
of any size, so UTF-8 characters split across chunks are exercised like on a socket.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import httpx
from httpx_sse import EventSource, ServerSentEvent

FIXTURES = Path(__file__).parents[2] / "fixtures" / "streams" / "anthropic"


def fixture(name: str) -> bytes:
    """The raw bytes of ``tests/fixtures/streams/anthropic/<name>.sse``."""
    return (FIXTURES / f"{name}.sse").read_bytes()


def chunked(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]


async def aiter_sse(chunks: Iterable[bytes]) -> AsyncIterator[ServerSentEvent]:
    """The events ``httpx_sse`` reads from a response whose body arrives in ``chunks``."""

    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    response = httpx.Response(
        200, headers={"content-type": "text/event-stream; charset=utf-8"}, content=body()
    )
    async for event in EventSource(response).aiter_sse():
        yield event


async def read_sse(data: bytes, size: int = 1 << 16) -> list[ServerSentEvent]:
    return [event async for event in aiter_sse(chunked(data, size))]

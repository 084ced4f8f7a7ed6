"""Fixtures for the client tests: a fake upstream on loopback, and stream helpers."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
import pytest

from llmbridge.client import StreamEvent
from tests.conftest import RunningServer
from tests.upstream import FakeUpstream

CHUNK = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[FakeUpstream, RunningServer]]:
    """A fake Ollama / OpenAI-compatible server answering with canned bytes."""
    fake = FakeUpstream()
    with RunningServer(fake.app) as server:
        yield fake, server


@pytest.fixture(autouse=True)
def _empty_upstream_queue(request: pytest.FixtureRequest) -> None:
    if "upstream" in request.fixturenames:
        fake, _ = request.getfixturevalue("upstream")
        fake.queue.clear()


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    """One OpenAI ``chat.completion.chunk`` SSE event."""
    body: dict[str, Any] = {**CHUNK, **extra}
    if "choices" not in extra:
        body["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    return b"data: " + orjson.dumps(body) + b"\n\n"


def usage_chunk(prompt: int, completion: int) -> bytes:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    return chunk(choices=[], usage={**usage, "total_tokens": prompt + completion})


DONE = b"data: [DONE]\n\n"


def ndjson(*frames: dict[str, Any]) -> list[bytes]:
    return [orjson.dumps(frame) + b"\n" for frame in frames]


async def collect(events: AsyncIterator[StreamEvent]) -> list[StreamEvent]:
    return [event async for event in events]


def kinds(events: list[StreamEvent]) -> list[str]:
    return [event.type.value for event in events]


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port

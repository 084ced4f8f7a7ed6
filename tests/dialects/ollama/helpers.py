"""Shared helpers for the Ollama dialect tests: fixture files and async plumbing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import TypeVar

from llmbridge.core.events import StreamEvent
from llmbridge.dialects.ollama import decode_chat_stream

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "streams" / "ollama"

T = TypeVar("T")


def fixture_bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


async def aiter_of(items: Iterable[T]) -> AsyncIterator[T]:
    for item in items:
        yield item


async def collect(source: AsyncIterator[T]) -> list[T]:
    return [item async for item in source]


async def decode_fixture(name: str) -> list[StreamEvent]:
    lines = fixture_bytes(name).decode().split("\n")
    return await collect(decode_chat_stream(aiter_of(lines)))

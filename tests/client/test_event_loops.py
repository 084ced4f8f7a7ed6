"""One adapter, many event loops: an adapter is configured once and called from
anywhere, so each ``asyncio.run(...)`` (a script's, a framework's worker thread's) gets
connections of its own, and those of a finished loop are closed with it.

Before, a second ``asyncio.run`` with the same adapter reused a connection bound to
the first, closed loop and yielded ``ERROR: Event loop is closed``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from llmbridge.client import EventType, OllamaAdapter, StreamEvent
from tests.client.conftest import DONE, chunk, collect, kinds, ndjson
from tests.conftest import RunningServer
from tests.upstream import Canned, FakeUpstream

SSE = "text/event-stream"


def openai_reply(text: str) -> Canned:
    return Canned(media_type=SSE, chunks=[chunk({"content": text}, "stop"), DONE])


def ollama_reply(text: str) -> Canned:
    frames = ndjson(
        {"model": "m", "created_at": "2025-01-01T00:00:00Z", "done": False,
         "message": {"role": "assistant", "content": text}},
        {"model": "m", "created_at": "2025-01-01T00:00:00Z", "done": True, "done_reason": "stop",
         "message": {"role": "assistant", "content": ""}},
    )  # fmt: skip
    return Canned(chunks=frames)


ADAPTERS: dict[str, tuple[Callable[[str], OllamaAdapter], Callable[[str], Canned]]] = {
    "openai-sdk": (lambda url: OllamaAdapter(url, default_model="m", max_retries=0), openai_reply),
    "native": (lambda url: OllamaAdapter.native(url, default_model="m"), ollama_reply),
    "openai-compatible": (
        lambda url: OllamaAdapter.openai_compatible(url, default_model="m"),
        openai_reply,
    ),
}


def text_of(events: list[StreamEvent]) -> str:
    return "".join(event.text for event in events if event.type is EventType.TOKEN)


@pytest.mark.parametrize("kind", list(ADAPTERS))
def test_one_adapter_across_asyncio_runs(
    upstream: tuple[FakeUpstream, RunningServer], kind: str
) -> None:
    fake, server = upstream
    make, reply = ADAPTERS[kind]
    adapter = make(server.url)  # built outside any loop, as module-level code does
    for word in ("one", "two", "three"):
        fake.queue.append(reply(word))
        events = asyncio.run(collect(adapter.call("go")))
        assert kinds(events) == ["TOKEN", "METADATA", "END"], events
        assert text_of(events) == word
    asyncio.run(adapter.aclose())


@pytest.mark.parametrize("kind", list(ADAPTERS))
def test_one_adapter_from_two_threads_at_once(
    upstream: tuple[FakeUpstream, RunningServer], kind: str
) -> None:
    """Two loops alive at the same time, each in its own thread, share one adapter."""
    fake, server = upstream
    make, reply = ADAPTERS[kind]
    adapter = make(server.url)
    fake.queue.extend([reply("same"), reply("same")])
    results: list[list[StreamEvent]] = []
    barrier = threading.Barrier(2)

    def worker() -> None:
        async def run() -> list[StreamEvent]:
            barrier.wait(timeout=10)
            return await collect(adapter.call("go"))

        results.append(asyncio.run(run()))

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(results) == 2
    for events in results:
        assert kinds(events) == ["TOKEN", "METADATA", "END"], events
        assert text_of(events) == "same"
    asyncio.run(adapter.aclose())


def test_chat_and_stream_work_across_loops_too(
    upstream: tuple[FakeUpstream, RunningServer],
) -> None:
    fake, server = upstream
    adapter = OllamaAdapter.native(server.url, default_model="m")
    fake.queue.extend([ollama_reply("first"), ollama_reply("second")])
    assert asyncio.run(adapter.chat("go")).message.text == "first"
    assert asyncio.run(adapter.chat("go")).message.text == "second"
    asyncio.run(adapter.aclose())

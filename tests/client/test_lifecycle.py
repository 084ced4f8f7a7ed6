"""Stopping early closes the provider's stream; healing of tool arguments that did not parse."""

from __future__ import annotations

from contextlib import aclosing

import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.client import EventType, OllamaAdapter, heal_tool_input
from llmbridge.core.errors import BackendError
from tests.client.conftest import DONE, chunk, collect, kinds
from tests.conftest import RunningServer
from tests.upstream import Canned, FakeUpstream


async def test_breaking_out_closes_the_backend_stream() -> None:
    backend = ScriptedBackend()
    backend.enqueue(Script(text=["a", "b", "c", "d"], chunk_delay=0.01))
    async with (
        OllamaAdapter.from_backend(backend, default_model="m") as adapter,
        aclosing(adapter.call("go")) as events,
    ):
        async for event in events:
            assert event.type is EventType.TOKEN
            break
    assert backend.cancelled == 1 and backend.completed == 0


async def test_breaking_out_of_an_sdk_stream_then_calling_again(
    upstream: tuple[FakeUpstream, RunningServer],
) -> None:
    fake, server = upstream
    slow = Canned(
        media_type="text/event-stream",
        chunks=[chunk({"content": "a"}), chunk({"content": "b"}), chunk({}, "stop"), DONE],
        delay=0.05,
    )
    fast = Canned(media_type="text/event-stream", chunks=[chunk({"content": "ok"}, "stop"), DONE])
    fake.queue.extend([slow, fast])
    async with OllamaAdapter(server.url, default_model="m", max_retries=0) as adapter:
        async with aclosing(adapter.call("go")) as events:
            async for event in events:
                assert event.text == "a"
                break
        again = await collect(adapter.call("go"))
    assert kinds(again) == ["TOKEN", "METADATA", "END"]


async def test_an_error_that_stops_chat_closes_the_backend_stream_before_raising() -> None:
    # The in-band error stops the accumulation with the backend's stream suspended
    # after it; ``chat`` closes that stream (aclosing) before the error reaches us.
    backend = ScriptedBackend()
    backend.enqueue(Script(text=["a", "b", "c"], fail_after=1, in_band=True))
    async with OllamaAdapter.from_backend(backend, default_model="m") as adapter:
        with pytest.raises(BackendError, match="scripted failure mid-stream"):
            await adapter.chat("go")
        assert backend.cancelled == 1 and backend.completed == 0


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('```json\n{"city": "Paris"}\n```', {"city": "Paris"}),
        ('{"city": "Par', {"city": "Par"}),
        ('{"q": {"terms": ["a", "b"', {"q": {"terms": ["a", "b"]}}),
        ('{"city": "Paris",', {"city": "Paris"}),
        ('{"city":', {"city": ""}),  # json-repair's guess, the same as the gateway's
        ('{"say": "a \\"quoted', {"say": 'a "quoted'}),
        ("[1, 2]", {"raw": "[1, 2]"}),
        ("not json at all", {"raw": "not json at all"}),
    ],
)
def test_heal_tool_input(raw: str, expected: dict[str, object]) -> None:
    assert heal_tool_input(raw) == expected

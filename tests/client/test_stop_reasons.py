"""METADATA's ``stop_reason``: seed 003's, the provider's ``finish_reason`` (ART code
checks ``"tool_calls"``, ``"stop"``, ``"length"``), whatever backend answered; the
neutral names with ``neutral_stop_reasons=True``."""

from __future__ import annotations

import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.client import OllamaAdapter, StreamEvent
from llmbridge.core.response import StopReason
from tests.client.conftest import collect

CASES = [
    (Script(text=["done"]), "stop", "end_turn"),
    (Script(text=["cut"], stop_reason=StopReason.MAX_TOKENS), "length", "max_tokens"),
    (Script(text=["x"], stop_reason=StopReason.STOP_SEQUENCE), "stop", "stop_sequence"),
    (Script(text=[""], stop_reason=StopReason.CONTENT_FILTER), "content_filter", "content_filter"),
    (Script(text=[], tool_calls=[("get_weather", {"city": "Paris"})]), "tool_calls", "tool_use"),
]


def stop_reason_of(events: list[StreamEvent]) -> str | None:
    (meta,) = [event.metadata for event in events if event.metadata is not None]
    return meta.stop_reason


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(("script", "seed", "neutral"), CASES)
async def test_stop_reason_names(script: Script, seed: str, neutral: str, stream: bool) -> None:
    backend = ScriptedBackend()
    seeds = OllamaAdapter.from_backend(backend, default_model="m")
    neutrals = OllamaAdapter.from_backend(backend, default_model="m", neutral_stop_reasons=True)
    backend.enqueue(script)
    assert stop_reason_of(await collect(seeds.call("go", stream=stream))) == seed
    backend.enqueue(script)
    assert stop_reason_of(await collect(neutrals.call("go", stream=stream))) == neutral


def test_every_constructor_takes_the_option() -> None:
    url = "http://127.0.0.1:9"
    adapters = [
        OllamaAdapter(url, neutral_stop_reasons=True),
        OllamaAdapter.native(url, neutral_stop_reasons=True),
        OllamaAdapter.openai_compatible(url, neutral_stop_reasons=True),
        OllamaAdapter.gateway(url, neutral_stop_reasons=True),
        OllamaAdapter.anthropic(url, api_key="x", neutral_stop_reasons=True),
        OllamaAdapter.from_backend(ScriptedBackend(), neutral_stop_reasons=True),
    ]
    assert all(adapter.neutral_stop_reasons for adapter in adapters)
    assert OllamaAdapter(url).neutral_stop_reasons is False

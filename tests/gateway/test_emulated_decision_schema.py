"""A backend that holds a reply to a JSON schema gets the emulated
decision's schema, in its own API's words, so the model can only name an offered tool
and stops where the JSON ends; one that does not is asked for plain JSON.

A fake upstream stands in for the servers (what matters is what they are sent); the
official openai client asks, with a tool, of routes whose models have no native tools.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from llmbridge.gateway.config import GatewayConfig
from llmbridge.serving.build import build_backends
from tests.conftest import RunningServer, openai_client, running_gateway
from tests.upstream import Canned, FakeUpstream

DECISION = '{"action": "tool_call", "tool_name": "get_weather", "arguments": {"city": "Paris"}}'
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def _openai_reply(text: str) -> Canned:
    """An OpenAI-compatible server's reply, sent whole (the gateway asks for it whole)."""
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "finish_reason": "stop",
    }
    reply = {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [choice],
    }
    return Canned(chunks=[orjson.dumps(reply)], media_type="application/json")


def _ollama_reply(text: str) -> Canned:
    """An Ollama server's reply, sent whole (the gateway asks for it whole)."""
    reply = {
        "model": "m",
        "created_at": "2026-01-01T00:00:00Z",
        "message": {"role": "assistant", "content": text},
        "done": True,
        "done_reason": "stop",
    }
    return Canned(chunks=[orjson.dumps(reply)], media_type="application/json")


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[FakeUpstream, RunningServer]]:
    fake = FakeUpstream()
    with RunningServer(fake.app) as server:
        yield fake, server


@pytest.fixture(scope="module")
def gateway(upstream: tuple[FakeUpstream, RunningServer]) -> Iterator[RunningServer]:  # type: ignore[override]
    _, up = upstream
    sections: dict[str, Any] = {
        "ollama": {"type": "ollama", "url": up.url},
        "llamacpp": {"type": "openai", "url": f"{up.url}/v1", "structured_output": True},
        "plain": {"type": "openai", "url": f"{up.url}/v1"},
        "old-ollama": {"type": "ollama", "url": up.url, "structured_output": False},
    }
    config = GatewayConfig.model_validate({"backends": sections, "default_backend": "ollama"})
    backends = build_backends(config, config.server.serving_host())
    models = [
        {"name": name, "backend": name, "tools": False} for name in sections
    ]  # no native tools: every request with tools is emulated
    with running_gateway(backends, models=models) as server:
        yield server


def _ask(gateway: RunningServer, model: str) -> Any:
    client = openai_client(gateway.url)
    reply = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[TOOL],  # type: ignore[list-item]
    )
    calls = reply.choices[0].message.tool_calls or []
    assert [(c.function.name, orjson.loads(c.function.arguments)) for c in calls] == [  # type: ignore[union-attr]
        ("get_weather", {"city": "Paris"})
    ]


def _sent_format(fake: FakeUpstream, model: str) -> Any:
    """What the upstream was asked to hold its reply to, in its own API's words."""
    body = orjson.loads(fake.bodies[-1])
    if model in ("llamacpp", "plain"):
        fmt = body["response_format"]
        return fmt["json_schema"]["schema"] if fmt["type"] == "json_schema" else fmt
    return body["format"]


@pytest.mark.parametrize("model", ["llamacpp", "ollama", "plain", "old-ollama"])
def test_the_decision_is_held_to_its_schema_where_the_backend_can(
    upstream: tuple[FakeUpstream, RunningServer], gateway: RunningServer, model: str
) -> None:
    fake, _ = upstream
    openai_api = model in ("llamacpp", "plain")
    fake.queue.append(_openai_reply(DECISION) if openai_api else _ollama_reply(DECISION))
    _ask(gateway, model)
    sent = _sent_format(fake, model)
    if model == "plain":  # no json_schema unless the configuration says the server has it
        assert sent == {"type": "json_object"}
    elif model == "old-ollama":  # structured_output: false
        assert sent == "json"
    else:
        call, reply = sent["anyOf"]
        assert call["properties"]["tool_name"] == {"enum": ["get_weather"]}
        assert reply["properties"]["action"] == {"enum": ["chat"]}

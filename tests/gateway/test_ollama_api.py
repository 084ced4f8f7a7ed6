"""The Ollama API, through the official ``ollama`` client, over a scripted backend."""

from __future__ import annotations

import httpx
import ollama
import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from tests.conftest import RunningServer, ollama_client


@pytest.fixture
def client(gateway: RunningServer) -> ollama.Client:
    return ollama_client(gateway.url)


def test_chat_non_streaming(client: ollama.Client, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["Hello", ", ", "world"]))
    reply = client.chat(model="scripted", messages=[{"role": "user", "content": "hi"}])
    assert reply.message.role == "assistant"
    assert reply.message.content == "Hello, world"
    assert reply.done is True
    assert reply.done_reason == "stop"
    assert reply.model == "scripted"
    assert reply.prompt_eval_count and reply.eval_count


def test_chat_streaming_chunks_arrive_in_order(
    client: ollama.Client, scripted: ScriptedBackend
) -> None:
    scripted.enqueue(Script(text=["one ", "two ", "three"]))
    chunks = list(
        client.chat(model="scripted", messages=[{"role": "user", "content": "count"}], stream=True)
    )
    assert [c.message.content for c in chunks if c.message.content] == ["one ", "two ", "three"]
    assert chunks[-1].done is True
    assert all(not c.done for c in chunks[:-1])


def test_chat_passes_options_and_system_to_backend(
    client: ollama.Client, scripted: ScriptedBackend
) -> None:
    client.chat(
        model="scripted",
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
        ],
        options={"temperature": 0.2, "num_predict": 7, "repeat_penalty": 1.1, "stop": ["\n"]},
    )
    seen = scripted.requests[-1]
    assert [m.role for m in seen.messages] == ["system", "user"]
    assert seen.params.temperature == 0.2
    assert seen.params.max_tokens == 7
    assert seen.params.repeat_penalty == 1.1
    assert seen.params.stop == ("\n",)


def test_tool_calls_reach_the_client(client: ollama.Client, scripted: ScriptedBackend) -> None:
    scripted.enqueue(
        Script(text=[], tool_calls=[("get_weather", {"city": "Paris"}), ("get_time", {})])
    )
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    reply = client.chat(
        model="scripted", messages=[{"role": "user", "content": "weather?"}], tools=[tool]
    )
    calls = reply.message.tool_calls or []
    assert [c.function.name for c in calls] == ["get_weather", "get_time"]
    assert calls[0].function.arguments == {"city": "Paris"}
    assert scripted.requests[-1].tools[0].name == "get_weather"


def test_thinking_is_returned_separately(client: ollama.Client, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(thinking=["let me ", "think"], text=["42"]))
    reply = client.chat(model="scripted", messages=[{"role": "user", "content": "?"}], think=True)
    assert reply.message.thinking == "let me think"
    assert reply.message.content == "42"


def test_generate(client: ollama.Client, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["Par", "is"]))
    reply = client.generate(model="scripted", prompt="Capital of France?", system="terse")
    assert reply.response == "Paris"
    assert reply.done is True
    seen = scripted.requests[-1]
    assert [m.role for m in seen.messages] == ["system", "user"]
    scripted.enqueue(Script(text=["a", "b"]))
    parts = [c.response for c in client.generate(model="scripted", prompt="x", stream=True)]
    assert "".join(parts) == "ab"


def test_empty_generate_loads_the_model(client: ollama.Client) -> None:
    reply = client.generate(model="scripted", prompt="")
    assert reply.done is True
    assert reply.done_reason == "load"


def test_tags_show_ps_version(client: ollama.Client, gateway: RunningServer) -> None:
    names = [m.model for m in client.list().models]
    assert "scripted" in names and "other" in names
    shown = client.show("scripted")
    assert "completion" in (shown.capabilities or [])
    assert "tools" in (shown.capabilities or [])
    client.ps()  # answers with a (possibly empty) list
    version = httpx.get(f"{gateway.url}/api/version").json()
    # Codex CLI's --oss mode refuses an Ollama below 0.13.4 (the first with /v1/responses).
    assert tuple(int(x) for x in version["version"].split(".")) >= (0, 13, 4)


def test_embed(client: ollama.Client) -> None:
    result = client.embed(model="scripted", input=["alpha", "beta"])
    assert len(result.embeddings) == 2
    assert result.embeddings[0] != result.embeddings[1]


def test_root_answers_get_and_head(gateway: RunningServer) -> None:
    assert httpx.get(gateway.url + "/").text == "Ollama is running"
    assert httpx.head(gateway.url + "/").status_code == 200

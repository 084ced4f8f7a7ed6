"""The OpenAI API, through the official ``openai`` client, over a scripted backend."""

from __future__ import annotations

import json

import openai
import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from tests.conftest import RunningServer, openai_client


@pytest.fixture
def client(gateway: RunningServer) -> openai.OpenAI:
    return openai_client(gateway.url, "x")


def test_chat_completion(client: openai.OpenAI, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["Hello", " there"]))
    reply = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}], max_tokens=5
    )
    assert reply.choices[0].message.content == "Hello there"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.model == "gpt-4o"
    assert reply.usage is not None and reply.usage.total_tokens > 0
    assert scripted.requests[-1].params.max_tokens == 5


def test_streaming_with_usage(client: openai.OpenAI, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["a", "b", "c"]))
    stream = client.chat.completions.create(
        model="scripted",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "abc"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop"


def test_streaming_without_usage_sends_no_usage_chunk(
    client: openai.OpenAI, scripted: ScriptedBackend
) -> None:
    chunks = list(
        client.chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert all(c.choices for c in chunks)


def test_tool_calls_streamed(client: openai.OpenAI, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=[], tool_calls=[("lookup", {"q": "x"}), ("lookup", {"q": "y"})]))
    tools = [
        {
            "type": "function",
            "function": {"name": "lookup", "parameters": {"type": "object"}},
        }
    ]
    stream = client.chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "?"}], tools=tools, stream=True
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                entry = calls.setdefault(delta.index, {"id": "", "name": "", "args": ""})
                if delta.id:
                    entry["id"] = delta.id
                if delta.function and delta.function.name:
                    entry["name"] = delta.function.name
                if delta.function and delta.function.arguments:
                    entry["args"] += delta.function.arguments
    assert finish == "tool_calls"
    assert [json.loads(c["args"]) for c in calls.values()] == [{"q": "x"}, {"q": "y"}]
    assert len({c["id"] for c in calls.values()}) == 2


def test_non_streaming_tool_calls(client: openai.OpenAI, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=[], tool_calls=[("lookup", {"q": "x"})]))
    reply = client.chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "?"}]
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    call = choice.message.tool_calls[0]
    assert call.function.name == "lookup"
    assert json.loads(call.function.arguments) == {"q": "x"}


def test_models(client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert "scripted" in ids
    assert client.models.retrieve("scripted").id == "scripted"


def test_embeddings(client: openai.OpenAI) -> None:
    result = client.embeddings.create(model="scripted", input=["alpha", "beta"])
    assert [d.index for d in result.data] == [0, 1]
    assert len(result.data[0].embedding) > 0

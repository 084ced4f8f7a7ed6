"""Tool calls from a backend without tools, through every dialect's official client."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.messages import ToolResultPart
from tests.conftest import (
    RunningServer,
    anthropic_client,
    ollama_client,
    openai_client,
    running_gateway,
)

DECISION = '{"action": "tool_call", "tool_name": "get_weather", "arguments": {"city": "Paris"}}'
WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
OPENAI_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": WEATHER["description"],
        "parameters": WEATHER["input_schema"],
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def toolless() -> ScriptedBackend:
    return ScriptedBackend("toolless", models=("tiny",), capabilities=frozenset({"completion"}))


@pytest.fixture(scope="module")
def gateway(toolless: ScriptedBackend) -> Iterator[RunningServer]:  # type: ignore[override]
    with running_gateway({"toolless": toolless}) as server:
        yield server


def test_anthropic_client_gets_a_real_tool_use(
    gateway: RunningServer, toolless: ScriptedBackend
) -> None:
    toolless.enqueue(Script(text=[DECISION]))
    raw = anthropic_client(gateway.url).messages.with_raw_response.create(
        model="tiny", max_tokens=64, messages=ASK, tools=[WEATHER]
    )
    reply = raw.parse()
    assert raw.headers["x-llmbridge-tools"] == "emulated"
    assert reply.stop_reason == "tool_use"
    block = reply.content[0]
    assert block.type == "tool_use" and block.name == "get_weather"
    assert block.input == {"city": "Paris"}
    sent = toolless.requests[-1]
    assert sent.tools == ()  # the backend got the decision prompt, not tools
    assert "get_weather" in sent.messages[-1].text


def test_openai_client_streams_a_real_tool_call(
    gateway: RunningServer, toolless: ScriptedBackend
) -> None:
    toolless.enqueue(Script(text=["```json\n", DECISION, "\n```"]))
    chunks = list(
        openai_client(gateway.url).chat.completions.create(
            model="tiny", messages=ASK, tools=[OPENAI_TOOL], stream=True
        )
    )
    calls = [d for c in chunks for d in (c.choices[0].delta.tool_calls or []) if c.choices]
    arguments = "".join(d.function.arguments or "" for d in calls if d.function)
    assert calls[0].function is not None and calls[0].function.name == "get_weather"
    assert json.loads(arguments) == {"city": "Paris"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_ollama_conversation_call_result_then_answer(
    gateway: RunningServer, toolless: ScriptedBackend
) -> None:
    client = ollama_client(gateway.url)
    toolless.enqueue(Script(text=[DECISION]))
    first = client.chat(model="tiny", messages=ASK, tools=[OPENAI_TOOL])
    calls = first.message.tool_calls or []
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    toolless.enqueue(Script(text=['{"action": "answer", "content": "Sunny, 21 °C in Paris."}']))
    history = [
        *ASK,
        {"role": "assistant", "content": "", "tool_calls": [c.model_dump() for c in calls]},
        {"role": "tool", "content": "Sunny, 21 °C", "tool_name": "get_weather"},
    ]
    answer = client.chat(model="tiny", messages=history, tools=[OPENAI_TOOL])
    assert answer.message.content == "Sunny, 21 °C in Paris."
    assert not answer.message.tool_calls
    assert "[get_weather result: Sunny, 21 °C]" in toolless.requests[-1].messages[-1].text


def test_unreadable_decision_falls_back_to_an_answer_from_the_tool_result(
    gateway: RunningServer, toolless: ScriptedBackend
) -> None:
    toolless.enqueue(Script(text=["I think the weather is nice"]), Script(text=["It is sunny."]))
    history = [
        *ASK,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "content": "Sunny", "tool_name": "get_weather"},
    ]
    reply = ollama_client(gateway.url).chat(model="tiny", messages=history, tools=[OPENAI_TOOL])
    assert reply.message.content == "It is sunny."
    fallback = toolless.requests[-1]
    assert fallback.tools == ()
    assert any(isinstance(p, ToolResultPart) for m in fallback.messages for p in m.parts)


def test_then_a_plain_chat_reply_and_finally_an_error(
    gateway: RunningServer, toolless: ScriptedBackend
) -> None:
    toolless.enqueue(Script(text=["not json"]), Script(text=["Bonjour !"]))
    reply = ollama_client(gateway.url).chat(
        model="tiny", messages=[{"role": "user", "content": "Salut"}], tools=[OPENAI_TOOL]
    )
    assert reply.message.content == "Bonjour !"
    toolless.enqueue(Script(text=["not json"]), Script(text=["   "]))
    import ollama

    with pytest.raises(ollama.ResponseError) as info:
        ollama_client(gateway.url).chat(
            model="tiny", messages=[{"role": "user", "content": "Salut"}], tools=[OPENAI_TOOL]
        )
    assert info.value.status_code == 502
    # Seed 000's final fallback: the Ollama body also reads as a final frame.
    toolless.enqueue(Script(text=["not json"]), Script(text=["   "]))
    raw = httpx.post(
        f"{gateway.url}/api/chat",
        json={
            "model": "tiny",
            "messages": [{"role": "user", "content": "Salut"}],
            "tools": [OPENAI_TOOL],
            "stream": False,
        },
    )
    assert raw.status_code == 502
    body = raw.json()
    assert body["done"] is True and body["done_reason"] == "error"
    assert body["message"]["content"].startswith("Error: the model gave no usable reply")
    assert body["error"] == body["message"]["content"].removeprefix("Error: ")


@pytest.mark.embedded
def test_the_embedded_model_calls_tools() -> None:
    """Zero configuration: the embedded model, asked with a tool, really calls it."""
    from llmbridge.gateway.app import create_app
    from llmbridge.gateway.config import load_config

    with RunningServer(create_app(load_config(None))) as server:
        reply = anthropic_client(server.url).messages.create(
            model="claude-sonnet-4-6",
            max_tokens=64,
            messages=ASK,
            tools=[WEATHER],
            extra_body={"temperature": 0},
        )
    assert reply.stop_reason == "tool_use"
    block = reply.content[0]
    assert block.type == "tool_use" and block.name == "get_weather"
    assert block.input == {"city": "Paris"}

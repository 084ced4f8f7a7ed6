"""Tool calls from a backend without tools, through every dialect's official client."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.errors import ContextLengthError
from llmbridge.core.messages import ToolResultPart
from llmbridge.features.apology import APOLOGIES
from llmbridge.features.tool_emulation import ANSWER_FROM_RESULTS
from tests.conftest import (
    RunningServer,
    anthropic_client,
    ollama_client,
    openai_client,
    running_gateway,
)
from tests.gateway.agent_loop import DIALECTS, Dialect, run_agent_loop

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


@pytest.fixture(autouse=True)
def _fresh_queue(toolless: ScriptedBackend) -> None:
    toolless.queue.clear()


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


def test_then_a_plain_chat_reply_and_finally_an_apology_in_the_users_language(
    gateway: RunningServer, toolless: ScriptedBackend
) -> None:
    salut = [{"role": "user", "content": "Salut"}]
    toolless.enqueue(Script(text=["not json"]), Script(text=["Bonjour !"]))
    reply = ollama_client(gateway.url).chat(model="tiny", messages=salut, tools=[OPENAI_TOOL])
    assert reply.message.content == "Bonjour !"
    # Seed 000's last resort: a sentence in the user's language, not an error.
    toolless.enqueue(Script(text=["not json"]), Script(text=["   "]))
    reply = ollama_client(gateway.url).chat(model="tiny", messages=salut, tools=[OPENAI_TOOL])
    assert reply.message.content == APOLOGIES["fr"] and reply.done_reason == "stop"
    toolless.enqueue(Script(text=["not json"]), Script(text=["   "]))
    parts = list(
        ollama_client(gateway.url).chat(
            model="tiny",
            messages=[{"role": "user", "content": "客廳的燈是開著的嗎"}],
            tools=[OPENAI_TOOL],
            stream=True,
        )
    )
    assert "".join(p.message.content for p in parts) == APOLOGIES["zh-Hant"]


# -- the agent loop ends ----------------------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS)
def test_an_agent_loop_ends_with_text_when_the_model_repeats_its_call(
    gateway: RunningServer, toolless: ScriptedBackend, dialect: Dialect
) -> None:
    """The reported bug, scripted: after the result the model decides the identical
    call again. The gateway answers from the result instead, within two model calls."""
    toolless.enqueue(
        Script(text=[DECISION]),  # round 1: the call
        Script(text=[DECISION]),  # round 2: the same call again, as the bug report saw
        Script(text=["Sunny, 21 °C in Paris."]),  # the answer from the result
    )
    rounds = run_agent_loop(
        dialect,
        gateway.url,
        model="tiny",
        tool=WEATHER,
        question=ASK[0]["content"],
        run_tool=lambda name, args: "Sunny, 21 °C",
        model_calls=lambda: len(toolless.requests),
    )
    assert [(c[0], c[1]) for c in rounds[0].calls] == [("get_weather", {"city": "Paris"})]
    assert len(rounds) == 2
    assert rounds[1].calls == [] and rounds[1].text == "Sunny, 21 °C in Paris."
    assert rounds[1].model_calls == 2
    answer = toolless.requests[-1]
    assert answer.tools == () and answer.messages[-2].text == ANSWER_FROM_RESULTS
    assert answer.messages[-1].text.startswith("Current date/time: ")  # last: it changes
    decision = toolless.requests[-2].messages[-1].text
    assert '- get_weather {"city":"Paris"} returned: Sunny, 21 °C' in decision


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_decision_that_answers_from_the_result_ends_the_loop_in_one_call(
    gateway: RunningServer, toolless: ScriptedBackend, dialect: Dialect
) -> None:
    answer = '{"action": "answer", "content": "It is sunny."}'
    toolless.enqueue(Script(text=[DECISION]), Script(text=[answer[:20], answer[20:]]))
    rounds = run_agent_loop(
        dialect,
        gateway.url,
        model="tiny",
        tool=WEATHER,
        question=ASK[0]["content"],
        run_tool=lambda name, args: "Sunny",
        model_calls=lambda: len(toolless.requests),
    )
    assert [(r.text, r.model_calls) for r in rounds[1:]] == [("It is sunny.", 1)]


# -- a prompt too long for the model -------------------------------------------------------

TOO_LONG = "the prompt is 9000 tokens but the model's context window is 8192 tokens"


def _post(url: str, dialect: Dialect, tools: bool) -> httpx.Response:
    ask = {"model": "tiny", "messages": ASK}
    if dialect == "ollama":
        body = {**ask, "stream": False, **({"tools": [OPENAI_TOOL]} if tools else {})}
        return httpx.post(f"{url}/api/chat", json=body)
    if dialect == "openai":
        body = {**ask, **({"tools": [OPENAI_TOOL]} if tools else {})}
        return httpx.post(f"{url}/v1/chat/completions", json=body)
    body = {**ask, "max_tokens": 64, **({"tools": [WEATHER]} if tools else {})}
    return httpx.post(f"{url}/v1/messages", json=body)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_an_over_long_prompt_is_the_same_400_with_and_without_tools(
    gateway: RunningServer, toolless: ScriptedBackend, dialect: Dialect
) -> None:
    replies = []
    for tools in (False, True):
        toolless.enqueue(Script(fail_before=ContextLengthError(TOO_LONG)))
        count = len(toolless.requests)
        reply = _post(gateway.url, dialect, tools)
        assert len(toolless.requests) == count + 1  # a caller mistake: never retried
        body = reply.json()
        body.pop("request_id", None)
        replies.append((reply.status_code, body))
    assert replies[0] == replies[1]
    status, body = replies[1]
    assert status == 400
    if dialect == "ollama":
        assert body == {"error": TOO_LONG}
    elif dialect == "openai":
        assert body["error"]["code"] == "context_length_exceeded"
        assert body["error"]["type"] == "invalid_request_error"
        assert body["error"]["message"] == TOO_LONG
    else:
        assert body["error"] == {"type": "invalid_request_error", "message": TOO_LONG}


def test_official_clients_see_the_400_under_emulation(
    gateway: RunningServer, toolless: ScriptedBackend
) -> None:
    import anthropic
    import ollama
    import openai

    toolless.enqueue(Script(fail_before=ContextLengthError(TOO_LONG)))
    with pytest.raises(openai.BadRequestError) as oai:
        openai_client(gateway.url).chat.completions.create(
            model="tiny", messages=ASK, tools=[OPENAI_TOOL]
        )
    assert oai.value.code == "context_length_exceeded"
    toolless.enqueue(Script(fail_before=ContextLengthError(TOO_LONG)))
    with pytest.raises(anthropic.BadRequestError):
        anthropic_client(gateway.url).messages.create(
            model="tiny", max_tokens=64, messages=ASK, tools=[WEATHER]
        )
    toolless.enqueue(Script(fail_before=ContextLengthError(TOO_LONG)))
    with pytest.raises(ollama.ResponseError) as oll:
        ollama_client(gateway.url).chat(model="tiny", messages=ASK, tools=[OPENAI_TOOL])
    assert oll.value.status_code == 400 and oll.value.error == TOO_LONG


@pytest.mark.embedded
def test_the_embedded_model_answers_a_tool_request_with_a_real_tool_use_or_text() -> None:
    """Zero configuration: tools offered to the embedded model are emulated, and the
    reply is a well-formed tool call or text. Which one the 135M model picks depends on
    the CPU and build, so only the protocol is checked (test_agent_loop_embedded.py
    runs the whole loop)."""
    from llmbridge.gateway.app import create_app
    from llmbridge.gateway.config import load_config

    with RunningServer(create_app(load_config(None))) as server:
        raw = anthropic_client(server.url).messages.with_raw_response.create(
            model="claude-sonnet-4-6",
            max_tokens=64,
            messages=ASK,
            tools=[WEATHER],
            extra_body={"temperature": 0},
        )
    reply = raw.parse()
    assert raw.headers["x-llmbridge-tools"] == "emulated"
    if reply.stop_reason == "tool_use":
        block = reply.content[-1]
        assert block.type == "tool_use" and block.name in ("get_weather", "unknown")
        assert isinstance(block.input, dict)
    else:
        assert reply.stop_reason in ("end_turn", "max_tokens")
        assert "".join(b.text for b in reply.content if b.type == "text").strip()

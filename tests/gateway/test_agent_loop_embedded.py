"""Agent loops on the real embedded model: zero configuration (what ``make run`` serves),
tools emulated, each dialect's official client.

What a 135M model writes changes with the CPU and the llama.cpp build, so nothing
here depends on it. The tests check the protocol, which the gateway guarantees
whatever the model writes: an agent loop ends with a non-empty text reply; a call
whose result is in is never asked for again; no request costs more than two model
calls; a prompt too long for the model is a 400 in the caller's dialect. Exact
decision paths are tested on the scripted backend (test_tool_emulation.py).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from llmbridge.core.events import StreamEvent
from llmbridge.core.request import ChatRequest
from llmbridge.gateway.app import create_app
from llmbridge.gateway.config import load_config
from llmbridge.serving.build import build_backends
from tests.conftest import RunningServer
from tests.gateway.agent_loop import DIALECTS, Dialect, Round, run_agent_loop

pytestmark = pytest.mark.embedded

MODEL = "llama3.2"  # zero configuration serves any name with the embedded model
CLOCK = {
    "name": "get_time",
    "description": "The current time on the server clock",
    # No parameters, and no others allowed: every call the model can make to it is
    # the same call, so the loop's end does not depend on what the model writes.
    "input_schema": {"type": "object", "properties": {}, "additionalProperties": False},
}
WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


class Counted:
    """Counts the model calls the gateway makes (a wrapper around ``backend.chat``)."""

    def __init__(self) -> None:
        self.calls = 0

    def wrap(self, chat: Any) -> Any:
        async def counted(request: ChatRequest) -> AsyncIterator[StreamEvent]:
            self.calls += 1
            async for event in chat(request):
                yield event

        return counted


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[RunningServer, Counted]]:
    config = load_config(None)
    backends = build_backends(config, config.server.serving_host())
    counter = Counted()
    for backend in backends.values():
        backend.chat = counter.wrap(backend.chat)  # type: ignore[method-assign]
    with RunningServer(create_app(config, backends=backends)) as server:
        yield server, counter


def run_tool(name: str, arguments: dict[str, Any]) -> str:
    if name == "get_time":
        return "14:30"
    if name == "get_weather":
        return "Sunny, 21 °C"
    return f"error: there is no tool named {name}"


def assert_ends_properly(rounds: list[Round]) -> None:
    """The loop ended with non-empty text; no round asked again for a call whose
    result it had; no request took more than two model calls."""
    assert rounds[-1].calls == [] and rounds[-1].text.strip(), rounds
    answered: list[tuple[str, dict[str, Any]]] = []
    for number, round_ in enumerate(rounds):
        assert round_.model_calls <= 2, rounds
        made = [(name, args) for name, args, _ in round_.calls]
        assert not any(call in answered for call in made), f"round {number} repeated a call"
        answered += made
        if ("get_time", {}) in answered and number + 1 < len(rounds):
            # once the real tool's result is in, the next reply is the answer
            assert rounds[number + 1].calls == [], rounds


@pytest.mark.parametrize("dialect", DIALECTS)
def test_an_agent_loop_ends_with_text(
    served: tuple[RunningServer, Counted], dialect: Dialect
) -> None:
    server, counter = served
    rounds = run_agent_loop(
        dialect,
        server.url,
        model=MODEL,
        tool=CLOCK,
        question="What time is it?",
        run_tool=run_tool,
        model_calls=lambda: counter.calls,
    )
    assert_ends_properly(rounds)
    # At most two tools can be called (get_time, or an invented "unknown"), each once.
    assert len(rounds) <= 3


@pytest.mark.parametrize("dialect", DIALECTS)
def test_after_the_tool_result_the_reply_is_text_within_two_model_calls(
    served: tuple[RunningServer, Counted], dialect: Dialect
) -> None:
    server, counter = served
    rounds = run_agent_loop(
        dialect,
        server.url,
        model=MODEL,
        tool=CLOCK,
        question="What time is it?",
        first_call=("get_time", {}, "call_1"),
        run_tool=run_tool,
        model_calls=lambda: counter.calls,
    )
    assert len(rounds) == 1
    assert_ends_properly(rounds)


def test_the_reported_repro_never_repeats_the_call(served: tuple[RunningServer, Counted]) -> None:
    """The issue, by hand: ask for the weather, get ``get_weather(city=Paris)``, send its
    result. The next reply is not that call again, and costs at most two model calls."""
    server, counter = served
    rounds = run_agent_loop(
        "ollama",
        server.url,
        model=MODEL,
        tool=WEATHER,
        question="What is the weather in Paris?",
        first_call=("get_weather", {"city": "Paris"}, ""),
        run_tool=run_tool,
        model_calls=lambda: counter.calls,
        max_rounds=1,
    )
    reply = rounds[0]
    assert ("get_weather", {"city": "Paris"}) not in [(n, a) for n, a, _ in reply.calls]
    assert reply.calls or reply.text.strip()
    assert reply.model_calls <= 2


def _post(url: str, dialect: Dialect, words: str, tools: bool) -> httpx.Response:
    messages = [{"role": "user", "content": words}]
    tool = {
        "type": "function",
        "function": {"name": "get_time", "parameters": CLOCK["input_schema"]},
    }
    if dialect == "ollama":
        body: dict[str, Any] = {"model": MODEL, "messages": messages, "stream": False}
        path, tools_field = "/api/chat", [tool]
    elif dialect == "openai":
        body, path, tools_field = (
            {"model": MODEL, "messages": messages},
            "/v1/chat/completions",
            [tool],
        )
    else:
        body = {"model": MODEL, "messages": messages, "max_tokens": 16}
        path, tools_field = "/v1/messages", [CLOCK]
    if tools:
        body["tools"] = tools_field
    return httpx.post(url + path, json=body, timeout=120)


def _error(dialect: Dialect, body: dict[str, Any]) -> tuple[str | None, str]:
    """The error's type (or code) and its message with the token counts blanked (they
    differ: the tool decision's prompt is not the conversation's)."""
    if dialect == "ollama":
        kind, message = None, body["error"]
    elif dialect == "openai":
        kind, message = body["error"]["code"], body["error"]["message"]
    else:
        kind, message = body["error"]["type"], body["error"]["message"]
    return kind, re.sub(r"\d+", "N", message)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_an_over_long_prompt_with_tools_is_a_400_in_the_callers_dialect(
    served: tuple[RunningServer, Counted], dialect: Dialect
) -> None:
    server, counter = served
    words = "word " * 12_000  # past the embedded model's 8192-token context
    before = counter.calls
    plain = _post(server.url, dialect, words, tools=False)
    emulated = _post(server.url, dialect, words, tools=True)
    assert plain.status_code == emulated.status_code == 400
    assert emulated.headers["x-llmbridge-tools"] == "emulated"
    assert _error(dialect, emulated.json()) == _error(dialect, plain.json())
    expected = {"ollama": None, "openai": "context_length_exceeded"}
    assert _error(dialect, emulated.json())[0] == expected.get(dialect, "invalid_request_error")
    assert counter.calls - before == 2  # one each: a caller mistake is not retried

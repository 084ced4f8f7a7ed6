"""Tool calls on the Responses front, emulated and healed as on the other fronts.

Through the official ``openai`` client's ``responses.create`` and ``responses.stream``
(whose accumulator checks the event grammar):

- a backend model without native tools (capabilities lack ``tools``) is asked for one
  JSON decision (features/tool_emulation.py); the decision becomes a ``function_call``
  item, or a ``custom_tool_call`` item for Codex's freeform ``apply_patch``, and the
  reply says ``x-llmbridge-tools: emulated``; the call's output sent back is answered;
- a backend with native tools whose arguments arrive broken (doubly escaped, double
  encoded, Python-ish, a bare string for a custom tool) is healed against the tool's
  schema (features/tool_healing.py) before the item reaches the client, as
  tests/gateway/test_http_backends.py and tests/features/test_tool_healing_dialects.py
  prove it for the chat fronts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import orjson
import pytest

from llmbridge.backends.openai_compat import OpenAICompatBackend
from llmbridge.backends.scripted import Script, ScriptedBackend
from tests.conftest import RunningServer, openai_client, running_gateway
from tests.upstream import Canned, FakeUpstream

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Use the `apply_patch` tool to edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch hunk+"},
}
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch\n"
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def decision(tool_name: str, arguments: dict[str, Any]) -> str:
    """The emulation's JSON decision for a tool call, as a tool-less model writes it."""
    return json.dumps({"action": "tool_call", "tool_name": tool_name, "arguments": arguments})


def streamed(client: openai.OpenAI, **kwargs: Any) -> tuple[list[Any], Any]:
    """The events of ``responses.stream`` and its accumulated final response."""
    with client.responses.stream(**kwargs) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [e.sequence_number for e in events] == list(range(len(events)))
    return events, final


# -- emulation: a backend model without tools -------------------------------------------


@pytest.fixture(scope="module")
def toolless() -> ScriptedBackend:
    return ScriptedBackend("toolless", models=("tiny",), capabilities=frozenset({"completion"}))


@pytest.fixture(autouse=True)
def _fresh_queue(toolless: ScriptedBackend) -> None:
    toolless.queue.clear()


@pytest.fixture(scope="module")
def emulating(toolless: ScriptedBackend) -> Iterator[RunningServer]:
    with running_gateway({"toolless": toolless}) as server:
        yield server


def test_emulated_function_call(emulating: RunningServer, toolless: ScriptedBackend) -> None:
    toolless.enqueue(Script(text=[decision("get_weather", {"city": "Paris"})]))
    raw = openai_client(emulating.url).responses.with_raw_response.create(
        model="tiny", input=ASK, tools=[WEATHER]
    )
    assert raw.headers["x-llmbridge-tools"] == "emulated"
    reply = raw.parse()
    assert reply.status == "completed"
    [call] = reply.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"}
    assert call.call_id
    sent = toolless.requests[-1]
    assert sent.tools == ()  # the backend got the decision prompt, not tools
    assert "get_weather" in sent.messages[-1].text


def test_emulated_function_call_streamed(
    emulating: RunningServer, toolless: ScriptedBackend
) -> None:
    text = decision("get_weather", {"city": "Paris"})
    toolless.enqueue(Script(text=["```json\n", text[:25], text[25:], "\n```"]))
    events, final = streamed(openai_client(emulating.url), model="tiny", input=ASK, tools=[WEATHER])
    [call] = final.output
    assert (call.type, call.name) == ("function_call", "get_weather")
    assert json.loads(call.arguments) == {"city": "Paris"}
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert [json.loads(e.arguments) for e in done] == [{"city": "Paris"}]
    assert events[-1].type == "response.completed"
    assert not [e for e in events if e.type == "response.output_text.delta"]


def test_emulated_stream_says_so_in_its_headers(
    emulating: RunningServer, toolless: ScriptedBackend
) -> None:
    toolless.enqueue(Script(text=[decision("get_weather", {"city": "Paris"})]))
    client = openai_client(emulating.url)
    with client.responses.with_streaming_response.create(
        model="tiny", input=ASK, tools=[WEATHER], stream=True
    ) as raw:
        assert raw.headers["x-llmbridge-tools"] == "emulated"
        kinds = [e.type for e in raw.parse()]
    assert kinds[-1] == "response.completed"
    assert "response.function_call_arguments.done" in kinds


def test_emulated_custom_tool_call(emulating: RunningServer, toolless: ScriptedBackend) -> None:
    """Codex's ``apply_patch``: the decision's one string argument is the item's input."""
    toolless.enqueue(Script(text=[decision("apply_patch", {"input": PATCH})]))
    client = openai_client(emulating.url)
    events, final = streamed(
        client, model="tiny", input="add hello.txt", tools=[APPLY_PATCH, WEATHER]
    )
    [call] = final.output
    assert call.type == "custom_tool_call"
    assert (call.name, call.input) == ("apply_patch", PATCH)
    inputs = [e.input for e in events if e.type == "response.custom_tool_call_input.done"]
    assert inputs == [PATCH]
    prompt = toolless.requests[-1].messages[-1].text
    assert "apply_patch" in prompt and "start: begin_patch hunk+" in prompt
    toolless.enqueue(Script(text=[decision("apply_patch", {"input": PATCH})]))
    raw = client.responses.with_raw_response.create(
        model="tiny", input="add hello.txt", tools=[APPLY_PATCH]
    )
    assert raw.headers["x-llmbridge-tools"] == "emulated"
    [item] = raw.parse().output
    assert (item.type, item.name, item.input) == ("custom_tool_call", "apply_patch", PATCH)


def test_emulated_round_trip(emulating: RunningServer, toolless: ScriptedBackend) -> None:
    """The call's output sent back: the emulation answers from it, in one model call."""
    client = openai_client(emulating.url)
    toolless.enqueue(Script(text=[decision("get_weather", {"city": "Paris"})]))
    [call] = client.responses.create(model="tiny", input=ASK, tools=[WEATHER]).output
    answer = json.dumps({"action": "answer", "content": "Sunny, 21 °C in Paris."})
    toolless.enqueue(Script(text=[answer[:30], answer[30:]]))
    before = len(toolless.requests)
    history = [
        *ASK,
        call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 °C"},
    ]
    events, final = streamed(client, model="tiny", input=history, tools=[WEATHER])
    assert final.output_text == "Sunny, 21 °C in Paris."
    assert [item.type for item in final.output] == ["message"]
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == "Sunny, 21 °C in Paris."
    assert len(toolless.requests) == before + 1
    prompt = toolless.requests[-1].messages[-1].text
    assert '- get_weather {"city":"Paris"} returned: Sunny, 21 °C' in prompt


def test_emulated_custom_tool_round_trip(
    emulating: RunningServer, toolless: ScriptedBackend
) -> None:
    client = openai_client(emulating.url)
    toolless.enqueue(Script(text=[decision("apply_patch", {"input": PATCH})]))
    [call] = client.responses.create(
        model="tiny", input="add hello.txt", tools=[APPLY_PATCH]
    ).output
    toolless.enqueue(Script(text=['{"action": "answer", "content": "Added hello.txt."}']))
    reply = client.responses.create(
        model="tiny",
        tools=[APPLY_PATCH],
        input=[
            {"role": "user", "content": "add hello.txt"},
            call.model_dump(exclude_none=True),
            {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Done!"},
        ],
    )
    assert reply.output_text == "Added hello.txt."
    prompt = toolless.requests[-1].messages[-1].text
    assert "returned: Done!" in prompt


# -- healing: a backend with native tools and broken arguments ---------------------------


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[FakeUpstream, RunningServer]]:
    fake = FakeUpstream()
    with RunningServer(fake.app) as server:
        yield fake, server


@pytest.fixture(scope="module")
def healing(upstream: tuple[FakeUpstream, RunningServer]) -> Iterator[RunningServer]:
    _, up = upstream
    with running_gateway({"vllm": OpenAICompatBackend("vllm", up.url)}) as server:
        yield server


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


def _call(call_id: str | None, name: str | None, arguments: str) -> dict[str, Any]:
    """A tool-call fragment; every call claims index 0, as small models' servers send."""
    entry: dict[str, Any] = {"index": 0, "function": {"arguments": arguments}}
    if call_id:
        entry |= {"id": call_id, "type": "function"}
        entry["function"]["name"] = name
    return {"tool_calls": [entry]}


SHELL = {
    "type": "function",
    "name": "shell",
    "parameters": {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}
READ = {"type": "function", "name": "read", "parameters": {"type": "object", "properties": {}}}


def _broken_calls() -> list[bytes]:
    """Doubly-escaped fragments, double-encoded JSON, a Python-ish object, and a custom
    tool's input written as a JSON string, as the patch itself, or under another name,
    instead of ``{"input": ...}``."""
    double_encoded = orjson.dumps('{"path": "/tmp/a b"}').decode()
    return [
        _chunk({"role": "assistant", "content": ""}),
        _chunk(_call("call_1", "shell", '{\\"comm')),
        _chunk(_call(None, None, 'and\\":\\"ls\\"}')),
        _chunk(_call("call_2", "read", double_encoded[:9])),
        _chunk(_call(None, None, double_encoded[9:])),
        _chunk(_call("call_3", "shell", "{command: \"echo 'hi'\"")),
        _chunk(_call("call_4", "apply_patch", orjson.dumps(PATCH).decode())),
        _chunk(_call("call_5", "apply_patch", PATCH[:20])),
        _chunk(_call(None, None, PATCH[20:])),
        _chunk(_call("call_6", "apply_patch", orjson.dumps({"patch": PATCH}).decode())),
        _chunk({}, "tool_calls"),
        b"data: [DONE]\n\n",
    ]


def _whole(frames: list[bytes]) -> Canned:
    """The reply ``frames`` stream, sent whole (a request the client wants whole asks
    the backend for a whole reply): the same calls, each fragment after a call's id
    appended to that call's arguments."""
    calls: list[dict[str, Any]] = []
    content, finish = "", None
    for frame in frames:
        payload = frame.removeprefix(b"data: ").strip()
        if payload == b"[DONE]":
            continue
        choice = orjson.loads(payload)["choices"][0]
        finish = choice["finish_reason"] or finish
        delta = choice["delta"]
        content += delta.get("content") or ""
        for call in delta.get("tool_calls", []):
            if call.get("id"):
                calls.append({"id": call["id"], "type": "function", "function": {}})
                calls[-1]["function"] = {"name": call["function"]["name"], "arguments": ""}
            calls[-1]["function"]["arguments"] += call["function"]["arguments"]
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = calls
    reply = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000}
    reply |= {"model": "m", "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
    return Canned(chunks=[orjson.dumps(reply)], media_type="application/json")


HEALED = [
    ("function_call", "shell", {"command": "ls"}),
    ("function_call", "read", {"path": "/tmp/a b"}),
    ("function_call", "shell", {"command": "echo 'hi'"}),
    *[("custom_tool_call", "apply_patch", PATCH)] * 3,
]


def _calls(output: list[Any]) -> list[tuple[str, str, Any]]:
    return [
        (item.type, item.name, item.input)
        if item.type == "custom_tool_call"
        else (item.type, item.name, json.loads(item.arguments))
        for item in output
    ]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "create"])
def test_broken_arguments_are_healed(
    healing: RunningServer, upstream: tuple[FakeUpstream, RunningServer], stream: bool
) -> None:
    fake, _ = upstream
    broken = _broken_calls()
    fake.queue.append(
        Canned(chunks=broken, media_type="text/event-stream") if stream else _whole(broken)
    )
    client = openai_client(healing.url)
    options: dict[str, Any] = {
        "model": "m",
        "input": "list, read, patch",
        "tools": [SHELL, READ, APPLY_PATCH],
    }
    if stream:
        events, final = streamed(client, **options)
        done = [
            json.loads(e.arguments)
            for e in events
            if e.type == "response.function_call_arguments.done"
        ]
        assert done == [arguments for _, _, arguments in HEALED[:3]]
        inputs = [e.input for e in events if e.type == "response.custom_tool_call_input.done"]
        assert inputs == [PATCH] * 3
    else:
        final = client.responses.create(**options)
    assert _calls(final.output) == HEALED
    assert final.status == "completed"
    sent = orjson.loads(fake.bodies[-1])
    assert [t["function"]["name"] for t in sent["tools"]] == ["shell", "read", "apply_patch"]


def test_healed_calls_round_trip(
    healing: RunningServer, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    """What the client sends back is the healed call, so the backend sees it too."""
    fake, _ = upstream
    fake.queue.append(_whole(_broken_calls()))
    client = openai_client(healing.url)
    tools: list[Any] = [SHELL, READ, APPLY_PATCH]
    first = client.responses.create(model="m", input="go", tools=tools)
    outputs = [
        {
            "type": f"{item.type}_output",
            "call_id": item.call_id,
            "output": f"result {number}",
        }
        for number, item in enumerate(first.output)
    ]
    answer = [_chunk({"role": "assistant", "content": "done"}), _chunk({}, "stop")]
    fake.queue.append(_whole([*answer, b"data: [DONE]\n\n"]))
    reply = client.responses.create(
        model="m",
        tools=tools,
        input=[
            {"role": "user", "content": "go"},
            *(item.model_dump(exclude_none=True) for item in first.output),
            *outputs,
        ],
    )
    assert reply.output_text == "done"
    sent = orjson.loads(fake.bodies[-1])
    assistant = next(m for m in sent["messages"] if m["role"] == "assistant")
    calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in assistant["tool_calls"]
    ]
    assert calls == [
        ("shell", {"command": "ls"}),
        ("read", {"path": "/tmp/a b"}),
        ("shell", {"command": "echo 'hi'"}),
        *[("apply_patch", {"input": PATCH})] * 3,
    ]
    results = [(m["tool_call_id"], m["content"]) for m in sent["messages"] if m["role"] == "tool"]
    assert results == [(item.call_id, f"result {n}") for n, item in enumerate(first.output)]

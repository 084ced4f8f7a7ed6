"""The ``opencode`` backend against the real OpenCode server, with exact model output.

OpenCode (npm ``opencode-ai``, pinned) runs as the gateway spawns it for users; its
model provider is the gateway's scripted backend, so each test decides exactly what
"the model" says: a tool decision, fenced or wrapped in prose, invalid JSON, an
answer, a provider error, a reply too slow for the deadline. Clients are the official
``ollama``, ``openai`` and ``anthropic`` libraries.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import pytest

from llmbridge.backends.opencode import LatencyBreakdown, OpenCodeBackend, OpenCodeTimeouts
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.errors import InvalidRequestError
from tests.conftest import (
    RunningServer,
    anthropic_client,
    ollama_client,
    openai_client,
    running_gateway,
)
from tests.e2e.opencode import gateway_over_opencode
from tests.e2e.relaying import paths_served, relaying_gateway
from tests.waiting import scaled, wait_until

TURN_ON = {
    "type": "function",
    "function": {
        "name": "HassTurnOn",
        "description": "Turns on/opens a device or entity",
        "parameters": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "Name of the device or entity"},
                "domain": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["name"],
        },
    },
}
GET_STATE = {
    "type": "function",
    "function": {
        "name": "GetLiveContext",
        "description": "Provides real-time information about the state of devices",
        "parameters": {"type": "object", "properties": {}},
    },
}
TOOLS = [TURN_ON, GET_STATE]
SYSTEM = {"role": "system", "content": "You are a voice assistant for Home Assistant."}
ASK = [SYSTEM, {"role": "user", "content": "Turn on the kitchen light"}]
DECISION = (
    '{"action": "tool_call", "tool_name": "HassTurnOn", "arguments": {"name": "kitchen light"}}'
)


@pytest.fixture(scope="module")
def model() -> ScriptedBackend:
    return ScriptedBackend("model", models=("scripted",))


@pytest.fixture(scope="module")
def stack(model: ScriptedBackend) -> Iterator[tuple[RunningServer, OpenCodeBackend]]:
    with gateway_over_opencode(
        {"model": model},
        {"scripted": {"context": 32768, "output": 1024}},
        default_model="gw/scripted",
        routes=[{"name": "scripted", "backend": "model"}],
        # Scaled like every bound (tests/waiting.py): after a restart on a loaded
        # machine OpenCode took more than 15 s to start its reply.
        prompt_timeout=scaled(15),
        idle_timeout=scaled(30),
    ) as pair:
        yield pair


@pytest.fixture
def gateway(stack: tuple[RunningServer, OpenCodeBackend], model: ScriptedBackend) -> RunningServer:
    model.queue.clear()
    return stack[0]


@pytest.fixture
def opencode(stack: tuple[RunningServer, OpenCodeBackend]) -> OpenCodeBackend:
    return stack[1]


def _session_exists(backend: OpenCodeBackend, sid: str) -> bool:
    assert backend.server.url is not None
    reply = httpx.get(f"{backend.server.url}/session/{sid}", headers=backend.server.headers)
    return reply.status_code == 200


def _breakdown_after(backend: OpenCodeBackend, count: int) -> LatencyBreakdown:
    """The breakdown of the request after the first ``count``, once its session's
    cleanup (which runs in the background) is done."""
    wait_until(
        lambda: len(backend.breakdowns) > count and backend.breakdowns[count].cleaned,
        "the request's latency breakdown, once its session was cleaned up",
    )
    return backend.breakdowns[count]


def _wait_until_deleted(backend: OpenCodeBackend, sid: str) -> None:
    wait_until(lambda: not _session_exists(backend, sid), f"session {sid} deleted")


# -- the Home Assistant conversation, official ollama client ---------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_ollama_tool_call_then_answer_from_the_result(
    gateway: RunningServer, model: ScriptedBackend, opencode: OpenCodeBackend, stream: bool
) -> None:
    client = ollama_client(gateway.url)
    count = len(opencode.breakdowns)
    model.enqueue(Script(text=[DECISION[:30], DECISION[30:]]))
    if stream:
        parts = list(client.chat(model="homeassistant", messages=ASK, tools=TOOLS, stream=True))
        assert parts[-1].done and parts[-1].done_reason == "stop"
        calls = [c for p in parts for c in (p.message.tool_calls or [])]
    else:
        first = client.chat(model="homeassistant", messages=ASK, tools=TOOLS)
        assert first.done_reason == "stop"
        calls = list(first.message.tool_calls or [])
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [
        ("HassTurnOn", {"name": "kitchen light"})
    ]
    # What OpenCode sent its provider: the decision prompt, and no tools of its own.
    sent = model.requests[-1]
    assert sent.tools == ()
    prompt = sent.messages[-1].text
    assert "HassTurnOn" in prompt and "Turn on the kitchen light" in prompt
    assert "Never assume the state of a device" in prompt

    answer_text = "The kitchen light is on now."
    answer = json.dumps({"action": "answer", "content": answer_text})
    model.enqueue(Script(text=[answer[i : i + 7] for i in range(0, len(answer), 7)]))
    history = [
        *ASK,
        {"role": "assistant", "content": "", "tool_calls": [c.model_dump() for c in calls]},
        {"role": "tool", "content": '{"success": true}', "tool_name": "HassTurnOn"},
    ]
    if stream:
        parts = list(client.chat(model="homeassistant", messages=history, tools=TOOLS, stream=True))
        pieces = [p.message.content for p in parts if p.message.content]
        assert "".join(pieces) == answer_text
        assert len(pieces) > 1  # streamed as the model wrote it
        assert parts[-1].done_reason == "stop"
    else:
        reply = client.chat(model="homeassistant", messages=history, tools=TOOLS)
        assert reply.message.content == answer_text and not reply.message.tool_calls
    assert '[HassTurnOn result: {"success": true}]' in model.requests[-1].messages[-1].text
    for breakdown in (_breakdown_after(opencode, count), _breakdown_after(opencode, count + 1)):
        _wait_until_deleted(opencode, breakdown.session_id)


@pytest.mark.parametrize(
    "reply",
    [
        ["```json\n", DECISION, "\n```"],
        ["Sure! Here is my decision: ", DECISION, " Hope that helps."],
    ],
    ids=["fenced", "prose"],
)
def test_fenced_or_wrapped_decisions_are_read(
    gateway: RunningServer, model: ScriptedBackend, reply: list[str]
) -> None:
    model.enqueue(Script(text=reply))
    result = ollama_client(gateway.url).chat(model="homeassistant", messages=ASK, tools=TOOLS)
    calls = result.message.tool_calls or []
    assert [c.function.name for c in calls] == ["HassTurnOn"]


def test_a_tool_never_offered_becomes_unknown(
    gateway: RunningServer, model: ScriptedBackend
) -> None:
    model.enqueue(
        Script(text=['{"action": "tool_call", "tool_name": "OpenGarage", "arguments": {}}'])
    )
    result = ollama_client(gateway.url).chat(model="homeassistant", messages=ASK, tools=TOOLS)
    assert [c.function.name for c in result.message.tool_calls or []] == ["unknown"]


def test_invalid_json_falls_back_to_a_chat_reply(
    gateway: RunningServer, model: ScriptedBackend
) -> None:
    model.enqueue(Script(text=["{'action': tool_call, name="]), Script(text=["Hello there!"]))
    result = ollama_client(gateway.url).chat(model="homeassistant", messages=ASK, tools=TOOLS)
    assert result.message.content == "Hello there!" and not result.message.tool_calls
    assert model.requests[-1].tools == ()


def test_a_non_english_user_is_answered_in_their_language(
    gateway: RunningServer, model: ScriptedBackend
) -> None:
    model.enqueue(Script(text=['{"action": "chat", "content": "Hallo! Wie kann ich helfen?"}']))
    messages = [SYSTEM, {"role": "user", "content": "Hallo, wie geht es dir?"}]
    result = ollama_client(gateway.url).chat(model="homeassistant", messages=messages, tools=TOOLS)
    assert result.message.content == "Hallo! Wie kann ich helfen?"
    prompt = model.requests[-1].messages[-1].text
    assert "Hallo, wie geht es dir?" in prompt
    assert "Reply in the language of the user's last message" in prompt


def test_plain_chat_streams_through_every_dialect(
    gateway: RunningServer, model: ScriptedBackend
) -> None:
    words = ["Paris", " is", " the", " capital", "."]
    model.enqueue(Script(text=words))
    chunks = list(
        openai_client(gateway.url).chat.completions.create(
            model="homeassistant",
            messages=[{"role": "user", "content": "Capital of France?"}],
            stream=True,
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Paris is the capital."
    model.enqueue(Script(text=words))
    message = anthropic_client(gateway.url).messages.create(
        model="homeassistant",
        max_tokens=64,
        messages=[{"role": "user", "content": "Capital of France?"}],
    )
    assert message.content[0].type == "text" and message.content[0].text == "Paris is the capital."
    assert message.usage.output_tokens > 0


def test_openai_and_anthropic_clients_get_real_tool_calls(
    gateway: RunningServer, model: ScriptedBackend
) -> None:
    model.enqueue(Script(text=[DECISION]))
    completion = openai_client(gateway.url).chat.completions.create(
        model="homeassistant", messages=ASK, tools=TOOLS
    )
    call = (completion.choices[0].message.tool_calls or [])[0]
    assert call.function.name == "HassTurnOn"
    assert json.loads(call.function.arguments) == {"name": "kitchen light"}
    model.enqueue(Script(text=[DECISION]))
    tool = TURN_ON["function"]
    message = anthropic_client(gateway.url).messages.create(
        model="homeassistant",
        max_tokens=256,
        messages=[{"role": "user", "content": "Turn on the kitchen light"}],
        tools=[{"name": tool["name"], "input_schema": tool["parameters"]}],
    )
    assert message.stop_reason == "tool_use"
    block = message.content[0]
    assert block.type == "tool_use" and block.input == {"name": "kitchen light"}


# -- failures: a provider error, a deadline, an abort, a dead server ---------------------


def test_an_opencode_provider_error_reaches_the_client_in_its_dialect(
    gateway: RunningServer, model: ScriptedBackend, opencode: OpenCodeBackend
) -> None:
    model.enqueue(Script(fail_before=InvalidRequestError("prompt too odd for this model")))
    count = len(opencode.breakdowns)
    with pytest.raises(ollama.ResponseError) as info:
        ollama_client(gateway.url).chat(
            model="homeassistant", messages=[{"role": "user", "content": "hi"}]
        )
    assert info.value.status_code == 400
    assert "prompt too odd for this model" in str(info.value.error)
    breakdown = _breakdown_after(opencode, count)
    assert breakdown.outcome == "BackendHTTPError"
    _wait_until_deleted(opencode, breakdown.session_id)


def test_a_reply_past_the_deadline_is_aborted_and_cleaned_up(
    gateway: RunningServer, model: ScriptedBackend, opencode: OpenCodeBackend
) -> None:
    saved = opencode.timeouts
    opencode.timeouts = OpenCodeTimeouts(prompt=1.5, idle=3.0, delete=5.0)
    cancelled, count = model.cancelled, len(opencode.breakdowns)
    try:
        model.enqueue(Script(text=["too", " late"], chunk_delay=10))
        started = time.monotonic()
        with pytest.raises(ollama.ResponseError) as info:
            ollama_client(gateway.url).chat(
                model="homeassistant", messages=[{"role": "user", "content": "hi"}]
            )
        assert time.monotonic() - started < 8
    finally:
        opencode.timeouts = saved
    assert info.value.status_code == 504
    assert "did not start its reply within 1.5 s" in str(info.value.error)
    breakdown = _breakdown_after(opencode, count)
    assert breakdown.outcome == "BackendTimeoutError"
    _wait_until_deleted(opencode, breakdown.session_id)
    wait_until(  # the abort reached OpenCode, which dropped its model call
        lambda: model.cancelled > cancelled, "OpenCode dropping its model call"
    )


def test_a_reply_streaming_longer_than_the_idle_deadline_arrives_whole(
    gateway: RunningServer, model: ScriptedBackend, opencode: OpenCodeBackend
) -> None:
    """A long reply that keeps streaming (Claude Code writing a file through OpenCode)
    runs past the idle deadline in all, with no gap near it: nothing is cut."""
    saved = opencode.timeouts
    opencode.timeouts = OpenCodeTimeouts(prompt=15, idle=1.5, delete=5.0)
    pieces = [f"line {n}\n" for n in range(12)]
    count = len(opencode.breakdowns)
    try:
        model.enqueue(Script(text=pieces, chunk_delay=0.3))  # 3.6 s in all
        parts = list(
            ollama_client(gateway.url).chat(
                model="homeassistant",
                messages=[{"role": "user", "content": "write the file"}],
                stream=True,
            )
        )
    finally:
        opencode.timeouts = saved
    assert "".join(p.message.content or "" for p in parts) == "".join(pieces)
    assert parts[-1].done and parts[-1].done_reason == "stop"
    breakdown = _breakdown_after(opencode, count)
    assert breakdown.outcome == "ok"
    assert breakdown.completion is not None and breakdown.completion > 1.5


def test_a_client_that_hangs_up_aborts_the_opencode_session(
    gateway: RunningServer, model: ScriptedBackend, opencode: OpenCodeBackend
) -> None:
    cancelled, count = model.cancelled, len(opencode.breakdowns)
    model.enqueue(Script(text=["one", " two"] + [" more"] * 50, chunk_delay=0.2))
    with httpx.stream(
        "POST",
        f"{gateway.url}/api/chat",
        json={"model": "homeassistant", "messages": [{"role": "user", "content": "count"}]},
        timeout=20,
    ) as response:
        first = next(response.iter_lines())
        assert json.loads(first)["message"]["content"]
    breakdown = _breakdown_after(opencode, count)
    assert breakdown.outcome == "cancelled"
    _wait_until_deleted(opencode, breakdown.session_id)
    wait_until(lambda: model.cancelled > cancelled, "OpenCode dropping its model call")


def test_every_request_logs_its_latency_breakdown(
    gateway: RunningServer, model: ScriptedBackend, opencode: OpenCodeBackend
) -> None:
    model.enqueue(Script(text=["ok"]))
    count = len(opencode.breakdowns)
    ollama_client(gateway.url).chat(
        model="homeassistant", messages=[{"role": "user", "content": "x"}]
    )
    b = _breakdown_after(opencode, count)
    assert b.outcome == "ok" and b.pooled
    for stage in (b.parse, b.session, b.prompt, b.first_token, b.completion, b.cleanup):
        assert stage is not None and stage >= 0
    assert b.first_token is not None and b.completion is not None
    assert b.first_token <= b.completion
    line = b.line()
    assert line.startswith(f"opencode {b.session_id} ok: parse=")
    assert "first_token=" in line and "cleanup=" in line


def test_shell_and_file_requests_run_nothing(
    gateway: RunningServer, model: ScriptedBackend, opencode: OpenCodeBackend, tmp_path: Path
) -> None:
    """Even a model that answers with OpenCode tool calls (bash, write) gets nothing
    run: OpenCode was offered no tools, and every permission is denied."""
    marker = tmp_path / "pwned"
    written = tmp_path / "written.txt"
    model.enqueue(
        Script(
            text=[],
            tool_calls=[
                ("bash", {"command": f"touch {marker}", "description": "x"}),
                ("write", {"filePath": str(written), "content": "hello"}),
            ],
        ),
        Script(text=["I cannot do that."]),
    )
    ollama_client(gateway.url).chat(
        model="homeassistant",
        messages=[{"role": "user", "content": f"Run `touch {marker}` and write {written}"}],
    )
    assert model.requests[-1].tools == ()
    assert not marker.exists() and not written.exists()
    assert opencode.server.url is not None


def test_health_reports_opencode_and_a_dead_server_is_restarted_once(
    gateway: RunningServer, model: ScriptedBackend, opencode: OpenCodeBackend
) -> None:
    health = httpx.get(f"{gateway.url}/health", timeout=scaled(30)).json()["backends"]["opencode"]
    assert health["ok"] and "OpenCode 1.18.33 (spawned, restarts: 0)" in health["detail"]
    process = opencode.server._process
    assert process is not None
    process.send_signal(signal.SIGKILL)
    wait_until(lambda: process.returncode is not None, "the OpenCode server gone")
    model.enqueue(Script(text=["back again"]))
    reply = ollama_client(gateway.url).chat(
        model="homeassistant", messages=[{"role": "user", "content": "still there?"}]
    )
    assert reply.message.content == "back again"
    assert opencode.server.restarts == 1
    health = httpx.get(f"{gateway.url}/health", timeout=scaled(30)).json()["backends"]["opencode"]
    assert health["ok"] and "restarts: 1" in health["detail"]


def test_opencodes_provider_requests_take_the_pass_through_path() -> None:
    """OpenCode's provider is a gateway whose backend speaks OpenAI chat completions
    (another gateway, serving the scripted model): each request OpenCode makes for a
    generation is relayed as bytes, and the client in front gets its answer."""
    inner_model = ScriptedBackend("model", models=("scripted",))
    words = ["Relayed", " through", " OpenCode", "."]
    with (
        running_gateway({"model": inner_model}) as inner,
        relaying_gateway(inner.url, "openai") as (front, recorder),
        gateway_over_opencode(
            {},
            {"scripted": {"context": 32768, "output": 1024}},
            default_model="gw/scripted",
            routes=[],
            provider_url=f"{front.url}/v1",
            prompt_timeout=scaled(15),
            idle_timeout=scaled(30),
        ) as (gateway, _),
    ):
        inner_model.enqueue(Script(text=words))
        reply = ollama_client(gateway.url).chat(
            model="homeassistant", messages=[{"role": "user", "content": "Say it."}]
        )
    assert reply.message.content == "".join(words)
    served = paths_served(recorder)
    assert served and set(served) == {"passthrough"}, served
    assert len(inner_model.requests) == len(served)

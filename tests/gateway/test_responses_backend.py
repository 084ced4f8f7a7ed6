"""The openai_responses backend end to end: Ollama and Anthropic clients of llmbridge A,
whose backend speaks the Responses API to llmbridge B's ``/v1/responses`` (a real
Responses server on loopback, over a scripted backend); and a fake upstream for the
faults only an HTTP server can produce."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import ollama
import orjson
import pytest

from llmbridge.backends.openai_responses import OpenAIResponsesBackend
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.messages import ThinkingPart, ToolCallPart, ToolResultPart
from llmbridge.core.response import Usage
from llmbridge.dialects.responses.carried import ITEM_PREFIX
from llmbridge.serving.build import build_backends
from llmbridge.serving.config import ServingConfig
from tests.conftest import RunningServer, anthropic_client, ollama_client, running_gateway
from tests.upstream import Canned, FakeUpstream

STREAMS = Path(__file__).parents[1] / "fixtures" / "streams" / "responses"
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture(scope="module")
def upstream_backend() -> ScriptedBackend:
    return ScriptedBackend("b", models=("gpt-up",))


@pytest.fixture(scope="module")
def gateway(upstream_backend: ScriptedBackend) -> Iterator[RunningServer]:  # type: ignore[override]
    # B requires a key, so every test here also proves A sends it (as a bearer token).
    with running_gateway({"b": upstream_backend}, server={"api_keys": ["sk-b"]}) as b:
        a = OpenAIResponsesBackend("resp", b.url, api_key="sk-b")
        # A reasoning model is named as one: model names say nothing of it here.
        models = [{"name": "gpt-up", "backend": "resp", "thinking": True}]
        with running_gateway({"resp": a}, models=models) as front:
            yield front


@pytest.fixture(autouse=True)
def _reset(upstream_backend: ScriptedBackend) -> None:
    upstream_backend.queue.clear()


def test_ollama_client_streams_text_from_a_responses_server(
    gateway: RunningServer, upstream_backend: ScriptedBackend
) -> None:
    upstream_backend.enqueue(
        Script(text=["Bon", "jour", " 🌍"], usage=Usage(input_tokens=11, output_tokens=3))
    )
    chunks = list(
        ollama_client(gateway.url).chat(
            model="gpt-up",
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "hi"},
            ],
            stream=True,
            options={"temperature": 0.3, "num_predict": 50},
        )
    )
    assert "".join(c.message.content for c in chunks) == "Bonjour 🌍"
    assert chunks[-1].done and chunks[-1].done_reason == "stop"
    assert (chunks[-1].prompt_eval_count, chunks[-1].eval_count) == (11, 3)
    seen = upstream_backend.requests[-1]
    assert seen.model == "gpt-up"
    assert [(m.role, m.text) for m in seen.messages] == [("system", "Be brief."), ("user", "hi")]
    assert (seen.params.temperature, seen.params.max_tokens) == (0.3, 50)


def test_anthropic_client_gets_a_whole_reply(
    gateway: RunningServer, upstream_backend: ScriptedBackend
) -> None:
    upstream_backend.enqueue(
        Script(text=["Hello", " there."], usage=Usage(input_tokens=9, output_tokens=2))
    )
    reply = anthropic_client(gateway.url).messages.create(
        model="gpt-up", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    )
    assert [b.type for b in reply.content] == ["text"]
    assert reply.content[0].text == "Hello there."
    assert reply.stop_reason == "end_turn"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (9, 2)


def test_anthropic_tool_call_round_trip(
    gateway: RunningServer, upstream_backend: ScriptedBackend
) -> None:
    upstream_backend.enqueue(
        Script(text=["Checking."], tool_calls=[("get_weather", {"city": "Paris"})]),
        Script(text=["Sunny in Paris."]),
    )
    client = anthropic_client(gateway.url)
    question = {"role": "user", "content": "Weather in Paris?"}
    with client.messages.stream(
        model="gpt-up", max_tokens=128, tools=[WEATHER], messages=[question]
    ) as stream:
        first = stream.get_final_message()
    assert [b.type for b in first.content] == ["text", "tool_use"]
    call = first.content[1]
    assert call.type == "tool_use" and call.name == "get_weather"
    assert call.input == {"city": "Paris"}
    assert first.stop_reason == "tool_use"
    sent_tools = upstream_backend.requests[-1].tools
    assert [t.name for t in sent_tools] == ["get_weather"]
    assert sent_tools[0].input_schema == WEATHER["input_schema"]

    second = client.messages.create(
        model="gpt-up",
        max_tokens=128,
        tools=[WEATHER],
        messages=[
            question,
            {"role": "assistant", "content": [block.model_dump() for block in first.content]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}],
            },
        ],
    )
    assert second.content[0].type == "text" and second.content[0].text == "Sunny in Paris."
    seen = upstream_backend.requests[-1]
    assert [m.role for m in seen.messages] == ["user", "assistant", "tool"]
    calls = [p for p in seen.messages[1].parts if isinstance(p, ToolCallPart)]
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", {"city": "Paris"})]
    result = seen.messages[2].parts[0]
    assert isinstance(result, ToolResultPart)
    assert (result.tool_call_id, result.content) == (calls[0].id, "sunny")


def test_ollama_tool_call_round_trip(
    gateway: RunningServer, upstream_backend: ScriptedBackend
) -> None:
    upstream_backend.enqueue(
        Script(text=[], tool_calls=[("get_weather", {"city": "Rome"})]),
        Script(text=["Rainy."]),
    )
    client = ollama_client(gateway.url)
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": WEATHER["input_schema"],
        },
    }
    question = {"role": "user", "content": "Weather in Rome?"}
    first = client.chat(model="gpt-up", messages=[question], tools=[tool])
    calls = first.message.tool_calls or []
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "Rome"})
    ]
    second = client.chat(
        model="gpt-up",
        messages=[
            question,
            first.message,
            {"role": "tool", "tool_name": "get_weather", "content": "rainy"},
        ],
        tools=[tool],
    )
    assert second.message.content == "Rainy."
    seen = upstream_backend.requests[-1]
    call = seen.messages[1].tool_calls[0]
    result = seen.messages[2].parts[0]
    assert isinstance(result, ToolResultPart)
    assert (result.tool_call_id, result.content) == (call.id, "rainy")


def test_thinking_is_carried_across_turns_for_the_same_backend(
    gateway: RunningServer, upstream_backend: ScriptedBackend
) -> None:
    upstream_backend.enqueue(
        Script(thinking=["weigh ", "options"], signature="sig-b", text=["Use a set."]),
        Script(text=["Done."]),
    )
    client = anthropic_client(gateway.url)
    question = {"role": "user", "content": "How do I dedupe a list?"}
    thinking = {"type": "enabled", "budget_tokens": 1024}
    with client.messages.stream(
        model="gpt-up", max_tokens=2048, thinking=thinking, messages=[question]
    ) as stream:
        first = stream.get_final_message()
    block = first.content[0]
    assert block.type == "thinking" and block.thinking == "weigh options"
    # B's encrypted reasoning, tagged with the backend that issued it.
    assert block.signature.startswith(ITEM_PREFIX)
    asked = upstream_backend.requests[-1].thinking
    assert asked is not None and asked.enabled  # the effort reached B

    client.messages.create(
        model="gpt-up",
        max_tokens=2048,
        thinking=thinking,
        messages=[
            question,
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": "And keep the order?"},
        ],
    )
    seen = upstream_backend.requests[-1]
    parts = [p for m in seen.messages for p in m.parts if isinstance(p, ThinkingPart)]
    # B got its own reasoning back, signature and all, as it issued it.
    assert [(p.text, p.signature) for p in parts] == [("weigh options", "sig-b")]


def test_thinking_another_backend_made_is_not_sent(
    gateway: RunningServer, upstream_backend: ScriptedBackend
) -> None:
    anthropic_client(gateway.url).messages.create(
        model="gpt-up",
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=[
            {"role": "user", "content": "first"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Claude's", "signature": "EqQBCkYIARgC"},
                    {"type": "text", "text": "An answer."},
                ],
            },
            {"role": "user", "content": "second"},
        ],
    )
    seen = upstream_backend.requests[-1]
    assert not [p for m in seen.messages for p in m.parts if isinstance(p, ThinkingPart)]
    assert [m.text for m in seen.messages] == ["first", "An answer.", "second"]


# -- faults ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake() -> Iterator[tuple[FakeUpstream, RunningServer]]:
    upstream = FakeUpstream()
    with RunningServer(upstream.app) as server:
        backend = OpenAIResponsesBackend("resp", server.url)
        with running_gateway(
            {"resp": backend}, resilience={"retries": 0, "breaker_failures": 0}
        ) as front:
            yield upstream, front


def _stream(name: str) -> Canned:
    return Canned(media_type="text/event-stream", chunks=[(STREAMS / name).read_bytes()])


def test_a_500_before_the_stream_is_an_http_error(
    fake: tuple[FakeUpstream, RunningServer],
) -> None:
    upstream, front = fake
    body = orjson.dumps({"error": {"message": "upstream exploded", "type": "server_error"}})
    upstream.queue.append(Canned(status=500, chunks=[body], media_type="application/json"))
    with pytest.raises(anthropic.APIStatusError, match="upstream exploded") as caught:
        anthropic_client(front.url).messages.create(
            model="gpt-x", max_tokens=32, messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.status_code == 502
    assert upstream.paths[-1] == "/v1/responses"
    sent = orjson.loads(upstream.bodies[-1])
    assert (sent["model"], sent["stream"], sent["store"]) == ("gpt-x", True, False)


def test_a_stream_cut_mid_way_is_an_in_stream_error(
    fake: tuple[FakeUpstream, RunningServer],
) -> None:
    upstream, front = fake
    upstream.queue.append(_stream("truncated.sse"))
    client = anthropic_client(front.url)
    received: list[str] = []
    with (
        pytest.raises(anthropic.APIError, match="ended before"),
        client.messages.stream(
            model="gpt-x", max_tokens=32, messages=[{"role": "user", "content": "hi"}]
        ) as stream,
    ):
        received.extend(stream.text_stream)
    assert "".join(received) == "Half a sent"


def test_response_failed_before_output_is_an_http_error(
    fake: tuple[FakeUpstream, RunningServer],
) -> None:
    upstream, front = fake
    upstream.queue.append(_stream("failed_before_output.sse"))
    with pytest.raises(ollama.ResponseError, match="error while processing") as caught:
        ollama_client(front.url).chat(model="gpt-x", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 502


def test_an_error_event_mid_stream_reaches_the_client_in_its_dialect(
    fake: tuple[FakeUpstream, RunningServer],
) -> None:
    upstream, front = fake
    upstream.queue.append(_stream("error_mid_stream.sse"))
    received: list[str] = []
    with pytest.raises(ollama.ResponseError, match="Rate limit reached"):
        for chunk in ollama_client(front.url).chat(
            model="gpt-x", messages=[{"role": "user", "content": "hi"}], stream=True
        ):
            received.append(chunk.message.content)
    assert "".join(received) == "Partial answer"


def test_models_and_health_come_from_the_servers_model_list(gateway: RunningServer) -> None:
    names = [m.model for m in ollama_client(gateway.url).list().models]
    assert "gpt-up" in names  # B's /v1/models, read through A's backend
    health = httpx.get(f"{gateway.url}/health").json()
    assert health["backends"]["resp"]["ok"] is True


def test_configured_as_type_openai_responses() -> None:
    config = ServingConfig.model_validate(
        {"backends": {"r": {"type": "openai_responses", "url": "http://10.0.0.7:8000"}}}
    )
    backend = build_backends(config)["r"]
    assert isinstance(backend, OpenAIResponsesBackend)
    assert backend.base_url == "http://10.0.0.7:8000/v1"
    assert backend.kind == "openai_responses"

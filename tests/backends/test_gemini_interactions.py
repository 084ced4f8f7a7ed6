"""The ``gemini_interactions`` backend behind the gateway: clients of other dialects (the
official ``anthropic``, ``openai`` and ``ollama`` SDKs) and of the Interactions API
itself (``google-genai``'s ``client.interactions``) on a Gemini model through Google's
Interactions API, configured as ``type: gemini_interactions`` and served by the
scripted Gemini-protocol server on loopback (tests/backends/gemini_server.py), which
shows exactly what the backend sent; and its configuration (``GEMINI_API_KEY``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import ollama
import pytest
from google import genai
from google.genai import types

from llmbridge.backends.gemini_interactions import GeminiInteractionsBackend
from llmbridge.gateway.config import load_config
from llmbridge.serving.build import build_backends
from llmbridge.serving.config import ServingConfig
from tests.backends.gemini_server import (
    GeminiServer,
    google_error,
    interaction_sse,
    model_entry,
    running_gemini_server,
)
from tests.conftest import (
    RunningServer,
    anthropic_client,
    ollama_client,
    openai_client,
    running_gateway,
)

MODEL = "gemini-3-flash-preview"
KEY = "AIza-interactions-key"
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
Json = dict[str, Any]


def created(interaction_id: str = "v1_scripted") -> Json:
    return {
        "event_type": "interaction.created",
        "interaction": {"id": interaction_id, "status": "in_progress", "model": MODEL},
    }


def completed(status: str = "completed", **usage: int) -> Json:
    counts = usage or {"total_input_tokens": 12, "total_output_tokens": 4, "total_tokens": 16}
    return {
        "event_type": "interaction.completed",
        "interaction": {"id": "v1_scripted", "status": status, "usage": counts},
    }


def text_step(index: int, *pieces: str) -> list[Json]:
    """A ``model_output`` step streamed as ``pieces``."""
    return [
        {"event_type": "step.start", "index": index, "step": {"type": "model_output"}},
        *(
            {"event_type": "step.delta", "index": index, "delta": {"type": "text", "text": piece}}
            for piece in pieces
        ),
        {"event_type": "step.stop", "index": index},
    ]


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[GeminiServer, RunningServer]]:
    """The gateway with one backend, built from ``type: gemini_interactions``."""
    with running_gemini_server() as (server, upstream):
        config = ServingConfig.model_validate(
            {
                "backends": {
                    "next": {"type": "gemini_interactions", "url": upstream.url, "api_key": KEY}
                }
            }
        )
        backends = build_backends(config)
        with running_gateway(backends, resilience={"retries": 0, "breaker_failures": 0}) as front:
            yield server, front


@pytest.fixture
def server(stack: tuple[GeminiServer, RunningServer]) -> GeminiServer:
    stack[0].reset()
    stack[0].models = {MODEL: model_entry(MODEL)}
    return stack[0]


@pytest.fixture
def gateway(stack: tuple[GeminiServer, RunningServer]) -> RunningServer:
    return stack[1]


def test_an_anthropic_client_runs_a_thinking_tool_loop_through_interactions(
    server: GeminiServer, gateway: RunningServer
) -> None:
    call = {"type": "function_call", "id": "fc_1", "name": "get_weather", "arguments": {}}
    server.enqueue(
        interaction_sse(
            created(),
            {"event_type": "step.start", "index": 0, "step": {"type": "thought"}},
            {
                "event_type": "step.delta",
                "index": 0,
                "delta": {"type": "thought_summary", "content": {"type": "text", "text": "ask"}},
            },
            # A signature may come in pieces: the backend keeps them as one.
            {
                "event_type": "step.delta",
                "index": 0,
                "delta": {"type": "thought_signature", "signature": "c2ln"},
            },
            {
                "event_type": "step.delta",
                "index": 0,
                "delta": {"type": "thought_signature", "signature": "LWdvb2c="},
            },
            {"event_type": "step.stop", "index": 0},
            {"event_type": "step.start", "index": 1, "step": call},
            {
                "event_type": "step.delta",
                "index": 1,
                "delta": {"type": "arguments_delta", "arguments": '{"city": '},
            },
            {
                "event_type": "step.delta",
                "index": 1,
                "delta": {"type": "arguments_delta", "arguments": '"Paris"}'},
            },
            {"event_type": "step.stop", "index": 1},
            completed(
                "requires_action",
                total_input_tokens=12,
                total_output_tokens=4,
                total_thought_tokens=3,
                total_tokens=19,
            ),
        ),
        interaction_sse(created(), *text_step(0, "Sunny ", "in Paris."), completed()),
    )
    client = anthropic_client(gateway.url)
    question = {"role": "user", "content": "Weather in Paris?"}
    thinking = {"type": "enabled", "budget_tokens": 2048}
    with client.messages.stream(
        model=MODEL, max_tokens=4096, thinking=thinking, tools=[WEATHER], messages=[question]
    ) as stream:
        first = stream.get_final_message()
    assert [b.type for b in first.content] == ["thinking", "tool_use"]
    assert first.content[0].thinking == "ask"  # type: ignore[union-attr]
    tool_use = first.content[1]
    assert tool_use.type == "tool_use"
    assert (tool_use.name, tool_use.input) == ("get_weather", {"city": "Paris"})
    assert first.stop_reason == "tool_use"
    # Google's output tokens do not count its thought tokens; Anthropic's do.
    assert (first.usage.input_tokens, first.usage.output_tokens) == (12, 7)
    sent = server.calls("interactions")[-1]
    assert sent.headers["x-goog-api-key"] == KEY and "key" not in sent.query
    assert sent.body["model"] == MODEL
    assert (sent.body["stream"], sent.body["store"]) == (True, False)
    assert sent.body["input"] == [
        {"type": "user_input", "content": [{"type": "text", "text": "Weather in Paris?"}]}
    ]
    assert sent.body["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": WEATHER["input_schema"],
        }
    ]
    assert sent.body["generation_config"]["thinking_level"] == "medium"  # 2048 tokens
    assert sent.body["generation_config"]["thinking_summaries"] == "auto"

    second = client.messages.create(
        model=MODEL,
        max_tokens=4096,
        thinking=thinking,
        tools=[WEATHER],
        messages=[
            question,
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": tool_use.id, "content": "sunny"}
                ],
            },
        ],
    )
    assert [b.type for b in second.content] == ["text"]
    assert second.content[0].text == "Sunny in Paris."  # type: ignore[union-attr]
    steps = server.calls("interactions")[-1].body["input"]
    assert [s["type"] for s in steps] == [
        "user_input",
        "thought",
        "function_call",
        "function_result",
    ]
    # Google gets its own signature back, whole, on the thought it came with.
    assert steps[1] == {
        "type": "thought",
        "signature": "c2lnLWdvb2c=",
        "summary": [{"type": "text", "text": "ask"}],
    }
    # The call and its result under one id (the Anthropic front's, made from Google's).
    assert steps[2] == {**call, "id": tool_use.id, "arguments": {"city": "Paris"}}
    assert steps[3] == {
        "type": "function_result",
        "call_id": tool_use.id,
        "result": "sunny",
        "name": "get_weather",
    }


def test_an_openai_client_s_parameters_and_json_schema_reach_google(
    server: GeminiServer, gateway: RunningServer
) -> None:
    server.enqueue(interaction_sse(created(), *text_step(0, '{"ok": ', "true}"), completed()))
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    reply = openai_client(gateway.url).chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "system", "content": "Be terse."}, {"role": "user", "content": "ok?"}],
        max_tokens=64,
        temperature=0.2,
        top_p=0.9,
        seed=7,
        stop=["END"],
        presence_penalty=0.5,
        response_format={"type": "json_schema", "json_schema": {"name": "ok", "schema": schema}},
    )
    completion = reply.parse()
    assert completion.choices[0].message.content == '{"ok": true}'
    assert completion.usage is not None and completion.usage.prompt_tokens == 12
    # Google's generation_config has no presence penalty: dropped, and said so.
    assert "presence_penalty" in reply.headers["x-llmbridge-params"]
    body = server.calls("interactions")[-1].body
    assert body["system_instruction"] == "Be terse."
    assert body["generation_config"] == {
        "temperature": 0.2,
        "top_p": 0.9,
        "max_output_tokens": 64,
        "seed": 7,
        "stop_sequences": ["END"],
    }
    assert body["response_format"] == {
        "type": "text",
        "mime_type": "application/json",
        "schema": schema,
    }


def test_an_error_event_mid_stream_ends_an_ollama_stream_with_its_error(
    server: GeminiServer, gateway: RunningServer
) -> None:
    error = {"code": "unavailable", "message": "The model is overloaded."}
    server.enqueue(
        interaction_sse(
            created(),
            {"event_type": "step.start", "index": 0, "step": {"type": "model_output"}},
            {"event_type": "step.delta", "index": 0, "delta": {"type": "text", "text": "Par"}},
            {"event_type": "error", "error": error},
        )
    )
    stream = ollama_client(gateway.url).chat(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
    )
    text = []
    with pytest.raises(ollama.ResponseError, match="overloaded"):
        for chunk in stream:
            text.append(chunk.message.content)
    assert "".join(text) == "Par"


def test_a_stream_cut_before_interaction_completed_is_a_502(
    server: GeminiServer, gateway: RunningServer
) -> None:
    server.enqueue(interaction_sse(created(), *text_step(0, "half"), done=False))
    with pytest.raises(ollama.ResponseError) as caught:
        ollama_client(gateway.url).chat(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 502
    assert "interaction.completed" in caught.value.error


def test_googles_429_reaches_the_client_as_a_429_with_retry_after(
    server: GeminiServer, gateway: RunningServer
) -> None:
    retry = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "30s"}
    server.enqueue(
        google_error(429, "Resource has been exhausted.", "RESOURCE_EXHAUSTED", details=[retry])
    )
    with pytest.raises(anthropic.RateLimitError, match="Resource has been exhausted") as caught:
        anthropic_client(gateway.url).messages.create(
            model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.response.headers["retry-after"] == "30"


def test_an_interactions_client_through_the_gateway_onto_googles_interactions(
    server: GeminiServer, gateway: RunningServer
) -> None:
    """Both ways at once: google-genai's ``client.interactions`` at the gateway's front,
    Google's Interactions API behind it; a streamed reply, then one continued from the
    stored interaction (the gateway keeps the chain and sends Google all of it)."""
    server.enqueue(
        interaction_sse(created(), *text_step(0, "Bonjour", "!"), completed()),
        interaction_sse(created(), *text_step(0, "Au revoir."), completed()),
    )
    client = genai.Client(api_key="x", http_options=types.HttpOptions(base_url=gateway.url))
    events = list(
        client.interactions.create(
            model=MODEL,
            input="Say hello in French.",
            system_instruction="Answer in French.",
            generation_config={"temperature": 0.3},
            stream=True,
        )
    )
    kinds = [e.event_type for e in events]
    assert kinds[0] == "interaction.created" and kinds[-1] == "interaction.completed"
    text = "".join(
        e.delta.text for e in events if e.event_type == "step.delta" and e.delta.type == "text"
    )
    assert text == "Bonjour!"
    first_id = events[0].interaction.id
    sent = server.calls("interactions")[-1].body
    assert sent["system_instruction"] == "Answer in French."
    assert sent["generation_config"] == {"temperature": 0.3}

    second = client.interactions.create(
        model=MODEL, input="And goodbye?", previous_interaction_id=first_id
    )
    assert second.output_text == "Au revoir."
    assert second.previous_interaction_id == first_id
    assert server.calls("interactions")[-1].body["input"] == [
        {"type": "user_input", "content": [{"type": "text", "text": "Say hello in French."}]},
        {"type": "model_output", "content": [{"type": "text", "text": "Bonjour!"}]},
        {"type": "user_input", "content": [{"type": "text", "text": "And goodbye?"}]},
    ]


# -- configuration ----------------------------------------------------------------------


def test_configured_as_type_gemini_interactions_with_the_key_from_the_environment(
    tmp_path: Path,
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "backends:\n"
        "  g: {type: gemini_interactions}\n"
        "  h: {type: gemini_interactions, api_key: from-file, url: 'http://10.0.0.9:8080/v1beta'}\n",
        encoding="utf-8",
    )
    loaded = load_config(path, {}, {"GEMINI_API_KEY": "from-env"})
    g, h = loaded.backends["g"], loaded.backends["h"]
    assert g.type == "gemini_interactions" and g.api_key == "from-env"
    assert h.type == "gemini_interactions" and h.api_key == "from-file"
    assert g.url == "https://generativelanguage.googleapis.com"
    built = build_backends(loaded)
    assert isinstance(built["g"], GeminiInteractionsBackend)
    assert built["g"].kind == "gemini_interactions"
    assert isinstance(built["h"], GeminiInteractionsBackend)
    assert built["h"].base_url == "http://10.0.0.9:8080"

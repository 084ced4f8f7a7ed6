"""The Anthropic front's policies, through the official client: thinking (capability,
drop / strict), max_tokens clamping, tool_choice by instruction, Claude families,
count_tokens over every block type, and the usage Claude Code's compaction reads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import orjson
import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.messages import TextPart
from llmbridge.core.response import Usage
from llmbridge.features.tool_choice import ANY_TOOL_INSTRUCTION, named_tool_instruction
from tests.conftest import RunningServer, anthropic_client, running_gateway

USER = [{"role": "user", "content": "hi"}]
THINK = {"type": "enabled", "budget_tokens": 31999}  # what Claude Code sends


@pytest.fixture(scope="module")
def thinker() -> ScriptedBackend:
    return ScriptedBackend("thinker", models=("qwen3:8b",))


@pytest.fixture(scope="module")
def plain() -> ScriptedBackend:
    """A backend whose model calls tools (but has no tool_choice) and cannot think."""
    return ScriptedBackend(
        "plain",
        models=("llama3.2",),
        capabilities=frozenset({"completion", "tools"}),
        context_length=4096,
    )


def _servers(thinker: ScriptedBackend, plain: ScriptedBackend, policy: str) -> Any:
    return running_gateway(
        {"thinker": thinker, "plain": plain},
        models=[
            {"name": "deep", "backend": "thinker", "model": "qwen3:8b"},
            {"name": "small", "backend": "plain", "model": "llama3.2"},
            {"name": "capped", "backend": "thinker", "model": "qwen3:8b", "max_tokens": 100},
            {"name": "forced", "backend": "plain", "model": "llama3.2", "thinking": True},
        ],
        claude_families={"haiku": {"backend": "plain", "model": "llama3.2"}},
        thinking=policy,
    )


@pytest.fixture(scope="module")
def gateway(thinker: ScriptedBackend, plain: ScriptedBackend) -> Iterator[RunningServer]:  # type: ignore[override]
    with _servers(thinker, plain, "drop") as server:
        yield server


@pytest.fixture(scope="module")
def strict(thinker: ScriptedBackend, plain: ScriptedBackend) -> Iterator[RunningServer]:
    with _servers(thinker, plain, "strict") as server:
        yield server


def test_thinking_reaches_a_thinking_model_with_an_effort(
    gateway: RunningServer, thinker: ScriptedBackend
) -> None:
    thinker.enqueue(Script(thinking=["let me see"], text=["42"]))
    reply = anthropic_client(gateway.url).messages.create(
        model="deep", max_tokens=64, messages=USER, thinking=THINK
    )
    assert [b.type for b in reply.content] == ["thinking", "text"]
    sent = thinker.requests[-1].thinking
    assert sent is not None and sent.enabled
    assert sent.budget_tokens == 31999


def test_drop_policy_serves_without_thinking_and_says_so(
    gateway: RunningServer, plain: ScriptedBackend
) -> None:
    raw = anthropic_client(gateway.url).messages.with_raw_response.create(
        model="small", max_tokens=64, messages=USER, thinking=THINK
    )
    assert raw.headers["x-llmbridge-thinking"] == "dropped"
    assert raw.parse().content[0].type == "text"
    assert plain.requests[-1].thinking is None


def test_strict_policy_answers_400_thinking_not_supported(strict: RunningServer) -> None:
    with pytest.raises(anthropic.BadRequestError, match="thinking_not_supported") as info:
        anthropic_client(strict.url).messages.create(
            model="small", max_tokens=64, messages=USER, thinking=THINK
        )
    assert info.value.status_code == 400
    # seed 001's error type, which its clients branch on (not invalid_request_error)
    body = info.value.body
    assert isinstance(body, dict)
    assert body["type"] == "error"
    assert body["error"]["type"] == "thinking_not_supported"
    assert body["request_id"] == info.value.response.headers["request-id"]
    # without thinking the same model is fine
    anthropic_client(strict.url).messages.create(model="small", max_tokens=8, messages=USER)


def test_config_override_makes_a_model_thinking_capable(
    strict: RunningServer, plain: ScriptedBackend
) -> None:
    anthropic_client(strict.url).messages.create(
        model="forced", max_tokens=64, messages=USER, thinking=THINK
    )
    assert plain.requests[-1].thinking is not None


def test_max_tokens_is_clamped_to_the_model_limit(
    gateway: RunningServer, thinker: ScriptedBackend, plain: ScriptedBackend
) -> None:
    client = anthropic_client(gateway.url)
    # (the SDK wants an explicit timeout for a non-streamed request this large)
    client.messages.create(model="capped", max_tokens=32000, messages=USER, timeout=30)
    assert thinker.requests[-1].params.max_tokens == 100
    client.messages.create(model="small", max_tokens=32000, messages=USER, timeout=30)
    assert plain.requests[-1].params.max_tokens == 4096  # the model's context length
    client.messages.create(model="small", max_tokens=50, messages=USER)
    assert plain.requests[-1].params.max_tokens == 50


TOOL = {"name": "get_time", "input_schema": {"type": "object", "properties": {}}}
OTHER = {"name": "get_date", "input_schema": {"type": "object", "properties": {}}}


def _system_text(backend: ScriptedBackend) -> str:
    first = backend.requests[-1].messages[0]
    return "".join(p.text for p in first.parts if isinstance(p, TextPart))


def test_tool_choice_by_instruction_where_the_backend_cannot(
    gateway: RunningServer, plain: ScriptedBackend
) -> None:
    client = anthropic_client(gateway.url)
    client.messages.create(
        model="small",
        max_tokens=8,
        messages=USER,
        system="be brief",
        tools=[TOOL, OTHER],
        tool_choice={"type": "any"},
    )
    assert _system_text(plain) == "be brief\n\n" + ANY_TOOL_INSTRUCTION
    assert len(plain.requests[-1].tools) == 2
    client.messages.create(
        model="small",
        max_tokens=8,
        messages=USER,
        tools=[TOOL, OTHER],
        tool_choice={"type": "tool", "name": "get_date"},
    )
    assert _system_text(plain) == named_tool_instruction("get_date")
    assert [t.name for t in plain.requests[-1].tools] == ["get_date"]
    client.messages.create(
        model="small", max_tokens=8, messages=USER, tools=[TOOL], tool_choice={"type": "none"}
    )
    assert plain.requests[-1].tools == ()


def test_claude_families_map_to_configured_models(
    gateway: RunningServer, plain: ScriptedBackend
) -> None:
    client = anthropic_client(gateway.url)
    for name in ("claude-haiku-4-5", "claude-haiku-9-1", "haiku"):
        client.messages.create(model=name, max_tokens=8, messages=USER)
        assert plain.requests[-1].model == "llama3.2"


def test_count_tokens_counts_every_block_type(gateway: RunningServer) -> None:
    body = {
        "model": "deep",
        "system": "You are terse.",  # You(1) are(1) terse.(2) = 4
        "tools": [  # name get_time(2) + description "Current time"(2+1) + schema JSON
            {
                "name": "get_time",
                "description": "Current time",
                "input_schema": {"type": "object"},
            },  # {"type":"object"} = 17 chars -> 5
        ],
        "messages": [
            {"role": "user", "content": "what time"},  # 1 + 1
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "use the tool", "signature": "s"},  # 1+1+1
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "get_time",  # 2
                        "input": {"tz": "UTC"},
                    },  # {"tz":"UTC"} = 12 chars -> 3
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "12:00 noon",
                    },  # 2+1
                ],
            },
        ],
    }
    expected = 4 + (2 + 3 + 5) + 2 + 3 + (2 + 3) + 3
    response = httpx.post(gateway.url + "/v1/messages/count_tokens", json=body)
    assert response.status_code == 200
    assert response.json() == {"input_tokens": expected}


def test_stream_usage_estimate_then_real_counts(
    gateway: RunningServer, thinker: ScriptedBackend
) -> None:
    thinker.enqueue(Script(text=["ok"], usage=Usage(input_tokens=1234, output_tokens=7)))
    body = {"model": "deep", "max_tokens": 8, "stream": True, "messages": USER}
    with httpx.stream("POST", gateway.url + "/v1/messages", json=body) as response:
        events = [
            orjson.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")
        ]
    start = next(e for e in events if e["type"] == "message_start")
    delta = next(e for e in events if e["type"] == "message_delta")
    assert start["message"]["usage"]["input_tokens"] > 0  # the estimate
    assert delta["usage"]["input_tokens"] == 1234  # the backend's real count
    assert delta["usage"]["output_tokens"] == 7

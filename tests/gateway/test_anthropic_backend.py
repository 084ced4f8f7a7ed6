"""The Anthropic backend, tested gateway to gateway: llmbridge A forwards to
llmbridge B's Anthropic front as it would to api.anthropic.com."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llmbridge.backends.anthropic import AnthropicBackend
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.messages import ThinkingPart, ToolCallPart
from tests.conftest import RunningServer, anthropic_client, running_gateway

SIGNATURE = "EqQBCkYIARgCIkB/signed+by=anthropic=="


@pytest.fixture(scope="module")
def upstream_backend() -> ScriptedBackend:
    return ScriptedBackend("b", models=("claude-upstream",))


@pytest.fixture(scope="module")
def gateway(upstream_backend: ScriptedBackend) -> Iterator[RunningServer]:  # type: ignore[override]
    # B requires the key, so every test here also proves A sends it (as x-api-key).
    with running_gateway({"b": upstream_backend}, server={"api_keys": ["sk-test"]}) as upstream:
        a = AnthropicBackend("claude", upstream.url, api_key="sk-test")
        with running_gateway({"claude": a}) as front:
            yield front


def test_streamed_signatures_pass_through_byte_for_byte(
    gateway: RunningServer, upstream_backend: ScriptedBackend
) -> None:
    upstream_backend.enqueue(
        Script(thinking=["weigh ", "options"], signature=SIGNATURE, text=["Done."])
    )
    with anthropic_client(gateway.url).messages.stream(
        model="claude-upstream",
        max_tokens=256,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=[{"role": "user", "content": "think"}],
    ) as stream:
        final = stream.get_final_message()
    thinking = final.content[0]
    assert thinking.type == "thinking"
    assert thinking.thinking == "weigh options"
    assert thinking.signature == SIGNATURE
    assert final.content[1].type == "text"


def test_only_anthropic_signed_thinking_is_sent_back(
    gateway: RunningServer, upstream_backend: ScriptedBackend
) -> None:
    history = [
        {"role": "user", "content": "first"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "signed reasoning", "signature": SIGNATURE},
                {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt"}],
        },
        # reasoning a local model produced earlier: unsigned
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "local reasoning", "signature": ""},
                {"type": "text", "text": "There is a.txt."},
            ],
        },
        {"role": "user", "content": "thanks"},
    ]
    anthropic_client(gateway.url).messages.create(
        model="claude-upstream",
        max_tokens=256,
        thinking={"type": "enabled", "budget_tokens": 1024},
        tools=[{"name": "ls", "input_schema": {"type": "object"}}],
        messages=history,
    )
    received = upstream_backend.requests[-1]
    thinking = [p for m in received.messages for p in m.parts if isinstance(p, ThinkingPart)]
    assert [(p.text, p.signature) for p in thinking] == [("signed reasoning", SIGNATURE)]
    calls = [p for m in received.messages for p in m.parts if isinstance(p, ToolCallPart)]
    assert [c.name for c in calls] == ["ls"]
    assert [m.role for m in received.messages] == ["user", "assistant", "tool", "assistant", "user"]

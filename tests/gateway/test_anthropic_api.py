"""The Anthropic Messages API, through the official ``anthropic`` client."""

from __future__ import annotations

import anthropic
import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from tests.conftest import RunningServer, anthropic_client


@pytest.fixture
def client(gateway: RunningServer) -> anthropic.Anthropic:
    return anthropic_client(gateway.url, "x")


def test_create(client: anthropic.Anthropic, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["Hi", "!"]))
    reply = client.messages.create(
        model="claude-sonnet-4-6",
        max_tokens=16,
        system="be nice",
        messages=[{"role": "user", "content": "hello"}],
    )
    assert reply.content[0].type == "text"
    assert reply.content[0].text == "Hi!"
    assert reply.stop_reason == "end_turn"
    assert reply.model == "claude-sonnet-4-6"
    assert reply.id.startswith("msg_")
    assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0
    seen = scripted.requests[-1]
    assert [m.role for m in seen.messages] == ["system", "user"]
    assert seen.params.max_tokens == 16


def test_stream_helper_builds_the_final_message(
    client: anthropic.Anthropic, scripted: ScriptedBackend
) -> None:
    scripted.enqueue(Script(thinking=["hmm"], text=["A", "B"], tool_calls=[("run", {"cmd": "ls"})]))
    with client.messages.stream(
        model="claude-haiku-4-5",
        max_tokens=64,
        messages=[{"role": "user", "content": "go"}],
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "AB"
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
    tool = final.content[2]
    assert tool.type == "tool_use"
    assert tool.name == "run" and tool.input == {"cmd": "ls"}
    assert tool.id.startswith("toolu_")
    assert final.stop_reason == "tool_use"
    assert final.usage.input_tokens > 0


def test_beta_path(client: anthropic.Anthropic, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["ok"]))
    reply = client.beta.messages.create(
        model="claude-x", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.content[0].type == "text" and reply.content[0].text == "ok"


def test_tool_results_reach_the_backend_in_order(
    client: anthropic.Anthropic, scripted: ScriptedBackend
) -> None:
    client.messages.create(
        model="claude-x",
        max_tokens=8,
        messages=[
            {"role": "user", "content": "list files"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt"},
                    {"type": "text", "text": "and now?"},
                ],
            },
        ],
    )
    roles = [m.role for m in scripted.requests[-1].messages]
    assert roles == ["user", "assistant", "tool", "user"]


def test_count_tokens(client: anthropic.Anthropic) -> None:
    counted = client.messages.count_tokens(
        model="claude-x", messages=[{"role": "user", "content": "one two three fourfive"}]
    )
    # seed 001's rule: words of up to 4 characters are one token, longer ones one per 4.
    assert counted.input_tokens == 6  # one, two: 1 each; three, fourfive: 2 each

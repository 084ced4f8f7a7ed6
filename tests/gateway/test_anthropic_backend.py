"""The Anthropic backend, tested gateway to gateway: llmbridge A forwards to
llmbridge B's Anthropic front as it would to api.anthropic.com."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from llmbridge.backends.anthropic import LONGEST_WHOLE_TOKENS, AnthropicBackend
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.messages import ThinkingPart, ToolCallPart
from llmbridge.dialects.gemini.thoughts import GEMINI
from llmbridge.dialects.responses.carried import carry as responses_carry
from tests.conftest import RunningServer, anthropic_client, openai_client, running_gateway
from tests.upstream import Canned, FakeUpstream

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


# -- byte for byte, on the wire ------------------------------------------------------------

REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP+/=="
"""Opaque, as Anthropic's redacted thinking is: only its own API can read it."""
WIRE_SIGNATURE = "ErUBCkYIBRgCIkDq1+Zh/XE=9k/r+Ad=="
"""A signature in base64 with ``+``, ``/`` and ``=``, each to come back unchanged."""


def _sse(*events: dict[str, object]) -> list[bytes]:
    return [f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode() for event in events]


def _signed_reply(**delta: object) -> Canned:
    """What Anthropic streams for a thinking reply that is partly redacted; ``delta``:
    more fields of its ``message_delta``."""
    message = {"id": "msg_up", "type": "message", "role": "assistant", "model": "claude-x"}
    usage = {"input_tokens": 9, "output_tokens": 1}
    block = {"type": "thinking", "thinking": "", "signature": ""}
    return Canned(
        media_type="text/event-stream",
        chunks=_sse(
            {"type": "message_start", "message": {**message, "content": [], "usage": usage}},
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "redacted_thinking", "data": REDACTED},
            },
            {"type": "content_block_stop", "index": 0},
            {"type": "content_block_start", "index": 1, "content_block": block},
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "thinking_delta", "thinking": "weigh it"},
            },
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {
                    "type": "signature_delta",
                    "signature": WIRE_SIGNATURE,
                },
            },
            {"type": "content_block_stop", "index": 1},
            {
                "type": "content_block_start",
                "index": 2,
                "content_block": {"type": "text", "text": ""},
            },
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "text_delta", "text": "Done."},
            },
            {"type": "content_block_stop", "index": 2},
            {
                "type": "message_delta",
                "delta": {"type": "end_turn", "stop_reason": "end_turn"},
                "usage": {"output_tokens": 5},
                **delta,
            },
            {"type": "message_stop"},
        ),
    )


def _signed_message(**extra: object) -> Canned:
    """``_signed_reply``'s message sent whole, as Anthropic answers a request that does
    not stream; ``extra``: more top-level fields."""
    content = [
        {"type": "redacted_thinking", "data": REDACTED},
        {"type": "thinking", "thinking": "weigh it", "signature": WIRE_SIGNATURE},
        {"type": "text", "text": "Done."},
    ]
    message = {
        "id": "msg_up",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": content,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 9, "output_tokens": 5},
        **extra,
    }
    return Canned(media_type="application/json", chunks=[json.dumps(message).encode()])


@pytest.fixture(scope="module")
def wire() -> Iterator[tuple[FakeUpstream, RunningServer]]:
    """A gateway whose Anthropic backend is a fake API answering canned bytes (a
    stream, or a message sent whole, as the request asks): the translated path (the
    pass-through path has its own tests, tests/gateway/test_passthrough_anthropic.py)."""
    fake = FakeUpstream()
    fake.serve_canned("/v1/messages")
    with RunningServer(fake.app) as server:
        backend = AnthropicBackend("claude", server.url)
        translated = [{"name": "claude-x", "backend": "claude", "passthrough": False}]
        with running_gateway(
            {"claude": backend}, models=translated, resilience={"retries": 0}
        ) as front:
            yield fake, front


def test_redacted_thinking_and_signatures_go_both_ways_byte_for_byte(
    wire: tuple[FakeUpstream, RunningServer],
) -> None:
    fake, gateway = wire
    fake.queue.append(_signed_reply())
    client = anthropic_client(gateway.url)
    question = {"role": "user", "content": "think"}
    thinking = {"type": "enabled", "budget_tokens": 1024}
    with client.messages.stream(
        model="claude-x", max_tokens=2048, thinking=thinking, messages=[question]
    ) as stream:
        first = stream.get_final_message()
    signature = WIRE_SIGNATURE
    assert [b.type for b in first.content] == ["redacted_thinking", "thinking", "text"]
    assert first.content[0].data == REDACTED  # type: ignore[union-attr]
    assert first.content[1].signature == signature  # type: ignore[union-attr]

    fake.queue.append(_signed_message())
    client.messages.create(
        model="claude-x",
        max_tokens=2048,
        thinking=thinking,
        messages=[
            question,
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": "again"},
        ],
    )
    sent = json.loads(fake.bodies[-1])
    assert sent["messages"][1]["content"][:2] == [
        {"type": "redacted_thinking", "data": REDACTED},
        {"type": "thinking", "thinking": "weigh it", "signature": signature},
    ]


def test_thinking_another_backend_signed_never_reaches_anthropic(
    wire: tuple[FakeUpstream, RunningServer],
) -> None:
    # A Claude client that talked to a Gemini model (or a Responses server) before holds
    # thinking blocks whose signature is that backend's carried token; Anthropic would
    # answer 400 "Invalid signature in thinking block".
    fake, gateway = wire
    fake.queue.append(_signed_message())
    foreign = [
        GEMINI.carry("gem", "c2lnLWdlbWluaQ=="),
        responses_carry("resp", "gAAAAB-encrypted"),
    ]
    history = [
        {"role": "user", "content": "first"},
        *(
            turn
            for index, signature in enumerate(foreign)
            for turn in (
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "thinking",
                            "thinking": f"elsewhere {index}",
                            "signature": signature,
                        },
                        {"type": "text", "text": f"answer {index}"},
                    ],
                },
                {"role": "user", "content": f"next {index}"},
            )
        ),
    ]
    anthropic_client(gateway.url).messages.create(
        model="claude-x",
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=history,
    )
    sent = json.loads(fake.bodies[-1])
    blocks = [block["type"] for turn in sent["messages"] for block in turn["content"]]
    assert "thinking" not in blocks
    assert [turn["content"][0]["text"] for turn in sent["messages"]] == [
        "first",
        "answer 0",
        "next 0",
        "answer 1",
        "next 1",
    ]


def test_what_anthropic_says_its_context_editing_cleared_reaches_the_client(
    wire: tuple[FakeUpstream, RunningServer],
) -> None:
    fake, gateway = wire
    applied = {
        "applied_edits": [
            {
                "type": "clear_tool_uses_20250919",
                "cleared_tool_uses": 4,
                "cleared_input_tokens": 9120,
            }
        ]
    }
    edits = {"edits": [{"type": "clear_tool_uses_20250919"}]}
    client = anthropic_client(gateway.url)
    ask = {
        "model": "claude-x",
        "max_tokens": 2048,
        "messages": [{"role": "user", "content": "go on"}],
        "betas": ["context-management-2025-06-27"],
        "context_management": edits,
    }
    fake.queue.append(_signed_reply(context_management=applied))
    with client.beta.messages.stream(**ask) as stream:  # type: ignore[arg-type]
        streamed = stream.get_final_message()
    fake.queue.append(_signed_message(context_management=applied))
    whole = client.beta.messages.create(**ask)  # type: ignore[call-overload]
    for reply in (streamed, whole):
        assert reply.context_management is not None
        assert reply.context_management.model_dump() == applied
    assert json.loads(fake.bodies[-1])["context_management"] == edits
    assert "stream" not in json.loads(fake.bodies[-1])  # asked for whole
    assert whole.content[1].signature == WIRE_SIGNATURE  # type: ignore[union-attr]


def test_a_reply_the_client_wants_whole_is_asked_for_whole(
    wire: tuple[FakeUpstream, RunningServer],
) -> None:
    """An OpenAI client's non-streamed chat on the Anthropic backend asks for one
    message (no stream to decode event by event), and its tool call, counts and the
    stop a server left unsaid reach the client as a stream's would."""
    fake, gateway = wire
    call = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "x"}}
    fake.queue.append(
        _signed_message(content=[{"type": "text", "text": "Looking."}, call], stop_reason=None)
    )
    answer = openai_client(gateway.url).chat.completions.create(
        model="claude-x", max_tokens=64, messages=[{"role": "user", "content": "find x"}]
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Looking."
    calls = choice.message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [  # type: ignore[union-attr]
        ("lookup", {"q": "x"})
    ]
    assert answer.usage is not None
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (9, 5)
    assert "stream" not in json.loads(fake.bodies[-1])


def test_a_reply_too_long_to_wait_for_whole_is_streamed(
    wire: tuple[FakeUpstream, RunningServer],
) -> None:
    """Over ``LONGEST_WHOLE_TOKENS`` (Anthropic's SDKs refuse such a request unstreamed:
    it may take over ten minutes) the backend streams and accumulates, whatever the
    client asked."""
    fake, gateway = wire
    fake.queue.append(_signed_reply())
    answer = openai_client(gateway.url).chat.completions.create(
        model="claude-x",
        max_tokens=LONGEST_WHOLE_TOKENS + 1,
        messages=[{"role": "user", "content": "write a book"}],
    )
    assert answer.choices[0].message.content == "Done."
    assert json.loads(fake.bodies[-1])["stream"] is True

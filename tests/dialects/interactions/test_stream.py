"""The Interactions stream DECODER (the ``gemini_interactions`` backend's side) on golden
captures, one per quirk (tests/fixtures/streams/interactions/): a function call whole in
its ``step.start``; a thought whose summary starts in ``step.start`` and whose
signature comes in pieces, then text with an annotation delta to skip; an ``error``
event mid-stream; an ``incomplete`` reply framed with CRLF and no ``event:`` lines.
And what a malformed stream raises."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from llmbridge.core.accumulate import accumulate
from llmbridge.core.errors import BackendProtocolError, LLMBridgeError
from llmbridge.core.events import StreamError, StreamEvent
from llmbridge.core.messages import TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.response import ChatResponse, StopReason
from llmbridge.dialects.framing import aiter_sse
from llmbridge.dialects.interactions import decode_chat_response, decode_chat_stream
from llmbridge.dialects.interactions.steps import INTERACTIONS

FIXTURES = Path(__file__).parents[2] / "fixtures" / "streams" / "interactions"


async def _chunks(raw: bytes, size: int = 7) -> AsyncIterator[bytes]:
    # Small chunks: events split across reads, as the network splits them.
    for start in range(0, len(raw), size):
        yield raw[start : start + size]


def events(raw: bytes) -> list[StreamEvent]:
    async def run() -> list[StreamEvent]:
        stream = decode_chat_stream(aiter_sse(_chunks(raw)), origin="next")
        return [event async for event in stream]

    return asyncio.run(run())


def reply(name: str) -> ChatResponse:
    async def run() -> ChatResponse:
        raw = (FIXTURES / name).read_bytes()
        return await accumulate(decode_chat_stream(aiter_sse(_chunks(raw)), origin="next"))

    return asyncio.run(run())


def test_a_call_whole_in_its_step_start() -> None:
    got = reply("call_whole_in_step_start.sse")
    assert got.message.parts == (ToolCallPart("fc_9", "get_weather", {"city": "Rome"}),)
    assert got.stop_reason is StopReason.TOOL_USE
    assert (got.usage.input_tokens, got.usage.output_tokens) == (20, 6)


def test_a_signature_in_pieces_is_one_tagged_signature_and_thought_tokens_are_output() -> None:
    got = reply("thought_signature_in_pieces_then_text.sse")
    assert got.message.parts == (
        ThinkingPart("Weigh it.", signature=INTERACTIONS.carry("next", "AAECAwQF")),
        TextPart("Yes, it is."),
    )
    assert INTERACTIONS.recover(got.message.parts[0].signature, "next") == "AAECAwQF"  # type: ignore[union-attr]
    assert INTERACTIONS.recover(got.message.parts[0].signature, "other") is None  # type: ignore[union-attr]
    usage = got.usage
    assert (usage.input_tokens, usage.output_tokens, usage.reasoning_tokens) == (9, 15, 11)
    assert usage.cache_read_input_tokens == 5
    assert got.stop_reason is StopReason.END_TURN


def test_an_error_event_mid_stream_is_the_last_event() -> None:
    decoded = events((FIXTURES / "error_event_mid_stream.sse").read_bytes())
    last = decoded[-1]
    assert isinstance(last, StreamError)
    assert isinstance(last.error, LLMBridgeError)
    assert last.error.status_code == 429  # resource_exhausted: rate limited
    assert "Quota exceeded." in last.error.message


def test_incomplete_is_max_tokens_with_crlf_framing_and_no_event_lines() -> None:
    got = reply("max_tokens_incomplete_crlf.sse")
    assert got.message.parts == (TextPart("Once upon"),)
    assert got.stop_reason is StopReason.MAX_TOKENS


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"data: not json\n\n", "not JSON"),
        (b"data: [1, 2]\n\n", "not an object"),
        (
            b'data: {"event_type":"interaction.created","interaction":{"id":"x"}}\n\n'
            b'data: {"event_type":"step.start","index":0,"step":{"type":"function_call"}}\n\n',
            "name",
        ),
        (
            b'data: {"event_type":"interaction.created","interaction":{"id":"x"}}\n\n'
            b'data: {"event_type":"step.delta","index":0,"delta":{"type":"text","text":1}}\n\n',
            "delta.text",
        ),
        (
            b'data: {"event_type":"interaction.created","interaction":{"id":"x"}}\n\n'
            b"data: [DONE]\n\n",
            "interaction.completed",
        ),
    ],
)
def test_malformed_streams_raise_naming_what_is_wrong(raw: bytes, says: str) -> None:
    with pytest.raises(BackendProtocolError, match=says):
        events(raw)


SUMMARY = [{"type": "text", "text": "t"}]


def test_a_whole_interaction_is_one_reply() -> None:
    got = decode_chat_response(
        {
            "id": "v1_whole",
            "model": "gemini-3-flash-preview",
            "status": "requires_action",
            "steps": [
                {
                    "type": "thought",
                    "signature": "AAEC",
                    "summary": [{"type": "text", "text": "t"}],
                },
                {"type": "model_output", "content": [{"type": "text", "text": "Calling."}]},
                {"type": "function_call", "id": "fc", "name": "f", "arguments": {"a": 1}},
            ],
            "usage": {"total_input_tokens": 4, "total_output_tokens": 2},
        },
        origin="next",
    )
    assert got.id == "v1_whole" and got.stop_reason is StopReason.TOOL_USE
    assert got.message.parts == (
        ThinkingPart("t", signature=INTERACTIONS.carry("next", "AAEC")),
        TextPart("Calling."),
        ToolCallPart("fc", "f", {"a": 1}),
    )
    assert (got.usage.input_tokens, got.usage.output_tokens) == (4, 2)
    with pytest.raises(BackendProtocolError, match="steps"):
        decode_chat_response({"steps": "nope"})

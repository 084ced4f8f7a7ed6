"""The Responses dialect's client side: a server's SSE stream and response object as
neutral values, over golden captures (tests/fixtures/streams/responses/, one per
quirk, every event valid for the openai SDK's own ``ResponseStreamEvent``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from llmbridge.core.accumulate import accumulate
from llmbridge.core.errors import BackendError, BackendProtocolError
from llmbridge.core.events import (
    PartDelta,
    PartEnd,
    PartStart,
    ResponseEnd,
    ResponseStart,
    StreamError,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolArgsDelta,
)
from llmbridge.core.messages import Message, TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.replay import events_from_response
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.dialects.responses.carried import PROVIDER, carry_item, recover, recover_item
from llmbridge.dialects.responses.decode import decode_chat_response, decode_chat_stream
from llmbridge.dialects.responses.request import decode_chat_request
from llmbridge.dialects.responses.stream import encode_chat_stream
from tests.dialects.openai.helpers import aiter_list, collect, split_every, sse_events

FIXTURES = Path(__file__).parents[2] / "fixtures" / "streams" / "responses"
EVENT = TypeAdapter[Any](ResponseStreamEvent)
ENCRYPTED = "gAAAAABo4Lx9c2VjcmV0LXJlYXNvbmluZy1ibG9i_-=="


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


async def decode(pieces: list[bytes], origin: str | None = "up") -> list[StreamEvent]:
    return [event async for event in decode_chat_stream(sse_events(pieces), origin=origin)]


async def decode_whole(pieces: list[bytes], origin: str | None = "up") -> ChatResponse:
    return await accumulate(decode_chat_stream(sse_events(pieces), origin=origin))


def payloads(name: str) -> list[dict[str, Any]]:
    return [
        orjson.loads(line[len(b"data: ") :])
        for line in fixture(name).splitlines()
        if line.startswith(b"data: ")
    ]


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.sse")))
def test_every_fixture_event_is_valid_for_the_openai_sdk(name: str) -> None:
    events = payloads(name)
    assert events
    for number, payload in enumerate(events):
        assert payload["sequence_number"] == number
        EVENT.validate_python(payload)


async def test_text_with_usage_and_cached_tokens() -> None:
    events = await decode([fixture("text.sse")])
    assert events[0] == ResponseStart(
        id="resp_0a1b2c3d4e5f", model="gpt-4.1-mini-2025-04-14", created=1764000000.0
    )
    assert events[1] == PartStart(0, TextPart(""))
    assert [e.delta for e in events if isinstance(e, PartDelta)] == [
        TextDelta("Bonjour, "),
        TextDelta("café 🌍"),
        TextDelta("!"),
    ]
    assert events[-2] == PartEnd(0, TextPart("Bonjour, café 🌍!"))
    assert events[-1] == ResponseEnd(
        stop_reason=StopReason.END_TURN,
        usage=Usage(
            input_tokens=42,
            output_tokens=7,
            cache_read_input_tokens=32,
            cache_creation_input_tokens=0,
            reasoning_tokens=0,
        ),
    )


@pytest.mark.parametrize("size", [1, 3, 7, 64, 1000])
async def test_any_chunking_gives_the_same_response(size: int) -> None:
    for name in ("text.sse", "reasoning_summary_encrypted.sse", "parallel_function_calls.sse"):
        data = fixture(name)
        assert await decode_whole(split_every(data, size)) == await decode_whole([data])


async def test_reasoning_summaries_and_encrypted_content_become_a_signed_thinking_part() -> None:
    events = await decode([fixture("reasoning_summary_encrypted.sse")])
    deltas = [e.delta for e in events if isinstance(e, PartDelta) and e.index == 0]
    texts = [d.text for d in deltas if isinstance(d, ThinkingDelta)]
    # Two summary parts: one paragraph each, joined by a blank line.
    assert "".join(texts) == "**Planning** the answer\n\nChecking the edge case"
    ends = [e for e in events if isinstance(e, PartEnd)]
    thinking = ends[0].part
    assert isinstance(thinking, ThinkingPart)
    assert thinking.text == "**Planning** the answer\n\nChecking the edge case"
    assert thinking.provider == PROVIDER
    # The whole item is carried (id left out), both summary parts as the server gave them.
    item = {
        "type": "reasoning",
        "summary": [
            {"type": "summary_text", "text": "**Planning** the answer"},
            {"type": "summary_text", "text": "Checking the edge case"},
        ],
        "encrypted_content": ENCRYPTED,
    }
    assert thinking.signature == carry_item("up", item)
    assert recover_item(thinking.signature, "up") == item
    assert recover(thinking.signature, "up") == ENCRYPTED
    assert ends[1].part == TextPart("Use a set.")
    end = events[-1]
    assert isinstance(end, ResponseEnd) and end.stop_reason == StopReason.END_TURN
    assert (end.usage.input_tokens, end.usage.output_tokens) == (120, 85)


async def test_encrypted_reasoning_without_summary_then_fragmented_function_call() -> None:
    events = await decode([fixture("reasoning_encrypted_then_function_call.sse")])
    response = await decode_whole([fixture("reasoning_encrypted_then_function_call.sse")])
    thinking, call = response.message.parts
    assert isinstance(thinking, ThinkingPart) and thinking.text == ""
    assert recover(thinking.signature, "up") == "gAAAAABo4Lx9b25seS1lbmNyeXB0ZWQ="
    assert call == ToolCallPart("call_Wx1yZ2", "get_weather", {"city": "Paris", "unit": "c"})
    fragments = [
        e.delta.json_fragment
        for e in events
        if isinstance(e, PartDelta) and isinstance(e.delta, ToolArgsDelta)
    ]
    assert fragments == ['{"ci', 'ty":"Par', 'is","unit":"c"}']
    assert response.stop_reason == StopReason.TOOL_USE


async def test_parallel_function_calls_are_two_parts() -> None:
    response = await decode_whole([fixture("parallel_function_calls.sse")])
    assert response.message.parts == (
        ToolCallPart("call_a", "get_weather", {"city": "Paris"}),
        ToolCallPart("call_b", "get_weather", {"city": "Rome"}),
    )
    assert response.stop_reason == StopReason.TOOL_USE
    assert (response.usage.input_tokens, response.usage.output_tokens) == (80, 30)


async def test_incomplete_is_max_tokens() -> None:
    response = await decode_whole([fixture("incomplete_max_output_tokens.sse")])
    assert response.message.text == "Once upon a time"
    assert response.stop_reason == StopReason.MAX_TOKENS
    assert response.usage.output_tokens == 16


async def test_failure_before_any_output_is_the_first_event() -> None:
    # No ResponseStart first: the serving layer then treats it as a failure before
    # the reply (an HTTP error, retried or sent to a fallback).
    events = await decode([fixture("failed_before_output.sse")])
    assert len(events) == 1 and isinstance(events[0], StreamError)
    error = events[0].error
    assert isinstance(error, BackendError)
    assert error.code == "server_error" and error.status_code == 502
    assert "error while processing" in error.message


async def test_error_event_mid_stream_ends_the_stream() -> None:
    events = await decode([fixture("error_mid_stream.sse")])
    assert isinstance(events[0], ResponseStart)
    assert [e.delta for e in events if isinstance(e, PartDelta)] == [
        TextDelta("Partial "),
        TextDelta("answer"),
    ]
    last = events[-1]
    assert isinstance(last, StreamError)
    assert last.error.code == "rate_limit_exceeded" and last.error.status_code == 429
    assert sum(isinstance(e, StreamError) for e in events) == 1  # response.failed unread


async def test_truncated_stream_raises() -> None:
    with pytest.raises(BackendProtocolError, match="ended before"):
        await decode([fixture("truncated.sse")])


async def test_items_sent_whole_without_deltas() -> None:
    response = await decode_whole([fixture("items_without_deltas.sse")])
    assert response.message.parts == (
        ThinkingPart("The user wants a greeting.", provider=PROVIDER),
        TextPart("Hi there."),
        ToolCallPart("call_w", "wave", {"times": 2}),
    )


async def test_raw_reasoning_text_is_thinking() -> None:
    response = await decode_whole([fixture("raw_reasoning_text.sse")])
    assert response.message.parts == (
        ThinkingPart("Think step by step.", provider=PROVIDER),
        TextPart("Done."),
    )


def _sse(*events: dict[str, Any]) -> bytes:
    return b"".join(
        b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events
    )


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"event: response.created\ndata: {not json\n\n", "not JSON"),
        (b"data: [1, 2]\n\n", "not an object"),
        (
            _sse(
                {"type": "response.function_call_arguments.delta", "output_index": 0, "delta": "{"}
            ),
            "never added",
        ),
        (
            _sse(
                {
                    "type": "response.output_item.added",
                    "output_index": 0,
                    "item": {"type": "function_call", "call_id": 7, "name": "f"},
                }
            ),
            "'function_call.call_id' is not a string",
        ),
        (
            _sse({"type": "response.completed", "response": "done"}),
            "'response.completed.response' is not a JSON object",
        ),
    ],
)
async def test_malformed_streams_raise_naming_the_field(data: bytes, match: str) -> None:
    with pytest.raises(BackendProtocolError, match=match):
        await decode([data])


async def test_stream_equals_the_non_streamed_response() -> None:
    for name in (
        "text.sse",
        "reasoning_summary_encrypted.sse",
        "reasoning_encrypted_then_function_call.sse",
        "parallel_function_calls.sse",
        "items_without_deltas.sse",
        "raw_reasoning_text.sse",
    ):
        completed = payloads(name)[-1]
        Response.model_validate(completed["response"])
        whole = decode_chat_response(completed["response"], origin="up")
        streamed = await decode_whole([fixture(name)])
        assert whole.message == streamed.message, name
        assert (whole.stop_reason, whole.usage) == (streamed.stop_reason, streamed.usage)


def test_a_failed_response_object_raises_its_error() -> None:
    failed = payloads("failed_before_output.sse")[-1]["response"]
    with pytest.raises(BackendError, match="error while processing") as caught:
        decode_chat_response(failed)
    assert caught.value.code == "server_error"
    with pytest.raises(BackendProtocolError):
        decode_chat_response([])


async def test_llmbridge_own_stream_decodes_back_to_the_same_reply() -> None:
    """The front's encoder and this decoder are inverses: what a Responses client of one
    llmbridge sees is what an openai_responses backend of another reads."""
    request = decode_chat_request(
        {
            "model": "m",
            "input": "hi",
            "include": ["reasoning.encrypted_content"],
            "tools": [{"type": "function", "name": "ls", "parameters": {"type": "object"}}],
        }
    )
    reply = ChatResponse(
        id="resp_x",
        model="m",
        message=Message(
            "assistant",
            (
                ThinkingPart("hmm", signature="sig-1", provider="anthropic"),
                TextPart("Listing."),
                ToolCallPart("call_1", "ls", {"path": "/tmp"}),
            ),
        ),
        stop_reason=StopReason.TOOL_USE,
        usage=Usage(input_tokens=3, output_tokens=4),
    )
    body = await collect(encode_chat_stream(aiter_list(events_from_response(reply)), request))
    decoded = await decode_whole([body])
    thinking, text, call = decoded.message.parts
    assert isinstance(thinking, ThinkingPart) and thinking.text == "hmm"
    assert (text, call) == (TextPart("Listing."), ToolCallPart("call_1", "ls", {"path": "/tmp"}))
    assert decoded.stop_reason == StopReason.TOOL_USE
    assert (decoded.usage.input_tokens, decoded.usage.output_tokens) == (3, 4)
    # The front sealed the signature into encrypted_content; it comes back carried.
    sealed = recover(thinking.signature, "up")
    assert sealed is not None and sealed.startswith("llmbridge.v1.")


async def test_reasoning_tokens_are_read_and_sent_on() -> None:
    """A Responses server's ``output_tokens_details.reasoning_tokens`` reaches the core
    (``Usage.reasoning_tokens``) and every front that reports it: the Responses
    front's ``output_tokens_details`` and chat completions' ``completion_tokens_details``."""
    from llmbridge.dialects.openai.response import encode_usage as chat_usage
    from llmbridge.dialects.responses.response import encode_usage as responses_usage

    events = await decode([fixture("reasoning_summary_encrypted.sse")])
    end = events[-1]
    assert isinstance(end, ResponseEnd) and end.usage.reasoning_tokens == 64
    assert responses_usage(end.usage)["output_tokens_details"] == {"reasoning_tokens": 64}
    assert chat_usage(end.usage)["completion_tokens_details"] == {"reasoning_tokens": 64}
    assert "completion_tokens_details" not in chat_usage(Usage(output_tokens=3))

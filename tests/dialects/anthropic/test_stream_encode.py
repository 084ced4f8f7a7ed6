"""Encoding neutral events as Anthropic SSE, checked with the official SDK."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

import anthropic
import httpx2
import pydantic
import pytest
from anthropic.types import RawMessageStreamEvent

from llmbridge.core.errors import BackendUnavailableError, RateLimitError, RequestTooLargeError
from llmbridge.core.events import (
    PartDelta,
    PartEnd,
    PartStart,
    ResponseEnd,
    ResponseStart,
    SignatureDelta,
    StreamError,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolArgsDelta,
    UsageUpdate,
)
from llmbridge.core.messages import Message, TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.replay import events_from_response
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.core.tool_arguments import parse_tool_arguments
from llmbridge.dialects.anthropic import encode_chat_stream
from llmbridge.dialects.anthropic.stream import error_event
from tests.dialects.anthropic.sse import read_sse

REQUEST = ChatRequest(model="claude-public", messages=(Message("user", (TextPart("q"),)),))
STREAM_EVENT = pydantic.TypeAdapter(RawMessageStreamEvent)


async def aiter(events: Iterable[StreamEvent]) -> AsyncIterator[StreamEvent]:
    for event in events:
        yield event


async def encode(events: Iterable[StreamEvent]) -> bytes:
    return b"".join([chunk async for chunk in encode_chat_stream(aiter(events), REQUEST)])


async def wire_events(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    return [(sse.event, json.loads(sse.data)) for sse in await read_sse(data)]


def full_reply() -> ChatResponse:
    return ChatResponse(
        id="chatcmpl-9",
        model="qwen3:8b",
        message=Message(
            "assistant",
            (
                ThinkingPart("Need the weather.", signature="EqQB+/sig==", provider="anthropic"),
                TextPart("Let me check. ✓"),
                ToolCallPart("call_7", "get_weather", {"city": "Zürich"}),
            ),
        ),
        stop_reason=StopReason.TOOL_USE,
        usage=Usage(input_tokens=321, output_tokens=45),
    )


async def test_thinking_text_tool_use_sequence() -> None:
    events = await wire_events(await encode(events_from_response(full_reply())))
    for name, data in events:
        assert data["type"] == name
        STREAM_EVENT.validate_python(data)
    assert [(name, data.get("index")) for name, data in events] == [
        ("message_start", None),
        ("content_block_start", 0),
        ("content_block_delta", 0),
        ("content_block_delta", 0),
        ("content_block_stop", 0),
        ("content_block_start", 1),
        ("content_block_delta", 1),
        ("content_block_stop", 1),
        ("content_block_start", 2),
        ("content_block_delta", 2),
        ("content_block_stop", 2),
        ("message_delta", None),
        ("message_stop", None),
    ]
    message = events[0][1]["message"]
    assert message["id"].startswith("msg_")
    assert message["model"] == "claude-public"
    assert message["content"] == []
    assert message["stop_reason"] is None
    assert message["usage"]["input_tokens"] == 321
    assert events[1][1]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert events[2][1]["delta"] == {"type": "thinking_delta", "thinking": "Need the weather."}
    assert events[3][1]["delta"] == {"type": "signature_delta", "signature": "EqQB+/sig=="}
    assert events[5][1]["content_block"] == {"type": "text", "text": ""}
    assert events[6][1]["delta"] == {"type": "text_delta", "text": "Let me check. ✓"}
    assert events[8][1]["content_block"] == {
        "type": "tool_use",
        "id": "toolu_call_7",
        "name": "get_weather",
        "input": {},
    }
    assert json.loads(events[9][1]["delta"]["partial_json"]) == {"city": "Zürich"}
    assert events[11][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"input_tokens": 321, "output_tokens": 45},
    }


def sdk_client(data: bytes) -> anthropic.AsyncAnthropic:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=data)

    transport = httpx2.MockTransport(handler)
    return anthropic.AsyncAnthropic(
        api_key="test",
        base_url="http://gateway.test",
        http_client=httpx2.AsyncClient(transport=transport),
    )


async def test_official_sdk_accumulates_the_stream() -> None:
    client = sdk_client(await encode(events_from_response(full_reply())))
    async with client.messages.stream(
        model="claude-public", max_tokens=100, messages=[{"role": "user", "content": "q"}]
    ) as stream:
        message = await stream.get_final_message()
    await client.close()
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use"]
    thinking, text, tool = message.content
    assert thinking.type == "thinking" and thinking.signature == "EqQB+/sig=="
    assert text.type == "text" and text.text == "Let me check. ✓"
    assert tool.type == "tool_use" and tool.input == {"city": "Zürich"}
    assert message.stop_reason == "tool_use"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (321, 45)


async def test_no_empty_text_block_before_a_tool_call() -> None:
    events = await wire_events(
        await encode(
            [
                ResponseStart("r", "m", 0.0),
                PartStart(0, TextPart("")),
                PartDelta(0, TextDelta("")),
                PartEnd(0, TextPart("")),
                PartStart(1, ToolCallPart("c", "f")),
                PartEnd(1, ToolCallPart("c", "f")),
                ResponseEnd(StopReason.END_TURN),
            ]
        )
    )
    starts = [data for name, data in events if name == "content_block_start"]
    assert starts == [
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_c", "name": "f", "input": {}},
        }
    ]
    # A tool call with no arguments sends no input_json_delta: input stays {}.
    assert not [data for name, data in events if name == "content_block_delta"]
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


async def test_message_delta_carries_the_real_input_tokens() -> None:
    events = await wire_events(
        await encode(
            [
                ResponseStart("r", "m", 0.0, input_tokens=100),
                PartStart(0, TextPart("")),
                PartDelta(0, TextDelta("hi")),
                PartEnd(0, TextPart("hi")),
                UsageUpdate(Usage(input_tokens=137, cache_read_input_tokens=20)),
                ResponseEnd(StopReason.MAX_TOKENS, usage=Usage(output_tokens=9)),
            ]
        )
    )
    assert events[0][1]["message"]["usage"]["input_tokens"] == 100
    assert events[-2][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
        # Anthropic's input_tokens leave the 20 cache reads out.
        "usage": {"input_tokens": 117, "output_tokens": 9, "cache_read_input_tokens": 20},
    }


async def test_estimate_is_repeated_when_the_end_has_no_count() -> None:
    events = await wire_events(
        await encode(
            [ResponseStart("r", "m", 0.0, input_tokens=55), ResponseEnd(StopReason.END_TURN)]
        )
    )
    assert events[-2][1]["usage"] == {"input_tokens": 55, "output_tokens": 0}


async def test_split_signature_is_sent_once_before_the_stop() -> None:
    part = ThinkingPart("t", signature="abcdef")
    events = await wire_events(
        await encode(
            [
                ResponseStart("r", "m", 0.0),
                PartStart(0, ThinkingPart("")),
                PartDelta(0, ThinkingDelta("t")),
                PartDelta(0, SignatureDelta("abc")),
                PartDelta(0, SignatureDelta("def")),
                PartEnd(0, part),
                ResponseEnd(StopReason.END_TURN),
            ]
        )
    )
    names = [(name, data.get("delta", {}).get("type")) for name, data in events]
    assert names[1:5] == [
        ("content_block_start", None),
        ("content_block_delta", "thinking_delta"),
        ("content_block_delta", "signature_delta"),
        ("content_block_stop", None),
    ]
    assert events[3][1]["delta"]["signature"] == "abcdef"


async def test_tool_arguments_are_sent_parsed() -> None:
    # A small model double-encoded its arguments; the core repaired them by PartEnd.
    raw = json.dumps(json.dumps({"path": "a.txt"}))
    arguments, _ = parse_tool_arguments(raw)
    client = sdk_client(
        await encode(
            [
                ResponseStart("r", "m", 0.0),
                PartStart(0, ToolCallPart("c", "Read")),
                PartDelta(0, ToolArgsDelta(raw[:5])),
                PartDelta(0, ToolArgsDelta(raw[5:])),
                PartEnd(0, ToolCallPart("c", "Read", arguments)),
                ResponseEnd(StopReason.TOOL_USE),
            ]
        )
    )
    async with client.messages.stream(
        model="m", max_tokens=10, messages=[{"role": "user", "content": "q"}]
    ) as stream:
        message = await stream.get_final_message()
    await client.close()
    assert message.content[0].type == "tool_use"
    assert message.content[0].input == {"path": "a.txt"}


async def test_redacted_thinking_block() -> None:
    part = ThinkingPart("", redacted="enc==", provider="anthropic")
    events = await wire_events(
        await encode(
            [
                ResponseStart("r", "m", 0.0),
                PartStart(0, part),
                PartEnd(0, part),
                ResponseEnd(StopReason.END_TURN),
            ]
        )
    )
    assert events[1][1]["content_block"] == {"type": "redacted_thinking", "data": "enc=="}
    assert events[2][0] == "content_block_stop"
    for _, data in events:
        STREAM_EVENT.validate_python(data)


async def test_stream_error_ends_the_stream() -> None:
    data = await encode(
        [
            ResponseStart("r", "m", 0.0),
            PartStart(0, TextPart("")),
            PartDelta(0, TextDelta("par")),
            StreamError(BackendUnavailableError("Overloaded")),
            PartDelta(0, TextDelta("never sent")),
        ]
    )
    events = await wire_events(data)
    assert events[-1] == (
        "error",
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    )
    assert b"never sent" not in data


async def test_error_before_anything_else() -> None:
    events = await wire_events(await encode([StreamError(RateLimitError("slow down"))]))
    assert events == [
        ("error", {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})
    ]


async def test_stream_without_an_end_reports_an_error() -> None:
    events = await wire_events(await encode([ResponseStart("r", "m", 0.0)]))
    assert [name for name, _ in events] == ["message_start", "error"]
    assert events[-1][1]["error"]["type"] == "api_error"


async def test_sdk_raises_on_the_error_event() -> None:
    client = sdk_client(
        await encode(
            [ResponseStart("r", "m", 0.0), StreamError(BackendUnavailableError("Overloaded"))]
        )
    )
    try:
        async with client.messages.stream(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "q"}]
        ) as stream:
            with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
                await stream.get_final_message()
    finally:
        await client.close()


async def test_error_event_for_the_gateway() -> None:
    events = await wire_events(error_event(RequestTooLargeError("too big")))
    assert events == [
        ("error", {"type": "error", "error": {"type": "request_too_large", "message": "too big"}})
    ]

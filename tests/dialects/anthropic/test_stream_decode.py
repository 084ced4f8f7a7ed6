"""Decoding a real Anthropic API's SSE stream: golden fixtures, one per quirk."""

from __future__ import annotations

import pytest

from llmbridge.core.accumulate import accumulate_sync
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
    ToolArgsDelta,
    UsageUpdate,
)
from llmbridge.core.messages import TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.response import StopReason, Usage
from llmbridge.dialects.anthropic import decode_chat_stream
from tests.dialects.anthropic.sse import aiter_sse, chunked, fixture


async def decode(data: bytes, size: int = 1 << 16) -> list[StreamEvent]:
    return [event async for event in decode_chat_stream(aiter_sse(chunked(data, size)))]


@pytest.mark.parametrize("size", [1, 3, 1 << 16])
async def test_text_only_with_utf8_split_across_chunks(size: int) -> None:
    events = await decode(fixture("text_only"), size)
    assert isinstance(events[0], ResponseStart)
    assert events[0].id == "msg_01XFDUDYJgAACzvnptvVoYEL"
    assert events[0].input_tokens == 25
    assert events[1:5] == [
        PartStart(0, TextPart("")),
        PartDelta(0, TextDelta("Héllo, ")),
        PartDelta(0, TextDelta("wörld 🌍!")),
        PartEnd(0, TextPart("Héllo, wörld 🌍!")),
    ]
    resp = accumulate_sync(events)
    assert resp.message.text == "Héllo, wörld 🌍!"
    assert resp.stop_reason is StopReason.END_TURN
    assert resp.usage == Usage(25, 15, 0, 0)


async def test_thinking_with_signature_then_text() -> None:
    events = await decode(fixture("thinking_then_text"))
    resp = accumulate_sync(events)
    assert resp.message.parts == (
        ThinkingPart(
            "Let me solve 27 * 453.\n27 * 453 = 12231.",
            signature="EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/abc==",
            provider="anthropic",
        ),
        TextPart("27 * 453 = 12,231"),
    )
    # 40 not read from the cache, 12 read: 52 in all, as the core counts.
    assert resp.usage == Usage(52, 60, cache_read_input_tokens=12, cache_creation_input_tokens=0)


async def test_tool_use_fragments_concatenate() -> None:
    events = await decode(fixture("tool_use"), 5)
    fragments = [
        e.delta.json_fragment
        for e in events
        if isinstance(e, PartDelta) and isinstance(e.delta, ToolArgsDelta)
    ]
    # The first input_json_delta is "" and adds nothing.
    assert fragments == ['{"location":', ' "San Francisco, CA", ', '"unit": "fahrenheit"}']
    resp = accumulate_sync(events)
    assert resp.message.parts[1] == ToolCallPart(
        id="toolu_01T1x1fJ34qAmk2tNTrN7Up6",
        name="get_weather",
        arguments={"location": "San Francisco, CA", "unit": "fahrenheit"},
    )
    assert resp.stop_reason is StopReason.TOOL_USE
    assert [e.index for e in events if isinstance(e, PartStart)] == [0, 1]


async def test_pings_and_unknown_events_are_ignored() -> None:
    events = await decode(fixture("ping_interleaved"))
    assert [type(e) for e in events] == [
        ResponseStart,
        PartStart,
        PartDelta,
        PartEnd,
        UsageUpdate,
        ResponseEnd,
    ]
    resp = accumulate_sync(events)
    assert resp.stop_reason is StopReason.STOP_SEQUENCE
    assert resp.stop_sequence == "\n\nHuman:"


async def test_redacted_thinking_keeps_part_numbering() -> None:
    events = await decode(fixture("redacted_thinking"))
    starts = [e for e in events if isinstance(e, PartStart)]
    assert [e.index for e in starts] == [0, 1, 2]
    resp = accumulate_sync(events)
    assert resp.message.parts == (
        ThinkingPart(
            "",
            redacted="EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB9URj2pLmN",
            provider="anthropic",
        ),
        ThinkingPart("Visible reasoning.", signature="sig-visible", provider="anthropic"),
        TextPart("Done."),
    )


async def test_mid_stream_error_is_the_last_event() -> None:
    events = await decode(fixture("error_mid_stream"))
    last = events[-1]
    assert isinstance(last, StreamError)
    assert isinstance(last.error, BackendError)
    assert last.error.message == "Overloaded"
    assert last.error.status_code == 503
    assert last.error.code == "overloaded_error"
    assert PartDelta(0, TextDelta("Partial")) in events


async def test_truncated_stream_is_a_protocol_error() -> None:
    with pytest.raises(BackendProtocolError, match="before message_stop"):
        await decode(fixture("truncated"))


@pytest.mark.parametrize(
    "data",
    [
        b"event: message_start\ndata: {not json\n\n",
        b'event: message_start\ndata: ["a list"]\n\n',
        b'event: message_start\ndata: {"type":"message_start","message":{}}\n\n',
        b'event: content_block_start\ndata: {"type":"content_block_start","index":0}\n\n',
    ],
)
async def test_malformed_events_are_protocol_errors(data: bytes) -> None:
    with pytest.raises(BackendProtocolError):
        await decode(data)


async def test_delta_for_an_unknown_block_is_a_protocol_error() -> None:
    start = fixture("truncated").split(b"event: content_block_start")[0]
    delta = (
        b"event: content_block_delta\n"
        b'data: {"type":"content_block_delta","index":4,'
        b'"delta":{"type":"text_delta","text":"x"}}\n\n'
    )
    with pytest.raises(BackendProtocolError, match="never started"):
        await decode(start + delta)

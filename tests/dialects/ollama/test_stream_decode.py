"""decode_chat_stream against golden NDJSON captures, one per quirk of Ollama's streams."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmbridge.core.accumulate import accumulate, accumulate_sync
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
)
from llmbridge.core.messages import TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.response import StopReason, Timings, Usage
from llmbridge.core.stream import EventBatches
from llmbridge.dialects.ollama import decode_chat_batches, decode_chat_stream, split_ndjson_lines
from tests.dialects.ollama.helpers import aiter_of, collect, decode_fixture, fixture_bytes


def assert_grammar(events: list[StreamEvent]) -> None:
    """ResponseStart, (PartStart, PartDelta*, PartEnd)*, (ResponseEnd | StreamError)."""
    assert isinstance(events[0], ResponseStart)
    assert isinstance(events[-1], ResponseEnd | StreamError)
    open_index: int | None = None
    next_index = 0
    for event in events[1:-1]:
        if isinstance(event, PartStart):
            assert open_index is None and event.index == next_index
            open_index, next_index = event.index, next_index + 1
        elif isinstance(event, PartDelta):
            assert event.index == open_index
        elif isinstance(event, PartEnd):
            assert event.index == open_index
            open_index = None
    if isinstance(events[-1], ResponseEnd):
        assert open_index is None


async def test_plain_text() -> None:
    events = await decode_fixture("text.ndjson")
    assert_grammar(events)
    start = events[0]
    assert isinstance(start, ResponseStart)
    assert start.model == "llama3.2"
    assert start.id.startswith("chatcmpl-")
    assert start.created == pytest.approx(1740823200.123456)
    deltas = [
        e.delta.text for e in events if isinstance(e, PartDelta) and isinstance(e.delta, TextDelta)
    ]
    assert deltas == ["Héllo", ", 世界 ", "🌍!"]
    response = accumulate_sync(events)
    assert response.message.parts == (TextPart("Héllo, 世界 🌍!"),)
    assert response.stop_reason is StopReason.END_TURN
    assert response.usage == Usage(input_tokens=26, output_tokens=4)
    assert response.timings == Timings(
        total_ns=912345678, load_ns=12345678, prompt_eval_ns=130000000, eval_ns=700000000
    )


async def test_thinking_then_content_cut_at_length() -> None:
    events = await decode_fixture("thinking_then_content.ndjson")
    assert_grammar(events)
    response = accumulate_sync(events)
    assert response.message.parts == (
        ThinkingPart("The user wants 2+2."),
        TextPart("2 + 2 ="),
    )
    assert response.stop_reason is StopReason.MAX_TOKENS
    assert response.usage == Usage(input_tokens=12, output_tokens=8)
    assert response.timings == Timings(total_ns=500000000)


async def test_tool_call_only_in_done_frame() -> None:
    events = await decode_fixture("tool_calls_in_done_frame.ndjson")
    assert_grammar(events)
    response = accumulate_sync(events)
    (call,) = response.message.parts
    assert isinstance(call, ToolCallPart)
    assert call.name == "get_weather"
    assert call.arguments == {"city": "Paris", "unit": "celsius"}
    assert call.id.startswith("call_")
    # Ollama says "stop" for a tool call; any tool call in any frame means tool_use.
    assert response.stop_reason is StopReason.TOOL_USE
    assert response.usage == Usage(input_tokens=150, output_tokens=20)


async def test_parallel_tool_calls_all_index_zero_stay_separate() -> None:
    events = await decode_fixture("parallel_tool_calls_index0.ndjson")
    assert_grammar(events)
    response = accumulate_sync(events)
    calls = response.message.tool_calls
    assert [(c.name, c.arguments) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "London"}),
        ("get_time", {"zone": "Europe/Berlin"}),
        ("get_time", {"zone": "Asia/Tokyo"}),
    ]
    assert calls[0].id == "call_a1" and calls[1].id == "call_b2"
    assert len({c.id for c in calls}) == 4
    assert response.stop_reason is StopReason.TOOL_USE


async def test_mid_stream_error_is_the_last_event() -> None:
    events = await decode_fixture("mid_stream_error.ndjson")
    assert_grammar(events)
    error = events[-1]
    assert isinstance(error, StreamError)
    assert type(error.error) is BackendError
    assert error.error.message == (
        "an error was encountered while running the model: unexpected EOF"
    )
    texts = [
        e.delta.text for e in events if isinstance(e, PartDelta) and isinstance(e.delta, TextDelta)
    ]
    assert texts == ["Once upon", " a time"]  # the line after the error is never read
    with pytest.raises(BackendError, match="unexpected EOF"):
        accumulate_sync(events)


async def test_stream_without_done_frame_is_a_protocol_error() -> None:
    lines = fixture_bytes("truncated_without_done.ndjson").decode().split("\n")
    seen: list[StreamEvent] = []
    with pytest.raises(BackendProtocolError, match="done"):
        async for event in decode_chat_stream(aiter_of(lines)):
            seen.append(event)
    assert isinstance(seen[0], ResponseStart)


async def test_non_json_line_is_a_protocol_error() -> None:
    lines = ['{"model":"m","message":{"role":"assistant","content":"a"},"done":false}', "<html>"]
    with pytest.raises(BackendProtocolError, match="not JSON"):
        await collect(decode_chat_stream(aiter_of(lines)))


@pytest.mark.parametrize(
    "line",
    [
        "[1, 2]",
        '{"message": "text"}',
        '{"message": {"content": 5}}',
        '{"message": {"tool_calls": {"function": {}}}}',
        '{"message": {"tool_calls": [{"function": {"arguments": {}}}]}}',
    ],
)
async def test_malformed_frames_are_protocol_errors(line: str) -> None:
    with pytest.raises(BackendProtocolError):
        await collect(decode_chat_stream(aiter_of([line])))


class ChunkedByteStream(httpx.AsyncByteStream):
    """Yields a body in the given chunks, as a socket might deliver it."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


def chunked_response(body: bytes, size: int) -> httpx.Response:
    chunks = [body[start : start + size] for start in range(0, len(body), size)]
    return httpx.Response(200, stream=ChunkedByteStream(chunks))


@pytest.mark.parametrize(
    ("char", "cut"), [("é", 1), ("界", 1), ("界", 2), ("🌍", 1), ("🌍", 2), ("🌍", 3)]
)
async def test_utf8_split_across_chunks_through_httpx(char: str, cut: int) -> None:
    body = fixture_bytes("text.ndjson")
    at = body.index(char.encode()) + cut  # inside the character's UTF-8 bytes
    response = httpx.Response(200, stream=ChunkedByteStream([body[:at], body[at:]]))
    result = await accumulate(decode_chat_stream(response.aiter_lines()))
    assert result.message.text == "Héllo, 世界 🌍!"


async def test_one_byte_chunks_through_httpx() -> None:
    response = chunked_response(fixture_bytes("thinking_then_content.ndjson"), 1)
    result = await accumulate(decode_chat_stream(response.aiter_lines()))
    assert result.message.thinking == "The user wants 2+2."
    assert result.message.text == "2 + 2 ="


@pytest.mark.parametrize("size", [1, 3, 64])
async def test_split_ndjson_lines_keeps_utf8_and_unicode_line_breaks(size: int) -> None:
    # Go's encoder writes U+0085 raw; httpx's aiter_lines would cut this record in two.
    body = (
        b'{"model":"m","message":{"role":"assistant",'
        b'"content":"a\xc2\x85b \xe2\x80\xa8 \xf0\x9f\x8c\x8d"},'
        b'"done":false}\r\n'
        b'{"model":"m","message":{"role":"assistant","content":""},"done":true}'
    )
    lines = split_ndjson_lines(chunked_response(body, size).aiter_bytes())
    result = await accumulate(decode_chat_stream(lines))
    assert result.message.text == "a\x85b \u2028 🌍"


async def test_aiter_lines_would_break_on_u0085() -> None:
    body = b'{"message":{"content":"a\xc2\x85b"},"done":true}\n'
    lines = [line async for line in chunked_response(body, 4).aiter_lines()]
    assert len(lines) == 2  # why split_ndjson_lines exists


async def test_split_ndjson_lines_rejects_invalid_utf8() -> None:
    with pytest.raises(BackendProtocolError, match="UTF-8"):
        await collect(split_ndjson_lines(aiter_of([b'{"a":"\xff"}\n'])))


async def test_text_delta_events_are_exact() -> None:
    lines = [
        '{"model":"m","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":"hi"},"done":false}',
        '{"model":"m","created_at":"2025-01-01T00:00:01Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop"}',
    ]
    events = await collect(decode_chat_stream(aiter_of(lines)))
    assert events[1:] == [
        PartStart(0, TextPart("")),
        PartDelta(0, TextDelta("hi")),
        PartEnd(0, TextPart("hi")),
        ResponseEnd(stop_reason=StopReason.END_TURN),
    ]
    assert isinstance(events[0], ResponseStart) and events[0].created == 1735689600.0


_LINES = [
    b'{"model":"m","created_at":"2024-01-01T00:00:00Z","message":{"role":"assistant","content":"a"},"done":false}',
    b'{"model":"m","created_at":"2024-01-01T00:00:00Z",'
    b'"message":{"role":"assistant","content":"caf\xc3\xa9 \xc2\x85"},"done":false}',
    b'{"model":"m","created_at":"2024-01-01T00:00:00Z","message":{"role":"assistant","thinking":"hm"},"done":false}',
    b"",
    b"  ",
    b'{"error":"model runner stopped"}',
    b"{not json",
    b'{"model":"m","message":{"content":"\xff"},"done":false}',  # not UTF-8
    b"[1]",
    b'{"model":"m","created_at":"2024-01-01T00:00:00Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":3,"eval_count":2}',
]


async def _ollama_outcome(events: AsyncIterator[StreamEvent]) -> list[object]:
    """The events of a decode, then the kind and message of the error it raised."""
    seen: list[object] = []
    try:
        async for event in events:
            if isinstance(event, StreamError):
                seen.append(("StreamError", event.error.message))
            elif isinstance(event, ResponseStart):  # its id is made up for each decode
                seen.append(replace(event, id=""))
            else:
                seen.append(event)
    except BackendError as exc:
        seen.append((type(exc).__name__, exc.message))
    return seen


@given(
    st.lists(st.sampled_from(_LINES), max_size=10),
    st.lists(st.integers(min_value=1, max_value=90), min_size=1, max_size=10),
    st.booleans(),
)
async def test_decoding_reads_in_batches_gives_what_line_by_line_decoding_gives(
    lines: list[bytes], sizes: list[int], newline_at_end: bool
) -> None:
    """``decode_chat_batches`` (the backend's path: each read's events as one list)
    against ``decode_chat_stream`` over ``split_ndjson_lines``: the same events and
    the same error, however the bytes are cut, whatever the lines hold."""
    data = b"\n".join([_LINES[0], *lines]) + (b"\n" if newline_at_end else b"")
    reads, at = [], 0
    for size in sizes * len(data):
        if at >= len(data):
            break
        reads.append(data[at : at + size])
        at += size
    expected = await _ollama_outcome(decode_chat_stream(split_ndjson_lines(aiter_of(reads))))
    batched = EventBatches(decode_chat_batches(aiter_of(reads)))
    assert await _ollama_outcome(batched) == expected


async def test_each_read_is_one_batch_of_its_events() -> None:
    """Three lines in one read are one list of events; a line's events never wait
    for a later read."""
    data = b"".join(line + b"\n" for line in (_LINES[0], _LINES[1], _LINES[2]))
    batches = [batch async for batch in decode_chat_batches(aiter_of([data, _LINES[-1] + b"\n"]))]
    assert len(batches) == 2
    assert isinstance(batches[0][0], ResponseStart)
    assert isinstance(batches[1][-1], ResponseEnd)

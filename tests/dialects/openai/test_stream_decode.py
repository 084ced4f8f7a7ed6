"""decode_chat_stream over golden SSE captures, one per quirk of real servers."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

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
from llmbridge.core.response import StopReason, Usage
from llmbridge.dialects.openai.stream import decode_chat_stream, decode_chat_stream_bytes
from tests.dialects.openai.helpers import (
    FIXTURES,
    decode_events,
    decode_response,
    fixture_bytes,
    split_every,
    sse_events,
)


async def test_plain_text() -> None:
    events = await decode_events([fixture_bytes("text.sse")])
    assert events[0] == ResponseStart(
        id="chatcmpl-A1b2C3", model="gpt-4o-mini-2024-07-18", created=1732240000.0
    )
    assert events[1] == PartStart(0, TextPart(""))
    assert [e.delta for e in events if isinstance(e, PartDelta)] == [
        TextDelta("Bonjour, "),
        TextDelta("café 🌍"),
        TextDelta("!"),
    ]
    assert events[-2] == PartEnd(0, TextPart("Bonjour, café 🌍!"))
    assert events[-1] == ResponseEnd(stop_reason=StopReason.END_TURN)


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64])
async def test_any_chunking_gives_the_same_response(size: int) -> None:
    data = fixture_bytes("text.sse")
    whole = await decode_response([data])
    assert await decode_response(split_every(data, size)) == whole


async def test_multibyte_character_split_across_chunks() -> None:
    data = fixture_bytes("text.sse")
    emoji = "🌍".encode()
    start = data.index(emoji)
    for cut in range(start + 1, start + len(emoji)):  # every cut inside the 4 bytes
        response = await decode_response([data[:cut], data[cut:]])
        assert response.message.text == "Bonjour, café 🌍!"
    accent = data.index("é".encode())
    response = await decode_response([data[: accent + 1], data[accent + 1 :]])
    assert response.message.text == "Bonjour, café 🌍!"


async def test_reasoning_under_reasoning_field() -> None:
    response = await decode_response([fixture_bytes("reasoning_field.sse")])
    assert response.message.parts == (
        ThinkingPart("The user says hi."),
        TextPart("Hello!"),
    )
    assert response.stop_reason is StopReason.END_TURN
    assert response.model == "qwen3:0.6b"


async def test_reasoning_under_reasoning_content_with_usage_on_finish_chunk() -> None:
    response = await decode_response([fixture_bytes("reasoning_content.sse")])
    assert response.message.parts == (
        ThinkingPart("9.11 < 9.9 because .90 > .11"),
        TextPart("9.9 is larger."),
    )
    assert response.usage == Usage(
        input_tokens=15, output_tokens=42, cache_read_input_tokens=0, reasoning_tokens=30
    )
    assert response.id == "5f3a9c1e-0b7d-4c52-9d0e-2f8a7b6c1d00"


async def test_content_in_the_finishing_chunk_is_kept() -> None:
    response = await decode_response([fixture_bytes("content_with_finish.sse")])
    assert response.message.parts == (TextPart("The answer is 42."),)
    assert response.stop_reason is StopReason.MAX_TOKENS


async def test_tool_call_fragments_across_chunks() -> None:
    events = await decode_events([fixture_bytes("tool_call_fragments.sse")])
    starts = [e for e in events if isinstance(e, PartStart)]
    assert starts == [
        PartStart(0, ToolCallPart(id="call_aaa111", name="get_weather")),
        PartStart(1, ToolCallPart(id="call_bbb222", name="get_time")),
    ]
    response = await decode_response([fixture_bytes("tool_call_fragments.sse")])
    assert response.message.parts == (
        ToolCallPart("call_aaa111", "get_weather", {"city": "Paris"}),
        ToolCallPart("call_bbb222", "get_time", {"tz": "CET"}),
    )
    assert response.stop_reason is StopReason.TOOL_USE


async def test_parallel_calls_all_at_index_zero_stay_separate() -> None:
    response = await decode_response([fixture_bytes("parallel_index_zero.sse")])
    assert response.message.parts == (
        ToolCallPart("call_p1", "get_weather", {"city": "Paris"}),
        ToolCallPart("call_p2", "get_weather", {"city": "Tokyo"}),
        ToolCallPart("call_p3", "get_time", {"tz": "JST"}),
    )
    assert response.stop_reason is StopReason.TOOL_USE


async def test_finish_reason_stop_after_tool_calls_is_tool_use() -> None:
    response = await decode_response([fixture_bytes("stop_after_tool_calls.sse")])
    assert response.message.parts == (
        ToolCallPart("chatcmpl-tool-9c1", "search", {"query": "llmbridge"}),
    )
    assert response.stop_reason is StopReason.TOOL_USE


async def test_usage_from_the_include_usage_chunk() -> None:
    events = await decode_events([fixture_bytes("include_usage.sse")])
    end = events[-1]
    assert isinstance(end, ResponseEnd)
    assert end.usage == Usage(
        input_tokens=21, output_tokens=3, cache_read_input_tokens=16, reasoning_tokens=0
    )
    assert end.stop_reason is StopReason.END_TURN


async def test_mid_stream_error_payload_becomes_stream_error() -> None:
    events = await decode_events([fixture_bytes("mid_stream_error.sse")])
    assert isinstance(events[0], ResponseStart)
    assert PartDelta(0, TextDelta("Partial")) in events
    last = events[-1]
    assert isinstance(last, StreamError)
    assert isinstance(last.error, BackendError)
    assert last.error.message == "The server had an error while processing your request."
    assert last.error.code == "internal_error"
    assert not any(isinstance(e, ResponseEnd) for e in events)
    with pytest.raises(BackendError, match="while processing"):
        await decode_response([fixture_bytes("mid_stream_error.sse")])


async def test_error_event_becomes_stream_error() -> None:
    events = await decode_events([fixture_bytes("event_error.sse")])
    last = events[-1]
    assert isinstance(last, StreamError)
    assert last.error.message == "upstream overloaded"


async def test_truncated_stream_raises_protocol_error() -> None:
    data = fixture_bytes("truncated.sse")
    with pytest.raises(BackendProtocolError, match="ended before it finished"):
        await decode_events([data])


async def test_stream_with_done_but_no_finish_reason_is_complete() -> None:
    data = fixture_bytes("truncated.sse") + b"data: [DONE]\n\n"
    response = await decode_response([data])
    assert response.message.text == "Once upon a time"
    assert response.stop_reason is StopReason.END_TURN


async def test_finish_reason_without_done_is_complete() -> None:
    data = fixture_bytes("content_with_finish.sse").replace(b"data: [DONE]\n\n", b"")
    response = await decode_response([data])
    assert response.message.text == "The answer is 42."


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"data: {not json\n\n", "not JSON"),
        (b"data: [1, 2]\n\n", "not a JSON object"),
        (b'data: {"id":"x","choices":{"index":0}}\n\n', "not a list"),
        (b'data: {"id":"x","choices":[{"index":0,"delta":"hi"}]}\n\n', "delta"),
        (b'data: {"id":"x","choices":[{"index":0,"delta":{"content":5}}]}\n\n', "'content'"),
        (b"data: [DONE]\n\n", "before its first chunk"),
        (b"", "before its first chunk"),
    ],
)
async def test_malformed_streams_raise_protocol_error(data: bytes, match: str) -> None:
    with pytest.raises(BackendProtocolError, match=match):
        await decode_events([data])


async def test_string_error_payload() -> None:
    events = await decode_events([b'data: {"error": "model not loaded"}\n\n'])
    assert len(events) == 1
    only = events[0]
    assert isinstance(only, StreamError)
    assert only.error.message == "model not loaded"


async def test_both_reasoning_names_in_one_delta_count_once() -> None:
    chunk = (
        b'data: {"id":"c","model":"m","created":1,"choices":[{"index":0,'
        b'"delta":{"reasoning":"think","reasoning_content":"think"},"finish_reason":"stop"}]}\n\n'
    )
    response = await decode_response([chunk])
    assert response.message.parts == (ThinkingPart("think"),)


async def test_other_choices_are_ignored() -> None:
    chunk = (
        b'data: {"id":"c","model":"m","created":1,"choices":['
        b'{"index":1,"delta":{"content":"other"},"finish_reason":"stop"},'
        b'{"index":0,"delta":{"content":"mine"},"finish_reason":"stop"}]}\n\n'
    )
    response = await decode_response([chunk])
    assert response.message.text == "mine"


async def _outcome(events: AsyncIterator[StreamEvent]) -> list[object]:
    """The events of a decode, then the type and message of the error it raised, if any."""
    seen: list[object] = []
    try:
        async for event in events:
            if isinstance(event, StreamError):  # errors compare by kind and message
                seen.append(("StreamError", type(event.error).__name__, event.error.message))
            else:
                seen.append(event)
    except BackendError as exc:
        seen.append((type(exc).__name__, exc.message))
    return seen


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.sse")))
@pytest.mark.parametrize("size", [1, 7, 64, 1 << 20])
async def test_decoding_the_bytes_in_place_gives_what_httpx_sse_parsing_gives(
    name: str, size: int
) -> None:
    """``decode_chat_stream_bytes`` (the backends' path: SSE parsed as the bytes
    arrive) against ``decode_chat_stream`` over httpx-sse's own parser, on
    every captured stream, cut anywhere."""
    pieces = split_every(fixture_bytes(name), size)
    expected = await _outcome(decode_chat_stream(sse_events(pieces)))
    assert await _outcome(decode_chat_stream_bytes(_chunks(pieces))) == expected


async def _chunks(pieces: list[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


def _frame(payload: dict[str, object]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


_START = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
RUN_FRAMES = [
    _frame(_START | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
    _frame(_START | {"choices": [{"index": 0, "delta": {"content": 'a "q"\nline: data: x'}}]}),
    _frame(_START | {"choices": [{"index": 0, "delta": {"content": "tok "}}]}),
    _frame(_START | {"choices": [{"index": 0, "delta": {"reasoning_content": "think"}}]}),
    _frame(
        _START
        | {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "id": "t", "function": {"name": "f"}}]},
                }
            ]
        }
    ),
    _frame(_START | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    _frame(_START | {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}),
    b'data: {"error": {"message": "overloaded"}}\n\n',
]
"""Events of one plain ``data:`` line of a JSON object each."""
OTHER_FRAMES = [
    b": keep-alive\n\n",
    b"data: [DONE]\n\n",
    b'event: error\ndata: {"message": "named"}\n\n',
    b"data: [1, 2]\n\n",
    b"data: 3\n\n",
    b"data: {not json\n\n",
    b'id: 7\ndata: {"id":"c","choices":[]}\n\n',
    b'data: {"id":"c",\ndata: "choices":[]}\n\n',  # two data lines, joined by the parser
    b'data: {"id":"c","choices":[]}\r\n\r\n',
    b'data:{"id":"c","choices":[]}\n\n',
    b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"\xff"}}]}\n\n',  # bad UTF-8
]
"""The other kinds of event an OpenAI-compatible stream may send, well-formed or not."""


@example([RUN_FRAMES[7], RUN_FRAMES[2]], [3], False)  # events after an error in its read
@given(
    st.lists(st.one_of(st.sampled_from(RUN_FRAMES), st.sampled_from(OTHER_FRAMES)), max_size=12),
    st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=12),
    st.booleans(),
)
async def test_reads_of_many_events_decode_as_the_event_parser_does(
    frames: list[bytes], sizes: list[int], cut: bool
) -> None:
    """Reads of several whole events of every kind, or cut anywhere, give the events
    and the error httpx-sse's parser gives the same bytes."""
    data = b"".join([RUN_FRAMES[0], *frames])
    reads: list[bytes] = []
    if cut:  # the byte counts as cut points, the reads not at event boundaries
        at = 0
        for size in sizes * len(data):
            if at >= len(data):
                break
            reads.append(data[at : at + size * 17])
            at += size * 17
    else:
        rest = [RUN_FRAMES[0], *frames]
        for size in sizes * len(rest):
            if not rest:
                break
            reads.append(b"".join(rest[:size]))
            rest = rest[size:]
    expected = await _outcome(decode_chat_stream(sse_events(reads)))
    assert await _outcome(decode_chat_stream_bytes(_chunks(reads))) == expected

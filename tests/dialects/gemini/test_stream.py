"""Gemini streams (``dialects/gemini/stream.py``): Google-shaped SSE captures decoded, one
per quirk (``tests/fixtures/gemini/reply_*.sse``), golden encoder output
(``reply_encoded_*``; regenerate with ``UPDATE_SNAPSHOTS=1`` and review the diff), errors
in a stream both ways, the google-genai SDK's client reading an encoded stream, and a
hypothesis round trip: events -> encode -> SSE bytes -> ``aiter_sse`` -> decode ->
``accumulate``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from google import genai
from google.genai import types as genai_types
from httpx_sse import ServerSentEvent
from hypothesis import given, settings
from hypothesis import strategies as st

from llmbridge.core.accumulate import accumulate
from llmbridge.core.errors import (
    BackendError,
    BackendHTTPError,
    BackendProtocolError,
    RateLimitError,
)
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
from llmbridge.core.messages import TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.replay import events_from_response
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.dialects.framing import aiter_sse
from llmbridge.dialects.gemini.call_ids import issued_call_id
from llmbridge.dialects.gemini.stream import (
    decode_chat_stream,
    encode_chat_stream,
    encode_chat_stream_array,
)
from llmbridge.dialects.gemini.thoughts import GEMINI
from tests.dialects.gemini.test_response import (
    ORIGIN,
    check_golden,
    decoded_meaning,
    gemini_request,
    meaning,
    responses,
)

FIXTURES = Path(__file__).parents[2] / "fixtures" / "gemini"


def chunked(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]


async def _bytes(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def _events(events: Iterable[StreamEvent]) -> AsyncIterator[StreamEvent]:
    for event in events:
        yield event


async def _decoded(data: bytes, size: int) -> list[StreamEvent]:
    sse = aiter_sse(_bytes(chunked(data, size)))
    return [event async for event in decode_chat_stream(sse, origin=ORIGIN)]


def decode(data: bytes, size: int = 1 << 16) -> list[StreamEvent]:
    return asyncio.run(_decoded(data, size))


def decode_reply(data: bytes, size: int = 1 << 16) -> ChatResponse:
    async def run() -> ChatResponse:
        sse = aiter_sse(_bytes(chunked(data, size)))
        return await accumulate(decode_chat_stream(sse, origin=ORIGIN))

    return asyncio.run(run())


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


# -- decoding Google's streams (the gemini backend) -------------------------------------


def _call(name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return (name, arguments)


DECODED: dict[str, tuple[tuple[Any, ...], StopReason, Usage]] = {
    "reply_text.sse": (
        (TextPart("Hello, wörld \u2028 café!"),),
        StopReason.END_TURN,
        Usage(input_tokens=9, output_tokens=5),
    ),
    "reply_function_call_and_text_in_one_candidate.sse": (
        (TextPart("Let me check the weather."), _call("get_weather", {"city": "Lyon", "days": 2})),
        StopReason.TOOL_USE,
        Usage(input_tokens=30, output_tokens=12),
    ),
    "reply_finish_reason_in_own_chunk.sse": (
        (TextPart("Short answer."),),
        StopReason.MAX_TOKENS,
        Usage(input_tokens=4, output_tokens=3),
    ),
    "reply_safety_without_content.sse": ((), StopReason.CONTENT_FILTER, Usage(input_tokens=11)),
    "reply_thought_signature_on_function_call.sse": (
        (
            ThinkingPart(
                "**Planning** I should look at the files first.",
                signature=GEMINI.carry(ORIGIN, "CiQB0e2Kb0sig+/A"),
                provider="gemini",
            ),
            _call("list_directory", {"path": "."}),
            _call("read_file", {"path": "README.md"}),
        ),
        StopReason.TOOL_USE,
        Usage(input_tokens=20, output_tokens=25, reasoning_tokens=15),
    ),
    "reply_signature_in_empty_last_part.sse": (
        (
            TextPart("The answer is 4."),
            ThinkingPart("", signature=GEMINI.carry(ORIGIN, "EtQBsig2"), provider="gemini"),
        ),
        StopReason.END_TURN,
        Usage(input_tokens=6, output_tokens=24, reasoning_tokens=20),
    ),
}


def _comparable(parts: Iterable[Any]) -> tuple[Any, ...]:
    """Tool calls as (name, arguments), with their fresh ``call_`` ids checked apart."""
    out: list[Any] = []
    for part in parts:
        if isinstance(part, ToolCallPart):
            assert part.id.startswith("call_")  # Google sent no id: a fresh one
            out.append(_call(part.name, part.arguments))
        else:
            out.append(part)
    return tuple(out)


@pytest.mark.parametrize("name", sorted(DECODED))
@pytest.mark.parametrize("size", [1, 7, 1 << 16])
def test_decode_captures(name: str, size: int) -> None:
    parts, stop_reason, usage = DECODED[name]
    reply = decode_reply(fixture(name), size)
    assert _comparable(reply.message.parts) == parts
    assert reply.stop_reason is stop_reason
    assert reply.usage == usage
    assert reply.id.startswith("resp-")
    assert reply.model.startswith("gemini-2.5")


def test_decode_event_grammar() -> None:
    events = decode(fixture("reply_function_call_and_text_in_one_candidate.sse"))
    kinds = [type(event).__name__ for event in events]
    assert kinds == [
        "ResponseStart",
        "PartStart",
        "PartDelta",
        "PartEnd",
        "PartStart",
        "PartDelta",
        "PartEnd",
        "ResponseEnd",
    ]
    assert [event.index for event in events if isinstance(event, PartStart)] == [0, 1]


def test_decode_error_mid_stream_is_rate_limited_with_retry_after() -> None:
    events = decode(fixture("reply_error_mid_stream.sse"))
    assert isinstance(events[0], ResponseStart)
    last = events[-1]
    assert isinstance(last, StreamError)
    error = last.error
    assert isinstance(error, BackendHTTPError)
    assert (error.status_code, error.backend_status, error.retry_after) == (429, 429, 7.0)
    assert "RESOURCE_EXHAUSTED" in error.message and "quota" in error.message
    assert not isinstance(error, RateLimitError)  # a backend's 429, counted as such


@pytest.mark.parametrize(
    ("error", "status"),
    [
        ({"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}, 503),
        ({"message": "slow down", "status": "RESOURCE_EXHAUSTED"}, 429),
        ({"code": 500, "message": "boom", "status": "INTERNAL"}, 502),
        ({"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}, 400),
        ({"code": "x", "status": "DEADLINE_EXCEEDED"}, 502),
        ("just a string", 502),
    ],
)
def test_decode_error_object_maps_by_code_or_status(error: object, status: int) -> None:
    data = b'data: {"candidates":[{"content":{"parts":[{"text":"a"}]}}]}\r\n\r\n'
    data += b"data: " + orjson.dumps({"error": error}) + b"\r\n\r\n"
    last = decode(data)[-1]
    assert isinstance(last, StreamError)
    assert last.error.status_code == status


def test_decode_error_as_first_chunk() -> None:
    data = b'data: {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}\n\n'
    events = decode(data)
    assert len(events) == 1 and isinstance(events[0], StreamError)
    assert events[0].error.status_code == 429


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (fixture("reply_truncated.sse"), "before a finishReason"),
        (b"", "before its first chunk"),
        (b"data: not json\n\n", "not JSON"),
        (b"data: [1, 2]\n\n", "not a JSON object"),
        (b'data: {"candidates": [{"content": {"parts": [{"text": 1}]}}]}\n\n', "text"),
        (b'data: {"candidates": [{"content": {"parts": "x"}}]}\n\n', "parts"),
    ],
)
def test_decode_broken_streams(data: bytes, message: str) -> None:
    with pytest.raises(BackendProtocolError, match=message):
        decode(data)


def test_decode_ignores_other_candidates_and_keeps_the_last_usage() -> None:
    chunks = [
        {"candidates": [{"content": {"parts": [{"text": "zero"}]}, "index": 0}]},
        {"candidates": [{"content": {"parts": [{"text": "one"}]}, "index": 1}]},
        {
            "candidates": [{"finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 1},
        },
        {"usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2}},
    ]
    data = b"".join(b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in chunks)
    reply = decode_reply(data)
    assert reply.message.parts == (TextPart("zero"),)
    assert reply.usage == Usage(input_tokens=5, output_tokens=2)


def test_decode_thought_text_after_a_signed_thought_is_a_new_part() -> None:
    parts = [
        {"text": "first", "thought": True, "thoughtSignature": "AAAA"},
        {"text": "second", "thought": True},
        {"text": "answer"},
    ]
    chunks = [{"candidates": [{"content": {"parts": [p]}}]} for p in parts]
    chunks[-1]["candidates"][0]["finishReason"] = "STOP"
    data = b"".join(b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in chunks)
    assert decode_reply(data).message.parts == (
        ThinkingPart("first", signature=GEMINI.carry(ORIGIN, "AAAA"), provider="gemini"),
        ThinkingPart("second", provider="gemini"),
        TextPart("answer"),
    )


# -- encoding streams for Gemini clients (the gateway's front) ---------------------------

START = ResponseStart(id="up-1", model="backend-model", created=1764000000.0, input_tokens=7)


def _text_events(start: int, *pieces: str) -> list[StreamEvent]:
    return [
        PartStart(start, TextPart("")),
        *(PartDelta(start, TextDelta(piece)) for piece in pieces),
        PartEnd(start, TextPart("".join(pieces))),
    ]


TEXT = [
    START,
    *_text_events(0, "Hel", "lo \u2028 wörld"),
    UsageUpdate(Usage(output_tokens=2)),
    ResponseEnd(StopReason.END_TURN, Usage(input_tokens=7, output_tokens=3)),
]
THINKING_THEN_CALL = [
    START,
    PartStart(0, ThinkingPart("")),
    PartDelta(0, ThinkingDelta("Weather ")),
    PartDelta(0, ThinkingDelta("needed.")),
    PartDelta(0, SignatureDelta("c2lnLTE=")),
    PartEnd(0, ThinkingPart("Weather needed.", signature="c2lnLTE=")),
    *_text_events(1, "Checking."),
    PartStart(2, ToolCallPart("call_9", "get_weather")),
    PartDelta(2, ToolArgsDelta('{"city": ')),
    PartDelta(2, ToolArgsDelta('"Lyon"}')),
    PartEnd(2, ToolCallPart("call_9", "get_weather", {"city": "Lyon"})),
    ResponseEnd(StopReason.TOOL_USE, Usage(input_tokens=7, output_tokens=20, reasoning_tokens=12)),
]
SIGNATURE_ONLY = [
    START,
    PartStart(0, ThinkingPart("")),
    PartDelta(0, ThinkingDelta("hidden")),
    PartEnd(0, ThinkingPart("hidden", signature=GEMINI.carry("gem", "AAAA"))),
    ResponseEnd(StopReason.MAX_TOKENS, Usage(input_tokens=7, output_tokens=9)),
]
ERROR_MID_STREAM = [
    START,
    *_text_events(0, "Partial"),
    StreamError(BackendError("backend 'gpu-1' is overloaded", status_code=503)),
]

CASES: dict[str, tuple[list[StreamEvent], dict[str, bool]]] = {
    "text": (TEXT, {}),
    "thoughts_shown_then_call_with_ids": (THINKING_THEN_CALL, {"thoughts": True, "call_ids": True}),
    "thoughts_hidden_then_call": (THINKING_THEN_CALL, {}),
    "signature_only": (SIGNATURE_ONLY, {}),
    "error_mid_stream": (ERROR_MID_STREAM, {}),
}


async def _encode(events: list[StreamEvent], array: bool, **request: bool) -> bytes:
    encode = encode_chat_stream_array if array else encode_chat_stream
    chunks = encode(_events(events), gemini_request(model="gemini-2.5-flash", **request))
    return b"".join([chunk async for chunk in chunks])


def encode(events: list[StreamEvent], *, array: bool = False, **request: bool) -> bytes:
    return asyncio.run(_encode(events, array, **request))


@pytest.mark.parametrize("case", sorted(CASES))
def test_encode_golden_sse(case: str) -> None:
    events, request = CASES[case]
    check_golden(f"reply_encoded_{case}.sse", encode(events, **request))


@pytest.mark.parametrize("case", ["text", "error_mid_stream"])
def test_encode_golden_array(case: str) -> None:
    events, request = CASES[case]
    data = encode(events, array=True, **request)
    check_golden(f"reply_encoded_{case}.array.json", data)
    assert isinstance(orjson.loads(data), list)  # one JSON document, whatever happened


def test_encode_escapes_line_separators() -> None:
    data = encode(TEXT)
    assert "\u2028".encode() not in data
    assert b"\\u2028" in data


def test_encode_error_mid_stream_is_googles_error_object_last() -> None:
    lines = [line for line in encode(ERROR_MID_STREAM).split(b"\r\n\r\n") if line]
    assert orjson.loads(lines[-1].removeprefix(b"data: ")) == {
        "error": {"code": 503, "message": "backend 'gpu-1' is overloaded", "status": "UNAVAILABLE"}
    }
    elements = orjson.loads(encode(ERROR_MID_STREAM, array=True))
    assert elements[-1]["error"]["status"] == "UNAVAILABLE"


@pytest.mark.parametrize("array", [False, True])
def test_encode_stream_that_stops_early_ends_with_an_error(array: bool) -> None:
    data = encode(TEXT[:3], array=array)
    last = orjson.loads(data)[-1] if array else orjson.loads(data.split(b"data: ")[-1])
    assert last["error"]["code"] == 502
    assert last["error"]["status"] == "UNAVAILABLE"


def test_encoded_stream_decodes_back() -> None:
    """The gateway's stream, read by the gemini backend's decoder (llmbridge to llmbridge)."""
    reply = decode_reply(encode(THINKING_THEN_CALL, thoughts=True, call_ids=True))
    assert reply.message.parts == (
        ThinkingPart(
            "Weather needed.", signature=GEMINI.carry(ORIGIN, "c2lnLTE="), provider="gemini"
        ),
        TextPart("Checking."),
        # The id the gateway sent is Google's to the decoder: it rides in the core's.
        ToolCallPart(issued_call_id(ORIGIN, "call_9"), "get_weather", {"city": "Lyon"}),
    )
    assert reply.stop_reason is StopReason.TOOL_USE
    assert reply.usage == Usage(input_tokens=7, output_tokens=20, reasoning_tokens=12)


# -- the google-genai SDK's client reads an encoded stream --------------------------------


def sdk_client(body: bytes, seen: list[httpx.Request]) -> genai.Client:
    def reply(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return genai.Client(
        api_key="test-key",
        http_options=genai_types.HttpOptions(
            base_url="http://127.0.0.1:9",
            httpx_client=httpx.Client(transport=httpx.MockTransport(reply)),
        ),
    )


def test_sdk_client_reads_the_encoded_stream() -> None:
    seen: list[httpx.Request] = []
    client = sdk_client(encode(THINKING_THEN_CALL, thoughts=True), seen)
    chunks = list(client.models.generate_content_stream(model="gemini-2.5-flash", contents="hi"))
    assert seen[0].url.params["alt"] == "sse"
    assert "".join(chunk.text or "" for chunk in chunks) == "Checking."
    thoughts = [
        part.text
        for chunk in chunks
        for part in (chunk.candidates[0].content.parts or [])  # type: ignore[index, union-attr]
        if part.thought
    ]
    assert "".join(t or "" for t in thoughts) == "Weather needed."
    calls = [call for chunk in chunks for call in chunk.function_calls or []]
    assert [(call.name, call.args, call.id) for call in calls] == [
        ("get_weather", {"city": "Lyon"}, None)
    ]
    usage = chunks[-1].usage_metadata
    assert usage is not None
    assert (usage.prompt_token_count, usage.candidates_token_count) == (7, 8)
    assert usage.thoughts_token_count == 12
    assert chunks[-1].candidates[0].finish_reason == genai_types.FinishReason.STOP  # type: ignore[index]


def test_sdk_client_reads_a_carried_signature() -> None:
    seen: list[httpx.Request] = []
    client = sdk_client(encode(SIGNATURE_ONLY), seen)
    chunks = list(client.models.generate_content_stream(model="gemini-2.5-flash", contents="hi"))
    parts = [p for c in chunks for p in (c.candidates[0].content.parts or [])]  # type: ignore[index, union-attr]
    assert [p.thought_signature is not None for p in parts] == [True]
    assert chunks[-1].candidates[0].finish_reason == genai_types.FinishReason.MAX_TOKENS  # type: ignore[index]


# -- round trip ---------------------------------------------------------------------------


def stream_events(resp: ChatResponse, pieces: int) -> list[StreamEvent]:
    """``resp`` as a stream whose text and thinking come in up to ``pieces`` deltas."""
    out: list[StreamEvent] = []
    for event in events_from_response(resp):
        delta = event.delta if isinstance(event, PartDelta) else None
        if isinstance(delta, TextDelta | ThinkingDelta) and len(delta.text) > 1:
            step = max(1, len(delta.text) // pieces)
            for i in range(0, len(delta.text), step):
                piece = delta.text[i : i + step]
                split = TextDelta(piece) if isinstance(delta, TextDelta) else ThinkingDelta(piece)
                out.append(PartDelta(event.index, split))  # type: ignore[union-attr]
        else:
            out.append(event)
    return out


async def _sse_round_trip(resp: ChatResponse, pieces: int, size: int) -> ChatResponse:
    events = stream_events(resp, pieces)
    request = gemini_request(thoughts=True)
    data = b"".join([chunk async for chunk in encode_chat_stream(_events(events), request)])
    sse = aiter_sse(_bytes(chunked(data, size)))
    return await accumulate(decode_chat_stream(sse, origin=ORIGIN))


async def _array_round_trip(resp: ChatResponse, pieces: int) -> ChatResponse:
    events = stream_events(resp, pieces)
    request = gemini_request(thoughts=True)
    chunks = encode_chat_stream_array(_events(events), request)
    elements = orjson.loads(b"".join([chunk async for chunk in chunks]))

    async def as_sse() -> AsyncIterator[ServerSentEvent]:
        for element in elements:
            yield ServerSentEvent(data=orjson.dumps(element).decode())

    return await accumulate(decode_chat_stream(as_sse(), origin=ORIGIN))


@settings(max_examples=120, deadline=None)
@given(responses(), st.integers(1, 4), st.integers(1, 97))
def test_stream_round_trip(resp: ChatResponse, pieces: int, size: int) -> None:
    decoded = asyncio.run(_sse_round_trip(resp, pieces, size))
    assert decoded_meaning(decoded) == meaning(resp, ORIGIN)
    assert decoded.id == resp.id


@settings(max_examples=60, deadline=None)
@given(responses(), st.integers(1, 4))
def test_array_stream_round_trip(resp: ChatResponse, pieces: int) -> None:
    decoded = asyncio.run(_array_round_trip(resp, pieces))
    assert decoded_meaning(decoded) == meaning(resp, ORIGIN)

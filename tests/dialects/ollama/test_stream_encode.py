"""encode_chat_stream: exact NDJSON output, in-stream errors, and the official client reading it."""

from __future__ import annotations

from typing import Any

import httpx
import ollama
import orjson
import pytest

from llmbridge.core.errors import BackendTimeoutError
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
    UsageUpdate,
)
from llmbridge.core.messages import TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import StopReason, Timings, Usage
from llmbridge.dialects.ollama import decode_chat_request, encode_chat_stream
from tests.dialects.ollama.helpers import aiter_of, collect

CREATED = 1740823200.5  # 2025-03-01T10:00:00.5Z
REQUEST = ChatRequest(model="public-name", messages=(), stream=True)
CALL = ToolCallPart(id="call_1", name="get_weather", arguments={"city": "Paris"})

EVENTS: list[StreamEvent] = [
    ResponseStart(id="r1", model="backend-name", created=CREATED, input_tokens=9),
    PartStart(0, ThinkingPart("")),
    PartDelta(0, ThinkingDelta("Hmm.")),
    PartEnd(0, ThinkingPart("Hmm.")),
    PartStart(1, TextPart("")),
    PartDelta(1, TextDelta("Hé")),
    PartDelta(1, TextDelta("llo")),
    PartEnd(1, TextPart("Héllo")),
    PartStart(2, ToolCallPart(id="call_1", name="get_weather")),
    PartDelta(2, ToolArgsDelta('{"city":')),
    PartDelta(2, ToolArgsDelta('"Paris"}')),
    PartEnd(2, CALL),
    UsageUpdate(Usage(output_tokens=7)),
    ResponseEnd(
        stop_reason=StopReason.TOOL_USE,
        usage=Usage(input_tokens=10),
        timings=Timings(total_ns=1000, eval_ns=600),
    ),
]

HEAD = '{"model":"public-name","created_at":"2025-03-01T10:00:00.500000Z",'


async def encode(events: list[StreamEvent], *, generate: bool = False) -> bytes:
    return b"".join(await collect(encode_chat_stream(aiter_of(events), REQUEST, generate=generate)))


async def test_chat_stream_exact_output() -> None:
    assert (await encode(EVENTS)).decode() == (
        HEAD
        + '"message":{"role":"assistant","content":"","thinking":"Hmm."},"done":false}\n'
        + HEAD
        + '"message":{"role":"assistant","content":"Hé"},"done":false}\n'
        + HEAD
        + '"message":{"role":"assistant","content":"llo"},"done":false}\n'
        + HEAD
        + '"message":{"role":"assistant","content":"","tool_calls":[{"id":"call_1",'
        '"function":{"index":0,"name":"get_weather","arguments":{"city":"Paris"}}}]},'
        '"done":false}\n'
        + HEAD
        + '"message":{"role":"assistant","content":""},"done_reason":"stop","done":true,'
        '"total_duration":1000,"prompt_eval_count":10,"eval_count":7,"eval_duration":600}\n'
    )


async def test_generate_stream_exact_output() -> None:
    events = [e for e in EVENTS if not isinstance(e, PartEnd) or e.index != 2]
    events[-1] = ResponseEnd(stop_reason=StopReason.MAX_TOKENS)
    assert (await encode(events, generate=True)).decode() == (
        HEAD
        + '"response":"","thinking":"Hmm.","done":false}\n'
        + HEAD
        + '"response":"Hé","done":false}\n'
        + HEAD
        + '"response":"llo","done":false}\n'
        + HEAD
        + '"response":"","done_reason":"length","done":true,'
        '"prompt_eval_count":9,"eval_count":7}\n'
    )


async def test_tool_calls_get_increasing_indexes() -> None:
    second = ToolCallPart(id="call_2", name="get_time", arguments={})
    events: list[StreamEvent] = [
        ResponseStart(id="r", model="m", created=CREATED),
        PartStart(0, CALL),
        PartEnd(0, CALL),
        PartStart(1, second),
        PartEnd(1, second),
        ResponseEnd(stop_reason=StopReason.TOOL_USE),
    ]
    lines = [orjson.loads(line) for line in (await encode(events)).splitlines()]
    calls = [c for line in lines for c in line["message"].get("tool_calls", [])]
    assert [(c["id"], c["function"]["index"]) for c in calls] == [("call_1", 0), ("call_2", 1)]


def seed_error_frame(message: str) -> dict[str, Any]:
    """Seed 000's ``convertErrorToOllama`` output, field for field."""
    return {
        "model": "public-name",
        "created_at": "2025-03-01T10:00:00.500000Z",
        "message": {"role": "assistant", "content": f"Error: {message}"},
        "done": True,
        "done_reason": "error",
        "error": message,
    }


async def test_stream_error_renders_seed_000s_error_frame_and_stops() -> None:
    events: list[StreamEvent] = [
        ResponseStart(id="r", model="m", created=CREATED),
        PartStart(0, TextPart("")),
        PartDelta(0, TextDelta("partial")),
        StreamError(BackendTimeoutError("the backend did not answer in time")),
        PartDelta(0, TextDelta("never sent")),
    ]
    lines = (await encode(events)).splitlines()
    assert len(lines) == 2
    assert orjson.loads(lines[-1]) == seed_error_frame("the backend did not answer in time")
    # The seed's field order too: model, created_at, message, done, done_reason, error.
    assert list(orjson.loads(lines[-1])) == list(seed_error_frame("x"))


async def test_events_ending_without_an_end_render_the_error_frame() -> None:
    events: list[StreamEvent] = [ResponseStart(id="r", model="m", created=CREATED)]
    assert orjson.loads(await encode(events)) == seed_error_frame(
        "the backend's stream ended before it was complete"
    )


async def test_generate_stream_error_stays_ollamas_error_line() -> None:
    events: list[StreamEvent] = [
        ResponseStart(id="r", model="m", created=CREATED),
        StreamError(BackendTimeoutError("too slow")),
    ]
    assert orjson.loads(await encode(events, generate=True)) == {"error": "too slow"}


async def test_unicode_line_separators_are_escaped() -> None:
    # httpx's aiter_lines (used by ollama-python) splits at U+0085/U+2028/U+2029.
    text = "a\x85b\u2028c\u2029d"
    events: list[StreamEvent] = [
        ResponseStart(id="r", model="m", created=CREATED),
        PartStart(0, TextPart("")),
        PartDelta(0, TextDelta(text)),
        PartEnd(0, TextPart(text)),
        ResponseEnd(stop_reason=StopReason.END_TURN),
    ]
    body = await encode(events)
    assert b"\\u2028" in body and b"\\u0085" in body
    lines = [line async for line in httpx.Response(200, content=body).aiter_lines()]
    assert len(lines) == 2
    assert orjson.loads(lines[0])["message"]["content"] == text


async def test_official_client_reads_the_stream() -> None:
    seen: dict[str, Any] = {}

    async def handler(request: httpx.Request) -> httpx.Response:
        decoded = decode_chat_request(orjson.loads(request.content))
        seen["request"] = decoded
        body = b"".join(await collect(encode_chat_stream(aiter_of(EVENTS), decoded)))
        return httpx.Response(200, content=body)

    client = ollama.AsyncClient("http://ollama.test", transport=httpx.MockTransport(handler))
    try:
        chunks = [
            chunk
            async for chunk in await client.chat(
                model="public-name",
                messages=[{"role": "user", "content": "weather?"}],
                stream=True,
                think=True,
            )
        ]
    finally:
        await client.close()
    assert seen["request"].stream is True
    assert seen["request"].thinking is not None
    assert "".join(c.message.thinking or "" for c in chunks) == "Hmm."
    assert "".join(c.message.content or "" for c in chunks) == "Héllo"
    calls = [call for c in chunks for call in c.message.tool_calls or []]
    assert [(call.function.name, dict(call.function.arguments)) for call in calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    final = chunks[-1]
    assert final.done is True and final.done_reason == "stop"
    assert final.prompt_eval_count == 10 and final.eval_count == 7


async def test_official_client_raises_the_in_stream_error() -> None:
    events: list[StreamEvent] = [
        ResponseStart(id="r", model="m", created=CREATED),
        StreamError(BackendTimeoutError("too slow")),
    ]
    body = await encode(events)
    client = ollama.AsyncClient(
        "http://ollama.test",
        transport=httpx.MockTransport(lambda _request: httpx.Response(200, content=body)),
    )
    try:
        with pytest.raises(ollama.ResponseError, match="too slow"):
            async for _chunk in await client.chat(model="m", messages=[], stream=True):
                pass
    finally:
        await client.close()

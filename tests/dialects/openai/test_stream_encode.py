"""encode_chat_stream: exact bytes, the official client's chunk types, and its streaming."""

from __future__ import annotations

from collections.abc import Sequence

import openai
import orjson
import pytest
from openai.types.chat import ChatCompletionChunk

from llmbridge.core.errors import BackendUnavailableError, RateLimitError
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
)
from llmbridge.core.messages import Message, TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.replay import events_from_response
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.dialects.openai.stream import encode_chat_stream
from tests.dialects.openai.helpers import aiter_list, collect, official_client

REQUEST = ChatRequest(model="public-model", messages=(Message("user", (TextPart("hi"),)),))
START = ResponseStart(id="chatcmpl-abc", model="backend-model", created=1700000000.0)
TEXT_EVENTS: list[StreamEvent] = [
    START,
    PartStart(0, TextPart("")),
    PartDelta(0, TextDelta("Hi")),
    PartEnd(0, TextPart("Hi")),
    ResponseEnd(StopReason.END_TURN, usage=Usage(input_tokens=3, output_tokens=1)),
]
RICH = ChatResponse(
    id="chatcmpl-rich",
    model="backend-model",
    created=1700000001.0,
    message=Message(
        "assistant",
        (
            ThinkingPart("Let me check the weather."),
            TextPart("Checking ☀️ now."),
            ToolCallPart("call_1", "get_weather", {"city": "Paris", "units": "metric"}),
            ToolCallPart("call_2", "get_time", {}),
        ),
    ),
    stop_reason=StopReason.TOOL_USE,
    usage=Usage(input_tokens=30, output_tokens=12),
)


async def encode(events: Sequence[StreamEvent], request: ChatRequest = REQUEST) -> bytes:
    return await collect(encode_chat_stream(aiter_list(events), request))


def data_lines(body: bytes) -> list[bytes]:
    assert body.endswith(b"\n\n")
    frames = body.split(b"\n\n")[:-1]
    assert all(frame.startswith(b"data: ") for frame in frames)
    return [frame.removeprefix(b"data: ") for frame in frames]


def chunks(body: bytes) -> list[ChatCompletionChunk]:
    lines = data_lines(body)
    assert lines[-1] == b"[DONE]"
    return [ChatCompletionChunk.model_validate(orjson.loads(line)) for line in lines[:-1]]


async def test_exact_bytes_without_usage() -> None:
    prefix = (
        b'data: {"id":"chatcmpl-abc","object":"chat.completion.chunk","created":1700000000,'
        b'"model":"public-model","choices":[{"index":0,"delta":'
    )
    assert await encode(TEXT_EVENTS) == (
        prefix + b'{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
        b"" + prefix + b'{"content":"Hi"},"logprobs":null,"finish_reason":null}]}\n\n'
        b"" + prefix + b'{},"logprobs":null,"finish_reason":"stop"}]}\n\n'
        b"data: [DONE]\n\n"
    )


async def test_exact_bytes_with_usage() -> None:
    request = ChatRequest(model="public-model", messages=REQUEST.messages, include_usage=True)
    head = (
        b'data: {"id":"chatcmpl-abc","object":"chat.completion.chunk","created":1700000000,'
        b'"model":"public-model",'
    )
    prefix = head + b'"choices":[{"index":0,"delta":'
    assert await encode(TEXT_EVENTS, request) == (
        prefix + b'{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],'
        b'"usage":null}\n\n'
        b"" + prefix + b'{"content":"Hi"},"logprobs":null,"finish_reason":null}],"usage":null}\n\n'
        b"" + prefix + b'{},"logprobs":null,"finish_reason":"stop"}],"usage":null}\n\n'
        b"" + head + b'"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,'
        b'"total_tokens":4}}\n\n'
        b"data: [DONE]\n\n"
    )


async def test_every_chunk_is_a_valid_chunk_with_one_id() -> None:
    request = ChatRequest(model="public-model", messages=REQUEST.messages, include_usage=True)
    parsed = chunks(await encode(events_from_response(RICH), request))
    assert {c.id for c in parsed} == {"chatcmpl-rich"}
    assert {c.created for c in parsed} == {1700000001}
    assert {c.model for c in parsed} == {"public-model"}
    assert parsed[0].choices[0].delta.role == "assistant"
    assert all(c.choices[0].delta.role is None for c in parsed[1:-1])
    assert parsed[-1].choices == []
    assert parsed[-1].usage is not None
    assert parsed[-1].usage.total_tokens == 42
    finish = parsed[-2].choices[0]
    assert finish.finish_reason == "tool_calls"
    assert finish.delta.content is None and finish.delta.tool_calls is None


async def test_thinking_goes_out_as_reasoning_content() -> None:
    parsed = chunks(await encode(events_from_response(RICH)))
    reasoning = [c.choices[0].delta.model_extra for c in parsed if c.choices]
    assert {"reasoning_content": "Let me check the weather."} in reasoning


async def test_tool_calls_are_numbered_from_zero() -> None:
    parsed = chunks(await encode(events_from_response(RICH)))
    calls = [tc for c in parsed for tc in c.choices[0].delta.tool_calls or ()]
    firsts = [tc for tc in calls if tc.id is not None]
    assert [(tc.index, tc.id, tc.type) for tc in firsts] == [
        (0, "call_1", "function"),
        (1, "call_2", "function"),
    ]
    assert firsts[0].function is not None and firsts[0].function.name == "get_weather"
    assert firsts[0].function.arguments == ""
    assert len(calls) == 4  # per call: id and name, then the whole arguments once
    arguments = {0: "", 1: ""}
    for tc in calls:
        assert tc.function is not None
        arguments[tc.index] += tc.function.arguments or ""
    assert orjson.loads(arguments[0]) == {"city": "Paris", "units": "metric"}
    assert orjson.loads(arguments[1]) == {}


async def test_tool_call_without_argument_deltas_sends_them_at_the_end() -> None:
    call = ToolCallPart("call_9", "lookup", {"q": "x"})
    events: list[StreamEvent] = [
        START,
        PartStart(0, ToolCallPart("call_9", "lookup")),
        PartEnd(0, call),
        ResponseEnd(StopReason.TOOL_USE),
    ]
    parsed = chunks(await encode(events))
    fragments = [tc for c in parsed for tc in c.choices[0].delta.tool_calls or ()]
    assert fragments[-1].function is not None
    assert fragments[-1].function.arguments == '{"q":"x"}'


async def test_raw_arguments_are_sent_whole_at_the_end() -> None:
    events: list[StreamEvent] = [
        START,
        PartStart(0, ToolCallPart("call_r", "f")),
        PartDelta(0, ToolArgsDelta('{"a": ')),
        PartEnd(0, ToolCallPart("call_r", "f", {}, raw_arguments='{"a": ')),
        ResponseEnd(StopReason.END_TURN),
    ]
    parsed = chunks(await encode(events))
    fragments = [tc for c in parsed for tc in c.choices[0].delta.tool_calls or ()]
    assert [tc.function.arguments for tc in fragments if tc.function] == ["", '{"a": ']
    assert parsed[-1].choices[0].finish_reason == "tool_calls"  # a call was made


def tool_call_events(deltas: Sequence[str], final: ToolCallPart) -> list[StreamEvent]:
    return [
        START,
        PartStart(0, ToolCallPart(final.id, final.name)),
        *(PartDelta(0, ToolArgsDelta(fragment)) for fragment in deltas),
        PartEnd(0, final),
        ResponseEnd(StopReason.TOOL_USE),
    ]


async def test_argument_fragments_are_not_streamed_the_finished_part_is_sent() -> None:
    # The deltas are what a small model sent (doubly escaped); the PartEnd is what
    # tool healing made of them. Only the healed arguments may reach the client.
    final = ToolCallPart("call_h", "run", {"command": "ls"})
    events = tool_call_events(['{\\"comm', 'and\\":\\"ls\\"}'], final)
    prefix = (
        b'data: {"id":"chatcmpl-abc","object":"chat.completion.chunk","created":1700000000,'
        b'"model":"public-model","choices":[{"index":0,"delta":'
    )
    suffix = b',"logprobs":null,"finish_reason":null}]}\n\n'
    assert await encode(events) == (
        prefix
        + b'{"role":"assistant","content":""}'
        + suffix
        + prefix
        + b'{"tool_calls":[{"index":0,"id":"call_h","type":"function",'
        b'"function":{"name":"run","arguments":""}}]}'
        + suffix
        + prefix
        + b'{"tool_calls":[{"index":0,"function":{"arguments":"{\\"command\\":\\"ls\\"}"}}]}'
        + suffix
        + prefix
        + b'{},"logprobs":null,"finish_reason":"tool_calls"}]}\n\n'
        b"data: [DONE]\n\n"
    )


async def test_official_client_gets_the_healed_arguments() -> None:
    final = ToolCallPart("call_h", "run", {"command": "ls"})
    body = await encode(tool_call_events(['"{\\"command', '\\":\\"ls\\"}"'], final))
    async with (
        official_client(body, content_type="text/event-stream") as client,
        client.chat.completions.stream(
            model="public-model", messages=[{"role": "user", "content": "hi"}]
        ) as stream,
    ):
        final_completion = await stream.get_final_completion()
    calls = final_completion.choices[0].message.tool_calls or []
    assert [(c.id, c.function.name, c.function.arguments) for c in calls] == [
        ("call_h", "run", '{"command":"ls"}')
    ]


async def test_foreign_ids_become_chatcmpl_ids() -> None:
    events = [ResponseStart(id="msg_01XYZ", model="m", created=0.0), *TEXT_EVENTS[1:]]
    parsed = chunks(await encode(events))
    assert len({c.id for c in parsed}) == 1
    assert parsed[0].id.startswith("chatcmpl-")
    assert parsed[0].created > 1_600_000_000  # unknown creation time: now


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [
        (StopReason.END_TURN, "stop"),
        (StopReason.STOP_SEQUENCE, "stop"),
        (StopReason.MAX_TOKENS, "length"),
        (StopReason.CONTENT_FILTER, "content_filter"),
        (StopReason.TOOL_USE, "tool_calls"),
    ],
)
async def test_finish_reasons(stop_reason: StopReason, finish_reason: str) -> None:
    events = [*TEXT_EVENTS[:-1], ResponseEnd(stop_reason)]
    assert chunks(await encode(events))[-1].choices[0].finish_reason == finish_reason


async def test_stream_error_becomes_error_payload_then_done() -> None:
    error = RateLimitError("slow down", code="rate_limited")
    body = await encode([*TEXT_EVENTS[:3], StreamError(error)])
    lines = data_lines(body)
    assert lines[-1] == b"[DONE]"
    assert orjson.loads(lines[-2]) == {
        "error": {
            "message": "slow down",
            "type": "rate_limit_error",
            "param": None,
            "code": "rate_limited",
        }
    }
    for line in lines[:-2]:
        ChatCompletionChunk.model_validate(orjson.loads(line))


async def test_stream_error_before_start() -> None:
    body = await encode([StreamError(BackendUnavailableError("backend down"))])
    lines = data_lines(body)
    assert len(lines) == 2
    assert orjson.loads(lines[0])["error"]["type"] == "api_error"


async def test_events_ending_early_end_with_an_error() -> None:
    lines = data_lines(await encode(TEXT_EVENTS[:3]))
    assert lines[-1] == b"[DONE]"
    assert orjson.loads(lines[-2])["error"]["message"].startswith("the backend's stream ended")


# -- through the official client ----------------------------------------------------


async def test_official_client_streams_and_accumulates() -> None:
    request = ChatRequest(model="public-model", messages=REQUEST.messages, include_usage=True)
    body = await encode(events_from_response(RICH), request)
    async with (
        official_client(body, content_type="text/event-stream") as client,
        client.chat.completions.stream(
            model="public-model",
            messages=[{"role": "user", "content": "hi"}],
            stream_options={"include_usage": True},
        ) as stream,
    ):
        final = await stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Checking ☀️ now."
    assert choice.message.tool_calls is not None
    calls = [(c.id, c.function.name, c.function.arguments) for c in choice.message.tool_calls]
    assert calls == [
        ("call_1", "get_weather", '{"city":"Paris","units":"metric"}'),
        ("call_2", "get_time", "{}"),
    ]
    assert final.usage is not None and final.usage.prompt_tokens == 30


async def test_official_client_raises_the_in_stream_error() -> None:
    body = await encode([*TEXT_EVENTS[:3], StreamError(RateLimitError("slow down"))])
    async with official_client(body, content_type="text/event-stream") as client:
        stream = await client.chat.completions.create(
            model="public-model", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        received: list[str] = []
        with pytest.raises(openai.APIError, match="slow down"):
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    received.append(chunk.choices[0].delta.content)
    assert received == ["Hi"]

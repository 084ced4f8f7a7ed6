"""Round trips through the OpenAI dialect keep meaning (hypothesis).

Generated values are in the canonical form OpenAI's wire format can represent:
no thinking in request history (OpenAI has no input field for it), assistant text
before tool calls, one text part per reply kind, tool results right after the calls.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from llmbridge.core.messages import (
    ImagePart,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolChoice,
    ToolDefinition,
    ToolResultPart,
)
from llmbridge.core.replay import events_from_response
from llmbridge.core.request import ChatRequest, GenerationParams, ResponseFormat, ThinkingConfig
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.dialects.openai.request import decode_chat_request, encode_chat_request
from llmbridge.dialects.openai.response import decode_chat_response, encode_chat_response
from llmbridge.dialects.openai.stream import encode_chat_stream
from tests.dialects.openai.helpers import aiter_list, collect, decode_response, split_every

texts = st.text(max_size=20)
nonempty = st.text(min_size=1, max_size=20)
names = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_-]{0,15}", fullmatch=True)
counts = st.integers(min_value=0, max_value=10**7)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
arguments = st.dictionaries(texts, json_values, max_size=3)
raw_arguments = st.sampled_from(['{"city": ', "not json", "{'a': 1}", "[1, 2"])
images = st.builds(
    lambda data, media_type: ImagePart(data=base64.b64encode(data).decode(), media_type=media_type),
    st.binary(min_size=1, max_size=12),
    st.sampled_from(["image/png", "image/jpeg", "image/webp", "image/gif"]),
) | st.builds(lambda path: ImagePart(url=f"https://img.test/{path}.png"), names)


def json_round_trip(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


@st.composite
def tool_calls(draw: st.DrawFn, first_id: int) -> list[ToolCallPart]:
    calls = []
    for offset in range(draw(st.integers(min_value=0, max_value=3))):
        call_id = f"call_{first_id + offset}"
        if draw(st.booleans()):
            calls.append(ToolCallPart(call_id, draw(names), draw(arguments)))
        else:
            calls.append(ToolCallPart(call_id, draw(names), {}, raw_arguments=draw(raw_arguments)))
    return calls


@st.composite
def conversations(draw: st.DrawFn) -> tuple[Message, ...]:
    messages: list[Message] = []
    if draw(st.booleans()):
        messages.append(Message("system", (TextPart(draw(texts)),), name=draw(st.none() | names)))
    next_id = 0
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        kind = draw(st.sampled_from(["user", "assistant"]))
        if kind == "user":
            parts: list[Part] = draw(
                st.lists(st.builds(TextPart, texts) | images, min_size=1, max_size=3)
            )
            messages.append(Message("user", tuple(parts), name=draw(st.none() | names)))
            continue
        calls = draw(tool_calls(next_id))
        next_id += len(calls)
        text = draw(st.none() | nonempty)
        head: list[Part] = [TextPart(text)] if text else []
        messages.append(Message("assistant", (*head, *calls)))
        for call in calls:
            result = ToolResultPart(call.id, draw(texts), name=call.name)
            messages.append(Message("tool", (result,)))
    return tuple(messages)


@st.composite
def chat_requests(draw: st.DrawFn) -> ChatRequest:
    tools = tuple(
        draw(
            st.lists(
                st.builds(
                    ToolDefinition,
                    names,
                    texts,
                    st.builds(
                        lambda props: {"type": "object", "properties": props},
                        st.dictionaries(names, st.just({"type": "string"}), max_size=2),
                    ),
                ),
                max_size=2,
            )
        )
    )
    tool_choice = None
    if tools:
        tool_choice = draw(
            st.none()
            | st.builds(
                ToolChoice, st.sampled_from(["auto", "any", "none"]), st.none(), st.booleans()
            )
            | st.builds(
                ToolChoice, st.just("tool"), st.sampled_from([t.name for t in tools]), st.booleans()
            )
        )
    stream = draw(st.booleans())
    optional_float = st.none() | st.floats(min_value=-2, max_value=2)
    return ChatRequest(
        model=draw(nonempty),
        messages=draw(conversations()),
        stream=stream,
        include_usage=stream,  # OpenAI backends always get include_usage when streaming
        params=GenerationParams(
            max_tokens=draw(st.none() | st.integers(min_value=1, max_value=10**6)),
            temperature=draw(st.none() | st.floats(min_value=0, max_value=2)),
            top_p=draw(st.none() | st.floats(min_value=0, max_value=1)),
            stop=tuple(draw(st.lists(nonempty, max_size=4))),
            seed=draw(st.none() | st.integers(min_value=0, max_value=2**31)),
            frequency_penalty=draw(optional_float),
            presence_penalty=draw(optional_float),
        ),
        tools=tools,
        tool_choice=tool_choice,
        thinking=draw(
            st.none()
            | st.just(ThinkingConfig(enabled=False))
            | st.builds(ThinkingConfig, effort=st.sampled_from(["low", "medium", "high"]))
        ),
        response_format=draw(
            st.none()
            | st.sampled_from([ResponseFormat("text"), ResponseFormat("json")])
            | st.builds(
                lambda schema, name: ResponseFormat("json_schema", schema=schema, name=name),
                st.dictionaries(names, json_scalars, max_size=2),
                names,
            )
        ),
        provider_details=draw(st.none() | st.builds(lambda u: {"openai": {"user": u}}, nonempty)),
    )


@st.composite
def chat_responses(draw: st.DrawFn) -> ChatResponse:
    parts: list[Part] = []
    if draw(st.booleans()):
        parts.append(ThinkingPart(draw(nonempty)))
    if draw(st.booleans()):
        parts.append(TextPart(draw(nonempty)))
    calls = draw(tool_calls(0))
    parts.extend(calls)
    stop_reason = (
        StopReason.TOOL_USE
        if calls
        else draw(
            st.sampled_from([StopReason.END_TURN, StopReason.MAX_TOKENS, StopReason.CONTENT_FILTER])
        )
    )
    return ChatResponse(
        id="chatcmpl-" + draw(st.from_regex(r"[A-Za-z0-9]{1,12}", fullmatch=True)),
        model=draw(nonempty),
        created=float(draw(st.integers(min_value=1, max_value=2**31))),
        message=Message("assistant", tuple(parts)),
        stop_reason=stop_reason,
        usage=Usage(
            input_tokens=draw(counts),
            output_tokens=draw(counts),
            cache_read_input_tokens=draw(st.none() | counts),
        ),
    )


@given(chat_requests())
def test_request_round_trip(request: ChatRequest) -> None:
    assert decode_chat_request(json_round_trip(encode_chat_request(request))) == request


@given(chat_responses())
def test_response_round_trip(response: ChatResponse) -> None:
    request = ChatRequest(model=response.model, messages=())
    body = json_round_trip(encode_chat_response(response, request))
    assert decode_chat_response(body) == response


@settings(deadline=None)
@given(chat_responses(), st.integers(min_value=1, max_value=200))
def test_stream_round_trip(response: ChatResponse, chunk_size: int) -> None:
    request = ChatRequest(model=response.model, messages=(), stream=True, include_usage=True)

    async def round_trip() -> ChatResponse:
        body = await collect(
            encode_chat_stream(aiter_list(events_from_response(response)), request)
        )
        return await decode_response(split_every(body, chunk_size))

    assert asyncio.run(round_trip()) == response

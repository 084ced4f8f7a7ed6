"""Property tests: decode(encode(x)) keeps the meaning of whatever Ollama can represent."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmbridge.core.accumulate import accumulate
from llmbridge.core.messages import (
    ImagePart,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolDefinition,
    ToolResultPart,
)
from llmbridge.core.replay import events_from_response
from llmbridge.core.request import ChatRequest, GenerationParams, ResponseFormat, ThinkingConfig
from llmbridge.core.response import ChatResponse, StopReason, Timings, Usage
from llmbridge.dialects.ollama import (
    decode_chat_request,
    decode_chat_response,
    decode_chat_stream,
    encode_chat_request,
    encode_chat_response,
    encode_chat_stream,
)
from tests.dialects.ollama.helpers import aiter_of

PROPERTY_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

names = st.from_regex(r"[a-z_][a-z0-9_]{0,15}", fullmatch=True)
ids = st.from_regex(r"call_[0-9a-f]{8}", fullmatch=True)
texts = st.text(max_size=40)
nonempty_texts = st.text(min_size=1, max_size=40)
counts = st.none() | st.integers(min_value=0, max_value=2**40)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
arguments = st.dictionaries(names, json_values, max_size=4)
tool_calls = st.builds(ToolCallPart, id=ids, name=names, arguments=arguments)
images = st.binary(min_size=1, max_size=24).map(
    lambda b: ImagePart(data=base64.b64encode(b).decode())
)


def wire(body: dict[str, Any]) -> Any:
    """What the other side reads after the body went over the network as JSON."""
    return orjson.loads(orjson.dumps(body))


@st.composite
def assistant_messages(draw: st.DrawFn) -> Message:
    parts: list[Part] = []
    if thinking := draw(st.text(max_size=20)):
        parts.append(ThinkingPart(thinking))
    if text := draw(texts):
        parts.append(TextPart(text))
    calls: list[ToolCallPart] = draw(st.lists(tool_calls, max_size=3, unique_by=lambda c: c.id))
    parts.extend(calls)
    return Message(role="assistant", parts=tuple(parts))


@st.composite
def user_messages(draw: st.DrawFn) -> Message:
    parts: list[Part] = []
    if text := draw(texts):
        parts.append(TextPart(text))
    parts.extend(draw(st.lists(images, max_size=2)))
    return Message(role="user", parts=tuple(parts))


system_messages = nonempty_texts.map(lambda t: Message(role="system", parts=(TextPart(t),)))
tool_messages = st.builds(
    lambda call_id, content, name: Message(
        role="tool", parts=(ToolResultPart(tool_call_id=call_id, content=content, name=name),)
    ),
    ids,
    texts,
    names,
)
messages = st.lists(
    st.one_of(system_messages, user_messages(), assistant_messages(), tool_messages), max_size=6
)

unit = st.floats(min_value=0, max_value=1, allow_nan=False)
penalty = st.floats(min_value=-2, max_value=2, allow_nan=False)
params = st.builds(
    GenerationParams,
    max_tokens=st.none() | st.integers(min_value=0, max_value=100_000),
    temperature=st.none() | st.floats(min_value=0, max_value=2, allow_nan=False),
    top_p=st.none() | unit,
    top_k=st.none() | st.integers(min_value=0, max_value=1000),
    min_p=st.none() | unit,
    stop=st.lists(nonempty_texts, max_size=3).map(tuple),
    seed=st.none() | st.integers(min_value=0, max_value=2**31),
    frequency_penalty=st.none() | penalty,
    presence_penalty=st.none() | penalty,
    repeat_penalty=st.none() | st.floats(min_value=0, max_value=2, allow_nan=False),
    num_ctx=st.none() | st.integers(min_value=1, max_value=2**20),
    extra=st.fixed_dictionaries(
        {},
        optional={
            "mirostat": st.integers(min_value=0, max_value=2),
            "num_gpu": st.integers(min_value=0, max_value=99),
            "custom_option": json_values.filter(lambda v: v is not None),
        },
    ),
)
schemas = st.fixed_dictionaries(
    {"type": st.just("object"), "properties": st.dictionaries(names, st.just({"type": "string"}))}
)
tools = st.builds(ToolDefinition, name=names, description=texts, input_schema=schemas)
thinking = (
    st.none()
    | st.just(ThinkingConfig())
    | st.sampled_from(
        [ThinkingConfig(effort=effort) for effort in ("low", "medium", "high", "max")]
    )
)
response_formats = (
    st.none()
    | st.just(ResponseFormat(type="json"))
    | schemas.map(lambda schema: ResponseFormat(type="json_schema", schema=schema))
)
provider_details = st.none() | st.fixed_dictionaries(
    {},
    optional={
        "truncate": st.booleans(),
        "shift": st.booleans(),
        "logprobs": st.booleans(),
        "top_logprobs": st.integers(min_value=0, max_value=20),
    },
).map(lambda d: {"ollama": d} if d else None)

chat_requests = st.builds(
    ChatRequest,
    model=st.from_regex(r"[a-z0-9]+(:[a-z0-9.]+)?", fullmatch=True),
    messages=messages.map(tuple),
    stream=st.booleans(),
    params=params,
    tools=st.lists(tools, max_size=3).map(tuple),
    thinking=thinking,
    response_format=response_formats,
    keep_alive=st.none()
    | st.sampled_from(["5m", "1h30m"])
    | st.integers(min_value=-1, max_value=3600),
    provider_details=provider_details,
)


def meaning(message: Message) -> tuple[Any, ...]:
    """What a message says, ignoring how the parts happen to be split."""
    return (
        message.role,
        message.text,
        message.thinking,
        [p.data for p in message.parts if isinstance(p, ImagePart)],
        [(c.id, c.name, c.arguments) for c in message.tool_calls],
        [
            (p.tool_call_id, p.content, p.name)
            for p in message.parts
            if isinstance(p, ToolResultPart)
        ],
    )


def _as_ollama_takes(thinking: ThinkingConfig | None) -> ThinkingConfig | None:
    """Ollama's ``think`` has no level above ``high``: the core's ``max`` goes as it."""
    if thinking is not None and thinking.effort == "max":
        return ThinkingConfig(effort="high")
    return thinking


@PROPERTY_SETTINGS
@given(chat_requests)
def test_chat_request_round_trip(request: ChatRequest) -> None:
    decoded = decode_chat_request(wire(encode_chat_request(request)))
    assert [meaning(m) for m in decoded.messages] == [meaning(m) for m in request.messages]
    assert decoded.model == request.model
    assert decoded.stream == request.stream
    assert decoded.params == request.params
    assert decoded.tools == request.tools
    assert decoded.thinking == _as_ollama_takes(request.thinking)
    assert decoded.response_format == request.response_format
    assert decoded.keep_alive == request.keep_alive
    assert decoded.provider_details == request.provider_details


@st.composite
def chat_responses(draw: st.DrawFn) -> ChatResponse:
    part_strategy = st.one_of(
        nonempty_texts.map(TextPart), nonempty_texts.map(ThinkingPart), tool_calls
    )
    parts = draw(st.lists(part_strategy, max_size=5))
    has_calls = any(isinstance(p, ToolCallPart) for p in parts)
    stop = (
        StopReason.TOOL_USE
        if has_calls
        else draw(st.sampled_from([StopReason.END_TURN, StopReason.MAX_TOKENS]))
    )
    return ChatResponse(
        id="resp",
        model="backend",
        message=Message(role="assistant", parts=tuple(parts)),
        stop_reason=stop,
        usage=Usage(input_tokens=draw(counts), output_tokens=draw(counts)),
        timings=draw(
            st.builds(
                Timings, total_ns=counts, load_ns=counts, prompt_eval_ns=counts, eval_ns=counts
            )
        ),
        created=draw(st.integers(min_value=1, max_value=4_000_000_000)) + 0.25,
    )


REQUEST = ChatRequest(model="public", messages=())


def response_meaning(response: ChatResponse) -> tuple[Any, ...]:
    message = response.message
    return (
        message.text,
        message.thinking,
        [(c.id, c.name, c.arguments) for c in message.tool_calls],
        response.stop_reason,
        response.usage,
        response.timings,
        response.created,
    )


@PROPERTY_SETTINGS
@given(chat_responses())
def test_chat_response_round_trip(response: ChatResponse) -> None:
    decoded = decode_chat_response(wire(encode_chat_response(response, REQUEST)))
    assert decoded.model == "public"
    assert response_meaning(decoded) == response_meaning(response)


async def _stream_round_trip(response: ChatResponse) -> ChatResponse:
    encoded = encode_chat_stream(aiter_of(events_from_response(response)), REQUEST)
    body = b"".join([chunk async for chunk in encoded])
    lines = body.decode().split("\n")
    return await accumulate(decode_chat_stream(aiter_of(lines)))


@PROPERTY_SETTINGS
@given(chat_responses())
def test_chat_stream_round_trip(response: ChatResponse) -> None:
    decoded = asyncio.run(_stream_round_trip(response))
    assert decoded.model == "public"
    assert response_meaning(decoded) == response_meaning(response)
    # parts keep their order and kinds (adjacent parts of one kind may merge)
    kinds = [type(p) for p in decoded.message.parts]
    original = [type(p) for p in response.message.parts]
    assert kinds == [
        k for i, k in enumerate(original) if i == 0 or k is not original[i - 1] or k is ToolCallPart
    ]

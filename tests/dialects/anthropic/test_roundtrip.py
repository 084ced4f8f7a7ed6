"""Property tests: decode(encode(x)) keeps the meaning of x, for every codec pair.

Requests are drawn in the shape Anthropic can represent (one system prompt, user and
assistant turns alternating, tool results answering the previous turn's calls, only
Anthropic-signed thinking), which is the shape the encoder produces from anything.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from llmbridge.core.accumulate import accumulate
from llmbridge.core.events import StreamEvent
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
from llmbridge.core.request import ChatRequest, GenerationParams, ThinkingConfig
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.dialects.anthropic import (
    decode_chat_request,
    decode_chat_response,
    decode_chat_stream,
    encode_chat_request,
    encode_chat_response,
    encode_chat_stream,
)
from tests.dialects.anthropic.sse import aiter_sse, chunked

texts = st.text(min_size=1, max_size=40)
ids = st.from_regex(r"[A-Za-z0-9_-]{1,24}", fullmatch=True)
counts = st.none() | st.integers(min_value=0, max_value=10**6)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**9), 10**9) | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
arguments = st.dictionaries(st.text(max_size=8), json_values, max_size=4)
signed_thinking = st.builds(
    ThinkingPart, texts, signature=st.text(min_size=1, max_size=30), provider=st.just("anthropic")
)
redacted_thinking = st.builds(
    ThinkingPart,
    st.just(""),
    redacted=st.text(min_size=1, max_size=30),
    provider=st.just("anthropic"),
)
images = st.builds(
    ImagePart,
    data=st.binary(min_size=1, max_size=15).map(lambda raw: base64.b64encode(raw).decode()),
    media_type=st.sampled_from(["image/png", "image/jpeg", "image/gif", "image/webp"]),
) | st.builds(ImagePart, url=st.from_regex(r"https://example\.com/[a-z]{1,8}\.png", fullmatch=True))
user_parts = st.lists(st.one_of(st.builds(TextPart, texts), images), min_size=1, max_size=3)


@st.composite
def assistant_turn(draw: st.DrawFn) -> Message:
    parts: list[Part] = draw(st.lists(signed_thinking | redacted_thinking, max_size=2))
    parts += [TextPart(t) for t in draw(st.lists(texts, max_size=2))]
    call_ids = draw(st.lists(ids, max_size=3, unique=True))
    parts += [ToolCallPart(i, draw(ids), draw(arguments)) for i in call_ids]
    if not parts:
        parts = [TextPart(draw(texts))]
    return Message("assistant", tuple(parts))


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    messages: list[Message] = []
    if draw(st.booleans()):
        messages.append(Message("system", (TextPart(draw(texts)),)))
    messages.append(Message("user", tuple(draw(user_parts))))
    for _ in range(draw(st.integers(0, 3))):
        assistant = draw(assistant_turn())
        messages.append(assistant)
        for call in assistant.tool_calls:
            result = ToolResultPart(
                call.id, draw(st.text(max_size=20)), is_error=draw(st.booleans())
            )
            messages.append(Message("tool", (result,)))
        if not assistant.tool_calls or draw(st.booleans()):
            messages.append(Message("user", tuple(draw(user_parts))))
    return messages


tools = st.builds(
    ToolDefinition,
    name=ids,
    description=st.text(max_size=20),
    input_schema=st.fixed_dictionaries(
        {"type": st.just("object")},
        optional={"properties": st.dictionaries(ids, st.just({"type": "string"}))},
    ),
)
tool_choices = (
    st.none()
    | st.builds(ToolChoice, mode=st.sampled_from(["auto", "any"]), disable_parallel=st.booleans())
    | st.builds(ToolChoice, mode=st.just("tool"), name=ids, disable_parallel=st.booleans())
    | st.just(ToolChoice(mode="none"))
)


@st.composite
def requests(draw: st.DrawFn) -> ChatRequest:
    max_tokens = draw(st.integers(1, 200_000))
    thinking = None
    if max_tokens > 1025 and draw(st.booleans()):
        thinking = ThinkingConfig(budget_tokens=draw(st.integers(1024, max_tokens - 1)))
    return ChatRequest(
        model=draw(st.text(min_size=1, max_size=20)),
        messages=tuple(draw(conversations())),
        stream=draw(st.booleans()),
        params=GenerationParams(
            max_tokens=max_tokens,
            temperature=draw(st.none() | st.floats(0, 1)),
            top_p=draw(st.none() | st.floats(0, 1)),
            top_k=draw(st.none() | st.integers(1, 500)),
            stop=tuple(draw(st.lists(texts, max_size=3))),
        ),
        tools=tuple(draw(st.lists(tools, max_size=3))),
        tool_choice=draw(tool_choices),
        thinking=thinking,
    )


def _last_tool_turn_unsigned(messages: tuple[Message, ...]) -> bool:
    assistants = [m for m in messages if m.role == "assistant"]
    if not assistants or not assistants[-1].tool_calls:
        return False
    return not isinstance(assistants[-1].parts[0], ThinkingPart)


@settings(max_examples=150, deadline=None)
@given(requests())
def test_request_round_trip(req: ChatRequest) -> None:
    expected = req
    if req.thinking is not None and _last_tool_turn_unsigned(req.messages):
        # Anthropic refuses thinking when the tool turn in play does not open with a
        # signed thinking block; the encoder leaves thinking off for that request.
        expected = dataclasses.replace(req, thinking=None)
    assert decode_chat_request(encode_chat_request(req)) == expected


stop_reasons = st.sampled_from(
    [StopReason.END_TURN, StopReason.MAX_TOKENS, StopReason.TOOL_USE, StopReason.CONTENT_FILTER]
)


@st.composite
def responses(draw: st.DrawFn) -> ChatResponse:
    message = draw(assistant_turn())
    message = Message(
        "assistant",
        tuple(
            dataclasses.replace(p, id="toolu_" + p.id) if isinstance(p, ToolCallPart) else p
            for p in message.parts
        ),
    )
    stop_reason = draw(stop_reasons | st.just(StopReason.STOP_SEQUENCE))
    # The core's input_tokens count cache reads and writes in; a usage that
    # knows no input knows no cache either.
    uncached, output, read, written = draw(counts), draw(counts), draw(counts), draw(counts)
    if uncached is None:
        read = written = None
    total = None if uncached is None else uncached + (read or 0) + (written or 0)
    return ChatResponse(
        id="msg_" + draw(ids),
        model="claude-public",
        message=message,
        stop_reason=stop_reason,
        stop_sequence=draw(texts) if stop_reason is StopReason.STOP_SEQUENCE else None,
        usage=Usage(total, output, read, written),
    )


REQUEST = ChatRequest(model="claude-public", messages=(Message("user", (TextPart("q"),)),))


def meaning(resp: ChatResponse) -> tuple[Any, ...]:
    """What a client sees: parts, stop reason and usage (unknown counts read as 0)."""
    reason = resp.stop_reason
    if resp.message.tool_calls and reason is StopReason.END_TURN:
        reason = StopReason.TOOL_USE
    usage = resp.usage
    return (
        resp.id,
        resp.model,
        resp.message.parts,
        reason,
        resp.stop_sequence,
        (
            usage.input_tokens or 0,
            usage.output_tokens or 0,
            usage.cache_read_input_tokens or 0,
            usage.cache_creation_input_tokens or 0,
        ),
    )


@settings(max_examples=150, deadline=None)
@given(responses())
def test_response_round_trip(resp: ChatResponse) -> None:
    assert meaning(decode_chat_response(encode_chat_response(resp, REQUEST))) == meaning(resp)


async def _through_the_wire(resp: ChatResponse, chunk_size: int) -> ChatResponse:
    async def events() -> AsyncIterator[StreamEvent]:
        for event in events_from_response(resp):
            yield event

    data = b"".join([chunk async for chunk in encode_chat_stream(events(), REQUEST)])
    return await accumulate(decode_chat_stream(aiter_sse(chunked(data, chunk_size))))


@settings(max_examples=100, deadline=None)
@given(responses(), st.integers(1, 64))
def test_stream_round_trip(resp: ChatResponse, chunk_size: int) -> None:
    assert meaning(asyncio.run(_through_the_wire(resp, chunk_size))) == meaning(resp)

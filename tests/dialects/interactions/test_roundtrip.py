"""Round trips through the Interactions dialect keep meaning (hypothesis).

- A client sends the steps it received back as the next ``input`` (a stateless client,
  or the gateway's own store): what the backend said (text, thinking with its
  signature, function calls) reaches the backend again unchanged.
- The streamed reply is the non-streamed one, each event valid for google-genai's own
  ``InteractionSSEStreamEvent`` (a known variant, never the SDK's ``Unknown*``
  fallback), and read back by the client side (``decode_chat_stream``, the
  ``gemini_interactions`` backend's) it is the same reply.
- The backend's request, read by the front, is the conversation it was made from.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

import orjson
from google.genai._gaos.types import interactions as sdk
from httpx_sse import ServerSentEvent
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from llmbridge.core.accumulate import accumulate
from llmbridge.core.events import StreamEvent
from llmbridge.core.messages import (
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)
from llmbridge.core.replay import events_from_response
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.dialects.interactions import (
    decode_chat_request,
    decode_chat_stream,
    encode_chat_request,
    encode_chat_response,
    encode_chat_stream,
)
from llmbridge.dialects.interactions.steps import INTERACTIONS

texts = st.text(max_size=20)
nonempty = st.text(min_size=1, max_size=20)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
signatures = st.none() | st.binary(min_size=1, max_size=12).map(
    lambda raw: base64.b64encode(raw).decode()
)
TOOLS = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]


@st.composite
def parts(draw: st.DrawFn, number: int) -> Part:
    kind = draw(st.sampled_from(["text", "thinking", "call"]))
    if kind == "text":
        return TextPart(draw(nonempty))
    if kind == "thinking":
        return ThinkingPart(draw(nonempty), signature=draw(signatures))
    arguments = orjson.loads(orjson.dumps(draw(st.dictionaries(texts, json_values, max_size=3))))
    return ToolCallPart(f"call_{number}", "lookup", arguments)


@st.composite
def replies(draw: st.DrawFn) -> ChatResponse:
    count = draw(st.integers(min_value=1, max_value=5))
    message = Message("assistant", tuple(draw(parts(number)) for number in range(count)))
    return ChatResponse(
        id="scripted-1",
        model="m",
        message=message,
        stop_reason=draw(st.sampled_from(list(StopReason))),
        usage=Usage(draw(st.integers(0, 10**6)), draw(st.integers(0, 10**6))),
        created=1_700_000_000.0,
    )


def request_for(stream: bool) -> ChatRequest:
    body = {"model": "m", "input": "hi", "tools": TOOLS, "stream": stream}
    return decode_chat_request(body)


def known(value: object) -> None:
    """No part of an SDK object fell back to the SDK's ``Unknown*`` variants."""
    assert "Unknown" not in type(value).__name__, value
    for item in getattr(value, "__dict__", {}).values():
        for each in item if isinstance(item, list) else [item]:
            if isinstance(each, BaseModel):
                known(each)


@settings(max_examples=60, deadline=None)
@given(replies())
def test_steps_sent_back_reach_the_backend_unchanged(reply: ChatResponse) -> None:
    encoded = encode_chat_response(reply, request_for(False))
    known(sdk.Interaction.model_validate(encoded))
    follow_up = {
        "model": "m",
        "tools": TOOLS,
        "input": [
            {"type": "user_input", "content": [{"type": "text", "text": "hi"}]},
            *encoded["steps"],
        ],
    }
    decoded = decode_chat_request(orjson.loads(orjson.dumps(follow_up)))
    assistant = decoded.messages[1]
    assert assistant.role == "assistant"
    assert assistant.parts == reply.message.parts


async def _streamed(reply: ChatResponse, request: ChatRequest) -> bytes:
    async def events() -> AsyncIterator[StreamEvent]:
        for event in events_from_response(reply):
            yield event

    return b"".join([chunk async for chunk in encode_chat_stream(events(), request)])


@settings(max_examples=60, deadline=None)
@given(replies())
def test_the_stream_is_the_reply_for_the_sdk_and_for_the_backend_side(
    reply: ChatResponse,
) -> None:
    request = request_for(True)
    frames = asyncio.run(_streamed(reply, request)).decode().split("\n\n")
    assert frames[-2:] == ["data: [DONE]", ""]
    data: list[dict[str, Any]] = []
    for frame in frames[:-2]:
        name, line = frame.split("\n")
        event = orjson.loads(line.removeprefix("data: "))
        assert name == f"event: {event['event_type']}"
        known(sdk.InteractionSSEStreamEvent.model_validate({"data": event}).data)
        data.append(event)
    final = data[-1]["interaction"]
    expected = encode_chat_response(reply, request)
    assert (final["status"], final["usage"], final["steps"]) == (
        expected["status"],
        expected["usage"],
        expected["steps"],
    )

    async def read_back() -> ChatResponse:
        async def sse() -> AsyncIterator[ServerSentEvent]:
            for frame in frames[:-1]:
                name, _, line = frame.partition("\n")
                yield ServerSentEvent(data=(line or name).removeprefix("data: "))

        return await accumulate(decode_chat_stream(sse(), origin=None))

    again = asyncio.run(read_back())
    # The backend side tags signatures with its origin (none here) for the way back.
    assert again.message.parts == tuple(
        ThinkingPart(p.text, signature=INTERACTIONS.carry(None, p.signature))
        if isinstance(p, ThinkingPart) and p.signature
        else p
        for p in reply.message.parts
    )
    assert again.usage.input_tokens == reply.usage.input_tokens
    assert again.usage.output_tokens == reply.usage.output_tokens


@st.composite
def conversations(draw: st.DrawFn) -> tuple[Message, ...]:
    messages: list[Message] = [Message("user", (TextPart(draw(nonempty)),))]
    for turn in range(draw(st.integers(0, 3))):
        assistant: list[Part] = []
        if draw(st.booleans()):
            token = draw(signatures) or "c2ln"
            assistant.append(ThinkingPart(draw(texts), signature=INTERACTIONS.carry("g", token)))
        assistant.append(TextPart(draw(nonempty)))
        call = draw(st.booleans())
        if call:
            assistant.append(ToolCallPart(f"c{turn}", "lookup", {"q": draw(texts)}))
        messages.append(Message("assistant", tuple(assistant)))
        if call:
            result = ToolResultPart(f"c{turn}", draw(texts), name="lookup")
            messages.append(Message("tool", (result,)))
        messages.append(Message("user", (TextPart(draw(nonempty)),)))
    return tuple(messages)


@settings(max_examples=60, deadline=None)
@given(conversations())
def test_the_backends_request_read_by_the_front_is_its_conversation(
    messages: tuple[Message, ...],
) -> None:
    request = ChatRequest(model="m", messages=(Message("system", (TextPart("sys"),)), *messages))
    body = encode_chat_request(request, origin="g")
    decoded = decode_chat_request(orjson.loads(orjson.dumps(body)))
    assert decoded.messages[0] == Message("system", (TextPart("sys"),))
    # The front holds the signature Google sent; the backend sent the token only.
    expected = tuple(
        Message(
            m.role,
            tuple(
                ThinkingPart(p.text, signature=INTERACTIONS.recover(p.signature, "g"))
                if isinstance(p, ThinkingPart)
                else p
                for p in m.parts
            ),
        )
        for m in messages
    )
    assert decoded.messages[1:] == expected

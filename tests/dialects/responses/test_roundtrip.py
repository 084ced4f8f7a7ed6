"""Round trips through the Responses dialect keep meaning (hypothesis).

A client sends back the output items it received as the next request's ``input``
(Codex and the Agents SDK do, with ``store: false``): whatever the backend said
(text, thinking with its signature, function, custom and namespaced tool calls) must
reach the backend again unchanged. The streamed reply must be the non-streamed one,
event by event valid for the openai SDK's own types.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from llmbridge.core.messages import Message, Part, TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.replay import events_from_response
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.dialects.responses.request import decode_chat_request
from llmbridge.dialects.responses.response import encode_chat_response
from llmbridge.dialects.responses.stream import encode_chat_stream

EVENT = TypeAdapter[Any](ResponseStreamEvent)
texts = st.text(max_size=20)
nonempty = st.text(min_size=1, max_size=20)
names = st.from_regex(r"[a-zA-Z][a-zA-Z0-9_-]{0,11}", fullmatch=True)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "name": "lookup", "parameters": {"type": "object"}},
    {"type": "custom", "name": "apply_patch", "format": {"type": "text"}},
    {
        "type": "namespace",
        "name": "ns",
        "description": "grouped",
        "tools": [
            {"type": "function", "name": "inner", "parameters": {"type": "object"}},
            {"type": "custom", "name": "raw"},
        ],
    },
    {"type": "web_search"},
]


@st.composite
def parts(draw: st.DrawFn, number: int) -> Part:
    kind = draw(st.sampled_from(["text", "thinking", "function", "custom"]))
    if kind == "text":
        return TextPart(draw(texts))
    if kind == "thinking":
        signature = draw(st.none() | nonempty)
        return ThinkingPart(draw(nonempty), signature=signature, provider=draw(st.none() | names))
    call_id = f"call_{number}"
    if kind == "function":
        name = draw(st.sampled_from(["lookup", "ns__inner"]))
        arguments = orjson.loads(
            orjson.dumps(draw(st.dictionaries(texts, json_values, max_size=3)))
        )
        return ToolCallPart(call_id, name, arguments)
    return ToolCallPart(
        call_id, draw(st.sampled_from(["apply_patch", "ns__raw"])), {"input": draw(texts)}
    )


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
    body = {
        "model": "m",
        "input": "hi",
        "tools": TOOLS,
        "stream": stream,
        "include": ["reasoning.encrypted_content"],
    }
    return decode_chat_request(body)


def without_ids(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{key: value for key, value in item.items() if key != "id"} for item in items]


@settings(max_examples=60, deadline=None)
@given(replies())
def test_output_sent_back_reaches_the_backend_unchanged(reply: ChatResponse) -> None:
    encoded = encode_chat_response(reply, request_for(False))
    Response.model_validate(encoded)
    follow_up = {
        "model": "m",
        "tools": TOOLS,
        "input": [{"role": "user", "content": "hi"}, *encoded["output"]],
    }
    decoded = decode_chat_request(orjson.loads(orjson.dumps(follow_up)))
    assistant = decoded.messages[1]
    assert assistant.role == "assistant"
    # Thinking parts without a signature come back without their provider: only
    # sealed state carries it.
    expected = tuple(
        ThinkingPart(part.text)
        if isinstance(part, ThinkingPart) and part.signature is None
        else part
        for part in reply.message.parts
    )
    assert assistant.parts == expected


@settings(max_examples=60, deadline=None)
@given(replies())
def test_stream_is_the_response_event_by_event(reply: ChatResponse) -> None:
    request = request_for(True)

    async def run() -> bytes:
        async def events() -> Any:
            for event in events_from_response(reply):
                yield event

        return b"".join([chunk async for chunk in encode_chat_stream(events(), request)])

    frames = asyncio.run(run()).decode().split("\n\n")
    assert frames[-1] == ""
    decoded = []
    for number, frame in enumerate(frames[:-1]):
        name, data = frame.split("\n")
        event = orjson.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        assert event["sequence_number"] == number
        EVENT.validate_python(event)
        decoded.append(event)
    added = {
        e["output_index"]: e["item"]["id"]
        for e in decoded
        if e["type"].endswith("added") and "item" in e
    }
    done = {
        e["output_index"]: e["item"]["id"]
        for e in decoded
        if e["type"] == "response.output_item.done"
    }
    assert added == done
    final = decoded[-1]["response"]
    expected = encode_chat_response(reply, request)
    assert final["status"] == expected["status"]
    assert final["usage"] == expected["usage"]
    assert without_ids(final["output"]) == without_ids(expected["output"])

"""Healed tool calls reach every dialect's official client.

Backend streams with the argument shapes small models send (a JSON string, doubly
escaped, only in the final frame, parallel calls that all claim index 0) are decoded,
healed by ``heal_tool_calls`` and encoded for each front; the official ``openai``
(chat completions and Responses), ``anthropic`` and ``ollama`` clients must then read
the same healed objects.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import anthropic
import httpx
import httpx2
import ollama
import orjson
import pytest

from llmbridge.core.events import StreamEvent
from llmbridge.core.messages import Message, TextPart, ToolDefinition
from llmbridge.core.request import ChatRequest
from llmbridge.dialects.anthropic import encode_chat_stream as anthropic_encode
from llmbridge.dialects.ollama import decode_chat_stream as ollama_decode
from llmbridge.dialects.ollama import encode_chat_stream as ollama_encode
from llmbridge.dialects.openai.stream import decode_chat_stream as openai_decode
from llmbridge.dialects.openai.stream import encode_chat_stream as openai_encode
from llmbridge.dialects.responses import encode_chat_stream as responses_encode
from llmbridge.features.tool_healing import heal_tool_calls
from tests.dialects.openai.helpers import official_client, sse_events

TOOLS = (
    ToolDefinition(
        "shell",
        input_schema={
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    ),
    ToolDefinition("read", input_schema={"type": "object", "properties": {"path": {}}}),
)
REQUEST = ChatRequest(
    model="public", messages=(Message("user", (TextPart("go"),)),), stream=True, tools=TOOLS
)
EXPECTED = [
    ("shell", {"command": "ls"}),
    ("read", {"path": "/tmp/a b"}),
    ("shell", {"command": "echo 'hi'"}),
]

Calls = list[tuple[str, dict[str, Any]]]


# -- backend streams ----------------------------------------------------------------


def ollama_frame(message: dict[str, Any], **extra: Any) -> str:
    frame = {"model": "m", "created_at": "2025-03-01T10:00:00Z", "message": message, **extra}
    return orjson.dumps(frame).decode()


def ollama_backend() -> list[str]:
    """Every call in the final frame, all with index 0, arguments as strings."""
    calls = [
        {"function": {"index": 0, "name": "shell", "arguments": '{"command":"ls"}'}},
        {"function": {"index": 0, "name": "read", "arguments": '{\\"path\\":\\"/tmp/a b\\"}'}},
        {"function": {"index": 0, "name": "shell", "arguments": "{'command': \"echo 'hi'\"}"}},
    ]
    return [
        ollama_frame({"role": "assistant", "content": ""}, done=False),
        ollama_frame(
            {"role": "assistant", "content": "", "tool_calls": calls},
            done=True,
            done_reason="stop",
        ),
    ]


def openai_backend() -> bytes:
    """Fragments of doubly-escaped and double-encoded arguments, every call at index 0."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        body = {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return b"data: " + orjson.dumps(body) + b"\n\n"

    def call(call_id: str | None, name: str | None, arguments: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"index": 0, "function": {"arguments": arguments}}
        if call_id:
            entry |= {"id": call_id, "type": "function"}
            entry["function"]["name"] = name
        return {"tool_calls": [entry]}

    double_encoded = orjson.dumps('{"path": "/tmp/a b"}').decode()
    return b"".join(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk(call("call_1", "shell", '{\\"comm')),
            chunk(call(None, None, 'and\\":\\"ls\\"}')),
            chunk(call("call_2", "read", double_encoded[:9])),
            chunk(call(None, None, double_encoded[9:])),
            chunk(call("call_3", "shell", "{command: \"echo 'hi'\"")),
            chunk({}, "tool_calls"),
            b"data: [DONE]\n\n",
        ]
    )


async def aiter(items: Iterable[str]) -> AsyncIterator[str]:
    for item in items:
        yield item


def from_ollama() -> AsyncIterator[StreamEvent]:
    return ollama_decode(aiter(ollama_backend()))


def from_openai() -> AsyncIterator[StreamEvent]:
    return openai_decode(sse_events([openai_backend()]))


# -- fronts, read by the official clients ---------------------------------------------


async def body_of(stream: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in stream])


async def openai_front(events: AsyncIterator[StreamEvent]) -> Calls:
    body = await body_of(openai_encode(events, REQUEST))
    async with (
        official_client(body, content_type="text/event-stream") as client,
        client.chat.completions.stream(
            model="public", messages=[{"role": "user", "content": "go"}]
        ) as stream,
    ):
        completion = await stream.get_final_completion()
    assert completion.choices[0].finish_reason == "tool_calls"
    calls = completion.choices[0].message.tool_calls or []
    return [(c.function.name, json.loads(c.function.arguments)) for c in calls]


async def responses_front(events: AsyncIterator[StreamEvent]) -> Calls:
    body = await body_of(responses_encode(events, REQUEST))
    async with (
        official_client(body, content_type="text/event-stream") as client,
        client.responses.stream(model="public", input="go") as stream,
    ):
        response = await stream.get_final_response()
    assert response.status == "completed"
    calls = [item for item in response.output if item.type == "function_call"]
    assert len(calls) == len(response.output)
    return [(c.name, json.loads(c.arguments)) for c in calls]


async def anthropic_front(events: AsyncIterator[StreamEvent]) -> Calls:
    body = await body_of(anthropic_encode(events, REQUEST))

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    client = anthropic.AsyncAnthropic(
        api_key="test",
        base_url="http://gateway.test",
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
    )
    try:
        async with client.messages.stream(
            model="public", max_tokens=100, messages=[{"role": "user", "content": "go"}]
        ) as stream:
            message = await stream.get_final_message()
    finally:
        await client.close()
    assert message.stop_reason == "tool_use"
    return [(b.name, dict(b.input)) for b in message.content if b.type == "tool_use"]


async def ollama_front(events: AsyncIterator[StreamEvent]) -> Calls:
    body = await body_of(ollama_encode(events, REQUEST))

    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body)

    client = ollama.AsyncClient("http://ollama.test", transport=httpx.MockTransport(handler))
    try:
        chunks = [
            chunk
            async for chunk in await client.chat(
                model="public", messages=[{"role": "user", "content": "go"}], stream=True
            )
        ]
    finally:
        await client.close()
    calls = [call for c in chunks for call in c.message.tool_calls or []]
    return [(c.function.name, dict(c.function.arguments)) for c in calls]


Source = Callable[[], AsyncIterator[StreamEvent]]
Front = Callable[[AsyncIterator[StreamEvent]], Awaitable[Calls]]


@pytest.mark.parametrize("source", [from_ollama, from_openai], ids=["ollama", "openai"])
@pytest.mark.parametrize(
    "front",
    [openai_front, responses_front, anthropic_front, ollama_front],
    ids=["openai", "responses", "anthropic", "ollama"],
)
async def test_every_client_reads_the_healed_calls(source: Source, front: Front) -> None:
    assert await front(heal_tool_calls(source(), TOOLS)) == EXPECTED


@pytest.mark.parametrize("source", [from_ollama, from_openai], ids=["ollama", "openai"])
async def test_without_healing_the_calls_are_broken(source: Source) -> None:
    # The baseline: what the core's own parser leaves, so the test above means something.
    calls = await anthropic_front(source())
    assert calls != EXPECTED

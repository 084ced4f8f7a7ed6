"""Non-streamed Ollama replies (/api/chat, /api/generate, /api/embed) and the error body."""

from __future__ import annotations

from contextlib import closing
from typing import Any

import httpx
import ollama
import orjson
import pytest

from llmbridge.core.errors import BackendError, BackendProtocolError, ModelNotFoundError
from llmbridge.core.messages import Message, TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.request import ChatRequest, EmbedRequest
from llmbridge.core.response import ChatResponse, EmbedResponse, StopReason, Timings, Usage
from llmbridge.dialects.ollama import (
    decode_chat_request,
    decode_chat_response,
    decode_embed_response,
    encode_chat_response,
    encode_embed_response,
    encode_generate_response,
    error_body,
)

REQUEST = ChatRequest(model="public", messages=())
RESPONSE = ChatResponse(
    id="r1",
    model="backend",
    created=1740823200.25,
    message=Message(
        role="assistant",
        parts=(
            ThinkingPart("think"),
            TextPart("Hello"),
            ToolCallPart(id="call_1", name="f", arguments={"a": [1, 2]}),
        ),
    ),
    stop_reason=StopReason.TOOL_USE,
    usage=Usage(input_tokens=5, output_tokens=3),
    timings=Timings(total_ns=100, load_ns=10, prompt_eval_ns=20, eval_ns=70),
)
METRICS = {
    "total_duration": 100,
    "load_duration": 10,
    "prompt_eval_count": 5,
    "prompt_eval_duration": 20,
    "eval_count": 3,
    "eval_duration": 70,
}


def test_encode_chat_response() -> None:
    assert encode_chat_response(RESPONSE, REQUEST) == {
        "model": "public",
        "created_at": "2025-03-01T10:00:00.250000Z",
        "message": {
            "role": "assistant",
            "content": "Hello",
            "thinking": "think",
            "tool_calls": [
                {"id": "call_1", "function": {"index": 0, "name": "f", "arguments": {"a": [1, 2]}}}
            ],
        },
        "done_reason": "stop",
        "done": True,
        **METRICS,
    }


def test_encode_chat_response_length_and_unknown_metrics() -> None:
    resp = ChatResponse(
        id="r",
        model="m",
        created=0.0,
        message=Message(role="assistant", parts=(TextPart("cut"),)),
        stop_reason=StopReason.MAX_TOKENS,
        usage=Usage(output_tokens=1),
    )
    body = encode_chat_response(resp, REQUEST)
    assert body["message"] == {"role": "assistant", "content": "cut"}
    assert body["done_reason"] == "length"
    assert body["created_at"].endswith("Z")
    assert {k for k in body if "duration" in k or "count" in k} == {"eval_count"}


def test_encode_generate_response() -> None:
    assert encode_generate_response(RESPONSE, REQUEST) == {
        "model": "public",
        "created_at": "2025-03-01T10:00:00.250000Z",
        "response": "Hello",
        "thinking": "think",
        "done_reason": "stop",
        "done": True,
        **METRICS,
    }


def test_decode_real_chat_reply() -> None:
    body = {
        "model": "qwen3",
        "created_at": "2025-03-01T10:00:00.123456789Z",
        "message": {
            "role": "assistant",
            "content": "",
            "thinking": "need weather",
            "tool_calls": [
                {"function": {"index": 0, "name": "w", "arguments": {"city": "Paris"}}},
                {
                    "id": "call_x",
                    "function": {"index": 0, "name": "w", "arguments": {"city": "Oslo"}},
                },
            ],
        },
        "done_reason": "stop",
        "done": True,
        **METRICS,
    }
    resp = decode_chat_response(body)
    assert resp.model == "qwen3"
    assert resp.created == pytest.approx(1740823200.123456)
    assert resp.message.thinking == "need weather"
    assert [(c.name, c.arguments) for c in resp.message.tool_calls] == [
        ("w", {"city": "Paris"}),
        ("w", {"city": "Oslo"}),
    ]
    assert resp.message.tool_calls[1].id == "call_x"
    assert resp.message.tool_calls[0].id.startswith("call_")
    assert resp.stop_reason is StopReason.TOOL_USE
    assert resp.usage == Usage(input_tokens=5, output_tokens=3)
    assert resp.timings == Timings(total_ns=100, load_ns=10, prompt_eval_ns=20, eval_ns=70)


def test_decode_length_and_generate_shaped_reply() -> None:
    resp = decode_chat_response(
        {"model": "m", "response": "abc", "done": True, "done_reason": "length"}
    )
    assert resp.message.parts == (TextPart("abc"),)
    assert resp.stop_reason is StopReason.MAX_TOKENS


@pytest.mark.parametrize(
    "body",
    [None, [], {"model": "m"}, {"message": []}, {"message": {"content": 1}}],
)
def test_decode_malformed_reply(body: object) -> None:
    with pytest.raises(BackendProtocolError):
        decode_chat_response(body)


def test_decode_error_reply() -> None:
    with pytest.raises(BackendError, match="model crashed"):
        decode_chat_response({"error": "model crashed"})


def test_official_client_reads_the_reply() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        decoded = decode_chat_request(orjson.loads(request.content))
        return httpx.Response(200, json=encode_chat_response(RESPONSE, decoded))

    with closing(ollama.Client("http://ollama.test", transport=httpx.MockTransport(handler))) as c:
        reply = c.chat(model="public", messages=[{"role": "user", "content": "hi"}], stream=False)
    assert reply.model == "public"
    assert reply.message.content == "Hello"
    assert reply.message.thinking == "think"
    assert reply.message.tool_calls is not None
    assert reply.message.tool_calls[0].function.arguments == {"a": [1, 2]}
    assert reply.done_reason == "stop" and reply.eval_count == 3


# -- embeddings -----------------------------------------------------------------------


def test_embed_round_trip() -> None:
    resp = EmbedResponse(
        model="backend",
        embeddings=((0.1, -0.2), (1.0, 0.0)),
        input_tokens=4,
        timings=Timings(total_ns=9, load_ns=1),
    )
    body = encode_embed_response(resp, EmbedRequest(model="public", inputs=("a", "b")))
    assert body == {
        "model": "public",
        "embeddings": [[0.1, -0.2], [1.0, 0.0]],
        "total_duration": 9,
        "load_duration": 1,
        "prompt_eval_count": 4,
    }
    decoded = decode_embed_response(orjson.loads(orjson.dumps(body)))
    assert decoded == EmbedResponse(
        model="public",
        embeddings=((0.1, -0.2), (1.0, 0.0)),
        input_tokens=4,
        timings=Timings(total_ns=9, load_ns=1),
    )


def test_decode_embed_with_integer_values() -> None:
    assert decode_embed_response({"model": "e", "embeddings": [[1, 0]]}).embeddings == ((1.0, 0.0),)


@pytest.mark.parametrize(
    "body", [None, {}, {"embeddings": "x"}, {"embeddings": [[1, "a"]]}, {"embeddings": [1.0]}]
)
def test_decode_embed_malformed(body: Any) -> None:
    with pytest.raises(BackendProtocolError):
        decode_embed_response(body)


# -- errors ---------------------------------------------------------------------------


def test_error_body() -> None:
    assert error_body(ModelNotFoundError("gpt-9"), "req_1") == {"error": "model 'gpt-9' not found"}

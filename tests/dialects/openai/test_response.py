"""Chat and embedding replies: encoded for clients (checked with the official client's
types), decoded from servers."""

from __future__ import annotations

import array
import base64
from typing import Any

import orjson
import pytest
from openai.types import CreateEmbeddingResponse
from openai.types.chat import ChatCompletion, ChatCompletionMessageFunctionToolCall

from llmbridge.core.errors import BackendProtocolError
from llmbridge.core.messages import Message, TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.request import ChatRequest, EmbedRequest
from llmbridge.core.response import ChatResponse, EmbedResponse, StopReason, Usage
from llmbridge.dialects.openai.response import (
    decode_chat_response,
    decode_embed_response,
    encode_chat_response,
    encode_embed_response,
)
from tests.dialects.openai.helpers import official_client

REQUEST = ChatRequest(model="public-model", messages=(Message("user", (TextPart("hi"),)),))


def reply(*parts: Any, **fields: Any) -> ChatResponse:
    defaults: dict[str, Any] = {
        "id": "chatcmpl-1",
        "model": "backend-model",
        "created": 1700000000.0,
        "usage": Usage(input_tokens=10, output_tokens=5),
    }
    return ChatResponse(message=Message("assistant", tuple(parts)), **{**defaults, **fields})


# -- encode -------------------------------------------------------------------------


def test_encode_text_reply() -> None:
    body = encode_chat_response(reply(TextPart("Hello!")), REQUEST)
    assert body == {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "public-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello!"},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }
    completion = ChatCompletion.model_validate(body)
    assert completion.choices[0].message.content == "Hello!"


def test_encode_tool_calls_and_thinking() -> None:
    resp = reply(
        ThinkingPart("plan"),
        ToolCallPart("call_1", "f", {"x": 1}),
        ToolCallPart("call_2", "g", {}, raw_arguments="{oops"),
        stop_reason=StopReason.END_TURN,  # a tool call decides the finish reason anyway
        usage=Usage(input_tokens=10, output_tokens=5, cache_read_input_tokens=8),
    )
    body = encode_chat_response(resp, REQUEST)
    completion = ChatCompletion.model_validate(body)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert choice.message.model_extra == {"reasoning_content": "plan"}
    calls = choice.message.tool_calls or []
    assert all(isinstance(c, ChatCompletionMessageFunctionToolCall) for c in calls)
    assert [
        (c.id, c.function.name, c.function.arguments)
        for c in calls
        if isinstance(c, ChatCompletionMessageFunctionToolCall)
    ] == [
        ("call_1", "f", '{"x":1}'),
        ("call_2", "g", "{oops"),
    ]
    assert completion.usage is not None
    assert completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == 8


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [
        (StopReason.END_TURN, "stop"),
        (StopReason.STOP_SEQUENCE, "stop"),
        (StopReason.MAX_TOKENS, "length"),
        (StopReason.CONTENT_FILTER, "content_filter"),
        (StopReason.ERROR, "stop"),
    ],
)
def test_encode_finish_reasons(stop_reason: StopReason, finish_reason: str) -> None:
    body = encode_chat_response(reply(TextPart("x"), stop_reason=stop_reason), REQUEST)
    assert ChatCompletion.model_validate(body).choices[0].finish_reason == finish_reason


def test_encode_foreign_id_and_unknown_time() -> None:
    body = encode_chat_response(
        reply(TextPart("x"), id="msg_01", created=0.0, usage=Usage()), REQUEST
    )
    assert body["id"].startswith("chatcmpl-")
    assert body["created"] > 1_600_000_000
    assert body["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


def test_encode_empty_reply_has_empty_content() -> None:
    body = encode_chat_response(reply(), REQUEST)
    assert body["choices"][0]["message"] == {"role": "assistant", "content": ""}


async def test_official_client_reads_the_reply() -> None:
    body = encode_chat_response(reply(TextPart("Hi"), ToolCallPart("c", "f", {"a": [1]})), REQUEST)

    async with official_client(orjson.dumps(body)) as client:
        completion = await client.chat.completions.create(
            model="public-model", messages=[{"role": "user", "content": "hi"}]
        )
    assert completion.choices[0].message.content == "Hi"
    assert completion.choices[0].finish_reason == "tool_calls"


# -- decode -------------------------------------------------------------------------

OPENAI_REPLY = {
    "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
    "object": "chat.completion",
    "created": 1741569952,
    "model": "gpt-4.1-2025-04-14",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Hello! How can I assist you today?",
                "refusal": None,
                "annotations": [],
            },
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {
        "prompt_tokens": 19,
        "completion_tokens": 10,
        "total_tokens": 29,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    },
    "service_tier": "default",
    "system_fingerprint": None,
}


def test_decode_openai_reply() -> None:
    assert decode_chat_response(OPENAI_REPLY) == ChatResponse(
        id="chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
        model="gpt-4.1-2025-04-14",
        created=1741569952.0,
        message=Message("assistant", (TextPart("Hello! How can I assist you today?"),)),
        stop_reason=StopReason.END_TURN,
        usage=Usage(
            input_tokens=19, output_tokens=10, cache_read_input_tokens=0, reasoning_tokens=0
        ),
        provider_details={"openai": {"service_tier": "default"}},
    )


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_decode_reasoning_under_either_name(field: str) -> None:
    body = completion_with({"role": "assistant", "content": "42", field: "think"})
    assert decode_chat_response(body).message.parts == (ThinkingPart("think"), TextPart("42"))


def test_decode_tool_calls_override_finish_reason() -> None:
    body = completion_with(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}},
                {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{"}},
                {"type": "function", "function": {"name": "h", "arguments": {"obj": True}}},
            ],
        },
        finish_reason="stop",
    )
    resp = decode_chat_response(body)
    assert resp.stop_reason is StopReason.TOOL_USE
    calls = resp.message.tool_calls
    assert calls[0] == ToolCallPart("c1", "f", {"a": 1})
    assert calls[1] == ToolCallPart("c2", "g", {}, raw_arguments="{")
    assert calls[2].name == "h" and calls[2].arguments == {"obj": True}
    assert calls[2].id.startswith("call_")


def test_decode_vllm_stop_reason_names_the_stop_sequence() -> None:
    body = completion_with({"role": "assistant", "content": "a"}, stop_reason="###")
    resp = decode_chat_response(body)
    assert resp.stop_reason is StopReason.STOP_SEQUENCE
    assert resp.stop_sequence == "###"


@pytest.mark.parametrize(
    ("finish_reason", "stop_reason"),
    [
        ("length", StopReason.MAX_TOKENS),
        ("content_filter", StopReason.CONTENT_FILTER),
        (None, StopReason.END_TURN),
        ("eos", StopReason.END_TURN),
    ],
)
def test_decode_finish_reasons(finish_reason: str | None, stop_reason: StopReason) -> None:
    body = completion_with({"role": "assistant", "content": "x"}, finish_reason=finish_reason)
    assert decode_chat_response(body).stop_reason is stop_reason


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ([], "not a JSON object"),
        ({"choices": []}, "no choices"),
        ({"choices": "x"}, "no choices"),
        ({"choices": [{"message": "hi"}]}, "message is not a JSON object"),
        ({"choices": [{"message": {"content": 5}}]}, "content is not a string"),
        ({"choices": [{"message": {"tool_calls": {}}}]}, "not a list"),
        ({"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}, "no function name"),
        ({"choices": [{"message": {"tool_calls": ["x"]}}]}, "not a JSON object"),
        ({"id": 5, "choices": [{"message": {}}]}, "id is not a string"),
    ],
)
def test_decode_malformed_replies(body: object, match: str) -> None:
    with pytest.raises(BackendProtocolError, match=match):
        decode_chat_response(body)


def completion_with(message: dict[str, Any], **choice: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-x",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop", **choice}],
    }


# -- embeddings ---------------------------------------------------------------------


def test_encode_embeddings() -> None:
    resp = EmbedResponse(model="backend", embeddings=((0.1, 0.2), (0.3, -0.4)), input_tokens=7)
    body = encode_embed_response(resp, EmbedRequest(model="public", inputs=("a", "b")))
    parsed = CreateEmbeddingResponse.model_validate(body)
    assert [e.embedding for e in parsed.data] == [[0.1, 0.2], [0.3, -0.4]]
    assert [e.index for e in parsed.data] == [0, 1]
    assert parsed.model == "public"
    assert parsed.usage.prompt_tokens == parsed.usage.total_tokens == 7


def test_decode_embeddings_in_index_order() -> None:
    packed = base64.b64encode(array.array("f", [0.5, -1.0]).tobytes()).decode()
    body = {
        "object": "list",
        "data": [
            {"object": "embedding", "index": 1, "embedding": packed},
            {"object": "embedding", "index": 0, "embedding": [1, 2.5]},
        ],
        "model": "text-embedding-3-small",
        "usage": {"prompt_tokens": 4, "total_tokens": 4},
    }
    assert decode_embed_response(body) == EmbedResponse(
        model="text-embedding-3-small", embeddings=((1.0, 2.5), (0.5, -1.0)), input_tokens=4
    )


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("x", "not a JSON object"),
        ({"data": None}, "no data list"),
        ({"data": ["x"]}, "not a JSON object"),
        ({"data": [{"embedding": ["a"]}]}, "not a vector"),
        ({"data": [{"embedding": "!!!"}]}, "not base64"),
        ({"data": [{"index": "0", "embedding": []}]}, "index"),
    ],
)
def test_decode_malformed_embeddings(body: object, match: str) -> None:
    with pytest.raises(BackendProtocolError, match=match):
        decode_embed_response(body)

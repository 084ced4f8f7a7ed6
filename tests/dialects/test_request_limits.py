"""The request checks the Ollama and OpenAI decoders share from core (the parts of a
message, core/request_limits.check_message_parts; tool-call arguments sent as a string,
core/tool_arguments.parse_request_tool_arguments), as each decoder reports them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.request import ChatRequest
from llmbridge.core.request_limits import RequestLimits
from llmbridge.dialects.ollama.request import decode_chat_request as decode_ollama
from llmbridge.dialects.openai.request import decode_chat_request as decode_openai

Decode = Callable[[object, RequestLimits], ChatRequest]

LIMITS = RequestLimits(max_parts_per_message=3, max_json_depth=16)
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJ"
    "RU5ErkJggg=="
)


def call(arguments: Any, number: int = 0) -> dict[str, Any]:
    return {
        "id": f"c{number}",
        "type": "function",
        "function": {"name": "f", "arguments": arguments},
    }


def nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("decode", "message", "noun"),
    [
        (
            decode_ollama,
            {"role": "user", "content": "look", "images": [PNG] * 2, "tool_calls": []},
            None,
        ),
        (
            decode_ollama,
            {"role": "assistant", "images": [PNG] * 2, "tool_calls": [call({}, 1), call({}, 2)]},
            "4 images and tool calls exceed the limit of 3",
        ),
        (decode_openai, {"role": "user", "content": [{"type": "text", "text": "x"}] * 3}, None),
        (
            decode_openai,
            {"role": "user", "content": [{"type": "text", "text": "x"}] * 4},
            "4 content parts and tool calls exceed the limit of 3",
        ),
    ],
)
def test_parts_of_a_message_are_counted_against_the_limit(
    decode: Decode, message: dict[str, Any], noun: str | None
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}, message]}
    if noun is None:
        assert len(decode(body, LIMITS).messages) == 2
        return
    with pytest.raises(InvalidRequestError) as caught:
        decode(body, LIMITS)
    assert caught.value.param == "messages.1"
    assert caught.value.message.startswith(f"messages.1: {noun}")
    assert "server.limits.max_parts_per_message" in caught.value.message


@pytest.mark.parametrize("decode", [decode_ollama, decode_openai])
def test_tool_arguments_sent_as_a_string_are_checked_encodable(decode: Decode) -> None:
    too_deep = orjson.dumps(nested(20)).decode()
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "", "tool_calls": [call("{}"), call(too_deep, 1)]},
        ],
    }
    with pytest.raises(InvalidRequestError) as caught:
        decode(body, LIMITS)
    assert caught.value.param is not None
    assert caught.value.param.startswith("messages.1.tool_calls.1.function.arguments")
    assert "nested deeper than 16 levels" in caught.value.message


@pytest.mark.parametrize("decode", [decode_ollama, decode_openai])
def test_tool_arguments_within_the_limits_are_parsed(decode: Decode) -> None:
    arguments = {"a": [1, 2.5, "x"], "b": nested(10)}
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [call(orjson.dumps(arguments).decode())],
            },
        ],
    }
    request = decode(body, LIMITS)
    assert request.messages[1].tool_calls[0].arguments == arguments

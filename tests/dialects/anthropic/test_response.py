"""Anthropic response codec, checked against the official SDK's ``Message`` model."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from llmbridge.core.errors import BackendProtocolError, InternalError, LLMBridgeError
from llmbridge.core.messages import ImagePart, Message, TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.dialects.anthropic import (
    decode_chat_response,
    encode_chat_response,
    error_body,
    error_type_for_status,
)
from llmbridge.dialects.anthropic.response import anthropic_tool_id

REQUEST = ChatRequest(model="claude-public-name", messages=(Message("user", (TextPart("q"),)),))


def response(*parts: Any, **fields: Any) -> ChatResponse:
    defaults: dict[str, Any] = {"id": "chatcmpl-1", "model": "qwen3:8b"}
    defaults.update(fields)
    return ChatResponse(message=Message("assistant", tuple(parts)), **defaults)


def test_encode_validates_with_the_sdk() -> None:
    resp = response(
        ThinkingPart("reasoning", signature="sig", provider="anthropic"),
        TextPart(""),
        TextPart("Answer."),
        ToolCallPart("call_abc", "Bash", {"command": "ls"}),
        stop_reason=StopReason.TOOL_USE,
        usage=Usage(input_tokens=12, output_tokens=34, cache_read_input_tokens=5),
    )
    encoded = encode_chat_response(resp, REQUEST)
    message = anthropic.types.Message.model_validate(encoded)
    assert message.id.startswith("msg_")
    assert message.model == "claude-public-name"
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use"]
    assert encoded["content"][0] == {
        "type": "thinking",
        "thinking": "reasoning",
        "signature": "sig",
    }
    assert encoded["content"][2] == {
        "type": "tool_use",
        "id": "toolu_call_abc",
        "name": "Bash",
        "input": {"command": "ls"},
    }
    assert message.stop_reason == "tool_use"
    assert encoded["usage"] == {
        # Anthropic counts input_tokens without the cache reads; the core with them.
        "input_tokens": 7,
        "output_tokens": 34,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 5,
    }


def test_encode_unsigned_thinking_gets_an_empty_signature() -> None:
    encoded = encode_chat_response(response(ThinkingPart("local")), REQUEST)
    assert encoded["content"] == [{"type": "thinking", "thinking": "local", "signature": ""}]
    anthropic.types.Message.model_validate(encoded)


def test_encode_redacted_thinking_and_skips_non_output_parts() -> None:
    encoded = encode_chat_response(
        response(ThinkingPart("", redacted="enc", provider="anthropic"), ImagePart(data="AA")),
        REQUEST,
    )
    assert encoded["content"] == [{"type": "redacted_thinking", "data": "enc"}]
    anthropic.types.Message.model_validate(encoded)


def test_encode_keeps_a_msg_id() -> None:
    assert encode_chat_response(response(id="msg_123"), REQUEST)["id"] == "msg_123"


@pytest.mark.parametrize(
    ("reason", "wire"),
    [
        (StopReason.END_TURN, "end_turn"),
        (StopReason.MAX_TOKENS, "max_tokens"),
        (StopReason.STOP_SEQUENCE, "stop_sequence"),
        (StopReason.TOOL_USE, "tool_use"),
        (StopReason.CONTENT_FILTER, "refusal"),
        (StopReason.ERROR, "end_turn"),
    ],
)
def test_encode_stop_reasons(reason: StopReason, wire: str) -> None:
    encoded = encode_chat_response(response(TextPart("x"), stop_reason=reason), REQUEST)
    assert encoded["stop_reason"] == wire


def test_encode_a_tool_call_means_tool_use() -> None:
    encoded = encode_chat_response(response(ToolCallPart("c", "f")), REQUEST)
    assert encoded["stop_reason"] == "tool_use"


@pytest.mark.parametrize(
    ("call_id", "wire"),
    [
        ("toolu_01A09q90qw90lq917835lq9", "toolu_01A09q90qw90lq917835lq9"),
        ("call_abc", "toolu_call_abc"),
        ("ollama:0/x y", "toolu_ollama_0_x_y"),
    ],
)
def test_tool_ids(call_id: str, wire: str) -> None:
    assert anthropic_tool_id(call_id) == wire
    assert anthropic_tool_id(anthropic_tool_id(call_id)) == wire


def test_decode_a_real_message() -> None:
    body = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "thinking", "thinking": "t", "signature": "EqQB/+=="},
            {"type": "redacted_thinking", "data": "enc"},
            {"type": "text", "text": "Hi", "citations": None},
            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": [1]}},
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 4, "cache_read_input_tokens": 2},
    }
    resp = decode_chat_response(body)
    assert resp.id == "msg_01"
    assert resp.message.parts == (
        ThinkingPart("t", signature="EqQB/+==", provider="anthropic"),
        ThinkingPart("", redacted="enc", provider="anthropic"),
        TextPart("Hi"),
        ToolCallPart("toolu_1", "f", {"a": [1]}),
    )
    assert resp.stop_reason is StopReason.TOOL_USE
    # The core's input_tokens count the cache reads in.
    assert resp.usage == Usage(input_tokens=5, output_tokens=4, cache_read_input_tokens=2)
    assert resp.provider_details is None


def test_decode_keeps_inexact_stop_reasons() -> None:
    resp = decode_chat_response(
        {"id": "msg_1", "model": "m", "content": [], "stop_reason": "pause_turn", "usage": {}}
    )
    assert resp.stop_reason is StopReason.END_TURN
    assert resp.provider_details == {"anthropic": {"stop_reason": "pause_turn"}}


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"content": []},
        {"id": "msg_1", "content": "text"},
        {"id": "msg_1", "content": ["text"]},
        {"id": "msg_1", "content": [{"type": "text"}]},
        {"id": "msg_1", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "{}"}]},
    ],
)
def test_decode_malformed(body: object) -> None:
    with pytest.raises(BackendProtocolError):
        decode_chat_response(body)


# -- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error_type"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (409, "invalid_request_error"),
        (413, "request_too_large"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (502, "api_error"),
        (503, "overloaded_error"),
        (504, "api_error"),
        (529, "overloaded_error"),
    ],
)
def test_error_types(status: int, error_type: str) -> None:
    assert error_type_for_status(status) == error_type
    err = LLMBridgeError("went wrong", status_code=status)
    assert error_body(err, "req_1") == {
        "type": "error",
        "error": {"type": error_type, "message": "went wrong"},
        "request_id": "req_1",
    }


def test_error_body_validates_with_the_sdk() -> None:
    body = error_body(InternalError("boom"), "req_2")
    parsed = anthropic.types.ErrorResponse.model_validate(body)
    assert parsed.error.type == "api_error"


def test_a_whole_message_reads_as_its_stream_does() -> None:
    """What the stream decoder reads from ``message_delta`` and ``message_stop``, read
    from a message sent whole: a tool call whose stop the server left unsaid is a tool
    use, and what context editing cleared is kept for the client's reply."""
    applied = {"applied_edits": [{"type": "clear_tool_uses_20250919", "cleared_tool_uses": 2}]}
    call = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
    resp = decode_chat_response(
        {"id": "msg_1", "content": [call], "stop_reason": None, "context_management": applied}
    )
    assert resp.stop_reason is StopReason.TOOL_USE
    assert resp.provider_details == {"anthropic": {"context_management": applied}}
    plain = decode_chat_response({"id": "msg_2", "content": [], "stop_reason": "pause_turn"})
    assert plain.stop_reason is StopReason.END_TURN
    assert plain.provider_details == {"anthropic": {"stop_reason": "pause_turn"}}

"""OpenAI chat-completion and embedding replies, both directions.

``encode_*`` builds what the gateway's OpenAI front answers (``chat.completion`` and
embedding ``list`` objects); ``decode_*`` reads what an OpenAI-compatible server
answered and raises ``BackendProtocolError`` when it is not a valid reply. The
finish-reason and usage mappings here are shared with ``stream``.
"""

from __future__ import annotations

import array
import base64
import binascii
import time
from typing import Any

import orjson

from llmbridge.core.errors import BackendProtocolError
from llmbridge.core.ids import new_id
from llmbridge.core.messages import Message, Part, TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.request import ChatRequest, EmbedRequest
from llmbridge.core.response import ChatResponse, EmbedResponse, StopReason, Usage
from llmbridge.core.tool_arguments import parse_tool_arguments
from llmbridge.dialects.fields import (
    ReplyFields,
    int_or_none,
    is_number,
    number_or_none,
    object_or_empty,
    str_or_none,
)

__all__ = [
    "decode_chat_response",
    "decode_embed_response",
    "decode_usage",
    "encode_chat_response",
    "encode_embed_response",
    "encode_tool_call",
    "encode_usage",
    "finish_reason_for",
    "reply_created",
    "response_id",
    "stop_reason_for",
]

_FINISH_REASONS: dict[StopReason, str] = {
    StopReason.END_TURN: "stop",
    StopReason.STOP_SEQUENCE: "stop",
    StopReason.MAX_TOKENS: "length",
    StopReason.TOOL_USE: "tool_calls",
    StopReason.CONTENT_FILTER: "content_filter",
    StopReason.ERROR: "stop",
}
_STOP_REASONS: dict[str, StopReason] = {
    "stop": StopReason.END_TURN,
    "length": StopReason.MAX_TOKENS,
    "tool_calls": StopReason.TOOL_USE,
    "function_call": StopReason.TOOL_USE,
    "content_filter": StopReason.CONTENT_FILTER,
}
_KNOWN_RESPONSE_FIELDS = frozenset({"id", "object", "created", "model", "choices", "usage"})

_FIELDS = ReplyFields(lambda field, expected: f"the backend's {field} is not {expected}")
"""Readers of a reply's fields (``the backend's choices[0].message is not a JSON object``)."""


# -- shared mappings ----------------------------------------------------------------


def finish_reason_for(stop_reason: StopReason, saw_tool_call: bool) -> str:
    """OpenAI's ``finish_reason``; any tool call makes it ``tool_calls``."""
    return "tool_calls" if saw_tool_call else _FINISH_REASONS[stop_reason]


def stop_reason_for(finish_reason: str | None) -> StopReason:
    """The core stop reason for a ``finish_reason`` (unknown or missing: end of turn)."""
    return _STOP_REASONS.get(finish_reason or "", StopReason.END_TURN)


def reply_created(value: object) -> float:
    """A reply's ``created`` (Unix seconds); now when it is missing or not a number."""
    created = number_or_none(value)
    return created if created is not None else time.time()


def response_id(core_id: str) -> str:
    """The response id as OpenAI spells it: ours when it already is one, else a new one."""
    return core_id if core_id.startswith("chatcmpl-") else new_id("chatcmpl-")


def encode_usage(usage: Usage) -> dict[str, Any]:
    """OpenAI's ``usage`` object; unknown counts are 0 (the fields are required)."""
    prompt = usage.input_tokens or 0
    completion = usage.output_tokens or 0
    encoded: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if usage.cache_read_input_tokens is not None:
        encoded["prompt_tokens_details"] = {"cached_tokens": usage.cache_read_input_tokens}
    if usage.reasoning_tokens is not None:
        encoded["completion_tokens_details"] = {"reasoning_tokens": usage.reasoning_tokens}
    return encoded


def decode_usage(value: object) -> Usage:
    """Read a ``usage`` object; missing or malformed counts stay unknown."""
    if not isinstance(value, dict):
        return Usage()
    details = object_or_empty(value.get("prompt_tokens_details"))
    completion = object_or_empty(value.get("completion_tokens_details"))
    return Usage(
        input_tokens=int_or_none(value.get("prompt_tokens")),
        output_tokens=int_or_none(value.get("completion_tokens")),
        cache_read_input_tokens=int_or_none(details.get("cached_tokens")),
        reasoning_tokens=int_or_none(completion.get("reasoning_tokens")),
    )


def encode_tool_call(call: ToolCallPart) -> dict[str, Any]:
    """A complete ``tool_calls`` entry; arguments are a JSON string, raw text if kept."""
    arguments = call.raw_arguments
    if arguments is None:
        arguments = orjson.dumps(call.arguments).decode()
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }


# -- chat ---------------------------------------------------------------------------


def encode_chat_response(resp: ChatResponse, request: ChatRequest) -> dict[str, Any]:
    """The ``chat.completion`` object for a complete reply.

    Reasoning goes out as ``reasoning_content`` (the name DeepSeek and LiteLLM use and
    most OpenAI clients that show reasoning read).
    """
    message = resp.message
    calls = message.tool_calls
    text = message.text
    encoded: dict[str, Any] = {
        "role": "assistant",
        "content": text if text or not calls else None,
    }
    if calls:
        encoded["tool_calls"] = [encode_tool_call(call) for call in calls]
    thinking = message.thinking
    if thinking:
        encoded["reasoning_content"] = thinking
    return {
        "id": response_id(resp.id),
        "object": "chat.completion",
        "created": int(resp.created) or int(time.time()),
        "model": request.model,
        "choices": [
            {
                "index": 0,
                "message": encoded,
                "finish_reason": finish_reason_for(resp.stop_reason, bool(calls)),
                "logprobs": None,
            }
        ],
        "usage": encode_usage(resp.usage),
    }


def decode_chat_response(body: object) -> ChatResponse:
    """Read a server's ``chat.completion`` reply (the first choice).

    Raises:
        BackendProtocolError: the body is not a chat completion.
    """
    data = _FIELDS.required_object(body, "response")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise BackendProtocolError("the backend's chat completion has no choices")
    choice = _FIELDS.required_object(choices[0], "choices[0]")
    parts = _decode_message(_FIELDS.required_object(choice.get("message"), "choices[0].message"))
    finish_reason = _FIELDS.optional_string(choice.get("finish_reason"), "choices[0].finish_reason")
    stop_reason = stop_reason_for(finish_reason)
    # vLLM names the stop string that ended generation in a non-standard field.
    stop_sequence = str_or_none(choice.get("stop_reason")) if finish_reason == "stop" else None
    if stop_sequence is not None:
        stop_reason = StopReason.STOP_SEQUENCE
    if any(isinstance(part, ToolCallPart) for part in parts):
        stop_reason = StopReason.TOOL_USE
    extras = {
        key: value
        for key, value in data.items()
        if key not in _KNOWN_RESPONSE_FIELDS and value is not None
    }
    return ChatResponse(
        id=_FIELDS.optional_string(data.get("id"), "id") or new_id("chatcmpl-"),
        model=_FIELDS.optional_string(data.get("model"), "model") or "",
        message=Message("assistant", tuple(parts)),
        stop_reason=stop_reason,
        stop_sequence=stop_sequence,
        usage=decode_usage(data.get("usage")),
        created=reply_created(data.get("created")),
        provider_details={"openai": extras} if extras else None,
    )


def _decode_message(message: dict[str, Any]) -> list[Part]:
    parts: list[Part] = []
    # reasoning_content: DeepSeek, LiteLLM; reasoning: vLLM >= 0.11, Ollama. Servers
    # in transition send both with the same text, so take one, not their sum.
    reasoning = _FIELDS.optional_string(
        message.get("reasoning_content"), "message.reasoning_content"
    )
    reasoning = reasoning or _FIELDS.optional_string(message.get("reasoning"), "message.reasoning")
    if reasoning:
        parts.append(ThinkingPart(reasoning))
    content = message.get("content")
    if isinstance(content, list):  # a list of text parts, as some servers send
        content = "".join(
            item["text"]
            for item in content
            if isinstance(item, dict) and isinstance(item.get("text"), str)
        )
    text = _FIELDS.optional_string(content, "message.content")
    if text:
        parts.append(TextPart(text))
    calls = _FIELDS.optional_list(message.get("tool_calls"), "message.tool_calls")
    for position, call in enumerate(calls):
        where = f"message.tool_calls[{position}]"
        call = _FIELDS.required_object(call, where)
        function = _FIELDS.required_object(call.get("function"), f"{where}.function")
        name = _FIELDS.optional_string(function.get("name"), f"{where}.function.name")
        if not name:
            raise BackendProtocolError(f"the backend's {where} has no function name")
        arguments, raw = parse_tool_arguments(function.get("arguments"))
        call_id = _FIELDS.optional_string(call.get("id"), f"{where}.id") or new_id("call_")
        parts.append(ToolCallPart(call_id, name, arguments, raw))
    return parts


# -- embeddings ---------------------------------------------------------------------


def encode_embed_response(resp: EmbedResponse, request: EmbedRequest) -> dict[str, Any]:
    """The embeddings ``list`` object (always float vectors)."""
    tokens = resp.input_tokens or 0
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": index, "embedding": list(vector)}
            for index, vector in enumerate(resp.embeddings)
        ],
        "model": request.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def decode_embed_response(body: object) -> EmbedResponse:
    """Read a server's embeddings reply, in input order.

    Raises:
        BackendProtocolError: the body is not an embeddings list.
    """
    data = _FIELDS.required_object(body, "embeddings response")
    items = data.get("data")
    if not isinstance(items, list):
        raise BackendProtocolError("the backend's embeddings response has no data list")
    indexed: list[tuple[int, tuple[float, ...]]] = []
    for position, item in enumerate(items):
        entry = _FIELDS.required_object(item, f"data[{position}]")
        index = _FIELDS.required_int(entry.get("index", position), f"data[{position}].index")
        indexed.append((index, _vector(entry.get("embedding"), position)))
    indexed.sort(key=lambda pair: pair[0])
    return EmbedResponse(
        model=_FIELDS.optional_string(data.get("model"), "model") or "",
        embeddings=tuple(vector for _, vector in indexed),
        input_tokens=int_or_none(object_or_empty(data.get("usage")).get("prompt_tokens")),
    )


def _vector(value: object, position: int) -> tuple[float, ...]:
    if isinstance(value, str):  # encoding_format "base64": little-endian float32
        try:
            return tuple(array.array("f", base64.b64decode(value, validate=True)))
        except (binascii.Error, ValueError) as exc:
            raise BackendProtocolError(
                f"the backend's data[{position}].embedding is not base64 float32"
            ) from exc
    if not isinstance(value, list) or not all(is_number(x) for x in value):
        raise BackendProtocolError(f"the backend's data[{position}].embedding is not a vector")
    return tuple(float(x) for x in value)

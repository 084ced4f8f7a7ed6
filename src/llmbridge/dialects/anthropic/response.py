"""Anthropic Messages responses: ``ChatResponse`` to a ``message`` object and back.

``encode_chat_response`` answers a non-streaming ``/v1/messages`` call;
``decode_chat_response`` reads a real Anthropic API's reply. The spellings both
directions and the stream codecs share (message and tool ids, stop reasons, usage)
live here too, so ``stream`` imports them rather than repeating them.
"""

from __future__ import annotations

import re
import time
from typing import Any

from llmbridge.core.errors import BackendProtocolError
from llmbridge.core.ids import new_id
from llmbridge.core.messages import Message, Part, TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.dialects.anthropic.context_management import applied_edits_body, reported_edits
from llmbridge.dialects.anthropic.types import PROVIDER
from llmbridge.dialects.fields import ReplyFields, int_or_none, str_or_none

__all__ = [
    "anthropic_tool_id",
    "decode_block",
    "decode_chat_response",
    "decode_stop_reason",
    "decode_usage",
    "encode_block",
    "encode_chat_response",
    "encode_stop_reason",
    "encode_usage",
    "message_id",
    "thinking_omitted",
    "uncached_input_tokens",
]

_UNSAFE_ID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")

_STOP_REASONS = {
    StopReason.END_TURN: "end_turn",
    StopReason.MAX_TOKENS: "max_tokens",
    StopReason.STOP_SEQUENCE: "stop_sequence",
    StopReason.TOOL_USE: "tool_use",
    StopReason.CONTENT_FILTER: "refusal",
    StopReason.ERROR: "end_turn",
}

_DECODED_STOP_REASONS = {
    "end_turn": StopReason.END_TURN,
    "max_tokens": StopReason.MAX_TOKENS,
    "stop_sequence": StopReason.STOP_SEQUENCE,
    "tool_use": StopReason.TOOL_USE,
    "refusal": StopReason.CONTENT_FILTER,
    "pause_turn": StopReason.END_TURN,
    "model_context_window_exceeded": StopReason.MAX_TOKENS,
}
"""Anthropic's stop reasons in neutral terms; the inexact ones are also kept raw."""

_EXACT_STOP_REASONS = frozenset({"end_turn", "max_tokens", "stop_sequence", "tool_use"})

_MALFORMED = "the Anthropic backend sent a malformed message: "
_FIELDS = ReplyFields(lambda field, expected: f"{_MALFORMED}{field} is not {expected}")
"""Readers of a message's fields (``content.0.text is not a string``)."""


# -- shared spellings -----------------------------------------------------------------


def message_id(response_id: str) -> str:
    """A ``msg_`` id: the response's own when it has that shape, else a new one."""
    return response_id if response_id.startswith("msg_") else new_id("msg_")


def anthropic_tool_id(call_id: str) -> str:
    """A ``toolu_`` id for a tool call, derived deterministically from ``call_id``.

    Anthropic clients expect ``toolu_`` ids matching ``^[a-zA-Z0-9_-]+$``; OpenAI's
    ``call_...`` and Ollama's ids are prefixed and sanitised, so encoding the same
    call twice (stream, then history) gives the same id.
    """
    safe = _UNSAFE_ID_CHARS.sub("_", call_id)
    if not safe:
        return new_id("toolu_")
    return safe if safe.startswith("toolu_") else "toolu_" + safe


def encode_stop_reason(reason: StopReason, saw_tool_call: bool = False) -> str:
    """Anthropic's ``stop_reason`` (``tool_use`` whenever the reply called a tool)."""
    if saw_tool_call and reason is StopReason.END_TURN:
        return "tool_use"
    return _STOP_REASONS.get(reason, "end_turn")


def decode_stop_reason(raw: object) -> StopReason:
    """The neutral stop reason for Anthropic's (``None`` or unknown: end_turn)."""
    if isinstance(raw, str):
        return _DECODED_STOP_REASONS.get(raw, StopReason.END_TURN)
    return StopReason.END_TURN


def decode_usage(raw: object, known: Usage | None = None) -> Usage:
    """``usage`` of a message or a ``message_delta``; absent counts stay ``None``.

    Anthropic's ``input_tokens`` leave out the tokens read from and written to the
    cache; the core's include them, as every other API counts prompt tokens, so
    they are added in here. ``known``: the message's usage so far, whose
    cache counts stand for those a ``message_delta`` leaves out."""
    if not isinstance(raw, dict):
        return Usage()
    read = int_or_none(raw.get("cache_read_input_tokens"))
    written = int_or_none(raw.get("cache_creation_input_tokens"))
    if known is not None:
        read = known.cache_read_input_tokens if read is None else read
        written = known.cache_creation_input_tokens if written is None else written
    uncached = int_or_none(raw.get("input_tokens"))
    return Usage(
        input_tokens=None if uncached is None else uncached + (read or 0) + (written or 0),
        output_tokens=int_or_none(raw.get("output_tokens")),
        cache_read_input_tokens=read,
        cache_creation_input_tokens=written,
    )


def uncached_input_tokens(usage: Usage) -> int | None:
    """Anthropic's ``input_tokens``: the prompt tokens neither read from nor written to
    the cache (the core's ``input_tokens`` count them all)."""
    if usage.input_tokens is None:
        return None
    cached = (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
    return max(usage.input_tokens - cached, 0)


def encode_usage(usage: Usage) -> dict[str, int]:
    """``usage`` with every count an integer, as the API always sends them."""
    return {
        "input_tokens": uncached_input_tokens(usage) or 0,
        "output_tokens": usage.output_tokens or 0,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens or 0,
        "cache_read_input_tokens": usage.cache_read_input_tokens or 0,
    }


# -- encoding -------------------------------------------------------------------------


def encode_chat_response(resp: ChatResponse, request: ChatRequest) -> dict[str, Any]:
    """The ``message`` object answering a non-streaming ``/v1/messages`` call.

    Blocks keep the order the parts came in (thinking, text and tool calls may
    interleave with interleaved thinking, and a client passes them back in order).
    """
    content: list[dict[str, Any]] = []
    saw_tool_call = False
    omit = thinking_omitted(request)
    for part in resp.message.parts:
        block = encode_block(part, omit)
        if block is not None:
            content.append(block)
            saw_tool_call = saw_tool_call or block["type"] == "tool_use"
    message: dict[str, Any] = {
        "id": message_id(resp.id),
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": content,
        "stop_reason": encode_stop_reason(resp.stop_reason, saw_tool_call),
        "stop_sequence": resp.stop_sequence,
        "usage": encode_usage(resp.usage),
    }
    # What the gateway cleared, or else what an Anthropic backend said it cleared.
    context_management = applied_edits_body(request) or reported_edits(resp.provider_details)
    if context_management is not None:
        message["context_management"] = context_management
    return message


def thinking_omitted(request: ChatRequest) -> bool:
    """Whether the client asked for ``thinking.display: "omitted"`` (Claude Code 2.1.330
    does): thinking blocks then come without their text, as the API sends them, whatever
    backend thought; the signature, if any, is kept for the next turn."""
    details = (request.provider_details or {}).get(PROVIDER) or {}
    thinking = details.get("thinking")
    return isinstance(thinking, dict) and thinking.get("display") == "omitted"


def encode_block(part: Part, omit_thinking: bool = False) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text} if part.text else None
    if isinstance(part, ThinkingPart):
        if part.redacted:
            return {"type": "redacted_thinking", "data": part.redacted}
        if not part.text and not part.signature:
            return None
        text = "" if omit_thinking else part.text
        return {"type": "thinking", "thinking": text, "signature": part.signature or ""}
    if isinstance(part, ToolCallPart):
        return {
            "type": "tool_use",
            "id": anthropic_tool_id(part.id),
            "name": part.name,
            "input": part.arguments,
        }
    return None  # images and tool results are not assistant output


# -- decoding -------------------------------------------------------------------------


def decode_chat_response(body: object) -> ChatResponse:
    """Read a real Anthropic API's ``message``.

    Raises:
        BackendProtocolError: the body is not a message object.
    """
    if not isinstance(body, dict):
        raise _malformed("the body is not a JSON object")
    message_id_ = body.get("id")
    content = body.get("content")
    if not isinstance(message_id_, str) or not isinstance(content, list):
        raise _malformed("'id' or 'content' is missing")
    parts = [
        part
        for position, block in enumerate(content)
        if (part := decode_block(block, f"content.{position}")) is not None
    ]
    raw_stop = body.get("stop_reason")
    stop_reason = decode_stop_reason(raw_stop)
    if raw_stop is None and any(isinstance(part, ToolCallPart) for part in parts):
        stop_reason = StopReason.TOOL_USE  # as the stream decoder reads it
    details: dict[str, Any] = {}
    if isinstance(raw_stop, str) and raw_stop not in _EXACT_STOP_REASONS:
        details["stop_reason"] = raw_stop
    if isinstance(body.get("context_management"), dict):
        # What Anthropic's context editing cleared, for the client's reply to say
        # (context_management.reported_edits), as a stream's message_delta carries it.
        details["context_management"] = body["context_management"]
    return ChatResponse(
        id=message_id_,
        model=str(body.get("model") or ""),
        message=Message(role="assistant", parts=tuple(parts)),
        stop_reason=stop_reason,
        stop_sequence=str_or_none(body.get("stop_sequence")),
        usage=decode_usage(body.get("usage")),
        created=time.time(),
        provider_details={PROVIDER: details} if details else None,
    )


def decode_block(block: object, where: str) -> Part | None:
    """One content block of Anthropic's output (``None`` for server-tool blocks).

    Raises:
        BackendProtocolError: a known block type misses a field.
    """
    block = _FIELDS.required_object(block, where)
    kind = block.get("type")
    if kind == "text":
        return TextPart(_FIELDS.required_string(block.get("text"), f"{where}.text"))
    if kind == "thinking":
        return ThinkingPart(
            _FIELDS.required_string(block.get("thinking"), f"{where}.thinking"),
            signature=_FIELDS.required_string(block.get("signature"), f"{where}.signature") or None,
            provider=PROVIDER,
        )
    if kind == "redacted_thinking":
        redacted = _FIELDS.required_string(block.get("data"), f"{where}.data")
        return ThinkingPart("", redacted=redacted, provider=PROVIDER)
    if kind == "tool_use":
        return ToolCallPart(
            id=_FIELDS.required_string(block.get("id"), f"{where}.id"),
            name=_FIELDS.required_string(block.get("name"), f"{where}.name"),
            arguments=_FIELDS.required_object(block.get("input", {}), f"{where}.input"),
        )
    # server_tool_use, web_search_tool_result...: the API ran those tools itself;
    # the core has nothing to carry them in and no client of ours asked for them.
    return None


def _malformed(detail: str) -> BackendProtocolError:
    return BackendProtocolError(_MALFORMED + detail)

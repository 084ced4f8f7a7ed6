"""Responses API replies: the ``response`` object and its output items.

``encode_chat_response`` builds what ``POST /v1/responses`` answers without
streaming; the item and envelope builders here are shared with ``stream``, whose
``response.completed`` event carries the same object, so a streamed and a non-streamed
reply have one shape (the openai SDK's ``types/responses/response.py``).

Each core part becomes one output item: thinking a ``reasoning`` item (its text as
one ``summary_text``; ``encrypted_content`` when the client asked for it with
``include``, see ``reasoning.py``), or a ``compaction`` item when it carries a backend's
own compaction (``carried.py``; its ``encrypted_content`` always), text an assistant
``message``, a tool call a
``function_call`` or, for a custom tool, a ``custom_tool_call`` (``tools.py``). Stop
reasons: ``max_tokens`` and ``content_filter`` make the response ``incomplete`` with
the reason; anything else is ``completed``.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from llmbridge.core.ids import new_id
from llmbridge.core.messages import Part, TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.dialects.responses.carried import is_compaction
from llmbridge.dialects.responses.reasoning import seal_reasoning
from llmbridge.dialects.responses.request import DETAILS_KEY
from llmbridge.dialects.responses.tools import CUSTOM_INPUT, call_shape

__all__ = [
    "call_arguments",
    "compaction_output",
    "custom_input",
    "encode_chat_response",
    "encode_usage",
    "envelope",
    "incomplete_reason",
    "is_custom_call",
    "item_id",
    "message_item",
    "output_items",
    "output_text",
    "reasoning_item",
    "request_details",
    "response_id",
    "thinking_item",
    "tool_call_item",
]

_INCOMPLETE = {
    StopReason.MAX_TOKENS: "max_output_tokens",
    StopReason.CONTENT_FILTER: "content_filter",
}
_ITEM_PREFIX = {
    "message": "msg_",
    "reasoning": "rs_",
    "function_call": "fc_",
    "custom": "ctc_",
    "compaction": "cmp_",
}


def request_details(request: ChatRequest) -> dict[str, Any]:
    """This dialect's fields of the request (``request.DETAILS_KEY``)."""
    details = (request.provider_details or {}).get(DETAILS_KEY)
    return details if isinstance(details, dict) else {}


def response_id(core_id: str) -> str:
    """The response id as the API spells it: ours when it already is one, else new."""
    return core_id if core_id.startswith("resp_") else new_id("resp_")


def item_id(kind: str) -> str:
    """A new output item id (``msg_``, ``rs_``, ``fc_``, ``ctc_``)."""
    return new_id(_ITEM_PREFIX[kind])


def incomplete_reason(stop_reason: StopReason) -> str | None:
    """``incomplete_details.reason`` for a stop reason, or ``None`` when complete."""
    return _INCOMPLETE.get(stop_reason)


def encode_usage(usage: Usage) -> dict[str, Any]:
    """The ``usage`` object; unknown counts are 0 (the fields are required), so
    ``reasoning_tokens`` is 0 unless the backend reported it (OpenAI-compatible and
    Responses servers do)."""
    prompt = usage.input_tokens or 0
    output = usage.output_tokens or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": usage.cache_read_input_tokens or 0,
            "cache_write_tokens": usage.cache_creation_input_tokens or 0,
        },
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens or 0},
        "total_tokens": prompt + output,
    }


def envelope(
    request: ChatRequest,
    resp_id: str,
    created: float,
    status: str,
    output: list[dict[str, Any]],
    *,
    usage: Usage | None = None,
    incomplete: str | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``response`` object: what the request asked for, echoed, and the output."""
    details = request_details(request)
    echo: dict[str, Any] = details.get("echo") or {}
    body: dict[str, Any] = {
        "id": resp_id,
        "object": "response",
        "created_at": int(created) or int(time.time()),
        "status": status,
        "background": False,
        "error": error,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "instructions": echo.get("instructions"),
        "max_output_tokens": echo.get("max_output_tokens"),
        "metadata": echo.get("metadata") or {},
        "model": request.model,
        "output": output,
        "parallel_tool_calls": echo.get("parallel_tool_calls", True),
        "previous_response_id": details.get("previous_response_id"),
        "reasoning": echo.get("reasoning") or {"effort": None, "summary": None},
        "store": bool(details.get("stored")),  # set by the gateway when it stores it
        "temperature": echo.get("temperature"),
        "text": echo.get("text") or {"format": {"type": "text"}},
        "tool_choice": echo.get("tool_choice", "auto"),
        "tools": echo.get("tools") or [],
        "top_p": echo.get("top_p"),
        "truncation": echo.get("truncation", "disabled"),
        "usage": encode_usage(usage) if usage is not None else None,
        "user": echo.get("user"),
    }
    return body


def message_item(item: str, texts: list[str], status: str = "completed") -> dict[str, Any]:
    """An assistant ``message`` item with one ``output_text`` per text."""
    return {
        "id": item,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [output_text(text) for text in texts],
    }


def output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def reasoning_item(item: str, part: ThinkingPart, request: ChatRequest) -> dict[str, Any]:
    """A ``reasoning`` item: the thinking as one summary text."""
    encoded: dict[str, Any] = {
        "id": item,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": part.text}] if part.text else [],
    }
    if request_details(request).get("encrypted_reasoning"):
        encoded["encrypted_content"] = seal_reasoning(part)
    return encoded


def compaction_output(item: str, encrypted: str) -> dict[str, Any]:
    """A ``compaction`` item: opaque content standing for the conversation before it."""
    return {"id": item, "type": "compaction", "encrypted_content": encrypted}


def thinking_item(part: ThinkingPart, request: ChatRequest) -> dict[str, Any]:
    """The item of a thinking part: a ``compaction`` item when it carries a backend's
    compaction, else a ``reasoning`` item."""
    if is_compaction(part.signature):
        sealed = seal_reasoning(part)
        if sealed is not None:
            return compaction_output(item_id("compaction"), sealed)
    return reasoning_item(item_id("reasoning"), part, request)


def tool_call_item(
    item: str, call: ToolCallPart, request: ChatRequest, status: str = "completed"
) -> dict[str, Any]:
    """A ``function_call`` or ``custom_tool_call`` item, names restored (``tools.py``)."""
    shape = call_shape(request_details(request), call.name)
    encoded: dict[str, Any]
    if shape.custom:
        encoded = {
            "id": item,
            "type": "custom_tool_call",
            "status": status,
            "call_id": call.id,
            "name": shape.name,
            "input": custom_input(call),
        }
    else:
        encoded = {
            "id": item,
            "type": "function_call",
            "status": status,
            "call_id": call.id,
            "name": shape.name,
            "arguments": call_arguments(call),
        }
    if shape.namespace is not None:
        encoded["namespace"] = shape.namespace
    return encoded


def is_custom_call(call: ToolCallPart, request: ChatRequest) -> bool:
    return call_shape(request_details(request), call.name).custom


def call_arguments(call: ToolCallPart) -> str:
    """A call's arguments as the JSON string the API sends (raw text when kept)."""
    if call.raw_arguments is not None:
        return call.raw_arguments
    return orjson.dumps(call.arguments).decode()


def custom_input(call: ToolCallPart) -> str:
    """A custom tool call's freeform input: its one string argument, or, when the model
    wrote something else, its arguments as text (never dropped).

    The tool has exactly one argument, so a lone string under another name is the
    input; so is the whole input written as bare text (a JSON string, or the patch
    itself), which tool healing keeps as ``{"raw": text}`` (features/tool_healing.py)."""
    value = call.arguments.get(CUSTOM_INPUT)
    if isinstance(value, str) and call.raw_arguments is None:
        return value
    if call.raw_arguments is None and len(call.arguments) == 1:
        (name, only), *_ = call.arguments.items()
        if isinstance(only, str):
            return _string_literal(only) if name == "raw" else only
    return call_arguments(call)


def _string_literal(text: str) -> str:
    """``text`` decoded when it is a JSON string literal, else ``text`` itself."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
    return value if isinstance(value, str) else text


def encode_chat_response(resp: ChatResponse, request: ChatRequest) -> dict[str, Any]:
    """The ``response`` object for a complete reply."""
    incomplete = incomplete_reason(resp.stop_reason)
    return envelope(
        request,
        response_id(resp.id),
        resp.created,
        "incomplete" if incomplete else "completed",
        output_items(resp.message.parts, request),
        usage=resp.usage,
        incomplete=incomplete,
    )


def output_items(parts: tuple[Part, ...], request: ChatRequest) -> list[dict[str, Any]]:
    """One output item per part, as the stream sends them (``stream.py``)."""
    items: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, TextPart):
            items.append(message_item(item_id("message"), [part.text]))
        elif isinstance(part, ThinkingPart):
            items.append(thinking_item(part, request))
        elif isinstance(part, ToolCallPart):
            kind = "custom" if is_custom_call(part, request) else "function_call"
            items.append(tool_call_item(item_id(kind), part, request))
    return items

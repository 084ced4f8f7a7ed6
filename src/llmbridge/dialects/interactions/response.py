"""Interactions replies: a ``ChatResponse`` as the ``Interaction`` resource, and the
pieces the stream shares with it (the envelope, the status, the usage, the id).

The resource (google-genai's ``Interaction``)::

    {"id": "int_...", "object": "interaction", "model": ..., "status": "completed",
     "created": "2026-...Z", "updated": ..., "steps": [...], "usage": {...},
     "previous_interaction_id"?: ...}

``steps`` are the model's own (``steps.output_step``): a reply to a function result
holds the answer, not the input it answered (``GET`` with ``include_input=true`` adds
the request's ``input``). ``status`` says why the reply ended: ``completed``,
``requires_action`` (the model called functions: the client answers with
``function_result`` steps), ``incomplete`` (``max_output_tokens`` reached, or the reply
was cut by a filter), ``failed``.

Usage: ``total_input_tokens`` includes cached ones (``total_cached_tokens``), and
``total_output_tokens`` does not include the thought tokens (``total_thought_tokens``),
as Google counts them (``total_tokens`` is their sum); the core's ``output_tokens``
includes reasoning, so the encoder takes it out and the decoder adds it back.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from llmbridge.core.ids import new_id
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.dialects.fields import int_or_none, object_or_empty
from llmbridge.dialects.interactions.request import SUMMARIES
from llmbridge.dialects.interactions.steps import output_step
from llmbridge.dialects.interactions.types import PROVIDER

__all__ = [
    "PREVIOUS_INTERACTION_ID",
    "STORED",
    "decode_usage",
    "encode_chat_response",
    "encode_usage",
    "envelope",
    "interaction_id",
    "status_for",
    "summaries_shown",
    "timestamp",
]

PREVIOUS_INTERACTION_ID = "previous_interaction_id"
"""The body's field naming the interaction to continue (and the detail echoing it)."""
STORED = "stored"
"""The detail that says the interaction is stored."""

_STATUSES = {
    StopReason.END_TURN: "completed",
    StopReason.STOP_SEQUENCE: "completed",
    StopReason.TOOL_USE: "requires_action",
    StopReason.MAX_TOKENS: "incomplete",
    StopReason.CONTENT_FILTER: "incomplete",
    StopReason.ERROR: "failed",
}


def interaction_id(core_id: str) -> str:
    """The interaction's id: the backend's when it is already one (``int_``), else new."""
    return core_id if core_id.startswith("int_") else new_id("int_")


def timestamp(unix: float) -> str:
    """ISO 8601 in UTC, to the second, as the API writes ``created``."""
    moment = datetime.fromtimestamp(unix, UTC) if unix else datetime.now(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def status_for(stop_reason: StopReason) -> str:
    """The interaction's ``status`` for a finished reply."""
    return _STATUSES.get(stop_reason, "completed")


def summaries_shown(request: ChatRequest) -> bool:
    """Whether thought summaries go into the reply: unless ``thinking_summaries`` said
    ``none``."""
    details = (request.provider_details or {}).get(PROVIDER) or {}
    return details.get(SUMMARIES) is not False


def envelope(request: ChatRequest, interaction: str, status: str, created: str) -> dict[str, Any]:
    """The resource's fields other than ``steps`` and ``usage``."""
    body: dict[str, Any] = {
        "id": interaction,
        "object": "interaction",
        "model": request.model,
        "status": status,
        "created": created,
        "updated": created,
    }
    details = (request.provider_details or {}).get(PROVIDER) or {}
    previous = details.get(PREVIOUS_INTERACTION_ID)
    if previous:
        body[PREVIOUS_INTERACTION_ID] = previous
    return body


def encode_usage(usage: Usage) -> dict[str, Any]:
    """Google's ``Usage`` for the core's: only the counts that are known."""
    out: dict[str, Any] = {}
    thought = usage.reasoning_tokens or 0
    if usage.input_tokens is not None:
        out["total_input_tokens"] = usage.input_tokens
    if usage.output_tokens is not None:
        out["total_output_tokens"] = max(usage.output_tokens - thought, 0)
    if thought:
        out["total_thought_tokens"] = thought
    if usage.cache_read_input_tokens:
        out["total_cached_tokens"] = usage.cache_read_input_tokens
    if usage.input_tokens is not None or usage.output_tokens is not None:
        out["total_tokens"] = (usage.input_tokens or 0) + (usage.output_tokens or 0)
    return out


def decode_usage(usage: object) -> Usage:
    """The core's ``Usage`` for Google's (lenient: a wrong-typed count is unknown)."""
    body = object_or_empty(usage)
    output = int_or_none(body.get("total_output_tokens"))
    thought = int_or_none(body.get("total_thought_tokens"))
    if output is not None and thought:
        output += thought
    return Usage(
        input_tokens=int_or_none(body.get("total_input_tokens")),
        output_tokens=output,
        cache_read_input_tokens=int_or_none(body.get("total_cached_tokens")),
        reasoning_tokens=thought,
    )


def encode_chat_response(resp: ChatResponse, request: ChatRequest) -> dict[str, Any]:
    """The ``Interaction`` for a complete reply."""
    shown = summaries_shown(request)
    steps = [s for part in resp.message.parts if (s := output_step(part, shown=shown))]
    body = envelope(
        request, interaction_id(resp.id), status_for(resp.stop_reason), timestamp(resp.created)
    )
    body["steps"] = steps
    body["usage"] = encode_usage(resp.usage)
    return body

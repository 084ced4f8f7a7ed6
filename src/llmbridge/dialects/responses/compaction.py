"""Compaction, the wire side: the ``compaction`` item a compacted conversation becomes.

Codex compacts a long conversation remotely: it sends the conversation ending with a
``{"type": "compaction_trigger"}`` item to ``POST /v1/responses`` (Codex 0.169 and
0.171, with its ``remote_compaction_v2``), or the conversation to ``POST
/v1/responses/compact`` (the openai SDK's ``responses.compact``, earlier Codex
releases), and gets back one ``compaction`` item with opaque ``encrypted_content``,
which later requests carry in place of everything it stands for.

Two kinds of item come out of the gateway, both ``{"id": "cmp_...", "type":
"compaction", "encrypted_content": ...}``:

- a backend that compacts itself (a Responses server: ``Capabilities.compaction``)
  answered with its own item, which the core carries as a thinking signature
  (``carried.py``): its ``encrypted_content`` is that part sealed, as reasoning is
  (``reasoning.py``), and it goes back to that backend only;
- any other backend was asked for a summary (features/compaction.py): the item holds
  the summary (``summary.py``), and a later request carrying it back gives every
  backend the summary as a user message where the item was.

``/v1/responses/compact`` answers the ``response.compaction`` object (the SDK's
``CompactedResponse``): the request's user messages as it sent them, then the item.
A ``compaction_trigger`` answers an ordinary response (streamed or not) whose output is
the one item.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from llmbridge.core.errors import BackendProtocolError
from llmbridge.core.events import (
    PartDelta,
    PartEnd,
    PartStart,
    ResponseEnd,
    ResponseStart,
    StreamEvent,
)
from llmbridge.core.ids import new_id
from llmbridge.core.messages import Part, TextPart, ThinkingPart
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import ChatResponse
from llmbridge.dialects.framing import escape_line_breaks
from llmbridge.dialects.responses.carried import is_compaction
from llmbridge.dialects.responses.continuation import input_items
from llmbridge.dialects.responses.reasoning import seal_reasoning
from llmbridge.dialects.responses.response import (
    compaction_output,
    encode_usage,
    envelope,
    item_id,
    response_id,
)
from llmbridge.dialects.responses.stream import StreamEncoder
from llmbridge.dialects.responses.summary import seal_summary

__all__ = [
    "compacted_response",
    "compaction_item",
    "encode_compaction_response",
    "encode_compaction_stream",
    "kept_messages",
]


def compaction_item(parts: tuple[Part, ...] | list[Part]) -> dict[str, Any]:
    """The ``compaction`` item for a reply: the backend's own item when it compacted
    itself, else its text as the summary."""
    for part in parts:
        if isinstance(part, ThinkingPart) and is_compaction(part.signature):
            sealed = seal_reasoning(part)
            if sealed is not None:
                return compaction_output(item_id("compaction"), sealed)
    text = "".join(part.text for part in parts if isinstance(part, TextPart))
    return compaction_output(item_id("compaction"), seal_summary(text.strip()))


def kept_messages(body_input: object) -> list[Any]:
    """The user messages of a compact request's ``input``: what
    ``/v1/responses/compact`` returns before its item, each a whole ``message`` item
    (``type`` and a list of content parts, as OpenAI returns them and Codex parses
    them: a bare ``{"role", "content": "text"}`` is written out), its other fields as
    the client sent them."""
    kept = []
    for item in input_items(body_input):
        if not isinstance(item, dict):
            continue
        if item.get("type", "message") == "message" and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                content = [{"type": "input_text", "text": content}]
            kept.append({**item, "type": "message", "content": content})
    return kept


def compacted_response(
    reply: ChatResponse, kept: list[Any], *, compacted_id: str | None = None
) -> dict[str, Any]:
    """``POST /v1/responses/compact``'s ``response.compaction`` object."""
    return {
        "id": compacted_id or new_id("resp_"),
        "object": "response.compaction",
        "created_at": int(reply.created) or int(time.time()),
        "output": [*kept, compaction_item(reply.message.parts)],
        "usage": encode_usage(reply.usage),
    }


def encode_compaction_response(reply: ChatResponse, request: ChatRequest) -> dict[str, Any]:
    """The ``response`` object answering a ``compaction_trigger``: one compaction item."""
    return envelope(
        request,
        response_id(reply.id),
        reply.created,
        "completed",
        [compaction_item(reply.message.parts)],
        usage=reply.usage,
    )


async def encode_compaction_stream(
    events: AsyncIterator[StreamEvent],
    request: ChatRequest,
    on_end: Callable[[dict[str, Any]], None] | None = None,
) -> AsyncIterator[bytes]:
    """The stream answering a ``compaction_trigger``: ``response.created`` and
    ``response.in_progress`` at once, the item (``output_item.added`` and ``.done``)
    when the reply is complete, then ``response.completed``; a failure is ``error``
    and ``response.failed``, as in any Responses stream (``stream.py``). The summary
    itself is never streamed: it is the item's opaque content."""
    encoder = StreamEncoder(request, on_end)
    parts: list[Part] = []
    unnamed = ResponseStart(id="", model=request.model, created=0.0)
    async for event in events:
        if isinstance(event, PartStart | PartDelta | PartEnd | ResponseEnd):
            head = encoder.start(unnamed)  # once, should the stream not begin with its start
            if head:
                yield escape_line_breaks(head)
        if isinstance(event, PartStart | PartDelta):
            continue  # the item goes out whole, once the reply is complete
        if isinstance(event, PartEnd):
            parts.append(event.part)
            continue
        if isinstance(event, ResponseEnd):
            item = compaction_item(parts)
            chunk, index = encoder.open_item(item)
            chunk += encoder.close_item(index, item)
            yield escape_line_breaks(chunk + encoder.encode(event))
            return
        chunk = encoder.encode(event)  # the start, usage, or a StreamError's end
        if chunk:
            yield escape_line_breaks(chunk)
        if encoder.finished:
            return
    error = BackendProtocolError("the backend's stream ended before it was complete")
    yield escape_line_breaks(encoder.fail(error))

"""Ollama non-streamed replies <-> neutral responses (``/api/chat``, ``/generate``, ``/embed``,
``/embeddings``).

Encoders build what an Ollama client reads; decoders read a real Ollama server's
reply. A non-streamed chat reply is decoded as a one-frame stream (through
``stream.ChatFrameDecoder``), so streamed and non-streamed replies cannot disagree.
"""

from __future__ import annotations

import time
from typing import Any

from llmbridge.core.accumulate import accumulate_sync
from llmbridge.core.errors import BackendProtocolError
from llmbridge.core.request import ChatRequest, EmbedRequest
from llmbridge.core.response import ChatResponse, EmbedResponse, Timings
from llmbridge.dialects.fields import int_or_none, is_number, str_or_none
from llmbridge.dialects.ollama.stream import ChatFrameDecoder
from llmbridge.dialects.ollama.types import done_reason, metrics, rfc3339

__all__ = [
    "decode_chat_response",
    "decode_embed_response",
    "encode_chat_response",
    "encode_embed_response",
    "encode_embeddings_response",
    "encode_generate_response",
]


def encode_chat_response(resp: ChatResponse, request: ChatRequest) -> dict[str, Any]:
    """The non-streamed ``/api/chat`` reply."""
    message: dict[str, Any] = {"role": "assistant", "content": resp.message.text}
    thinking = resp.message.thinking
    if thinking:
        message["thinking"] = thinking
    calls = resp.message.tool_calls
    if calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "function": {"index": i, "name": call.name, "arguments": call.arguments},
            }
            for i, call in enumerate(calls)
        ]
    body: dict[str, Any] = {
        "model": request.model,
        "created_at": rfc3339(resp.created or time.time()),
        "message": message,
        "done_reason": done_reason(resp.stop_reason),
        "done": True,
    }
    body.update(metrics(resp.usage, resp.timings))
    return body


def encode_generate_response(resp: ChatResponse, request: ChatRequest) -> dict[str, Any]:
    """The non-streamed ``/api/generate`` reply (it has no tool calls)."""
    body: dict[str, Any] = {
        "model": request.model,
        "created_at": rfc3339(resp.created or time.time()),
        "response": resp.message.text,
    }
    thinking = resp.message.thinking
    if thinking:
        body["thinking"] = thinking
    body["done_reason"] = done_reason(resp.stop_reason)
    body["done"] = True
    body.update(metrics(resp.usage, resp.timings))
    return body


def decode_chat_response(body: object) -> ChatResponse:
    """A real Ollama non-streamed ``/api/chat`` (or ``/api/generate``) reply.

    Raises:
        BackendProtocolError: the body is not shaped like an Ollama reply.
        BackendError: the body is Ollama's ``{"error": "..."}``.
    """
    if not isinstance(body, dict):
        raise BackendProtocolError("Ollama's reply is not a JSON object")
    if "message" not in body and "response" not in body and not body.get("error"):
        raise BackendProtocolError("Ollama's reply has neither 'message' nor 'response'")
    # An error body becomes a StreamError, which accumulate raises.
    return accumulate_sync(ChatFrameDecoder().feed(body, final=True))


def encode_embed_response(resp: EmbedResponse, request: EmbedRequest) -> dict[str, Any]:
    """The ``/api/embed`` reply."""
    body: dict[str, Any] = {
        "model": request.model,
        "embeddings": [list(vector) for vector in resp.embeddings],
    }
    timings = resp.timings
    fields = (
        ("total_duration", timings.total_ns),
        ("load_duration", timings.load_ns),
        ("prompt_eval_count", resp.input_tokens),
    )
    body.update((key, value) for key, value in fields if value is not None)
    return body


def encode_embeddings_response(resp: EmbedResponse) -> dict[str, Any]:
    """The ``/api/embeddings`` reply: the one vector (empty for an empty prompt, which
    only loads the model), and nothing else, as Ollama answers."""
    vector = list(resp.embeddings[0]) if resp.embeddings else []
    return {"embedding": vector}


def decode_embed_response(body: object) -> EmbedResponse:
    """A real Ollama ``/api/embed`` reply.

    Raises:
        BackendProtocolError: ``embeddings`` is missing or not a list of number lists.
    """
    vectors = body.get("embeddings") if isinstance(body, dict) else None
    if not isinstance(body, dict) or not isinstance(vectors, list):
        raise BackendProtocolError("Ollama's embed reply has no 'embeddings' list")
    embeddings: list[tuple[float, ...]] = []
    for vector in vectors:
        if not isinstance(vector, list) or not all(is_number(x) for x in vector):
            raise BackendProtocolError("Ollama sent an embedding that is not a list of numbers")
        embeddings.append(tuple(float(x) for x in vector))
    return EmbedResponse(
        model=str_or_none(body.get("model")) or "",
        embeddings=tuple(embeddings),
        input_tokens=int_or_none(body.get("prompt_eval_count")),
        timings=Timings(
            total_ns=int_or_none(body.get("total_duration")),
            load_ns=int_or_none(body.get("load_duration")),
        ),
    )

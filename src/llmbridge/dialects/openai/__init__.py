"""The OpenAI chat-completions dialect: wire types and codecs, both directions, no I/O.

Server side (the gateway's ``/v1`` front): ``decode_chat_request``,
``encode_chat_response``, ``encode_chat_stream``, ``error_body``, plus embeddings, the
model list and the legacy ``/v1/completions`` (``completions``). Client side (backends
that talk to OpenAI-compatible servers): ``encode_chat_request``,
``decode_chat_response``, ``decode_chat_stream`` (chat and legacy completion streams),
``encode_completion_request``, and the embedding and model-list decoders. See
docs/ARCHITECTURE.md for the contract.
"""

from __future__ import annotations

from llmbridge.dialects.openai.completions import (
    decode_completion_request,
    encode_completion_request,
    encode_completion_response,
    encode_completion_stream,
)
from llmbridge.dialects.openai.errors import error_body
from llmbridge.dialects.openai.model_list import decode_models, encode_model, encode_models
from llmbridge.dialects.openai.request import (
    decode_chat_request,
    decode_embed_request,
    encode_chat_request,
    encode_embed_request,
)
from llmbridge.dialects.openai.response import (
    decode_chat_response,
    decode_embed_response,
    encode_chat_response,
    encode_embed_response,
)
from llmbridge.dialects.openai.stream import (
    decode_chat_batches,
    decode_chat_stream,
    decode_chat_stream_bytes,
    encode_chat_stream,
)

__all__ = [
    "decode_chat_batches",
    "decode_chat_request",
    "decode_chat_response",
    "decode_chat_stream",
    "decode_chat_stream_bytes",
    "decode_completion_request",
    "decode_embed_request",
    "decode_embed_response",
    "decode_models",
    "encode_chat_request",
    "encode_chat_response",
    "encode_chat_stream",
    "encode_completion_request",
    "encode_completion_response",
    "encode_completion_stream",
    "encode_embed_request",
    "encode_embed_response",
    "encode_model",
    "encode_models",
    "error_body",
]

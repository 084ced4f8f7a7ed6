"""Ollama's native API (``/api/chat``, ``/api/generate``, ``/api/embed``,
``/api/embeddings``, ``/api/tags``, ``/api/show``, ``/api/ps``, and the model-management
requests ``/api/pull``, ``/api/push``, ``/api/delete``, ``/api/copy``, ``/api/create``):
wire types and codecs in both directions, no I/O.

The gateway's Ollama routes use the server side (decode requests, encode replies and
NDJSON streams); the Ollama backend uses the client side (encode requests, decode
replies and streams). See docs/ARCHITECTURE.md for the dialect contract.
"""

from __future__ import annotations

from llmbridge.dialects.ollama.errors import error_body
from llmbridge.dialects.ollama.manage import ModelRequest, decode_model_request
from llmbridge.dialects.ollama.model_list import (
    decode_show,
    decode_tags,
    encode_ps,
    encode_show,
    encode_tags,
)
from llmbridge.dialects.ollama.request import (
    decode_chat_request,
    decode_embed_request,
    decode_embeddings_request,
    decode_generate_request,
    decode_show_request,
    encode_chat_request,
    encode_embed_request,
    encode_generate_request,
)
from llmbridge.dialects.ollama.response import (
    decode_chat_response,
    decode_embed_response,
    encode_chat_response,
    encode_embed_response,
    encode_embeddings_response,
    encode_generate_response,
)
from llmbridge.dialects.ollama.stream import (
    ChatFrameDecoder,
    decode_chat_batches,
    decode_chat_stream,
    encode_chat_stream,
    split_ndjson_lines,
)

__all__ = [
    "ChatFrameDecoder",
    "ModelRequest",
    "decode_chat_batches",
    "decode_chat_request",
    "decode_chat_response",
    "decode_chat_stream",
    "decode_embed_request",
    "decode_embed_response",
    "decode_embeddings_request",
    "decode_generate_request",
    "decode_model_request",
    "decode_show",
    "decode_show_request",
    "decode_tags",
    "encode_chat_request",
    "encode_chat_response",
    "encode_chat_stream",
    "encode_embed_request",
    "encode_embed_response",
    "encode_embeddings_response",
    "encode_generate_request",
    "encode_generate_response",
    "encode_ps",
    "encode_show",
    "encode_tags",
    "error_body",
    "split_ndjson_lines",
]

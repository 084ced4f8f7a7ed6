"""Google's Gemini API (``generateContent``, ``streamGenerateContent``, ``countTokens``,
``embedContent``, ``batchEmbedContents``, models), both directions. See docs/GEMINI.md.

Server side (Gemini CLI and the google-genai SDKs talking to the gateway):
``decode_chat_request``, ``decode_count_tokens_request``, ``decode_embed_request``,
``decode_batch_embed_request``, ``encode_chat_response``, ``encode_chat_stream`` (SSE,
``alt=sse``), ``encode_chat_stream_array`` (the JSON array stream), ``encode_model``,
``encode_model_list``, the embedding replies and ``error_body``. Client side (the
``gemini`` backend talking to Google AI Studio): ``encode_chat_request``,
``encode_embed_request``, ``decode_chat_response``, ``decode_chat_stream``,
``decode_models``, ``decode_batch_embed_response``. Wire models are in ``types``;
``contents`` holds turns and parts, ``schema`` Google's OpenAPI-subset schemas,
``thoughts`` the carried thought signatures, and ``model_list`` the model list.
"""

from __future__ import annotations

from llmbridge.dialects.gemini.errors import error_body, status_for_http
from llmbridge.dialects.gemini.model_list import decode_models, encode_model, encode_model_list
from llmbridge.dialects.gemini.request import (
    decode_batch_embed_request,
    decode_chat_request,
    decode_count_tokens_request,
    decode_embed_request,
    encode_chat_request,
    encode_embed_request,
)
from llmbridge.dialects.gemini.response import (
    decode_batch_embed_response,
    decode_chat_response,
    encode_batch_embed_response,
    encode_chat_response,
    encode_embed_response,
)
from llmbridge.dialects.gemini.stream import (
    decode_chat_stream,
    encode_chat_stream,
    encode_chat_stream_array,
)
from llmbridge.dialects.gemini.types import GenerateContentRequest

__all__ = [
    "GenerateContentRequest",
    "decode_batch_embed_request",
    "decode_batch_embed_response",
    "decode_chat_request",
    "decode_chat_response",
    "decode_chat_stream",
    "decode_count_tokens_request",
    "decode_embed_request",
    "decode_models",
    "encode_batch_embed_response",
    "encode_chat_request",
    "encode_chat_response",
    "encode_chat_stream",
    "encode_chat_stream_array",
    "encode_embed_request",
    "encode_embed_response",
    "encode_model",
    "encode_model_list",
    "error_body",
    "status_for_http",
]

"""The Anthropic Messages dialect: ``/v1/messages`` and ``count_tokens``, both directions.

Server side (Claude Code and the official SDKs talking to the gateway):
``decode_chat_request``, ``decode_count_tokens_request``, ``encode_chat_response``,
``encode_chat_stream``, ``error_body``. Client side (a backend that is a real
Anthropic API): ``encode_chat_request``, ``decode_chat_response``,
``decode_chat_stream``. Wire models are in ``types``.
"""

from __future__ import annotations

from llmbridge.dialects.anthropic.errors import error_body, error_type_for_status
from llmbridge.dialects.anthropic.request import (
    decode_chat_request,
    decode_count_tokens_request,
    encode_chat_request,
)
from llmbridge.dialects.anthropic.response import decode_chat_response, encode_chat_response
from llmbridge.dialects.anthropic.stream import decode_chat_stream, encode_chat_stream
from llmbridge.dialects.anthropic.types import CountTokensRequestBody, MessagesRequestBody

__all__ = [
    "CountTokensRequestBody",
    "MessagesRequestBody",
    "decode_chat_request",
    "decode_chat_response",
    "decode_chat_stream",
    "decode_count_tokens_request",
    "encode_chat_request",
    "encode_chat_response",
    "encode_chat_stream",
    "error_body",
    "error_type_for_status",
]

"""The OpenAI Responses dialect (``POST /v1/responses``): wire types and codecs, no I/O.

Server side (the gateway's front): ``decode_chat_request``, ``encode_chat_response``,
``encode_chat_stream``, ``error_body`` (OpenAI's error body, shared with chat
completions). Client side (the ``openai_responses`` backend): ``encode_chat_request``
(``encode``), ``decode_chat_response`` and ``decode_chat_stream`` (``decode``), with
the server's encrypted reasoning carried in thinking signatures (``carried``). See
docs/ARCHITECTURE.md for the contract and docs/RESPONSES.md for the field-by-field
mapping.
"""

from __future__ import annotations

from llmbridge.dialects.responses.decode import decode_chat_response, decode_chat_stream
from llmbridge.dialects.responses.encode import encode_chat_request
from llmbridge.dialects.responses.errors import error_body
from llmbridge.dialects.responses.request import decode_chat_request
from llmbridge.dialects.responses.response import encode_chat_response
from llmbridge.dialects.responses.stream import encode_chat_stream

__all__ = [
    "decode_chat_request",
    "decode_chat_response",
    "decode_chat_stream",
    "encode_chat_request",
    "encode_chat_response",
    "encode_chat_stream",
    "error_body",
]

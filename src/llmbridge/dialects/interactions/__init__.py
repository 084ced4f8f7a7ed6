"""Google's Interactions API (``POST /{v1beta|v1}/interactions``), both directions: wire
types and codecs, no I/O. See docs/INTERACTIONS.md.

Server side (``client.interactions`` of the google-genai SDKs talking to the gateway):
``decode_chat_request``, ``encode_chat_response`` (the ``Interaction`` resource),
``encode_chat_stream`` (its server-sent events), ``error_body`` (Google's error body,
the Gemini dialect's) and, for stored interactions, ``continuation``. Client side (the
``gemini_interactions`` backend talking to Google): ``encode_chat_request``,
``decode_chat_response``, ``decode_chat_stream``. Wire models are in ``types``;
``steps`` holds the conversation both ways. The API lists no models of its own (its
clients list Gemini's ``/v1beta/models``), so there is no ``model_list``.
"""

from __future__ import annotations

from llmbridge.dialects.interactions.decode import decode_chat_response, decode_chat_stream
from llmbridge.dialects.interactions.errors import error_body
from llmbridge.dialects.interactions.request import decode_chat_request, encode_chat_request
from llmbridge.dialects.interactions.response import encode_chat_response
from llmbridge.dialects.interactions.stream import encode_chat_stream
from llmbridge.dialects.interactions.types import CreateInteractionRequest

__all__ = [
    "CreateInteractionRequest",
    "decode_chat_request",
    "decode_chat_response",
    "decode_chat_stream",
    "encode_chat_request",
    "encode_chat_response",
    "encode_chat_stream",
    "error_body",
]

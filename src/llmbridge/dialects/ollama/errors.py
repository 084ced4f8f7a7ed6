"""Errors in Ollama's shape: ``{"error": "<message>"}``, for HTTP bodies and in-stream lines.

Ollama has no error types or codes; the HTTP status (chosen by the gateway from the
error's class) carries the kind. A failure after the reply began is seed 000's final
frame instead (``done_reason: "error"``), written by ``stream.py``.
"""

from __future__ import annotations

from typing import Any

from llmbridge.core.errors import LLMBridgeError
from llmbridge.dialects.validation import path_prefixed

__all__ = ["VALIDATION_WORDING", "error_body"]

VALIDATION_WORDING = path_prefixed(lambda reasons: reasons[0])
"""A body that fails validation: ``messages.0.role: Field required``, the first reason."""


def error_body(err: LLMBridgeError, request_id: str) -> dict[str, Any]:
    """The JSON body Ollama clients expect for ``err``.

    ``request_id`` is not part of Ollama's shape (clients read only ``error``); the
    gateway sends it in a header instead.
    """
    del request_id  # part of the dialect contract; Ollama's body has no place for it
    return {"error": err.message}

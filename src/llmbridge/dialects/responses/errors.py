"""The Responses API's errors: OpenAI's error body, and the in-stream error of a stream.

Before the first byte an error is OpenAI's ``{"error": {"message", "type", "param",
"code"}}`` with the HTTP status (the Responses API shares it with chat completions, so
``dialects/openai/errors.py`` is used as is, wording of validation errors included).
After it, a failure is an ``error`` event followed by ``response.failed`` whose
``response.error`` carries a ``code`` from the API's short list (``failure_code``).
"""

from __future__ import annotations

from typing import Any

from llmbridge.core.errors import LLMBridgeError
from llmbridge.dialects.openai.errors import VALIDATION_WORDING, error_body

__all__ = ["VALIDATION_WORDING", "error_body", "failure_code", "response_error"]


def failure_code(err: LLMBridgeError) -> str:
    """``response.error.code``: the API's codes are ``server_error``,
    ``rate_limit_exceeded``, ``invalid_prompt`` and a few specific to OpenAI's models."""
    if err.status_code == 429:
        return "rate_limit_exceeded"
    if 400 <= err.status_code < 500:
        return "invalid_prompt"
    return "server_error"


def response_error(err: LLMBridgeError) -> dict[str, Any]:
    """The ``error`` object of a failed response."""
    return {"code": failure_code(err), "message": err.message}

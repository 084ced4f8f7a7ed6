"""OpenAI's error body: ``{"error": {"message", "type", "param", "code"}}``.

The ``type`` follows the HTTP status the gateway answers with
(platform.openai.com/docs/guides/error-codes); ``param`` and ``code`` come from the
error itself (``ModelNotFoundError`` carries ``code="model_not_found"``). The same body
is the in-stream error of an SSE stream.
"""

from __future__ import annotations

from typing import Any

from llmbridge.core.errors import LLMBridgeError
from llmbridge.dialects.validation import ErrorWording, json_type

__all__ = ["VALIDATION_WORDING", "error_body", "error_type"]

_TYPES_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def error_type(status_code: int) -> str:
    """OpenAI's error ``type`` for an HTTP status (any 5xx is ``api_error``)."""
    known = _TYPES_BY_STATUS.get(status_code)
    if known is not None:
        return known
    if 400 <= status_code < 500:
        return "invalid_request_error"
    return "api_error"


def error_body(err: LLMBridgeError, request_id: str) -> dict[str, Any]:
    """The JSON body for ``err``.

    ``request_id`` is not part of OpenAI's body (OpenAI sends it as the
    ``x-request-id`` header); it is accepted so every dialect has one signature.
    """
    return {
        "error": {
            "message": err.message,
            "type": error_type(err.status_code),
            "param": err.param,
            "code": err.code,
        }
    }


def _invalid(where: str, reasons: list[str]) -> str:
    return f"Invalid '{where}': {'; '.join(reasons)}." if where else f"{'; '.join(reasons)}."


VALIDATION_WORDING = ErrorWording(
    not_an_object=lambda body: f"The request body must be a JSON object, not {json_type(body)}.",
    invalid=_invalid,
    missing=lambda where: f"Missing required parameter: '{where}'.",
    unsupported_tag=lambda where, value, expected: (
        f"Invalid value for '{where}': {value!r}. Supported values are: {expected}."
    ),
)
"""A body that fails validation, in the API's words: ``Missing required parameter:
'messages.0.role'.``, ``Invalid 'stream': Input should be a valid boolean.``"""

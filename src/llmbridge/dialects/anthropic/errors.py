"""Anthropic's error JSON: the body of an HTTP error and of an in-stream ``error`` event.

``{"type": "error", "error": {"type": ..., "message": ...}, "request_id": ...}``, with
``error.type`` chosen by HTTP status as docs.claude.com/en/api/errors lists them, except
for the types seed 001's clients branch on (``thinking_not_supported``: a 400 for
thinking asked of a model that cannot think), which an error names by its ``code``.
"""

from __future__ import annotations

from typing import Any

from llmbridge.core.errors import LLMBridgeError
from llmbridge.dialects.validation import path_prefixed

__all__ = [
    "SEED_ERROR_TYPES",
    "VALIDATION_WORDING",
    "error_body",
    "error_type",
    "error_type_for_status",
]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "api_error",
    529: "overloaded_error",
}


def error_type_for_status(status: int) -> str:
    """Anthropic's ``error.type`` for an HTTP status (other 4xx: invalid_request_error)."""
    known = _ERROR_TYPES.get(status)
    if known is not None:
        return known
    return "invalid_request_error" if 400 <= status < 500 else "api_error"


SEED_ERROR_TYPES = frozenset({"thinking_not_supported"})
"""``error.type`` values beyond Anthropic's own that seed 001 gives its clients: its
proxy answers thinking for a model that cannot think with HTTP 400 and
``{"type": "error", "error": {"type": "thinking_not_supported"}}``, and clients written
against it branch on that type (features/thinking.py raises it under ``strict``)."""


def error_type(err: LLMBridgeError) -> str:
    """``error.type`` for ``err``: its ``code`` when that is one of ``SEED_ERROR_TYPES``,
    else Anthropic's type for its HTTP status."""
    if err.code in SEED_ERROR_TYPES:
        return err.code
    return error_type_for_status(err.status_code)


def error_body(err: LLMBridgeError, request_id: str) -> dict[str, Any]:
    """The JSON body of an error response in Anthropic's shape."""
    return {
        "type": "error",
        "error": {"type": error_type(err), "message": err.message},
        "request_id": request_id,
    }


def _either(reasons: list[str]) -> str:
    """A union's reasons as one: ``Input should be a valid string or a valid list``."""
    prefix = "Input should be "
    if len(reasons) > 1 and all(reason.startswith(prefix) for reason in reasons):
        reasons = [reasons[0], *(reason.removeprefix(prefix) for reason in reasons[1:])]
    return " or ".join(reasons)


VALIDATION_WORDING = path_prefixed(_either)
"""A body that fails validation: ``messages.0.content: Input should be a valid string or
a valid list``; an unknown block type is ``messages.0.content.1: unknown type 'video'``."""

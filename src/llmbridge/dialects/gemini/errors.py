"""Google's error JSON: the body of an HTTP error and the last event of a failed stream.

``{"error": {"code": <HTTP status>, "message": ..., "status": "INVALID_ARGUMENT"}}``, the
shape every Google API answers with (google.rpc.Status as JSON, cloud.google.com/apis/
design/errors). ``status`` is the canonical gRPC code name chosen by HTTP status, as that
page's table maps them. A 400 that names a field also carries a ``google.rpc.BadRequest``
detail with the field, as Google's own 400s do; the google-genai SDK reads ``code``,
``message``, ``status`` and ``details`` (``google/genai/errors.py``).
"""

from __future__ import annotations

from typing import Any

from llmbridge.core.errors import LLMBridgeError
from llmbridge.dialects.validation import path_prefixed

__all__ = ["VALIDATION_WORDING", "error_body", "status_for_http"]

_STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    # No gRPC code means "wrong method"; Google's own front ends answer a wrong method
    # with a 400-family status, and NOT_FOUND would tell the client the route is absent.
    405: "INVALID_ARGUMENT",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

_BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"


_GEMINI_FIELDS = {"messages": "contents"}
"""Fields named by the core or a backend (a context-length error names ``messages``)
as a Gemini client knows them."""


def status_for_http(code: int) -> str:
    """The canonical ``status`` name for an HTTP status (other 4xx:
    ``FAILED_PRECONDITION``, other 5xx and anything else: ``INTERNAL``)."""
    known = _STATUSES.get(code)
    if known is not None:
        return known
    return "FAILED_PRECONDITION" if 400 <= code < 500 else "INTERNAL"


def error_body(err: LLMBridgeError, request_id: str) -> dict[str, Any]:
    """The JSON body for ``err``.

    ``request_id`` is not part of Google's body (it is in the ``x-request-id`` header);
    it is accepted so every dialect has one signature.
    """
    error: dict[str, Any] = {
        "code": err.status_code,
        "message": err.message,
        "status": status_for_http(err.status_code),
    }
    if err.param and 400 <= err.status_code < 500:
        violation = {"field": _GEMINI_FIELDS.get(err.param, err.param), "description": err.message}
        error["details"] = [{"@type": _BAD_REQUEST, "fieldViolations": [violation]}]
    return {"error": error}


def _either(reasons: list[str]) -> str:
    """A union's reasons as one: ``Input should be a valid string or a valid list``."""
    prefix = "Input should be "
    if len(reasons) > 1 and all(reason.startswith(prefix) for reason in reasons):
        reasons = [reasons[0], *(reason.removeprefix(prefix) for reason in reasons[1:])]
    return " or ".join(reasons)


VALIDATION_WORDING = path_prefixed(_either)
"""A body that fails validation, naming the field by its dotted path as the client
spelled it: ``contents.0.parts.1.inlineData.data: Field required``."""

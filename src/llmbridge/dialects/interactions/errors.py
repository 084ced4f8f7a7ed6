"""The Interactions API's errors: Google's error body, and the stream's ``error`` event.

Before the first byte an error is Google's ``{"error": {"code": <HTTP status>,
"message", "status"}}`` with the HTTP status, the shape every Google API answers with;
it is the Gemini dialect's (``dialects/gemini/errors.py``), used as is, the wording of
validation errors included, on both ``/v1beta/interactions`` and ``/v1/interactions``.
After it, a failure is the stream's ``error`` event, whose ``error`` is the SDKs'
``Error`` (``{"code": <str>, "message"}``): ``code`` the canonical status name in lower
case (``resource_exhausted``, ``unavailable``), as Google's own stream spells it.
"""

from __future__ import annotations

from typing import Any

from llmbridge.core.errors import LLMBridgeError
from llmbridge.dialects.gemini.errors import VALIDATION_WORDING, error_body, status_for_http

__all__ = ["VALIDATION_WORDING", "error_body", "stream_error"]


def stream_error(err: LLMBridgeError) -> dict[str, Any]:
    """The ``error`` object of a stream's ``error`` event for ``err``."""
    return {"code": status_for_http(err.status_code).lower(), "message": err.message}

"""What every fuzzed reply must look like: errors in the caller's dialect, no traceback.

Shared by ``test_schemathesis.py`` and ``test_dialect_requests.py``. The dialect of a
path is the gateway's own rule (``web.render.dialect_for_path``); the shapes are
those of ``dialects/*/errors.py``, checked strictly (no stray keys) so a body that an
official client could not parse as an error fails here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from llmbridge.dialects.anthropic.errors import error_type_for_status
from llmbridge.dialects.gemini.errors import status_for_http
from llmbridge.dialects.openai.errors import error_type
from llmbridge.web.render import Dialect, dialect_for_path

__all__ = ["assert_error_shape", "assert_no_traceback", "dialect_for_path"]

_TRACEBACK = re.compile(rb'Traceback \(most recent call last\)|File "[^"\n]*", line \d+')
# seed 000's failed tool decision adds these to Ollama's {"error"} (dialects/ollama/errors.py)
_OLLAMA_TOOL_DECISION = {"error", "message", "done", "done_reason"}
# google.rpc.Status as JSON; details only on a 400 naming a field (dialects/gemini/errors.py)
_GEMINI_ERROR_KEYS = {"code", "message", "status", "details"}


def assert_no_traceback(body: bytes) -> None:
    """No Python traceback (nor a ``File "...", line N`` frame) anywhere in ``body``."""
    found = _TRACEBACK.search(body)
    assert found is None, f"traceback in the reply: {body[:2000]!r}"


def assert_error_shape(
    dialect: Dialect, status: int, body: bytes, headers: Mapping[str, str] | None = None
) -> str:
    """``body`` is ``dialect``'s error JSON for ``status``; returns the message."""
    assert_no_traceback(body)
    try:
        parsed: Any = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise AssertionError(f"{status} error body is not JSON: {body[:500]!r}") from exc
    assert isinstance(parsed, dict), f"{status} error body is not an object: {parsed!r}"
    if dialect is Dialect.OLLAMA:
        assert set(parsed) == {"error"} or set(parsed) == _OLLAMA_TOOL_DECISION, parsed
        assert isinstance(parsed["error"], str) and parsed["error"], parsed
        return parsed["error"]
    if dialect is Dialect.OPENAI:
        assert set(parsed) == {"error"}, parsed
        error = parsed["error"]
        assert isinstance(error, dict) and set(error) == {"message", "type", "param", "code"}, error
        assert isinstance(error["message"], str) and error["message"], error
        assert error["type"] == error_type(status), (status, error)
        assert all(error[key] is None or isinstance(error[key], str) for key in ("param", "code"))
        return error["message"]
    if dialect is Dialect.GEMINI:
        assert set(parsed) == {"error"}, parsed
        error = parsed["error"]
        assert isinstance(error, dict), error
        assert {"code", "message", "status"} <= set(error) <= _GEMINI_ERROR_KEYS, error
        assert error["code"] == status and error["status"] == status_for_http(status), error
        assert isinstance(error["message"], str) and error["message"], error
        return error["message"]
    assert set(parsed) == {"type", "error", "request_id"}, parsed
    assert parsed["type"] == "error", parsed
    error = parsed["error"]
    assert isinstance(error, dict) and set(error) == {"type", "message"}, error
    assert error["type"] == error_type_for_status(status), (status, error)
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(parsed["request_id"], str) and parsed["request_id"].startswith("req_")
    if headers is not None:
        assert headers.get("request-id") == parsed["request_id"], headers
    return error["message"]

"""Errors rendered in the caller's dialect, with the right status code.

Which dialect a request speaks is decided by its path: ``/api/*`` is Ollama,
``/v1/messages*`` is Anthropic, ``/v1beta/*``, ``/v1/interactions*`` (Google's
Interactions API) and ``/v1/models/{model}:{method}`` for one of Gemini's methods
(``generateContent``...) are Gemini, any other ``/v1/*`` is OpenAI,
and ``/mcp`` and ``/mcp/*`` (the MCP gateway, mcp/) answer as MCP clients read an HTTP
error: a JSON-RPC error body (dialects/jsonrpc.py). Everything else (``/health``,
``/metrics``) answers in OpenAI's shape, the most widely parsed one. (Gemini's
``GET /v1/models`` shares its path with OpenAI's: its route, gateway/routes/gemini.py,
renders its own errors by the client's headers.)
Unexpected exceptions are logged with their traceback here and reach the client
only as a generic ``InternalError`` message: never a traceback.
"""

from __future__ import annotations

import logging
import math
from enum import StrEnum
from typing import Any
from urllib.parse import quote

from starlette.responses import Response
from starlette.types import Scope

from llmbridge.core.errors import BackendError, InternalError, LLMBridgeError, RateLimitError
from llmbridge.core.ids import new_id
from llmbridge.dialects import anthropic, jsonrpc, ollama, openai
from llmbridge.dialects.framing import dumps
from llmbridge.dialects.gemini import errors as gemini_errors

__all__ = [
    "GEMINI_METHODS",
    "Dialect",
    "dialect_for_path",
    "dialect_for_scope",
    "error_response",
    "header_value",
    "is_gemini_client",
    "new_request_id",
    "to_bridge_error",
]

log = logging.getLogger("llmbridge.gateway")


class Dialect(StrEnum):
    OLLAMA = "ollama"
    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    GEMINI = "gemini"
    MCP = "mcp"


GEMINI_METHODS = frozenset(
    {
        "generateContent",
        "streamGenerateContent",
        "countTokens",
        "embedContent",
        "batchEmbedContents",
    }
)
"""The methods Gemini's ``POST /{v1beta|v1}/models/{model}:{method}`` routes serve."""


def dialect_for_path(path: str) -> Dialect:
    if path.startswith("/api/") or path == "/api":
        return Dialect.OLLAMA
    if path == "/mcp" or path.startswith("/mcp/"):
        return Dialect.MCP
    if path.startswith("/v1/messages"):
        return Dialect.ANTHROPIC
    if path.startswith("/v1beta/") or path == "/v1beta":
        return Dialect.GEMINI
    # Google's Interactions API on the JS SDK's default version: Google's errors too.
    if path == "/v1/interactions" or path.startswith("/v1/interactions/"):
        return Dialect.GEMINI
    # Model names may hold colons (``qwen3:8b``): the method is after the last one, and
    # only a Gemini method makes an OpenAI path (``GET /v1/models/qwen3:8b``) Gemini's.
    if path.startswith("/v1/models/") and path.rpartition(":")[2] in GEMINI_METHODS:
        return Dialect.GEMINI
    return Dialect.OPENAI


def is_gemini_client(scope: Scope) -> bool:
    """A request from a Gemini client: the google-genai SDKs and Gemini CLI send
    ``x-goog-api-key`` and ``x-goog-api-client``; REST callers may put the key in
    ``?key=``. No OpenAI or Anthropic client sends any of them."""
    for name, _ in scope.get("headers", ()):
        if name in (b"x-goog-api-key", b"x-goog-api-client"):
            return True
    query: bytes = scope.get("query_string", b"")
    return query.startswith(b"key=") or b"&key=" in query


def dialect_for_scope(scope: Scope) -> Dialect:
    """``dialect_for_path``, and for the model list OpenAI shares with Anthropic and
    Gemini (``/v1/models``), the dialect the client's headers say: an
    ``anthropic-version`` header is Anthropic's, a Google key or client header Gemini's
    (so a refused key there is answered in the caller's own shape)."""
    path: str = scope.get("path", "")
    dialect = dialect_for_path(path)
    if dialect is Dialect.OPENAI and (path == "/v1/models" or path.startswith("/v1/models/")):
        if any(name == b"anthropic-version" for name, _ in scope.get("headers", ())):
            return Dialect.ANTHROPIC
        if is_gemini_client(scope):
            return Dialect.GEMINI
    return dialect


def header_value(text: str) -> str:
    """``text`` fit for an HTTP header value: printable ASCII as it is, anything else
    (non-ASCII, control characters, ``%``) percent-encoded as UTF-8 (RFC 3986), so a
    name a client chose (a tool type) can be reported back in a header without the
    latin-1 encoding Starlette applies failing with a 500."""
    if text.isascii() and text.isprintable() and "%" not in text:
        return text
    return quote(text, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~", errors="backslashreplace")


def new_request_id() -> str:
    return new_id("req_")


def to_bridge_error(exc: BaseException) -> LLMBridgeError:
    """Any exception as an ``LLMBridgeError``; unexpected ones are logged as bugs."""
    if isinstance(exc, LLMBridgeError):
        return exc
    log.error("unexpected error", exc_info=exc)
    return InternalError(f"internal error ({type(exc).__name__}); see the gateway log")


def error_body(dialect: Dialect, error: LLMBridgeError, request_id: str) -> dict[str, Any]:
    if dialect is Dialect.OLLAMA:
        return ollama.error_body(error, request_id)
    if dialect is Dialect.ANTHROPIC:
        return anthropic.error_body(error, request_id)
    if dialect is Dialect.GEMINI:
        return gemini_errors.error_body(error, request_id)
    if dialect is Dialect.MCP:
        return jsonrpc.error_body(error, request_id)
    return openai.error_body(error, request_id)


def error_response(
    dialect: Dialect,
    exc: BaseException,
    request_id: str,
    headers: dict[str, str] | None = None,
) -> Response:
    error = to_bridge_error(exc)
    all_headers = {"request-id": request_id, "x-request-id": request_id}
    if headers:
        all_headers.update(headers)
    if error.status_code == 401:
        all_headers.setdefault("www-authenticate", "Bearer")
    elif error.status_code == 408:
        # The body was not read to its end: close rather than keep reading it (RFC 9110
        # 15.5.9, "the server SHOULD send the close connection option").
        all_headers.setdefault("connection", "close")
    if isinstance(error, BackendError | RateLimitError) and error.retry_after is not None:
        # RFC 9110 10.2.3: delay-seconds, a whole number (the embedded model's queue).
        all_headers.setdefault("retry-after", str(max(1, math.ceil(error.retry_after))))
    return Response(
        dumps(error_body(dialect, error, request_id)),
        status_code=error.status_code,
        media_type="application/json",
        headers=all_headers,
    )

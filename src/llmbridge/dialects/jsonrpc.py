"""MCP's error wire format: a JSON-RPC 2.0 error object, for the gateway's ``/mcp``.

An MCP client reads an HTTP error from a streamable HTTP server as a JSON-RPC error
body (``{"jsonrpc": "2.0", "id": null, "error": {"code", "message", "data"}}``,
``application/json``): the official SDK's client surfaces that error, with its
message, to the caller, where any other body becomes a bare "Server returned an error
response". So a refused key (401), an unknown server (404) or the key database down
(503) on ``/mcp`` answer in this shape, and a tool call the gateway refuses inside the
protocol (``mcp/``) carries the same codes.

The codes: JSON-RPC's own where one fits (``-32602`` invalid params, which the MCP
specification also gives an unknown tool; ``-32600`` invalid request; ``-32603``
internal error), else the gateway's, in the band JSON-RPC leaves to implementations
(-32000..-32019; the SDK itself uses -32000 and -32001, so the gateway starts at
-32010). ``data`` names the HTTP status the same refusal has on the model APIs, the
error's kind and, when there is one, the field or permission at fault (``param``).
No request id is known at the HTTP level: ``id`` is ``null``, as the JSON-RPC
specification says for an error before the request was read.
"""

from __future__ import annotations

from typing import Any

from llmbridge.core.errors import LLMBridgeError

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "PERMISSION_DENIED",
    "RATE_LIMITED",
    "REQUEST_TIMEOUT",
    "RESULT_TOO_LARGE",
    "UNAUTHENTICATED",
    "UPSTREAM_UNAVAILABLE",
    "error_body",
    "error_code",
    "error_data",
]

INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_TIMEOUT = -32001
"""The SDK's own code for a request that timed out (``mcp_types.REQUEST_TIMEOUT``)."""

UNAUTHENTICATED = -32010
"""No key, or a wrong or revoked one (HTTP 401)."""
PERMISSION_DENIED = -32011
"""The key may not do this: a tool outside its ``mcp_tools`` (HTTP 403)."""
RATE_LIMITED = -32012
"""The key is over its ``rpm`` or ``max_parallel`` (HTTP 429)."""
UPSTREAM_UNAVAILABLE = -32013
"""The MCP server behind the gateway is down, failed, or its breaker is open (502/503)."""
RESULT_TOO_LARGE = -32014
"""A result or a request over its bound (``mcp.max_result_bytes``; HTTP 413)."""

_BY_STATUS = {
    400: INVALID_PARAMS,
    401: UNAUTHENTICATED,
    403: PERMISSION_DENIED,
    404: INVALID_PARAMS,
    405: INVALID_REQUEST,
    408: REQUEST_TIMEOUT,
    413: RESULT_TOO_LARGE,
    429: RATE_LIMITED,
    500: INTERNAL_ERROR,
    502: UPSTREAM_UNAVAILABLE,
    503: UPSTREAM_UNAVAILABLE,
    504: REQUEST_TIMEOUT,
}


def error_code(err: LLMBridgeError) -> int:
    """The JSON-RPC code of ``err`` (by its HTTP status; any other 4xx is an invalid
    request, any other 5xx an internal error)."""
    status = err.status_code
    code = _BY_STATUS.get(status)
    if code is not None:
        return code
    return INVALID_REQUEST if 400 <= status < 500 else INTERNAL_ERROR


def error_data(err: LLMBridgeError, request_id: str | None = None) -> dict[str, Any]:
    """The ``data`` member of ``err``'s error: its HTTP status, kind, field at fault
    and the gateway's request id, those that are known."""
    data: dict[str, Any] = {"status": err.status_code, "type": type(err).__name__}
    if err.param is not None:
        data["param"] = err.param
    if err.code is not None:
        data["code"] = err.code
    if request_id is not None:
        data["request_id"] = request_id
    return data


def error_body(err: LLMBridgeError, request_id: str) -> dict[str, Any]:
    """The JSON-RPC error response for ``err`` outside any request (``id: null``)."""
    return {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": error_code(err),
            "message": err.message,
            "data": error_data(err, request_id),
        },
    }

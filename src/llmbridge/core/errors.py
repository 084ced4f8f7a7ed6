"""The one error hierarchy of llmbridge.

Every failure that can reach a client is one of these. Lower-level exceptions are
mapped once, at the boundary where they occur, with ``raise ... from exc``: aiohttp's in
``backends/http.py`` (every HTTP backend's transport), llama.cpp's in the embedded
worker (``backends/embedded/worker.py``), the database drivers' in ``store/errors.py``,
JSON decoding in the dialects' decoders. The gateway renders these in the caller's
dialect.

    LLMBridgeError                      500  (base; never raised directly)
    ├── InvalidRequestError             400  malformed JSON, wrong types, missing fields
    │   ├── ContextLengthError          400  prompt longer than the model's context
    │   └── UnsupportedFeatureError     400  the backend cannot do what was asked
    ├── AuthenticationError             401  missing or wrong API key
    ├── PermissionDeniedError           403
    ├── NotFoundError                   404  unknown route or resource
    │   └── ModelNotFoundError          404  no backend serves this model name
    ├── MethodNotAllowedError           405  the route exists, not with this method
    ├── RequestTimeoutError             408  the request was not received in time
    ├── ConflictError                   409  the resource cannot be created as asked (id taken)
    ├── RequestTooLargeError            413  body over the configured limit
    ├── RateLimitError                  429
    ├── InternalError                   500  a bug in llmbridge
    ├── ServiceUnavailableError         503  a service llmbridge needs is down (a database)
    └── BackendError                    502  the backend failed
        ├── BackendUnavailableError     503  unreachable (connection refused, DNS, ...)
        │   └── BackendBusyError        503  at capacity: its queue is full, or the wait ran out
        ├── BackendTimeoutError         504  no answer within the deadline
        ├── BackendProtocolError        502  the backend sent something we cannot parse
        └── BackendHTTPError            (mapped from the backend's own status)
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "AuthenticationError",
    "BackendBusyError",
    "BackendError",
    "BackendHTTPError",
    "BackendProtocolError",
    "BackendTimeoutError",
    "BackendUnavailableError",
    "ConflictError",
    "ContextLengthError",
    "InternalError",
    "InvalidRequestError",
    "LLMBridgeError",
    "MethodNotAllowedError",
    "ModelNotFoundError",
    "NotFoundError",
    "PermissionDeniedError",
    "RateLimitError",
    "RequestTimeoutError",
    "RequestTooLargeError",
    "ServiceUnavailableError",
    "UnsupportedFeatureError",
    "error_for_status",
]


class LLMBridgeError(Exception):
    """Base of every error llmbridge reports to a client.

    Attributes:
        message: human-readable text, safe to show to the client.
        status_code: the HTTP status the gateway answers with.
        param: the request field at fault, when one is (OpenAI's ``param``).
        code: a short machine-readable code (OpenAI's ``code``), when one applies.
    """

    default_status: ClassVar[int] = 500

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code if status_code is not None else self.default_status
        self.param = param
        self.code = code

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, status_code={self.status_code})"


class InvalidRequestError(LLMBridgeError):
    """The request is malformed: bad JSON, wrong types, missing or unknown values."""

    default_status = 400


class ContextLengthError(InvalidRequestError):
    """The prompt (plus the requested output) does not fit the model's context window."""

    def __init__(self, message: str, *, param: str | None = "messages") -> None:
        super().__init__(message, param=param, code="context_length_exceeded")


class UnsupportedFeatureError(InvalidRequestError):
    """The request asks for something the chosen backend cannot do (e.g. embeddings)."""


class AuthenticationError(LLMBridgeError):
    """No API key, or a wrong one."""

    default_status = 401


class PermissionDeniedError(LLMBridgeError):
    """The key is valid but not allowed to do this."""

    default_status = 403


class NotFoundError(LLMBridgeError):
    """The route or resource does not exist."""

    default_status = 404


class ModelNotFoundError(NotFoundError):
    """No configured backend serves the requested model name."""

    def __init__(self, model: str) -> None:
        super().__init__(f"model '{model}' not found", param="model", code="model_not_found")
        self.model = model


class MethodNotAllowedError(LLMBridgeError):
    """The route exists, but not for this HTTP method."""

    default_status = 405


class RequestTimeoutError(LLMBridgeError):
    """The client did not send its whole request in time (gateway/server/read_limits.py)."""

    default_status = 408


class ConflictError(LLMBridgeError):
    """The resource cannot be created or changed as asked: its id is taken, or it
    collides with one already stored (the agent store's unique constraints)."""

    default_status = 409

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message, param=param, code="conflict")


class RequestTooLargeError(LLMBridgeError):
    """The request body exceeds the configured size limit."""

    default_status = 413


class RateLimitError(LLMBridgeError):
    """Too many requests; the client should retry later.

    Attributes:
        retry_after: seconds until the request would be let in, when known (a key's
            limits, accounts/limits.py); sent as ``Retry-After``.
    """

    default_status = 429

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        param: str | None = None,
        code: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, status_code=status_code, param=param, code=code)
        self.retry_after = retry_after


class InternalError(LLMBridgeError):
    """An unexpected failure inside llmbridge (a bug). The message never holds a traceback."""

    default_status = 500


class ServiceUnavailableError(LLMBridgeError):
    """A service llmbridge itself depends on is down or unreachable: the agent's
    database, say. Not a ``BackendError``: a model backend's failures count against
    its circuit breaker and trigger fallbacks; this does neither."""

    default_status = 503


class BackendError(LLMBridgeError):
    """The backend serving the request failed.

    Attributes:
        backend: the configured name of the backend, when known.
        retry_after: seconds the backend (or the gateway's circuit breaker) asks
            callers to wait before trying again, when it said; sent on as
            ``Retry-After``.
        retryable: whether sending the request again may succeed, when the backend's
            upstream said so itself (OpenCode's ``isRetryable`` on a provider error);
            ``None``: the serving layer judges by class and status
            (serving/resilience.py ``is_transient``).
    """

    default_status = 502

    def __init__(
        self,
        message: str,
        *,
        backend: str | None = None,
        status_code: int | None = None,
        code: str | None = None,
        retry_after: float | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message, status_code=status_code, code=code)
        self.backend = backend
        self.retry_after = retry_after
        self.retryable = retryable


class BackendUnavailableError(BackendError):
    """The backend could not be reached (connection refused, reset, DNS failure)."""

    default_status = 503


class BackendBusyError(BackendUnavailableError):
    """The backend works but cannot take this request now: its queue is full, or the
    request waited its whole deadline for a turn (the embedded model's queue). It comes
    with ``retry_after``; it is not retried on the same backend at once (the same queue
    will not be shorter a moment later) and, like a 429, does not count against the
    backend's circuit breaker: busy, not broken."""


class BackendTimeoutError(BackendError):
    """The backend did not answer within the deadline."""

    default_status = 504


class BackendProtocolError(BackendError):
    """The backend answered with something that is not valid in its dialect."""

    default_status = 502


class BackendHTTPError(BackendError):
    """The backend answered with an HTTP error status.

    The status is mapped so that the client sees what it would have seen from the
    backend directly: 4xx caller mistakes keep their status (400, 401, 403, 404, 413,
    429), 5xx become 502 (the gateway is fine; its upstream is not), and 503/529
    overload stays 503.

    Attributes:
        backend_status: the status the backend sent.
        body: the backend's error body (decoded text, at most a few KB).
    """

    def __init__(
        self,
        message: str,
        *,
        backend_status: int,
        backend: str | None = None,
        body: Any = None,
        retry_after: float | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(
            message,
            backend=backend,
            status_code=_map_backend_status(backend_status),
            retry_after=retry_after,
            retryable=retryable,
        )
        self.backend_status = backend_status
        self.body = body


def _map_backend_status(status: int) -> int:
    if status in (400, 401, 403, 404, 408, 409, 413, 422, 429):
        return status
    if status in (503, 529):
        return 503
    if 400 <= status < 500:
        return 400
    return 502


_BY_STATUS: dict[int, type[LLMBridgeError]] = {
    400: InvalidRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    405: MethodNotAllowedError,
    408: RequestTimeoutError,
    409: ConflictError,
    413: RequestTooLargeError,
    429: RateLimitError,
    500: InternalError,
    503: ServiceUnavailableError,
}


def error_for_status(status: int, message: str) -> LLMBridgeError:
    """The error of this tree for an HTTP status a framework chose (starlette's
    ``HTTPException``): the most general class with that status; a status the tree
    does not name is an ``InvalidRequestError`` (4xx) or an ``InternalError``
    (anything else) answering with that status."""
    known = _BY_STATUS.get(status)
    if known is not None:
        return known(message)
    if 400 <= status < 500:
        return InvalidRequestError(message, status_code=status)
    return InternalError(message, status_code=status)

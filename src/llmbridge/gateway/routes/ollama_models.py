"""Ollama's model management through the gateway: ``POST /api/pull``, ``/api/push``,
``/api/copy``, ``/api/create`` and ``DELETE /api/delete``.

The gateway keeps no models of its own. Each request goes to the backend that serves
the model it names (the router's answer, as for a chat: a route's ``model:`` is the
name the backend gets) when that backend is an Ollama server
(``Capabilities.manages_models``), and its reply comes back as the server sent it: a
pull's, push's or create's NDJSON progress lines as they arrive, a delete's or copy's
empty 200, the server's own error (404 for a model it does not have) in Ollama's shape.
A failure after the first progress line is Ollama's in-stream ``{"error": ...}`` line.
Any other backend (the embedded model, an OpenAI-compatible server, Anthropic...) has
no models to manage this way: a 400 in Ollama's shape names it and says so.

Who may: these change what a shared server holds, so with auth on only the operator's
keys may, the master key (``server.master_key``, which the auth middleware accepts on
these paths only: ``MANAGEMENT_PATHS``) and the static keys (``server.api_keys``); a
key kept in the database (a team member's, with its own limits) is refused with a 403.
With auth off the gateway is open, and these routes are too, as Ollama's own are.

Every request is admitted (the key's model globs) and recorded in the usage ledger
like any other model route, with the backend that served it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmbridge.backends.base import Backend
from llmbridge.core.errors import (
    InvalidRequestError,
    ModelNotFoundError,
    PermissionDeniedError,
    UnsupportedFeatureError,
)
from llmbridge.core.model_info import ModelOperation
from llmbridge.dialects import ollama
from llmbridge.dialects.framing import dumps
from llmbridge.gateway.exchange.exchange import Exchange
from llmbridge.gateway.exchange.handler import Endpoint, exchanged
from llmbridge.serving.router import ModelRouter, Resolved
from llmbridge.web.bodies import read_json
from llmbridge.web.render import Dialect, to_bridge_error
from llmbridge.web.streaming import StreamingBody, run_until_disconnect

__all__ = ["MANAGEMENT_PATHS", "MASTER_KEY_CALLER", "routes"]

_OPERATIONS: tuple[ModelOperation, ...] = ("pull", "push", "delete", "copy", "create")
MANAGEMENT_PATHS = frozenset(f"/api/{operation}" for operation in _OPERATIONS)
"""The paths on which the auth middleware accepts the master key."""
MASTER_KEY_CALLER = "llmbridge.master_key_caller"
"""The ASGI scope key the auth middleware sets (to ``True``) on a management request
that came with the master key."""

_NDJSON = "application/x-ndjson"


def check_may_manage(exchange: Exchange) -> None:
    """``PermissionDeniedError`` unless the caller may manage models (module docstring)."""
    if exchange.scope.get(MASTER_KEY_CALLER):
        return
    record = exchange.record
    if record is not None:
        raise PermissionDeniedError(
            f"the key {record.name!r} may not manage models: pull, push, delete, copy and "
            "create need the master key or a static key (server.api_keys)"
        )


def _managing_backend(resolved: Resolved, operation: ModelOperation) -> Backend:
    backend = resolved.backend
    if not backend.capabilities.manages_models:
        raise UnsupportedFeatureError(
            f"the gateway does not manage the models of backend '{backend.name}' "
            f"({backend.kind}), which serves '{resolved.public_name}': {operation} goes to "
            "Ollama backends only",
            param="model",
        )
    return backend


def _other_name(router: ModelRouter, request: ollama.ModelRequest, backend: Backend) -> str | None:
    """The backend's name for the second model a request names (a copy's destination,
    a create's ``from``): the router's, when it resolves to the same backend."""
    other = request.other
    if other is None:
        return None
    try:
        resolved = router.resolve(other)
    except ModelNotFoundError:  # a new name no route serves yet: as the client gave it
        return other
    if resolved.backend is backend:
        return resolved.backend_model
    if request.operation == "copy":
        raise InvalidRequestError(
            f"'{request.model}' and '{other}' are served by different backends "
            f"('{backend.name}' and '{resolved.backend.name}'): a copy stays on one server",
            param="destination",
        )
    return other  # a create's ``from`` may be a file, or a model only that server has


async def _relay(
    backend: Backend, operation: ModelOperation, body: dict[str, Any]
) -> AsyncGenerator[bytes, None]:
    async with backend.manage_models(operation, body) as chunks:
        async for chunk in chunks:
            if chunk:
                yield chunk


async def _streamed(
    first: bytes, rest: AsyncGenerator[bytes, None], exchange: Exchange
) -> AsyncIterator[bytes]:
    """The progress lines, the first already read; a failure after it is Ollama's
    in-stream error line (what ``ollama pull`` prints)."""
    try:
        yield first
        async for chunk in rest:
            yield chunk
    except Exception as exc:  # noqa: BLE001 - every failure becomes the error line
        error = to_bridge_error(exc)
        exchange.failed(error)
        yield dumps(ollama.error_body(error, exchange.request_id)) + b"\n"
    finally:
        await rest.aclose()


def _endpoint(operation: ModelOperation) -> Endpoint:
    @exchanged(f"/api/{operation}", Dialect.OLLAMA)
    async def endpoint(request: Request, exchange: Exchange) -> Response:
        state = exchange.state
        body = await read_json(request, state.limits)
        model_request = ollama.decode_model_request(operation, body)
        exchange.asked(model_request.model, streamed=model_request.streamed)
        check_may_manage(exchange)
        exchange.admit_model(model_request.model, refuse=True)
        router = state.models.router
        resolved = router.resolve(model_request.model)
        backend = _managing_backend(resolved, operation)
        other = _other_name(router, model_request, backend)
        sent = model_request.for_backend(resolved.backend_model, other)
        exchange.served_by(resolved)

        def forget() -> None:
            """What the gateway kept of the models the request changed is stale."""
            router.forget(backend.name, resolved.backend_model)
            if other is not None:
                router.forget(backend.name, other)

        relay = _relay(backend, operation, sent)
        if not model_request.streamed:
            # One JSON object (a pull or create with ``stream: false``) or nothing.
            async def whole() -> bytes:
                return b"".join([chunk async for chunk in relay])

            try:
                reply = await run_until_disconnect(request.receive, whole())
            finally:
                forget()
            exchange.backend_answered()
            if not reply:
                return Response(status_code=200)
            return Response(reply, media_type="application/json")
        try:
            # An error before the first line is an HTTP error (``exchanged`` renders it).
            first = await run_until_disconnect(request.receive, anext(relay, b""))
        except BaseException:
            await relay.aclose()
            forget()
            raise
        exchange.first_event()

        async def on_close(disconnected: bool) -> None:
            forget()
            await exchange.finish(499 if disconnected else None)

        return StreamingBody(
            _streamed(first, relay, exchange), media_type=_NDJSON, on_close=on_close
        )

    endpoint.__name__ = f"{operation}_model"
    return endpoint


routes = [
    Route(
        f"/api/{operation}",
        _endpoint(operation),
        methods=["DELETE" if operation == "delete" else "POST"],
    )
    for operation in _OPERATIONS
]

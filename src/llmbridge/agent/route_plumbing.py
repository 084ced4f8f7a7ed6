"""The agent API's plumbing (``agent.routes``, ``agent.document_routes``, a domain's
routes): what the app mounts (``MountedAgent``), the guard every handler runs under
(``guarded``: path and query parameters checked, every failure a JSON error in the
OpenAI shape, never a traceback), and the readers and writers the handlers share (the
runtime and the caller, the body within the request limits, integer query parameters,
a PATCH over the stored fields, a JSON response). Nothing here imports the gateway.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmbridge.agent.api import parse, unstorable_field
from llmbridge.agent.gate import OPEN_GATE, ModelGate
from llmbridge.agent.runtime import AgentRuntime
from llmbridge.core.errors import InvalidRequestError, LLMBridgeError, ServiceUnavailableError
from llmbridge.core.request_limits import RequestLimits
from llmbridge.dialects.framing import dumps
from llmbridge.store.values import MAX_ID
from llmbridge.web.auth import caller_identity
from llmbridge.web.bodies import read_json
from llmbridge.web.render import Dialect, error_response, new_request_id
from llmbridge.web.streaming import ClientDisconnected

__all__ = [
    "MAX_PAGE",
    "Handler",
    "MountedAgent",
    "check_parameters",
    "guarded",
    "int_query",
    "json_response",
    "mounted_agent",
    "opt_int_query",
    "page_of",
    "patch_fields",
    "read_body",
    "route",
    "runtime_of",
]

Handler = Callable[[Request], Awaitable[Response]]

MAX_PAGE = 1000


@dataclass(slots=True)
class MountedAgent:
    """What an app that mounts ``routes`` puts on ``app.state.agent``."""

    limits: RequestLimits
    """What one request may hold (the gateway's ``server.max_body_bytes`` and limits)."""
    runtime: AgentRuntime | None = None
    """The agent service, once its database is open (``None`` until then, or for good
    when it could not be opened)."""
    error: str | None = None
    """Why ``runtime`` is not there: the kind of failure only (its details, which may
    name the database server, are in the log)."""
    gate: ModelGate = OPEN_GATE
    """What a request that calls a model passes first (``agent.gate``): the gateway's
    keys, limits and usage ledger; by default nothing is counted."""


def mounted_agent(request: Request) -> MountedAgent:
    mounted: MountedAgent = request.app.state.agent
    return mounted


def guarded(handler: Handler) -> Handler:
    """``handler`` with every failure rendered as a JSON error (never a traceback)."""

    async def endpoint(request: Request) -> Response:
        try:
            check_parameters(request)
            return await handler(request)
        except ClientDisconnected:
            return Response(status_code=499)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a JSON error
            # A key's refusal carries Retry-After and x-ratelimit-* (agent.gate).
            refused = (
                mounted_agent(request).gate.refusal_headers(exc)
                if isinstance(exc, LLMBridgeError)
                else None
            )
            return error_response(Dialect.OPENAI, exc, new_request_id(), headers=refused or None)

    return endpoint


def json_response(
    body: object, status_code: int = 200, *, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(
        dumps(body), status_code=status_code, media_type="application/json", headers=headers
    )


def runtime_of(request: Request) -> tuple[AgentRuntime, str | None]:
    """The agent service and the caller's identity (the owner of what it creates)."""
    mounted = mounted_agent(request)
    if mounted.runtime is None:
        reason = f" ({mounted.error}; see the gateway log)" if mounted.error else ""
        raise ServiceUnavailableError(
            f"the agent service is unavailable: its database could not be opened{reason}"
        )
    return mounted.runtime, caller_identity(request)


async def read_body(request: Request) -> Any:
    return await read_json(request, mounted_agent(request).limits)


def check_parameters(request: Request) -> None:
    """A 400 naming the path or query parameter the store could not take: U+0000 in
    any of them (PostgreSQL's text cannot hold it), or an id beyond 64 bits."""
    for name, value in request.path_params.items():
        if isinstance(value, int) and value > MAX_ID:
            raise InvalidRequestError(f"{name}: must be at most {MAX_ID}", param=name)
    for name, value in [*request.path_params.items(), *request.query_params.multi_items()]:
        found = unstorable_field(value, name) if isinstance(value, str) else None
        if found is not None:
            raise InvalidRequestError(f"{name}: {found[1]}", param=name)


_DIGITS = re.compile(r"[0-9]{1,19}")
"""An integer query parameter: ASCII digits only (``str.isdigit`` also takes ``"²"``,
which ``int`` refuses), and no more than 19 of them (``MAX_ID`` has 19)."""


def int_query(request: Request, name: str, default: int, high: int = MAX_PAGE) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not _DIGITS.fullmatch(raw) or int(raw) > high:
        raise InvalidRequestError(f"{name}: must be an integer from 0 to {high}", param=name)
    return int(raw)


def opt_int_query(request: Request, name: str) -> int | None:
    if request.query_params.get(name) is None:
        return None
    return int_query(request, name, 0, high=MAX_ID)


def page_of(request: Request) -> tuple[int, int]:
    return int_query(request, "limit", 100), int_query(request, "offset", 0, high=2**31)


def patch_fields(body: Any, model: type[Any], current: dict[str, Any]) -> dict[str, Any]:
    """The fields a PATCH sets, validated as ``model`` over the stored ones."""
    if not isinstance(body, dict):
        raise InvalidRequestError("request body must be a JSON object")
    editable = {k: v for k, v in current.items() if k in model.model_fields}
    merged = parse(model, {**editable, **body})
    return {name: getattr(merged, name) for name in body}


def route(path: str, handler: Handler, *methods: str) -> Route:
    """A route to ``handler`` under the guard, named after it."""
    return Route(path, guarded(handler), methods=list(methods), name=handler.__name__)

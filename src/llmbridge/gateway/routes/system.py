"""The root (Ollama's liveness probe), HEAD /api/hello (Claude Code's), /health,
/metrics and /openapi.json.

``/health`` answers without a key, as load balancers and orchestrators probe it; with
API keys configured, a caller without a valid one gets only the verdict
(``{"status": "up" | "degraded" | "down"}``): the details name the backends, their
kinds, the version and, for a dead backend, its internal address. With a valid key,
or with auth off (no keys: the loopback default), the details too, and the shared
state's ``{"kind": "local" | "redis", "degraded": bool}``: with Redis configured and
unreachable the gateway keeps serving from each replica's memory and says
``degraded`` (state/failover.py); and the database's (keys, the ledger, the agent's
tables) ``{"kind", "url", "ok", "detail", "latency_ms"}``, its URL without the
password: a database that does not answer its probe (gateway/health.py) makes the
status ``degraded``, not ``down``, since requests that do not need it are still
served, and while it is down a database key is not looked up to show the details
(static keys still are). Under ``llmbridge serve --workers N``, ``workers``
lists each worker's pid, start, requests, in-flight count and backends' circuits, the
one that answered marked ``"self": true`` (gateway/server/workers.py). With MCP
servers configured, ``mcp`` has each one's state in the process that answered
(``up``, ``starting``, ``down`` with its error), its tools, calls and breaker
(mcp/upstream.py); a server that is down does not change the status: the model APIs
are served. Each backend's ``passthrough`` names the client dialect it serves on the
pass-through path (core/relay.py; ``null``: every request translated); each reply that
path served says ``x-llmbridge-path: passthrough``, and so does its request-log row.
"""

from __future__ import annotations

import asyncio
import time

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from llmbridge import __version__
from llmbridge.backends.base import BackendHealth
from llmbridge.core.errors import LLMBridgeError
from llmbridge.dialects.framing import dumps
from llmbridge.gateway.health import DatabaseProbe
from llmbridge.gateway.metrics import CONTENT_TYPE_LATEST
from llmbridge.gateway.openapi import OPENAPI_PATH, openapi_json
from llmbridge.gateway.state import GatewayState, state_of
from llmbridge.gateway.stored_responses import stored_responses_on
from llmbridge.web.auth import presented_key

__all__ = ["routes"]


async def root(request: Request) -> Response:
    # Ollama clients and Home Assistant probe "GET /" for this exact text.
    return PlainTextResponse("Ollama is running")


async def hello(request: Request) -> Response:
    # Claude Code (2.1.330) probes "HEAD /api/hello" to see that its base URL answers
    # (shared/reference/captured/README.md): an empty 200, as for "HEAD /" (GET too,
    # so the probe can be tried by hand).
    return Response(status_code=200)


async def _may_see_details(request: Request, database_ok: bool) -> bool:
    """With auth on, only a caller with a valid key (static or in the database; a
    database key only while the database answers its probe, so that ``/health`` never
    waits out the request path's deadlines on a frozen database)."""
    accounts = state_of(request).accounts
    if not accounts.enabled:
        return True
    try:
        presented = presented_key(request.headers)
        if not database_ok:
            return accounts.static_keys.match(presented) is not None
        await accounts.caller(presented)
    except LLMBridgeError:  # no key, a wrong or revoked one, or the key database down
        return False
    return True


def _database_probe(state: GatewayState) -> DatabaseProbe | None:
    """The probe of the database the gateway uses, if it uses one: for its keys (unless
    auth is off on purpose), the stored Responses, the agent service (which keeps them
    on) or the usage ledger. The probe has a connection of its own (gateway/health.py),
    not one of the gateway's ``Database``."""
    in_use = (
        state.accounts.auth is not False
        or stored_responses_on(state.config.agent)
        or state.ledger is not None
    )
    return state.health.database(state.database.url) if in_use else None


async def _probed(database: DatabaseProbe | None) -> BackendHealth | None:
    return None if database is None else await database.probe()


async def health(request: Request) -> Response:
    """The gateway is up; each backend's reachability, and the database's. 503 when no
    backend is reachable. Without a valid key (when keys are configured), the status
    alone."""
    state = state_of(request)
    configured = state.models.backends
    names = list(configured)
    database = _database_probe(state)
    results, database_health = await asyncio.gather(
        asyncio.gather(*(state.health.probe(n, configured[n]) for n in names)),
        _probed(database),
    )
    any_ok = any(r.ok for r in results)
    status = "up" if all(r.ok for r in results) else ("degraded" if any_ok else "down")
    shared = state.models.state  # Redis down: served from memory, limits per replica
    if shared.degraded and status == "up":
        status = "degraded"
    database_ok = database_health is None or database_health.ok
    if not database_ok and status == "up":
        status = "degraded"  # keys, agent and ledger 503; the rest is served
    code = 200 if any_ok else 503
    if not await _may_see_details(request, database_ok):
        return Response(dumps({"status": status}), status_code=code, media_type="application/json")
    backends = {
        name: {
            "kind": configured[name].kind,
            "ok": result.ok,
            "detail": result.detail,
            "latency_ms": None if result.latency_ms is None else round(result.latency_ms, 2),
            "circuit": state.models.router.breakers[name].state,
            # The client dialect it serves on the pass-through path (core/relay.py).
            "passthrough": configured[name].capabilities.relays,
        }
        for name, result in zip(names, results, strict=True)
    }
    body = {
        "status": status,
        "version": __version__,
        "uptime_s": round(time.time() - state.started_at, 1),
        "backends": backends,
        "state": {"kind": shared.kind, "degraded": shared.degraded},
    }
    if database is not None and database_health is not None:
        body["database"] = {
            "kind": database.kind,
            "url": database.shown,
            "ok": database_health.ok,
            "detail": database_health.detail,
            "latency_ms": (
                None if database_health.latency_ms is None else round(database_health.latency_ms, 2)
            ),
        }
    if state.workers is not None:  # serve --workers N: every worker, this one "self": true
        body["workers"] = state.workers.statuses()
    if state.mcp is not None:  # this process's MCP servers (mcp/upstream.py); not in status
        body["mcp"] = state.mcp.status()
    return Response(dumps(body), status_code=code, media_type="application/json")


async def metrics(request: Request) -> Response:
    return Response(state_of(request).metrics.render(), media_type=CONTENT_TYPE_LATEST)


async def openapi(request: Request) -> Response:
    """The gateway's OpenAPI description (gateway/openapi.py); behind the API key."""
    return Response(openapi_json(), media_type="application/json")


routes = [
    Route("/", root, methods=["GET", "HEAD"]),
    Route("/api/hello", hello, methods=["GET", "HEAD"]),
    Route("/health", health, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
    Route(OPENAPI_PATH, openapi, methods=["GET"]),
]

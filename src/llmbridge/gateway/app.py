"""Assemble the ASGI app: backends from configuration, routes, auth, error rendering,
read limits (gateway/server/read_limits.py), the agent service (``/agent/...``) and,
when ``mcp.servers`` or ``mcp.allowed_urls`` names any, the MCP gateway (``/mcp``,
``/mcp/{server}``: mcp/endpoints.py).

The product's database (store/database.py) is one ``Database`` per process, opened and
migrated once in the lifespan by the first part that needs it (``GatewayState.database``,
an ``OpenOnce``) and handed to each product's repository: the accounts' ``KeyStore``,
the agent runtime's ``AgentStore``, the stored Responses and interactions (opened at
start whether the agent serves or not: ``stored_responses.stored_responses_on``) and the
usage ledger. It is
closed once, last, at shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from llmbridge.accounts import routes as admin_api
from llmbridge.accounts.service import ACCOUNT, Accounts
from llmbridge.agent import routes as agent_api
from llmbridge.agent.routes import MountedAgent
from llmbridge.backends.base import Backend
from llmbridge.core.errors import (
    LLMBridgeError,
    MethodNotAllowedError,
    NotFoundError,
    ServiceUnavailableError,
    error_for_status,
)
from llmbridge.core.model_info import ModelInfo
from llmbridge.gateway.accounting import ledger_enabled, open_ledger
from llmbridge.gateway.agent_mcp import AgentMcpTools
from llmbridge.gateway.config import GatewayConfig
from llmbridge.gateway.console import routes as console_routes
from llmbridge.gateway.console.web import error_page, is_console_path
from llmbridge.gateway.exchange.agent_gate import KeyGate, memory_usage_recorder
from llmbridge.gateway.exchange.handler import EXCHANGED, log_left_mid_body
from llmbridge.gateway.exchange.mcp_gate import McpCallGate
from llmbridge.gateway.metrics import GatewayMetrics
from llmbridge.gateway.routes import (
    anthropic,
    completions,
    gemini,
    interactions,
    ollama,
    openai,
    responses,
    system,
)
from llmbridge.gateway.routes.ollama_models import MANAGEMENT_PATHS, MASTER_KEY_CALLER
from llmbridge.gateway.server.read_limits import BodyDeadline, ReadLimits, protocol_class
from llmbridge.gateway.server.workers import WorkerBoard
from llmbridge.gateway.state import GatewayState
from llmbridge.gateway.stored_responses import ResponseStore, stored_responses_on
from llmbridge.mcp.endpoints import McpGateway
from llmbridge.serving.models import open_models
from llmbridge.state import open_state
from llmbridge.state.failover import FailoverState
from llmbridge.store.database import OpenOnce
from llmbridge.web.after_response import collect_after_response, run_after_response
from llmbridge.web.auth import KEY_IDENTITY, OPEN_PATHS, KeyChecker, key_identity, presented_key
from llmbridge.web.render import (
    dialect_for_path,
    dialect_for_scope,
    error_response,
    new_request_id,
)
from llmbridge.web.routing import HotRoutes, IndexedRouter
from llmbridge.web.streaming import SERVER_SEND

if TYPE_CHECKING:
    from llmbridge.agent.tools import ToolRegistry
    from llmbridge.gateway.telemetry import Tracing

__all__ = ["create_app", "http_protocol"]

log = logging.getLogger("llmbridge.gateway")

ADMIN_PREFIX = "/admin/"
MCP_PATH = "/mcp"
"""The MCP gateway (mcp/endpoints.py): its paths take the master key besides the others."""
CONSOLE_PREFIX = "/ui"
"""The operator console (gateway/console/): it signs its own sessions in with the
master key, so the API-key check lets its paths through."""


async def _open_stored_responses(state: GatewayState) -> None:
    """The stored Responses (``previous_response_id``, ``GET /v1/responses/{id}``) on
    the gateway's database, whether the agent serves or not. A failure is logged and
    leaves the gateway serving; a request that needs them then answers 503 with the
    kind of failure."""
    try:
        state.responses = ResponseStore(await state.database.get())
    except Exception as exc:  # noqa: BLE001 - reported on every request that needs them
        state.responses_error = type(exc).__name__  # the details may name the database
        log.error("stored responses are unavailable: %s: %s", type(exc).__name__, exc)


async def _open_agent(
    mounted: MountedAgent, state: GatewayState, tools: ToolRegistry | None
) -> None:
    """The agent service on the gateway's database into ``mounted`` (``app.state.agent``,
    what ``agent/routes.py`` reads). A failure is logged and leaves the rest of the
    gateway serving; ``/agent/...`` then answers 503 with the reason."""
    from llmbridge.agent.runtime import AgentRuntime

    config = state.config
    try:
        database = await state.database.get()
        # The MCP gateway's tools, for the personas whose mcp_tools name them.
        mcp = AgentMcpTools(state.mcp) if state.mcp is not None else None
        mounted.runtime = await AgentRuntime.open(
            config.agent, state.models, tools=tools, database=database, mcp=mcp
        )
        if mounted.runtime.summariser is not None:
            # Memory's background calls count in the ledger like any model call.
            mounted.runtime.summariser.on_usage = memory_usage_recorder(state)
    except Exception as exc:  # noqa: BLE001 - reported on every /agent request instead
        # Clients get the kind of failure only: the details may name the database.
        mounted.error = type(exc).__name__
        log.error("the agent service is unavailable: %s: %s", type(exc).__name__, exc)


def _open_tracing(config: GatewayConfig) -> Tracing | None:
    """This process's tracer when ``telemetry.otlp_endpoint`` is set (gateway/telemetry.py,
    imported only then: with tracing off the OpenTelemetry SDK is never loaded)."""
    endpoint = config.telemetry.otlp_endpoint
    if not endpoint:
        return None
    from llmbridge.gateway.telemetry import DEFAULT_SERVICE_NAME, Tracing

    return Tracing(endpoint, config.telemetry.service_name or DEFAULT_SERVICE_NAME)


class _AuthMiddleware:
    """Rejects requests without a valid key, in the caller's dialect (pure ASGI: cheap).
    Static keys are checked in memory, database keys through the accounts' cache
    (accounts/service.py); ``/admin/`` checks the master key itself
    (accounts/routes.py), and the model-management routes accept it besides the other
    keys (gateway/routes/ollama_models.py). While auth is off for want of keys, each
    request lets the accounts look for a first database key (in the background, at
    most every 5 s)."""

    def __init__(self, app: ASGIApp, accounts: Accounts) -> None:
        self.app = app
        self.accounts = accounts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # A WebSocket's key is checked at its upgrade (the Responses API over a socket:
        # gateway/routes/responses_socket.py), and refused with the HTTP answer.
        path = scope["path"] if scope["type"] in ("http", "websocket") else ""
        if (
            not path
            or path in OPEN_PATHS
            or path.startswith(ADMIN_PREFIX)
            or path.startswith(CONSOLE_PREFIX)
        ):
            await self.app(scope, receive, send)
            return
        if not self.accounts.enabled:
            self.accounts.look_for_keys()
            await self.app(scope, receive, send)
            return
        try:
            query = scope.get("query_string", b"")  # Gemini clients' ?key=
            presented = presented_key(Headers(scope=scope), query)
            if _takes_master_key(path) and self.accounts.master_matches(presented):
                # The operator's key also manages models (gateway/routes/ollama_models.py)
                # and uses every MCP tool (mcp/permissions.py).
                scope[KEY_IDENTITY], scope[MASTER_KEY_CALLER] = key_identity(presented), True
            else:
                # Which key matched: the caller's identity (the agent API's owner), and
                # its record when it is a database key (its limits: accounts/limits.py).
                scope[KEY_IDENTITY], scope[ACCOUNT] = await self.accounts.caller(presented)
        except LLMBridgeError as exc:  # 401; 503 with the key database down or frozen
            await self._refuse(scope, receive, send, exc)
            return
        except Exception as exc:  # a bug in the lookup: logged, not shown
            log.exception("the key lookup failed")
            error = ServiceUnavailableError(f"the key lookup failed ({type(exc).__name__})")
            await self._refuse(scope, receive, send, error)
            return
        await self.app(scope, receive, send)

    @staticmethod
    async def _refuse(scope: Scope, receive: Receive, send: Send, error: LLMBridgeError) -> None:
        response = error_response(dialect_for_scope(scope), error, new_request_id())
        await response(scope, receive, send)


def _mcp_gateway(state: GatewayState, workers: WorkerBoard | None) -> McpGateway | None:
    """The MCP gateway when ``mcp.servers`` or ``mcp.allowed_urls`` names any. One set
    of upstreams per process: each worker of --workers N its own, and no sessions there
    unless ``mcp.stateless`` says otherwise (docs/MCP.md)."""
    config = state.config.mcp
    if not config.enabled:
        return None
    stateless = config.stateless
    if stateless is None:
        stateless = workers is not None
    return McpGateway(config, gate=McpCallGate(state), stateless=stateless)


def _takes_master_key(path: str) -> bool:
    """Whether the master key is a key on ``path`` (else only ``/admin/`` takes it)."""
    return path in MANAGEMENT_PATHS or path == MCP_PATH or path.startswith(MCP_PATH + "/")


def _ledger_when_keys_appear(state: GatewayState) -> Callable[[], Awaitable[None]]:
    """What the accounts call when database keys turn auth on while the gateway runs:
    open the ledger from then on (``accounting.ledger_enabled``), as a start with those
    keys would have."""

    async def ledger_on() -> None:
        if state.ledger is None and ledger_enabled(state.config, auth_on=True):
            state.ledger = await open_ledger(
                state.config,
                getattr(state.models, "state", None),
                state.metrics,
                database=state.database,
                auth_on=True,
            )

    return ledger_on


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    dialect = dialect_for_path(request.url.path)
    error: LLMBridgeError
    if exc.status_code == 404:
        error = NotFoundError(f"no route for {request.method} {request.url.path}")
    elif exc.status_code == 405:
        error = MethodNotAllowedError(
            f"method {request.method} is not allowed on {request.url.path}"
        )
    else:
        error = error_for_status(exc.status_code, str(exc.detail))
    headers = dict(exc.headers) if exc.headers else None
    if is_console_path(request.url.path):
        # A person's browser: the console's page and headers, not an API's JSON.
        return error_page(request, error.status_code, error.message, headers=headers)
    return error_response(dialect, error, new_request_id(), headers=headers)


async def _render_error(request: Request, exc: Exception) -> Response:
    if is_console_path(request.url.path):
        if isinstance(exc, LLMBridgeError):
            return error_page(request, exc.status_code, exc.message)
        # A bug: the kind of failure only (the log has the traceback). uvicorn closes
        # the connection after it: said, so that no client sends its next request there.
        message = f"internal error ({type(exc).__name__}); see the gateway log"
        return error_page(request, 500, message, headers={"connection": "close"})
    return error_response(dialect_for_path(request.url.path), exc, new_request_id())


def _endpoint_label(scope: Scope) -> str:
    """The matched route's path template (bounded, unlike the path itself)."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else ""


async def _client_disconnected(request: Request, exc: Exception) -> Response:
    """The client left while sending its body (starlette's ``ClientDisconnect``): one
    log line and a 499 in the metrics, where a traceback of 80 lines used to be."""
    endpoint = _endpoint_label(request.scope)
    request.app.state.gateway.metrics.unserved(endpoint, 499)
    log_left_mid_body(request)
    return Response(status_code=499)  # nobody reads it; uvicorn drops it


def _body_timed_out(metrics: GatewayMetrics, scope: Scope) -> None:
    """A body that did not arrive in time (gateway/server/read_limits.py), for the metrics:
    an exchanged route (gateway/exchange/handler.py) counts its own 408 with its ledger row."""
    if not getattr(scope.get("endpoint"), EXCHANGED, False):
        metrics.unserved(_endpoint_label(scope), 408)


_EXCEPTION_HANDLERS: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
    HTTPException: _http_exception,
    ClientDisconnect: _client_disconnected,
    # An LLMBridgeError no route caught (a 408 from BodyDeadline, say) is an answer, not
    # a bug: under its own key starlette renders it in ExceptionMiddleware, and it is not
    # re-raised to uvicorn's traceback log as the catch-all Exception entry
    # (ServerErrorMiddleware) would be.
    LLMBridgeError: _render_error,
    Exception: _render_error,
}


def _exchanged_route(route: Route) -> bool:
    """A route of the model API (gateway/exchange/handler.py): ``HotRoutes`` serves it."""
    return bool(getattr(route.endpoint, EXCHANGED, False))


class GatewayApp(Starlette):
    """Starlette, with the server's own ``send`` in the request task's context for a
    streamed body's chunks (web/streaming.py ``SERVER_SEND``), and what a request left
    for after its response run once it is sent (web/after_response.py)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        SERVER_SEND.set(send)  # each request runs in a task of its own: its own context
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        jobs, token = collect_after_response()
        try:
            await super().__call__(scope, receive, send)
        finally:
            run_after_response(jobs, token)


def http_protocol(app: Starlette) -> type[asyncio.Protocol]:
    """uvicorn's ``http=`` option for ``app``: httptools with the configured header
    limits (gateway/server/read_limits.py), each closed connection counted in its metrics."""
    state: GatewayState = app.state.gateway
    return protocol_class(ReadLimits.of(state.config.server), state.metrics.rejected_connection)


def create_app(
    config: GatewayConfig,
    backends: dict[str, Backend] | None = None,
    on_ready: Callable[[list[ModelInfo]], None] | None = None,
    *,
    agent_tools: ToolRegistry | None = None,
    workers: WorkerBoard | None = None,
) -> Starlette:
    """The gateway app. ``backends`` overrides construction from config (tests);
    ``on_ready`` gets the served models once the backends have started (the banner);
    ``agent_tools`` replaces the agent's default tools (``agent.runtime.default_tools``);
    ``workers``: this app is one of ``llmbridge serve --workers N`` (gateway/server/asgi.py)."""
    metrics = GatewayMetrics(workers.metrics_dir if workers is not None else None)
    # Limits, in-flight counts and breakers: this process's, or Redis's for every
    # worker and replica (state/; its connection is checked in the lifespan).
    shared = open_state(config.state.redis_url)
    models = open_models(
        config, host=config.server.serving_host(), backends=backends, observer=metrics, state=shared
    )
    if shared.kind == "redis":
        for breaker in models.router.breakers.values():
            breaker.share(shared)  # serving/resilience.py: one breaker across replicas
    keys = KeyChecker(config.server.api_keys)
    state = GatewayState(config=config, models=models, keys=keys, metrics=metrics)
    state.workers = workers
    # One database for every product (module docstring), opened in the lifespan.
    state.database = OpenOnce(config.database_url())
    state.accounts = Accounts(
        static_keys=keys,
        master_key=config.server.master_key,
        database=state.database,
        state=lambda: models.state,
        body_limits=state.limits,
        auth=config.server.auth,
    )
    state.accounts.on_auth_on = _ledger_when_keys_appear(state)

    # Agent turns count against the caller's key and in the ledger (gateway/exchange/agent_gate.py).
    agent = MountedAgent(state.limits, gate=KeyGate(state))
    mcp = state.mcp = _mcp_gateway(state, workers)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with models:  # started here, closed at shutdown (serving/models.py)
            if isinstance(shared, FailoverState):
                await shared.start()  # degraded from the start when Redis does not answer
            # The key database: its keys may turn auth on (accounts/service.py).
            await state.accounts.open()
            if stored_responses_on(config.agent):
                await _open_stored_responses(state)
            if config.agent.enabled:
                await _open_agent(agent, state, agent_tools)
            # After the shared state is in place: the ledger adds spend to it.
            state.ledger = await open_ledger(
                config,
                getattr(models, "state", None),
                metrics,
                database=state.database,
                auth_on=state.accounts.enabled,
            )
            # Each process its own tracer (each worker of --workers N opens its own).
            state.tracing = _open_tracing(config)
            serving_mcp = AsyncExitStack()
            if mcp is not None:  # its servers connected (stdio ones started) now
                await serving_mcp.enter_async_context(mcp.running())
            if on_ready is not None:
                on_ready(await models.list_models())
            if workers is not None:
                workers.start(state)  # this worker's line in /health (gateway/server/workers.py)
            try:
                yield
            finally:
                # First: its tool calls are recorded before the ledger's last flush, and
                # no stdio server outlives the gateway.
                await serving_mcp.aclose()
                if workers is not None:
                    await workers.stop()
                await state.accounts.stop_looking()  # it may open the ledger
                if state.ledger is not None:
                    # Requests are over: what is buffered is written before exit.
                    await state.ledger.aclose()
                    state.ledger = None
                if state.tracing is not None:
                    # Requests are over: the spans still queued are sent before exit.
                    tracing, state.tracing = state.tracing, None
                    await asyncio.to_thread(tracing.shutdown)
                if agent.runtime is not None:
                    try:
                        await agent.runtime.aclose()
                    except Exception:
                        log.exception("the agent service failed to close")
                    agent.runtime = None
                state.responses = None
                await state.accounts.aclose()
                # Once, after every part that used it (the ledger's last flush above).
                await state.database.close()
                await shared.aclose()  # last: the ledger's flush above updates it

    agent_routes = agent_api.mounted_routes(config.agent) if config.agent.enabled else []
    app = GatewayApp(exception_handlers=_EXCEPTION_HANDLERS)
    # Routes looked up by path instead of tried one by one (web/routing.py).
    app.router = IndexedRouter(
        routes=[
            *system.routes,
            *ollama.routes,
            # Before OpenAI's: Gemini's GET /v1/models answers only Gemini clients.
            *gemini.routes,
            *openai.routes,
            *responses.routes,
            *interactions.routes,
            *completions.routes,
            *anthropic.routes,
            *gemini.unknown_methods,
            *agent_routes,
            *(mcp.routes if mcp is not None else []),
            *admin_api.routes,
            *console_routes,
        ],
        lifespan=lifespan,
    )
    app.state.gateway = state
    app.state.agent = agent  # what agent/routes.py reads
    app.state.accounts = state.accounts  # what accounts/routes.py reads
    # Innermost: the chat routes past Starlette's router and its wrappers (web/routing.py).
    app.add_middleware(
        HotRoutes, router=app.router, handlers=_EXCEPTION_HANDLERS, serves=_exchanged_route
    )
    app.add_middleware(_AuthMiddleware, accounts=state.accounts)

    app.add_middleware(
        BodyDeadline,
        seconds=config.server.body_timeout,
        on_timeout=partial(_body_timed_out, state.metrics),
    )
    return app

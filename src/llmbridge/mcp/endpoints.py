"""The gateway's MCP endpoints: ``McpGateway``, mounted by gateway/app.py.

``/mcp`` serves every configured server's tools, resources and prompts (tools and
prompts named ``<server>__<name>``: mcp/catalog.py), ``/mcp/<server>`` one server
under its own names, both over streamable HTTP. Each endpoint (a view) is the SDK's
low-level ``Server`` with this module's handlers, behind its own
``StreamableHTTPSessionManager``, which speaks every revision the SDK does: the
``initialize`` handshake of 2024-11-05, 2025-03-26, 2025-06-18 and 2025-11-25
(negotiated down to what the client offers) and the stateless 2026-07-28 envelope. The
SDK owns the protocol: malformed JSON-RPC, an unknown method, a wrong
``Accept`` or session header are its answers, in its shapes.

Sessions: a handshake-revision client gets a session (``Mcp-Session-Id``), bound to
the key that opened it (another key presenting its id gets the SDK's 404, as for an
unknown session), and its GET stream carries list-changed notifications
(mcp/listeners.py). With ``mcp.stateless`` (by default with ``--workers N``, where the
next request may reach another worker) there are no sessions.

Every handler answers within a bounded time (the upstream's call bound) and never
with a traceback: a gateway refusal or fault is a JSON-RPC error whose code and
``data`` come from dialects/jsonrpc.py; an upstream's own JSON-RPC error (bad
arguments) is passed on as it came; a tool's own failure (``isError: true``) is a
result, as the specification wants. Each ``tools/call`` goes through the gate
(mcp/gate.py): the key's ``mcp_tools`` (mcp/permissions.py), its limits, one ledger
row; lists, prompts and resource reads show and serve what the same permission
allows. A result larger than ``mcp.max_result_bytes`` (its JSON) is refused with an
error saying so; a resource read or a prompt too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import anyio
import mcp_types as types
import orjson
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from llmbridge import __version__
from llmbridge.core.errors import (
    BackendError,
    InternalError,
    InvalidRequestError,
    LLMBridgeError,
    NotFoundError,
    RequestTooLargeError,
)
from llmbridge.dialects.jsonrpc import error_code, error_data
from llmbridge.mcp.catalog import Catalog, exposed, page
from llmbridge.mcp.config import HttpServerConfig, McpConfig
from llmbridge.mcp.gate import OPEN_GATE, CallGate, CallPass, Outcome, ToolCall
from llmbridge.mcp.listeners import Listeners
from llmbridge.mcp.permissions import Permissions
from llmbridge.mcp.upstream import Kind, Upstream
from llmbridge.web.auth import KEY_IDENTITY
from llmbridge.web.render import Dialect, error_response, new_request_id

__all__ = ["MAX_REQUEST_BYTES", "McpGateway"]

log = logging.getLogger("llmbridge.mcp")

MAX_REQUEST_BYTES = 4 * 1024 * 1024
"""The largest JSON-RPC request body (the SDK's own default): 413 above."""

SESSION_HEADER = "mcp-session-id"

T = TypeVar("T")


def _scope(ctx: ServerRequestContext[Any, Any]) -> Scope:
    """The HTTP request's scope of a message (its key). Every message reaches the
    handlers through the session manager, which attaches its request; one without
    would be served with no key checked, so it is refused instead."""
    request = ctx.request
    if not isinstance(request, Request):
        raise InternalError("an MCP message arrived without its HTTP request")
    return request.scope


def mcp_error(error: LLMBridgeError) -> MCPError:
    """``error`` as the JSON-RPC error the client gets (dialects/jsonrpc.py)."""
    return MCPError(error_code(error), error.message, error_data(error))


def _upstream_error(server: str, exc: MCPError) -> LLMBridgeError:
    """An upstream's own JSON-RPC error, as the ledger records it (the client gets
    the error itself)."""
    message = f"the MCP server {server!r} answered {exc.code}: {exc.message}"
    if exc.code in (types.INVALID_PARAMS, types.INVALID_REQUEST):
        return InvalidRequestError(message)
    if exc.code == types.METHOD_NOT_FOUND:
        return NotFoundError(message)
    return BackendError(message, backend=server)


async def _guarded(work: Callable[[], Awaitable[T]]) -> T:
    """``work()``, its failures as JSON-RPC errors: never a traceback (module
    docstring)."""
    try:
        return await work()
    except MCPError:
        raise
    except LLMBridgeError as exc:
        raise mcp_error(exc) from None
    except Exception as exc:
        log.exception("an MCP request failed")
        raise mcp_error(
            InternalError(f"internal error ({type(exc).__name__}); see the gateway log")
        ) from None


def _json_size(value: BaseModel) -> tuple[dict[str, Any], int]:
    raw = value.model_dump(by_alias=True, mode="json", exclude_none=True)
    return raw, json_bytes(raw)


def json_bytes(value: object) -> int:
    """The size of ``value`` as JSON. orjson refuses integers past 64 bits, which JSON
    (and so a client's arguments) may hold: those are measured by the stdlib."""
    try:
        return len(orjson.dumps(value))
    except TypeError:
        return len(json.dumps(value, separators=(",", ":"), default=str).encode())


class _GatewayServer(Server[Any]):
    """The SDK's low-level server, advertising ``listChanged`` to handshake clients
    when the gateway keeps sessions (the session manager builds the handshake's
    options itself, with none)."""

    def __init__(self, *args: Any, list_changed: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._list_changed = list_changed
        # The gateway's own span covers each call (gateway/exchange/mcp_gate.py); the SDK's
        # per-message span would be a second one under a process-wide tracer.
        self.middleware.clear()

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        changed = self._list_changed
        return super().create_initialization_options(
            notification_options or NotificationOptions(changed, changed, changed),
            experimental_capabilities,
            extensions,
        )


class _View:
    """One endpoint: ``/mcp`` (``server=None``) or ``/mcp/<server>``."""

    def __init__(self, gateway: McpGateway, server: str | None) -> None:
        self.gateway = gateway
        self.server = server
        self.endpoint = "/mcp" if server is None else "/mcp/{server}"
        self.listeners = Listeners(stateful=not gateway.stateless)
        catalog = gateway.catalog
        self.mcp = _GatewayServer(
            "llmbridge" if server is None else f"llmbridge/{server}",
            version=__version__,
            instructions=None,
            list_changed=not gateway.stateless,
            get_tool_input_schema=lambda name: catalog.input_schema(server, name),
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
            on_list_resources=self.list_resources,
            on_list_resource_templates=self.list_resource_templates,
            on_read_resource=self.read_resource,
            on_list_prompts=self.list_prompts,
            on_get_prompt=self.get_prompt,
            on_subscriptions_listen=self.listeners.listen,
        )
        self.manager = StreamableHTTPSessionManager(
            app=self.mcp,
            stateless=gateway.stateless,
            max_request_body_size=MAX_REQUEST_BYTES,
        )

    @property
    def page_size(self) -> int:
        return self.gateway.config.page_size

    # -- lists -----------------------------------------------------------------------

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        async def work() -> types.ListToolsResult:
            self.listeners.note(ctx)
            tools = self.gateway.tools_for(self.server, _scope(ctx))
            items, following = page(tools, params.cursor if params else None, self.page_size)
            return types.ListToolsResult(tools=items, next_cursor=following)

        return await _guarded(work)

    async def list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        async def work() -> types.ListResourcesResult:
            permissions = Permissions.of(_scope(ctx))
            self.listeners.note(ctx)
            found = self.gateway.catalog.resources(self.server, permissions.reaches)
            items, following = page(found, params.cursor if params else None, self.page_size)
            return types.ListResourcesResult(resources=items, next_cursor=following)

        return await _guarded(work)

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        async def work() -> types.ListResourceTemplatesResult:
            permissions = Permissions.of(_scope(ctx))
            found = self.gateway.catalog.templates(self.server, permissions.reaches)
            items, following = page(found, params.cursor if params else None, self.page_size)
            return types.ListResourceTemplatesResult(
                resource_templates=items, next_cursor=following
            )

        return await _guarded(work)

    async def list_prompts(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        async def work() -> types.ListPromptsResult:
            permissions = Permissions.of(_scope(ctx))
            self.listeners.note(ctx)
            found = self.gateway.catalog.prompts(self.server, permissions.allows)
            items, following = page(found, params.cursor if params else None, self.page_size)
            return types.ListPromptsResult(prompts=items, next_cursor=following)

        return await _guarded(work)

    # -- reads -----------------------------------------------------------------------

    async def read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        async def work() -> types.ReadResourceResult:
            permissions = Permissions.of(_scope(ctx))
            upstream = self.gateway.catalog.resource(self.server, params.uri, permissions.reaches)
            if not permissions.reaches(upstream.name):
                raise permissions.resource_refusal(params.uri, upstream.name)
            result = await upstream.read_resource(params.uri)
            self.gateway.bounded(result, f"the resource {params.uri!r}")
            return result

        return await _guarded(work)

    async def get_prompt(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        async def work() -> types.GetPromptResult:
            permissions = Permissions.of(_scope(ctx))
            upstream, own = self.gateway.catalog.prompt(self.server, params.name)
            full = exposed(upstream.name, own)
            if not permissions.allows(full):
                raise permissions.prompt_refusal(full)
            result = await upstream.get_prompt(own, params.arguments)
            self.gateway.bounded(result, f"the prompt {params.name!r}")
            return result

        return await _guarded(work)

    # -- tool calls ------------------------------------------------------------------

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await _guarded(lambda: self._call_tool(ctx, params))

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        headers = ctx.request.headers if isinstance(ctx.request, Request) else {}
        return await self.gateway.call_tool(
            self.server,
            params.name,
            params.arguments,
            scope=_scope(ctx),
            endpoint=self.endpoint,
            session_id=headers.get(SESSION_HEADER),
            protocol_version=ctx.protocol_version,
            jsonrpc_id=ctx.request_id,
        )


class _Endpoint:
    """The ASGI app of ``/mcp`` (``by_path=False``) or ``/mcp/{server}``."""

    def __init__(self, gateway: McpGateway, *, by_path: bool) -> None:
        self.gateway = gateway
        self.by_path = by_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        views = self.gateway.views
        if self.by_path:
            name = (scope.get("path_params") or {}).get("server")
            view = views.get(name) if isinstance(name, str) else None
            if view is None:
                error = NotFoundError(
                    f"no MCP server named {name!r} here; the servers: "
                    f"{', '.join(self.gateway.upstreams)}"
                )
                await error_response(Dialect.MCP, error, new_request_id())(scope, receive, send)
                return
        else:
            view = views[None]
        identity = scope.get(KEY_IDENTITY)
        if isinstance(identity, str):
            # The SDK binds a session to the principal that opened it: another key
            # presenting its id is answered as for an unknown session.
            scope["user"] = AuthenticatedUser(
                AccessToken(token="", client_id=identity, scopes=[])  # no token kept
            )
        await view.manager.handle_request(scope, receive, send)


class McpGateway:
    """The MCP gateway of one process (module docstring). ``gate``: what admits and
    records tool calls (gateway/exchange/mcp_gate.py); ``stateless``: serve without sessions;
    ``environ``: where ``${VAR}`` is read (the process's)."""

    def __init__(
        self,
        config: McpConfig,
        *,
        gate: CallGate = OPEN_GATE,
        stateless: bool = False,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        self.gate = gate
        self.stateless = stateless
        self.upstreams: dict[str, Upstream] = {
            name: Upstream(name, server, config, environ=environ, on_change=self._changed)
            for name, server in config.servers.items()
        }
        self.catalog = Catalog(self.upstreams)
        self.views: dict[str | None, _View] = {None: _View(self, None)}
        for name in self.upstreams:
            self.views[name] = _View(self, name)

    @property
    def routes(self) -> list[Route]:
        """``/mcp`` and ``/mcp/{server}`` (the SDK answers what each method means)."""
        methods = ["GET", "POST", "DELETE"]
        return [
            Route("/mcp", endpoint=_Endpoint(self, by_path=False), methods=methods),
            Route("/mcp/{server}", endpoint=_Endpoint(self, by_path=True), methods=methods),
        ]

    def tools_for(
        self, view: str | None, scope: Scope, *, upstream: Upstream | None = None
    ) -> list[types.Tool]:
        """The tools of ``view`` (``None``: every server, named ``<server>__<tool>``;
        a server's name: that server's, under its own names) that the key of ``scope``
        may see (its ``mcp_tools``), from the servers that are up. ``upstream``: a
        server a request connected (``request_server``), which ``view`` names."""
        return self._catalog(upstream).tools(view, Permissions.of(scope).allows)

    def _catalog(self, upstream: Upstream | None) -> Catalog:
        return self.catalog if upstream is None else Catalog({upstream.name: upstream})

    @contextlib.asynccontextmanager
    async def request_server(
        self, name: str, url: str, headers: Mapping[str, str]
    ) -> AsyncIterator[Upstream]:
        """A server only a request names (a URL ``mcp.allowed_urls`` allows that no
        ``mcp.servers`` entry has), connected for that request and named ``name``:
        over streamable HTTP with the request's headers as it gave them (never the
        gateway's ``${VAR}``), its first connection awaited (``mcp.connect_timeout_s``;
        one that failed is ``state`` ``down``, its ``error`` saying why), disconnected
        when the request is done. The caller checked ``url`` against
        ``allowed_urls``; ``InvalidRequestError`` for one that is not HTTP(S)."""
        try:
            config = HttpServerConfig(url=url, headers=dict(headers))
        except ValidationError:
            raise InvalidRequestError(
                f"the MCP server URL {url!r} is not an http:// or https:// URL",
                code="mcp_url_not_allowed",
            ) from None
        upstream = Upstream(name, config, self.config, verbatim=True)
        upstream.start()
        try:
            with anyio.move_on_after(self.config.connect_timeout_s):
                await upstream.first_attempt()
            yield upstream
        finally:
            with anyio.CancelScope(shield=True):
                await upstream.stop()

    async def call_tool(
        self,
        view: str | None,
        name: str,
        arguments: dict[str, Any] | None,
        *,
        scope: Scope,
        endpoint: str,
        session_id: str | None = None,
        protocol_version: str | None = None,
        jsonrpc_id: str | int | None = None,
        within_request: bool = False,
        upstream: Upstream | None = None,
    ) -> types.CallToolResult:
        """Call ``name`` (as ``view`` names it: ``tools_for``) for the key of ``scope``:
        its ``mcp_tools`` checked, then its limits taken through the gate (not with
        ``within_request``: a model request the gateway admitted makes the call, and
        holds them: mcp/gate.py), the call made and recorded once however it ends
        (``endpoint`` is the route the record names: ``/mcp``, ``/mcp/{server}``, or
        the model API route that called the tool); ``upstream``: a server the request
        connected (``request_server``), which ``view`` names.

        Raises ``LLMBridgeError`` for the gateway's refusals and faults (an unknown
        tool, a permission, a limit, a result over ``mcp.max_result_bytes``, a server
        that is down) and the SDK's ``MCPError`` for the server's own JSON-RPC error; a
        tool's own failure is a result with ``is_error``."""
        gate = self.gate
        call = ToolCall(
            server=view or "",
            tool=name,
            name=name,
            endpoint=endpoint,
            scope=scope,
            arguments=arguments,
            arguments_bytes=json_bytes(arguments) if arguments else 0,
            session_id=session_id,
            protocol_version=protocol_version,
            jsonrpc_id=jsonrpc_id,
            known=False,
            within_request=within_request,
        )
        try:
            upstream, own = self._catalog(upstream).tool(view, name)
            call.server, call.tool, call.known = upstream.name, own, True
            permissions = Permissions.of(scope)
            full = exposed(upstream.name, own)
            if not permissions.allows(full):
                raise permissions.refusal(full)
        except LLMBridgeError as exc:
            await gate.refused(call, exc)
            raise
        admitted = await gate.admit(call)  # a refusal is recorded, then raised
        return await self._called(upstream, own, call, admitted)

    async def _called(
        self, upstream: Upstream, own: str, call: ToolCall, admitted: CallPass
    ) -> types.CallToolResult:
        outcome = Outcome(status=500)
        try:
            result = await upstream.call_tool(own, call.arguments)
            raw, size = self.bounded(result, f"the result of {call.name!r}")
            outcome = Outcome(200, result=raw, result_bytes=size, tool_error=result.is_error)
            return result
        except MCPError as exc:
            outcome = Outcome(
                400 if exc.code == types.INVALID_PARAMS else 502,
                error=_upstream_error(upstream.name, exc),
            )
            raise
        except LLMBridgeError as exc:
            outcome = Outcome(exc.status_code, error=exc)
            raise
        except anyio.get_cancelled_exc_class():
            outcome = Outcome(499)  # the client cancelled it, or left
            raise
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await admitted.finish(outcome)
                except Exception:  # recording must not fail the call
                    log.exception("recording MCP tool call %s failed", call.name)

    def bounded(self, result: BaseModel, what: str) -> tuple[dict[str, Any], int]:
        """``result`` as JSON and its size; ``RequestTooLargeError`` over
        ``mcp.max_result_bytes``."""
        raw, size = _json_size(result)
        limit = self.config.max_result_bytes
        if size > limit:
            raise RequestTooLargeError(
                f"{what} is {size} bytes of JSON, over mcp.max_result_bytes ({limit}): "
                "the gateway does not pass on a cut result",
                code="result_too_large",
            )
        return raw, size

    async def _changed(self, upstream: Upstream, kinds: frozenset[Kind]) -> None:
        for name in (None, upstream.name):
            view = self.views.get(name)
            if view is not None:
                await view.listeners.changed(frozenset(kinds))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Connect every server (waiting up to ``mcp.start_wait_s`` for their first
        connections), serve, then stop: listen streams ended, sessions closed, every
        server disconnected (stdio servers stopped)."""
        for upstream in self.upstreams.values():
            upstream.start()
        try:
            with anyio.move_on_after(self.config.start_wait_s):
                for upstream in self.upstreams.values():
                    await upstream.first_attempt()
            async with contextlib.AsyncExitStack() as managers:
                for view in self.views.values():
                    await managers.enter_async_context(view.manager.run())
                try:
                    yield
                finally:
                    for view in self.views.values():
                        view.listeners.close()
        finally:
            await asyncio.gather(*(upstream.stop() for upstream in self.upstreams.values()))

    def status(self) -> dict[str, dict[str, Any]]:
        """Each server's state (``/health``, the console)."""
        return {name: upstream.status() for name, upstream in self.upstreams.items()}

"""One configured MCP server, connected and kept connected: ``Upstream``.

Each upstream has one supervisor task, which owns its client (the SDK's ``Client``
over mcp/transports.py's transport: the SDK's task groups are entered and left in that
one task, as anyio requires):

1. **connect**: open the transport (spawn a stdio server; an HTTP server is reached
   on the first request), negotiate the protocol (the ``initialize`` handshake, or
   ``protocol: auto``), then list its tools, resources, resource templates and prompts,
   each followed through its pages (at most ``MAX_PAGES`` of them, ``MAX_ITEMS``
   items), each only when the server's capabilities name it. Handshake and listings
   are bounded by ``mcp.connect_timeout_s``. The upstream is then **up**.
2. **serve**: calls from the gateway's handlers (other tasks) go through the
   client's session; a list-changed notification from the server marks its list
   stale and wakes the supervisor, which lists it again and tells the gateway
   (``on_change``), which tells its clients.
3. **lost**: the connection's read stream ends (a stdio server that exited), or a
   call fails for want of a connection: the client is closed (the SDK stops the
   process: stdin closed, then SIGTERM and SIGKILL to its process group), the
   upstream is **down**, and after a backoff (``mcp.restart_backoff_s``, doubling
   to ``mcp.restart_backoff_max_s`` while it keeps failing, back to the first once
   it stayed up) it is connected again. A failure to connect is logged with its
   reason and retried the same way: a missing ``${VAR}``, a program not found, a
   refused connection.
4. **stopped**: ``stop`` (the gateway's shutdown) closes the client and ends the
   task; a stdio server is never left running.

A call (``call_tool``, ``read_resource``, ``get_prompt``) is bounded by its
server's ``call_timeout_s`` (else ``mcp.call_timeout_s``): the wait for a server that
is (re)connecting counts in it, and past it the call is cancelled upstream (the SDK
sends ``notifications/cancelled``) and fails with a 504. A server that is down (in
its backoff) fails a call at once, with the reason and when it is tried again;
its breaker (mcp/breaker.py) fails calls at once after repeated failures. Failures
are ``core.errors``: the upstream's own JSON-RPC errors (an unknown tool, bad
arguments) are passed through as the SDK's ``MCPError``, and do not count against the
breaker: the server answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.session import ClientSession, IncomingMessage
from mcp.shared.exceptions import MCPError

from llmbridge.core.errors import (
    BackendError,
    BackendProtocolError,
    BackendTimeoutError,
    BackendUnavailableError,
    LLMBridgeError,
)
from llmbridge.mcp.breaker import Breaker
from llmbridge.mcp.config import McpConfig, StdioServerConfig, UpstreamConfig
from llmbridge.mcp.transports import open_transport

__all__ = ["MAX_ITEMS", "MAX_PAGES", "Listing", "Upstream"]

log = logging.getLogger("llmbridge.mcp")

MAX_PAGES = 100
"""Pages of one list followed per listing: a server whose cursor never ends cannot
hold a (re)connection."""
MAX_ITEMS = 10_000
"""Items of one list kept per server."""

STAYED_UP_S = 60.0
"""A connection that lasted this long resets the restart backoff to its first step."""

T = TypeVar("T")

State = Literal["starting", "up", "down", "stopped"]
Kind = Literal["tools", "resources", "prompts"]

_CHANGES: dict[type[Any], Kind] = {
    types.ToolListChangedNotification: "tools",
    types.ResourceListChangedNotification: "resources",
    types.PromptListChangedNotification: "prompts",
}

_CONNECTION_LOST = (
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    ConnectionError,
)

_LOST_CODES = frozenset({types.CONNECTION_CLOSED})


@dataclass(frozen=True, slots=True)
class Listing:
    """What a server offers, as it last listed it."""

    tools: tuple[types.Tool, ...] = ()
    resources: tuple[types.Resource, ...] = ()
    templates: tuple[types.ResourceTemplate, ...] = ()
    prompts: tuple[types.Prompt, ...] = ()


class Upstream:
    """One configured server (module docstring). ``on_change(upstream, kinds)`` is
    awaited when its lists changed (``kinds``: ``tools``, ``resources``, ``prompts``),
    came up or went down."""

    def __init__(
        self,
        name: str,
        config: UpstreamConfig,
        settings: McpConfig,
        *,
        environ: Mapping[str, str] | None = None,
        on_change: Callable[[Upstream, frozenset[Kind]], Awaitable[None]] | None = None,
        verbatim: bool = False,
    ) -> None:
        self.name = name
        self.config = config
        self.settings = settings
        self.environ: Mapping[str, str] | None = os.environ if environ is None else environ
        if verbatim:
            self.environ = None  # its values are sent as given: transports.open_transport
        self.on_change = on_change
        self.kind = "stdio" if isinstance(config, StdioServerConfig) else config.transport
        self.call_timeout_s = config.call_timeout_s or settings.call_timeout_s
        self.breaker = Breaker(name, settings.breaker_failures, settings.breaker_reset_s)
        self.state: State = "starting"
        self.listing = Listing()
        self.error: str | None = None
        """Why it last failed or went down (for the log, ``/health`` and errors)."""
        self.protocol_version: str | None = None
        self.connections = 0
        """Connections made so far (1 after the first start; more after restarts)."""
        self.calls = 0
        self.failed_calls = 0
        self.up_since: float | None = None
        self.retry_at: float | None = None
        """When (``time.monotonic``) a server that is down is tried again."""
        self._session: ClientSession | None = None
        self._settled = asyncio.Event()
        """Set, and replaced, each time the upstream comes up or goes down: what a
        call waiting for a server that is connecting wakes on."""
        self._attempted = asyncio.Event()
        """Set once the first connection has succeeded or failed."""
        self._wake = asyncio.Event()
        self._lost = False
        self._stale: set[Kind] = set()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- life ------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._supervise(), name=f"llmbridge-mcp-{self.name}"
            )

    async def first_attempt(self) -> None:
        """Return once the first connection succeeded or failed."""
        await self._attempted.wait()

    async def stop(self) -> None:
        """Close the connection (a stdio server is stopped) and end the supervisor."""
        self._stopping.set()
        self._wake.set()
        task, self._task = self._task, None
        if task is None:
            return
        try:
            # The SDK's own shutdown of a stdio server is bounded (about 6 s at worst:
            # stdin closed, SIGTERM, SIGKILL); this bound is only a backstop.
            await asyncio.wait_for(asyncio.shield(task), timeout=15.0)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        except Exception:  # noqa: BLE001 - the supervisor logged its own failures
            log.debug("the MCP server %s's supervisor ended with an error", self.name)
        self.state = "stopped"

    async def _supervise(self) -> None:
        backoff = self.settings.restart_backoff_s
        while not self._stopping.is_set():
            self.state = "starting"
            self.up_since = None
            try:
                await self._connect_once()
            except Exception as exc:  # noqa: BLE001 - any failure: logged, retried
                self._went_down(_reason(exc))
            else:
                self._went_down(self.error or "its connection ended")
            finally:
                self._attempted.set()
            if self._stopping.is_set():
                break
            await self._changed(frozenset({"tools", "resources", "prompts"}))
            up = self.up_since
            if up is not None and time.monotonic() - up >= STAYED_UP_S:
                backoff = self.settings.restart_backoff_s
            self.retry_at = time.monotonic() + backoff
            log.warning(
                "MCP server %s is down (%s): started again in %.1f s",
                self.name,
                self.error,
                backoff,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=backoff)
            backoff = min(backoff * 2, self.settings.restart_backoff_max_s)
        self.state = "stopped"
        self._settle()

    async def _connect_once(self) -> None:
        """Connect, list, serve until the connection is lost or the upstream stopped."""
        self._lost = False
        self._stale.clear()
        self._wake.clear()
        mode = "legacy" if self.config.protocol == "handshake" else "auto"
        self.error = None
        transport = open_transport(
            self.name,
            self.config,
            on_closed=self._connection_closed,
            environ=self.environ,
            max_result_bytes=self.settings.max_result_bytes,
        )
        client = Client(
            transport,
            mode=mode,
            read_timeout_seconds=self.settings.connect_timeout_s,
            message_handler=self._on_message,
            # The gateway passes results on; a client-side cache would serve a key
            # what another key's listing held.
            cache=None,
        )
        async with client:
            session = client.session
            self.listing = await self._list_all(session)
            self._session = session
            self.protocol_version = client.protocol_version
            self.connections += 1
            self.state, self.error, self.retry_at = "up", None, None
            self.up_since = time.monotonic()
            self._settle()
            self._attempted.set()
            log.info(
                "MCP server %s is up (%s, protocol %s): %d tools, %d resources, %d prompts",
                self.name,
                self.kind,
                self.protocol_version,
                len(self.listing.tools),
                len(self.listing.resources) + len(self.listing.templates),
                len(self.listing.prompts),
            )
            if self.connections > 1:
                await self._changed(frozenset({"tools", "resources", "prompts"}))
            try:
                await self._serve(session)
            finally:
                self._session = None

    async def _serve(self, session: ClientSession) -> None:
        """Wait for the connection's end, listing again what the server says changed."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._stopping.is_set() or self._lost:
                return
            kinds, self._stale = frozenset(self._stale), set()
            if kinds:
                try:
                    self.listing = await self._list_all(session, kinds, self.listing)
                except (LLMBridgeError, MCPError) as exc:
                    log.warning("listing MCP server %s again failed: %s", self.name, exc)
                    continue
                await self._changed(kinds)

    def _connection_closed(self) -> None:
        if not self._lost:
            self._lost = True
            if self.error is None and not self._stopping.is_set():
                self.error = "its connection ended"
            self._wake.set()

    def _went_down(self, reason: str) -> None:
        self.state = "down"
        self.error = reason
        self._session = None
        self._settle()

    def _settle(self) -> None:
        """Wake the calls waiting for this upstream to come up or go down."""
        settled, self._settled = self._settled, asyncio.Event()
        settled.set()

    async def _changed(self, kinds: frozenset[Kind]) -> None:
        if self.on_change is None:
            return
        try:
            await self.on_change(self, kinds)
        except Exception:  # a listener's bug must not stop the supervisor
            log.exception("telling clients MCP server %s changed failed", self.name)

    async def _on_message(self, message: IncomingMessage) -> None:
        """The server's notifications: a list changed (listed again by the
        supervisor, never here: this runs on the session's read path)."""
        kind = _CHANGES.get(type(message))
        if kind is not None:
            self._stale.add(kind)
            self._wake.set()
        elif isinstance(message, Exception):
            log.debug("MCP server %s's transport reported: %r", self.name, message)

    # -- listings --------------------------------------------------------------------

    async def _list_all(
        self,
        session: ClientSession,
        kinds: frozenset[Kind] = frozenset({"tools", "resources", "prompts"}),
        previous: Listing | None = None,
    ) -> Listing:
        """What the server offers (``kinds`` of it listed again, the rest kept from
        ``previous``), bounded by ``mcp.connect_timeout_s`` as a whole."""
        capabilities = session.server_capabilities or types.ServerCapabilities()
        listing = previous or Listing()
        with anyio.fail_after(self.settings.connect_timeout_s):
            tools, resources, templates, prompts = (
                listing.tools,
                listing.resources,
                listing.templates,
                listing.prompts,
            )
            if "tools" in kinds and capabilities.tools is not None:
                tools = await _pages(lambda p: session.list_tools(params=p), "tools")
            if "resources" in kinds and capabilities.resources is not None:
                resources = await _pages(lambda p: session.list_resources(params=p), "resources")
                templates = await _pages(
                    lambda p: session.list_resource_templates(params=p), "resource_templates"
                )
            if "prompts" in kinds and capabilities.prompts is not None:
                prompts = await _pages(lambda p: session.list_prompts(params=p), "prompts")
        return Listing(tools, resources, templates, prompts)

    # -- calls -----------------------------------------------------------------------

    async def call_tool(self, tool: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
        """Call ``tool`` (the server's own name) within the call bound."""
        return await self._call(
            lambda s: s.call_tool(tool, arguments, read_timeout_seconds=self.call_timeout_s),
            f"the tool {tool!r}",
        )

    async def read_resource(self, uri: str) -> types.ReadResourceResult:
        return await self._call(lambda s: s.read_resource(uri), f"the resource {uri!r}")

    async def get_prompt(
        self, prompt: str, arguments: dict[str, str] | None
    ) -> types.GetPromptResult:
        return await self._call(lambda s: s.get_prompt(prompt, arguments), f"the prompt {prompt!r}")

    async def _call(self, send: Callable[[ClientSession], Awaitable[T]], what: str) -> T:
        """``send`` on the session within the call bound (module docstring)."""
        self.breaker.check()
        self.calls += 1
        timeout = self.call_timeout_s
        try:
            with anyio.fail_after(timeout):
                session = await self._ready()
                result = await send(session)
        except TimeoutError:
            self._failed()
            raise BackendTimeoutError(
                f"the MCP server {self.name!r} did not answer {what} within {timeout:g} s",
                backend=self.name,
            ) from None
        except MCPError as exc:
            if exc.code in _LOST_CODES:
                self._failed(lost=True)
                raise BackendUnavailableError(
                    f"the MCP server {self.name!r} closed its connection during {what}",
                    backend=self.name,
                ) from exc
            if exc.code == types.REQUEST_TIMEOUT:
                self._failed()
                raise BackendTimeoutError(
                    f"the MCP server {self.name!r} did not answer {what} within {timeout:g} s",
                    backend=self.name,
                ) from exc
            self.breaker.success()  # it answered, with an error of its own
            raise
        except BackendError:
            self.failed_calls += 1
            raise
        except _CONNECTION_LOST as exc:
            self._failed(lost=True)
            raise BackendUnavailableError(
                f"the MCP server {self.name!r} is unreachable ({type(exc).__name__})",
                backend=self.name,
            ) from exc
        except Exception as exc:
            # The SDK refused what the server sent (a result outside its tool's schema,
            # a malformed message) or its HTTP client failed: the server's fault.
            self._failed(lost=_is_http_failure(exc))
            raise BackendProtocolError(
                f"the MCP server {self.name!r} failed {what}: {_reason(exc)}",
                backend=self.name,
            ) from exc
        self.breaker.success()
        return result

    async def _ready(self) -> ClientSession:
        """The session of a server that is up, waiting (within the caller's bound)
        for one that is connecting; one that is down is a 503 at once."""
        while True:
            session = self._session
            if session is not None and self.state == "up":
                return session
            if self.state == "stopped" or self._stopping.is_set():
                raise BackendUnavailableError(
                    f"the MCP server {self.name!r} is stopped", backend=self.name
                )
            if self.state == "down":
                retry = None if self.retry_at is None else self.retry_at - time.monotonic()
                raise BackendUnavailableError(
                    f"the MCP server {self.name!r} is down ({self.error})"
                    + ("" if retry is None else f"; started again in {max(retry, 0):.0f} s"),
                    backend=self.name,
                    retry_after=retry,
                )
            await self._settled.wait()

    def _failed(self, *, lost: bool = False) -> None:
        self.failed_calls += 1
        self.breaker.failure()
        if lost:
            self._connection_closed()

    def status(self) -> dict[str, Any]:
        """What ``/health`` and the console show of it."""
        return {
            "state": self.state,
            "transport": self.kind,
            "protocol": self.protocol_version,
            "tools": len(self.listing.tools) if self.state == "up" else 0,
            "resources": len(self.listing.resources) if self.state == "up" else 0,
            "prompts": len(self.listing.prompts) if self.state == "up" else 0,
            "connections": self.connections,
            "calls": self.calls,
            "failed_calls": self.failed_calls,
            "breaker": self.breaker.state,
            "error": self.error,
        }


async def _pages(
    fetch: Callable[[types.PaginatedRequestParams | None], Awaitable[Any]], field: str
) -> tuple[Any, ...]:
    """Every item of a paginated list, its pages followed (``MAX_PAGES``,
    ``MAX_ITEMS``)."""
    items: list[Any] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        page = await fetch(None if cursor is None else types.PaginatedRequestParams(cursor=cursor))
        items.extend(getattr(page, field))
        cursor = page.next_cursor
        if not cursor or cursor in seen or len(items) >= MAX_ITEMS:
            break
        seen.add(cursor)
    return tuple(items[:MAX_ITEMS])


def _is_http_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is the HTTP client's (the connection, not the server's answer)."""
    module = type(exc).__module__ or ""
    return module.startswith("httpx2") or isinstance(exc, OSError)


def _reason(exc: BaseException) -> str:
    """A failure in a line: the first of an exception group's, its message or kind."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

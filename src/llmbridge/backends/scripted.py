"""A scripted backend: exact, repeatable replies and faults on demand.

For the cases a real model cannot produce on demand: exact token sequences, tool
calls, thinking, in-band errors, failures before or in the middle of a stream, slow
chunks. Tests enqueue ``Script`` values; with an empty queue the default script is
used, whose reply echoes the last user message when ``echo`` is set. It also counts
what happened (requests received, streams cancelled) so tests can assert on it, and
it is fast enough to serve as the backend of the overhead benchmark.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from llmbridge.backends.base import OPENAI_SAMPLING, Backend, BackendHealth, Capabilities
from llmbridge.core.errors import BackendError, LLMBridgeError
from llmbridge.core.events import ResponseEnd, ResponseStart, StreamError, StreamEvent
from llmbridge.core.ids import new_id
from llmbridge.core.model_info import Capability, ModelInfo
from llmbridge.core.parts_manager import PartsManager
from llmbridge.core.request import ChatRequest, EmbedRequest
from llmbridge.core.response import EmbedResponse, StopReason, Usage
from llmbridge.features.token_count import count_request_tokens, count_text_tokens

__all__ = ["Script", "ScriptedBackend"]


@dataclass(slots=True)
class Script:
    """One scripted reply.

    The reply is ``thinking`` chunks, then ``text`` chunks, then ``tool_calls``.
    ``fail_before`` is raised before the first event; ``fail_after`` is raised (or,
    with ``in_band``, yielded as an in-band ``StreamError``) after that many text
    chunks.
    """

    text: list[str] = field(default_factory=lambda: ["Hello", " from", " llmbridge."])
    thinking: list[str] = field(default_factory=list)
    signature: str | None = None
    """Signs the thinking, as Anthropic does (a ``signature_delta``)."""
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    stop_reason: StopReason | None = None
    usage: Usage | None = None
    chunk_delay: float = 0.0
    fail_before: LLMBridgeError | None = None
    fail_after: int | None = None
    fail_error: LLMBridgeError | None = None
    in_band: bool = False
    echo: bool = False


class ScriptedBackend(Backend):
    kind = "scripted"
    # A test double takes every parameter, so a test sees exactly what was sent.
    capabilities = Capabilities(
        model_capabilities=True,
        sampling=OPENAI_SAMPLING | {"top_k", "min_p", "repeat_penalty", "num_ctx"},
        fim=True,  # for the models constructed with the "insert" capability
    )

    def __init__(
        self,
        name: str = "scripted",
        *,
        default: Script | None = None,
        models: tuple[str, ...] = ("scripted",),
        can_embed_vectors: bool = True,
        capabilities: frozenset[Capability] = frozenset(
            {"completion", "tools", "thinking", "embedding"}
        ),
        context_length: int = 8192,
    ) -> None:
        super().__init__(name)
        self.default = default or Script()
        self.models = models
        self.queue: deque[Script] = deque()
        self.requests: list[ChatRequest] = []
        self.cancelled = 0
        self.cancelled_at: list[float] = []
        """``time.monotonic()`` of each cancellation (how fast a hang-up reaches us)."""
        self.completed = 0
        self._embeds = can_embed_vectors
        self.model_capabilities = capabilities
        self.context_length = context_length

    def enqueue(self, *scripts: Script) -> None:
        self.queue.extend(scripts)

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        self.requests.append(request)
        script = self.queue.popleft() if self.queue else self.default
        if script.fail_before is not None:
            raise script.fail_before
        texts = script.text
        if script.echo:
            last_user = next((m.text for m in reversed(request.messages) if m.role == "user"), "")
            texts = [last_user]
        try:
            async with aclosing(self._play(request, script, texts)) as events:
                async for event in events:
                    yield event
        except (asyncio.CancelledError, GeneratorExit):
            self.cancelled += 1
            self.cancelled_at.append(time.monotonic())
            raise

    async def _play(
        self, request: ChatRequest, script: Script, texts: list[str]
    ) -> AsyncGenerator[StreamEvent, None]:
        parts = PartsManager()
        yield ResponseStart(
            id=new_id("scripted-"),
            model=request.model,
            created=time.time(),
            input_tokens=count_request_tokens(request),
        )
        for chunk in script.thinking:
            await self._pause(script)
            for event in parts.thinking(chunk):
                yield event
        if script.signature:
            for event in parts.signature(script.signature):
                yield event
        for number, chunk in enumerate(texts):
            if script.fail_after is not None and number == script.fail_after:
                error = script.fail_error or BackendError("scripted failure mid-stream")
                if script.in_band:
                    yield StreamError(error)
                    return
                raise error
            await self._pause(script)
            for event in parts.text(chunk):
                yield event
        for name, arguments in script.tool_calls:
            for event in parts.tool_call(name, arguments):
                yield event
        for event in parts.finish():
            yield event
        stop = script.stop_reason or (
            StopReason.TOOL_USE if parts.saw_tool_call else StopReason.END_TURN
        )
        usage = script.usage or Usage(
            input_tokens=count_request_tokens(request),
            output_tokens=sum(count_text_tokens(t) for t in texts) or 1,
        )
        self.completed += 1
        yield ResponseEnd(stop_reason=stop, usage=usage)

    @staticmethod
    async def _pause(script: Script) -> None:
        if script.chunk_delay:
            await asyncio.sleep(script.chunk_delay)

    async def embed(self, request: EmbedRequest) -> EmbedResponse:
        if not self._embeds:
            return await super().embed(request)
        vectors = tuple(_toy_vector(text) for text in request.inputs)
        tokens = sum(count_text_tokens(t) for t in request.inputs)
        return EmbedResponse(model=request.model, embeddings=vectors, input_tokens=tokens)

    async def list_models(self) -> list[ModelInfo]:
        return [await self.show_model(m) for m in self.models]

    async def show_model(self, model: str) -> ModelInfo:
        """Any name is served, with this backend's capabilities."""
        return ModelInfo(
            name=model,
            backend=self.name,
            backend_model=model,
            capabilities=self.model_capabilities,
            context_length=self.context_length,
            family="scripted",
        )

    async def health(self) -> BackendHealth:
        return BackendHealth(ok=True, detail="scripted", latency_ms=0.0)


def _toy_vector(text: str, dims: int = 8) -> tuple[float, ...]:
    """A deterministic vector that differs between texts (not a real embedding)."""
    values = [0.0] * dims
    for i, byte in enumerate(text.encode()):
        values[i % dims] += byte / 255.0
    norm = sum(v * v for v in values) ** 0.5 or 1.0
    return tuple(v / norm for v in values)

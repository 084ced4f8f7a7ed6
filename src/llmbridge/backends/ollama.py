"""A real Ollama server as a backend, over its native API (``/api/chat``, and
``/api/generate`` for completions and fill-in-the-middle).

Model list and capabilities come from ``/api/tags`` and ``/api/show``, so what the
gateway reports (tools, thinking, vision, context length) is what Ollama reports.
An unload (``keep_alive: 0`` with nothing to generate) and the model-management
requests (``/api/pull``, ``/api/push``, ``/api/delete``, ``/api/copy``,
``/api/create``) go to the server as Ollama clients send them, and a model they change
is described afresh next time.

An Ollama client's own ``/api/chat`` body takes the pass-through path here
(dialects/ollama/relay.py): sent as it came, its reply's lines relayed. A translated chat
the client wants whole is asked for whole (``stream: false``: one body decoded, a quarter
less of the gateway's CPU than a stream decoded line by line and accumulated again); the
rest are streamed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from functools import partial
from typing import Any

from llmbridge.backends.base import OPENAI_SAMPLING, Backend, BackendHealth, Capabilities
from llmbridge.backends.http import HTTPSettings, HTTPTransport, RelayCall
from llmbridge.core.errors import LLMBridgeError
from llmbridge.core.events import StreamEvent
from llmbridge.core.model_info import ModelInfo, ModelOperation
from llmbridge.core.request import ChatRequest, EmbedRequest
from llmbridge.core.response import EmbedResponse
from llmbridge.core.stream import EventBatches, EventStream
from llmbridge.dialects import ollama as dialect
from llmbridge.dialects.ollama.relay import ChatStreamRelay, relay_reply, relay_request

__all__ = ["OllamaBackend"]


class OllamaBackend(Backend):
    """Speaks Ollama's native API to ``base_url`` (e.g. ``http://127.0.0.1:11434``)."""

    kind = "ollama"
    capabilities = Capabilities(
        model_capabilities=True,
        thinking_effort=False,
        sampling=OPENAI_SAMPLING | {"top_k", "min_p", "repeat_penalty", "num_ctx"},
        fim=True,  # /api/generate's suffix, for models whose /api/show says "insert"
        context_option=True,  # options.num_ctx, sized by serving/prepare/context_size.py
        structured_output=True,  # ``format`` takes a JSON schema (Ollama 0.5 and later)
        manages_models=True,  # /api/pull, /api/delete... are forwarded to it
        relays="ollama",  # an Ollama client's /api/chat body (dialects/ollama/relay.py)
    )

    def __init__(
        self,
        name: str,
        base_url: str,
        *,
        api_key: str | None = None,
        http: HTTPSettings | None = None,
    ) -> None:
        super().__init__(name)
        self.base_url = base_url.rstrip("/")
        headers = {"authorization": f"Bearer {api_key}"} if api_key else None
        self._http = HTTPTransport(name, self.base_url, http or HTTPSettings(), headers)
        self._show_cache: dict[str, ModelInfo] = {}

    async def aclose(self) -> None:
        await self._http.aclose()

    def chat(self, request: ChatRequest) -> EventStream:
        # The pass-through path's stream is handed out as it is, not re-yielded: one
        # async-generator hop fewer for each read of a relayed stream. A translated
        # reply comes a read's events at a time (core/stream.py's EventBatches).
        if request.relay is not None:
            return self._http.relay(request, partial(self._relay_call, request))
        return EventBatches(self._translated(request))

    async def _translated(self, request: ChatRequest) -> AsyncGenerator[list[StreamEvent], None]:
        # Encoded off the event loop when the request is large (backends/http.py).
        # A completion (legacy completions, /api/generate) goes to /api/generate:
        # the prompt as it stands, a suffix filled through the model's template.
        if request.completion is not None:
            path, encode = "/api/generate", dialect.encode_generate_request
        else:
            path, encode = "/api/chat", dialect.encode_chat_request
        if not request.stream and request.completion is None:
            yield await self._http.whole(path, request, encode, dialect.decode_chat_response)
            return
        body = await self._http.encode(replace(request, stream=True), encode)
        async with self._http.stream(path, body) as chunks:
            async for batch in dialect.decode_chat_batches(chunks):
                yield batch

    @staticmethod
    def _relay_call(request: ChatRequest) -> RelayCall:
        """The pass-through path: the client's body (its model name and ``num_ctx`` set
        where serving set them), the reply's lines relayed."""
        body, client_model = relay_request(request)
        if not request.stream:
            reply = partial(relay_reply, client_model=client_model)
            return RelayCall("/api/chat", body, reply=reply)
        return RelayCall("/api/chat", body, ChatStreamRelay(client_model))

    async def embed(self, request: EmbedRequest) -> EmbedResponse:
        body = dialect.encode_embed_request(request)
        reply = await self._http.request_json("POST", "/api/embed", body)
        return dialect.decode_embed_response(reply)

    async def list_models(self) -> list[ModelInfo]:
        models = dialect.decode_tags(await self._http.request_json("GET", "/api/tags"))
        # /api/tags has no capabilities on older servers; /api/show always does.
        detailed = await asyncio.gather(*(self._show_or_none(m.backend_model) for m in models))
        return [
            replace(full or basic, name=basic.name, backend=self.name)
            for basic, full in zip(models, detailed, strict=True)
        ]

    async def _show_or_none(self, model: str) -> ModelInfo | None:
        try:
            return await self.show_model(model)
        except LLMBridgeError:  # a model that fails to describe itself is still listed
            return None

    async def show_model(self, model: str) -> ModelInfo:
        if model not in self._show_cache:
            reply = await self._http.request_json("POST", "/api/show", {"model": model})
            self._show_cache[model] = replace(dialect.decode_show(model, reply), backend=self.name)
        return self._show_cache[model]

    async def running_models(self) -> list[ModelInfo]:
        reply = await self._http.request_json("GET", "/api/ps")
        return [replace(m, backend=self.name) for m in dialect.decode_tags(reply)]

    async def unload(self, model: str) -> bool:
        # What Ollama clients send for it (Open WebUI's eject): an empty prompt with
        # keep_alive 0; Ollama expires the model's runner and answers "unload".
        body = {"model": model, "prompt": "", "keep_alive": 0, "stream": False}
        await self._http.request_json("POST", "/api/generate", body)
        return True

    @asynccontextmanager
    async def manage_models(
        self, operation: ModelOperation, body: dict[str, Any]
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        method = "DELETE" if operation == "delete" else "POST"
        try:
            async with self._http.stream(f"/api/{operation}", body, method=method) as chunks:
                yield chunks
        finally:
            # What the server knows of a pulled, created, copied or deleted model changed.
            self._show_cache.clear()

    async def health(self) -> BackendHealth:
        verdict, body = await self._http.probe("/api/version")
        if verdict.ok and isinstance(body, dict):
            return replace(verdict, detail=f"ollama {body.get('version', '?')}")
        return verdict

"""Any OpenAI-compatible ``/v1`` server as a backend (OpenAI, vLLM, llama.cpp, Ollama's /v1).

Adding another such server is configuration (a base URL and a key), not code. Chats go
to ``chat/completions``; completions and fill-in-the-middle to ``completions``. A chat
the client wants whole is asked for whole (one body decoded: a fifth less of the
gateway's CPU for a translated request than a stream decoded chunk by chunk and
accumulated again); the rest are streamed.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import replace
from functools import partial
from urllib.parse import urlsplit

from llmbridge.backends.base import Backend, BackendHealth, Capabilities
from llmbridge.backends.http import HTTPSettings, HTTPTransport, RelayCall
from llmbridge.core.events import StreamEvent
from llmbridge.core.model_info import ModelInfo
from llmbridge.core.request import ChatRequest, EmbedRequest
from llmbridge.core.response import EmbedResponse
from llmbridge.core.stream import EventBatches, EventStream
from llmbridge.dialects import openai as dialect
from llmbridge.dialects.openai.relay import ChatStreamRelay, relay_reply, relay_request

__all__ = ["OpenAICompatBackend", "normalise_base_url"]


def normalise_base_url(url: str) -> str:
    """``http://host:8000`` -> ``http://host:8000/v1``; a URL with a path is kept as given.

    OpenAI-compatible servers mount the API under ``/v1`` almost always; some (behind
    a prefix) under another path, which the user then spells out.
    """
    url = url.rstrip("/")
    if urlsplit(url).path in ("", "/"):
        return url + "/v1"
    return url


FIRST_PARTY_HOSTS = frozenset({"api.openai.com"})
"""Hosts whose tool arguments need no healing: a request with tools there may take the
pass-through path (``Capabilities.trusted_tool_arguments``)."""


class OpenAICompatBackend(Backend):
    """Speaks OpenAI chat completions to ``base_url``; a chat completions client's own
    body on the pass-through path (dialects/openai/relay.py)."""

    kind = "openai"
    # /v1/completions' suffix: fill-in-the-middle.
    capabilities = Capabilities(tool_choice=True, fim=True, relays="openai")

    def __init__(
        self,
        name: str,
        base_url: str,
        *,
        api_key: str | None = None,
        http: HTTPSettings | None = None,
    ) -> None:
        super().__init__(name)
        self.base_url = normalise_base_url(base_url)
        headers = {"authorization": f"Bearer {api_key}"} if api_key else None
        self._http = HTTPTransport(name, self.base_url, http or HTTPSettings(), headers)
        if urlsplit(self.base_url).hostname in FIRST_PARTY_HOSTS:
            self.capabilities = replace(self.capabilities, trusted_tool_arguments=True)

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
        # A raw completion or a fill-in-the-middle goes to /v1/completions, which takes
        # the prompt as it stands (vLLM, llama.cpp, OpenAI); a templated one (Ollama's
        # /api/generate without raw) is a chat like any other.
        completion = request.completion
        if completion is not None and (completion.raw or completion.suffix is not None):
            path, encode = "completions", dialect.encode_completion_request
        else:
            path, encode = "chat/completions", dialect.encode_chat_request
        if not request.stream and path == "chat/completions":
            yield await self._http.whole(path, request, encode, dialect.decode_chat_response)
            return
        body = await self._http.encode(replace(request, stream=True), encode)
        async with self._http.stream(path, body) as chunks:
            async for batch in dialect.decode_chat_batches(chunks):
                yield batch

    @staticmethod
    def _relay_call(request: ChatRequest) -> RelayCall:
        """The pass-through path: the client's body, the reply's bytes relayed."""
        body, client_model, strip_usage = relay_request(request)
        if not request.stream:
            reply = partial(relay_reply, client_model=client_model)
            return RelayCall("chat/completions", body, reply=reply)
        return RelayCall("chat/completions", body, ChatStreamRelay(client_model, strip_usage))

    async def embed(self, request: EmbedRequest) -> EmbedResponse:
        body = dialect.encode_embed_request(request)
        reply = await self._http.request_json("POST", "embeddings", body)
        return dialect.decode_embed_response(reply)

    async def list_models(self) -> list[ModelInfo]:
        reply = await self._http.request_json("GET", "models")
        return [replace(m, backend=self.name) for m in dialect.decode_models(reply)]

    async def health(self) -> BackendHealth:
        verdict, _ = await self._http.probe("models")
        return verdict

"""Any OpenAI-compatible ``/v1`` server as a backend (OpenAI, vLLM, llama.cpp, Ollama's /v1).

Adding another such server is configuration (a base URL and a key), not code.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from urllib.parse import urlsplit

import orjson
from httpx_sse import EventSource

from llmbridge.backends.base import Backend, BackendHealth
from llmbridge.backends.http import (
    HTTPSettings,
    make_client,
    map_transport_errors,
    probe,
    raise_for_backend_status,
    request_json,
)
from llmbridge.core.events import StreamEvent
from llmbridge.core.models import ModelInfo
from llmbridge.core.request import ChatRequest, EmbedRequest
from llmbridge.core.response import EmbedResponse
from llmbridge.dialects import openai as dialect

__all__ = ["OpenAICompatBackend", "normalise_base_url"]

_JSON = {"content-type": "application/json"}


def normalise_base_url(url: str) -> str:
    """``http://host:8000`` -> ``http://host:8000/v1``; a URL with a path is kept as given.

    OpenAI-compatible servers mount the API under ``/v1`` almost always; some (behind
    a prefix) under another path, which the user then spells out.
    """
    url = url.rstrip("/")
    if urlsplit(url).path in ("", "/"):
        return url + "/v1"
    return url


class OpenAICompatBackend(Backend):
    """Speaks OpenAI chat completions to ``base_url``."""

    kind = "openai"

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
        self._client = make_client(self.base_url, http or HTTPSettings(), headers)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def chat(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        body = orjson.dumps(dialect.encode_chat_request(replace(request, stream=True)))
        async with (
            map_transport_errors(self.name),
            self._client.stream(
                "POST", "chat/completions", content=body, headers=_JSON
            ) as response,
        ):
            await raise_for_backend_status(response, self.name)
            async for event in dialect.decode_chat_stream(EventSource(response).aiter_sse()):
                yield event

    async def embed(self, request: EmbedRequest) -> EmbedResponse:
        body = dialect.encode_embed_request(request)
        reply = await request_json(self._client, "POST", "embeddings", self.name, body)
        return dialect.decode_embed_response(reply)

    async def list_models(self) -> list[ModelInfo]:
        reply = await request_json(self._client, "GET", "models", self.name)
        return [replace(m, backend=self.name) for m in dialect.decode_models(reply)]

    async def health(self) -> BackendHealth:
        verdict, _ = await probe(self._client, "models")
        return verdict

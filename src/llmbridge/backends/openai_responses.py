"""Any server that speaks OpenAI's Responses API (``/v1/responses``) as a backend.

OpenAI (whose newest models, the Codex ones among them, are served only there), Ollama
>= 0.13, vLLM, LiteLLM, or another llmbridge. Requests go out through the Responses
dialect's client side (``dialects/responses/encode.py``, ``decode.py``), always
streamed and with ``store: false``: llmbridge sends the whole conversation each turn.

Reasoning the server returns encrypted comes back as the thinking part's signature,
tagged with this backend's name, and is sent back only to this backend
(``dialects/responses/carried.py``), as the Anthropic backend sends back only
Anthropic-signed thinking. A compaction (Codex's remote compaction, through the
gateway's Responses front) is asked of the server itself, with Codex's own
``compaction_trigger`` item (``compaction=True``, the default: OpenAI compacts), or,
for a server that does not compact, left to serving's request for a summary
(``compaction=False``: ``Capabilities.compaction``). The model list and the health
probe use ``/v1/models``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import replace
from functools import partial

from llmbridge.backends.base import Backend, BackendHealth, Capabilities
from llmbridge.backends.http import HTTPSettings, HTTPTransport
from llmbridge.backends.openai_compat import normalise_base_url
from llmbridge.core.events import StreamEvent
from llmbridge.core.model_info import ModelInfo
from llmbridge.core.request import ChatRequest
from llmbridge.dialects import openai, responses
from llmbridge.dialects.framing import aiter_sse

__all__ = ["OpenAIResponsesBackend"]


class OpenAIResponsesBackend(Backend):
    """Speaks the Responses API to ``base_url`` (``/v1`` added when it has no path)."""

    kind = "openai_responses"
    # The API enforces tool_choice and takes effort levels; it has no stop sequences,
    # seed or penalties, so serving/prepare/sampling.py drops those (and says so).
    capabilities = Capabilities(
        tool_choice=True,
        sampling=frozenset({"max_tokens", "temperature", "top_p"}),
        compaction=True,
    )

    def __init__(
        self,
        name: str,
        base_url: str,
        *,
        api_key: str | None = None,
        http: HTTPSettings | None = None,
        compaction: bool = True,
    ) -> None:
        super().__init__(name)
        if not compaction:
            self.capabilities = replace(type(self).capabilities, compaction=False)
        self.base_url = normalise_base_url(base_url)
        headers = {"authorization": f"Bearer {api_key}"} if api_key else None
        self._http = HTTPTransport(name, self.base_url, http or HTTPSettings(), headers)
        self._encode = partial(responses.encode_chat_request, origin=name)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        # Encoded off the event loop when the request is large (backends/http.py).
        body = await self._http.encode(replace(request, stream=True), self._encode)
        async with self._http.stream("responses", body) as chunks:
            async for event in responses.decode_chat_stream(aiter_sse(chunks), origin=self.name):
                yield event

    async def list_models(self) -> list[ModelInfo]:
        reply = await self._http.request_json("GET", "models")
        return [replace(m, backend=self.name) for m in openai.decode_models(reply)]

    async def health(self) -> BackendHealth:
        verdict, _ = await self._http.probe("models")
        return verdict

"""Anthropic's Messages API (or any server with an Anthropic front) as a backend.

Requests go out through the Anthropic dialect's encoder, which sends thinking blocks
back only when Anthropic itself signed them: a block that is unsigned, or signed by
another provider, would be rejected ("Invalid signature in thinking block"), so it is
dropped on the way out. Signatures that are sent pass through byte for byte.

The client's ``anthropic-beta`` values go out in the same header, less the retired
ones (features/anthropic_beta.py); Claude Code's billing-header system line is kept
(``Capabilities.anthropic_api``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import replace

from llmbridge.backends.base import Backend, BackendHealth, Capabilities
from llmbridge.backends.http import HTTPSettings, HTTPTransport
from llmbridge.core.events import StreamEvent
from llmbridge.core.model_info import ModelInfo
from llmbridge.core.request import ChatRequest
from llmbridge.dialects import anthropic as dialect
from llmbridge.dialects.framing import aiter_sse
from llmbridge.features.anthropic_beta import BETA_DETAILS

__all__ = ["ANTHROPIC_URL", "ANTHROPIC_VERSION", "AnthropicBackend"]

ANTHROPIC_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
"""The API version header every request carries (Anthropic's only stable version)."""


class AnthropicBackend(Backend):
    """Speaks the Messages API to ``base_url`` (with or without a trailing ``/v1``)."""

    kind = "anthropic"
    capabilities = Capabilities(
        tool_choice=True,
        sampling=frozenset({"max_tokens", "temperature", "top_p", "top_k", "stop"}),
        anthropic_api=True,
    )

    def __init__(
        self,
        name: str,
        base_url: str = ANTHROPIC_URL,
        *,
        api_key: str | None = None,
        anthropic_version: str = ANTHROPIC_VERSION,
        http: HTTPSettings | None = None,
    ) -> None:
        super().__init__(name)
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        headers = {"anthropic-version": anthropic_version}
        if api_key:
            headers["x-api-key"] = api_key
        self._http = HTTPTransport(name, self.base_url, http or HTTPSettings(), headers)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        # Encoded off the event loop when the request is large (backends/http.py).
        body = await self._http.encode(replace(request, stream=True), dialect.encode_chat_request)
        betas = (request.provider_details or {}).get(BETA_DETAILS)
        headers = {"anthropic-beta": ",".join(betas)} if betas else None
        async with self._http.stream("/v1/messages", body, headers=headers) as chunks:
            async for event in dialect.decode_chat_stream(aiter_sse(chunks)):
                yield event

    async def list_models(self) -> list[ModelInfo]:
        reply = await self._http.request_json("GET", "/v1/models")
        data = reply.get("data") if isinstance(reply, dict) else None
        models = []
        for entry in data if isinstance(data, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                model_id = entry["id"]
                models.append(
                    ModelInfo(
                        name=model_id,
                        backend=self.name,
                        backend_model=model_id,
                        capabilities=frozenset({"completion", "tools", "thinking", "vision"}),
                    )
                )
        return models

    async def health(self) -> BackendHealth:
        verdict, _ = await self._http.probe("/v1/models")
        return verdict

"""Anthropic's Messages API (or any server with an Anthropic front) as a backend.

Requests go out through the Anthropic dialect's encoder, which sends thinking blocks
back only when Anthropic itself signed them: a block that is unsigned, or signed by
another provider, would be rejected ("Invalid signature in thinking block"), so it is
dropped on the way out. Signatures that are sent pass through byte for byte.

The client's ``anthropic-beta`` values go out in the same header, less the retired
ones (features/anthropic_beta.py); Claude Code's billing-header system line is kept
(``Capabilities.anthropic_api``).

An Anthropic client's own body goes out as it came on the pass-through path
(dialects/anthropic/relay.py), with the same headers, and the reply's bytes come back.
A translated chat the client wants whole is asked for whole (one ``message`` decoded,
where a stream was decoded event by event and accumulated again) when it asks for
at most ``LONGEST_WHOLE_TOKENS``; the rest stream.
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
from llmbridge.core.request import ChatRequest
from llmbridge.dialects import anthropic as dialect
from llmbridge.dialects.anthropic.relay import MessageStreamRelay, relay_reply, relay_request
from llmbridge.dialects.anthropic.request import DEFAULT_MAX_TOKENS
from llmbridge.dialects.framing import aiter_sse
from llmbridge.features.anthropic_beta import BETA_DETAILS

__all__ = ["ANTHROPIC_URL", "ANTHROPIC_VERSION", "FIRST_PARTY_HOSTS", "AnthropicBackend"]

ANTHROPIC_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
"""The API version header every request carries (Anthropic's only stable version)."""
FIRST_PARTY_HOSTS = frozenset({"api.anthropic.com"})
"""Hosts whose tool input needs no healing: a request with tools there may take the
pass-through path (``Capabilities.trusted_tool_arguments``)."""


class AnthropicBackend(Backend):
    """Speaks the Messages API to ``base_url`` (with or without a trailing ``/v1``)."""

    kind = "anthropic"
    capabilities = Capabilities(
        tool_choice=True,
        sampling=frozenset({"max_tokens", "temperature", "top_p", "top_k", "stop"}),
        anthropic_api=True,
        relays="anthropic",
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
        if urlsplit(self.base_url).hostname in FIRST_PARTY_HOSTS:
            self.capabilities = replace(self.capabilities, trusted_tool_arguments=True)

    async def aclose(self) -> None:
        await self._http.aclose()

    def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        # The pass-through path's stream is handed out as it is, not re-yielded.
        if request.relay is not None:
            return self._http.relay(request, partial(self._relay_call, request))
        return self._translated(request)

    async def _translated(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        if not request.stream and _short(request):  # wanted whole: asked for whole
            events = await self._http.whole(
                "/v1/messages",
                request,
                dialect.encode_chat_request,
                dialect.decode_chat_response,
                headers=_headers(request),
            )
            for event in events:
                yield event
            return
        # Encoded off the event loop when the request is large (backends/http.py).
        body = await self._http.encode(replace(request, stream=True), dialect.encode_chat_request)
        async with self._http.stream("/v1/messages", body, headers=_headers(request)) as chunks:
            async for event in dialect.decode_chat_stream(aiter_sse(chunks)):
                yield event

    @staticmethod
    def _relay_call(request: ChatRequest) -> RelayCall:
        """The pass-through path: the client's body, the reply's bytes relayed."""
        body, client_model = relay_request(request)
        headers = _headers(request)
        if not request.stream:
            reply = partial(relay_reply, client_model=client_model)
            return RelayCall("/v1/messages", body, reply=reply, headers=headers)
        return RelayCall("/v1/messages", body, MessageStreamRelay(client_model), headers=headers)

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


LONGEST_WHOLE_TOKENS = 21_333
"""The most output tokens a reply the client wants whole is asked for whole: above
them Anthropic's own SDKs refuse a request that does not stream (at their estimate of
128,000 tokens an hour it may take over ten minutes, and the API or a network may cut
a connection idle that long), so such a reply is streamed and accumulated instead."""


def _short(request: ChatRequest) -> bool:
    """Whether ``request`` asks for few enough tokens to be asked for whole (the
    encoder's default where it names none, its thinking budget on top)."""
    tokens = request.params.max_tokens or DEFAULT_MAX_TOKENS
    thinking = request.thinking
    if thinking is not None and thinking.enabled and thinking.budget_tokens:
        tokens += thinking.budget_tokens
    return tokens <= LONGEST_WHOLE_TOKENS


def _headers(request: ChatRequest) -> dict[str, str] | None:
    """This request's own headers: the client's ``anthropic-beta`` values that reach
    Anthropic (features/anthropic_beta.py), on both paths alike."""
    betas = (request.provider_details or {}).get(BETA_DETAILS)
    return {"anthropic-beta": ",".join(betas)} if betas else None

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

A Responses client's own body goes out as it came on the pass-through path
(``dialects/responses/relay.py``, docs/PASSTHROUGH.md), and the reply's bytes come back.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from dataclasses import replace
from functools import partial
from urllib.parse import urlsplit

from llmbridge.backends.base import Backend, BackendHealth, Capabilities
from llmbridge.backends.http import HTTPSettings, HTTPTransport, RelayCall
from llmbridge.backends.openai_compat import FIRST_PARTY_HOSTS, normalise_base_url
from llmbridge.core.errors import LLMBridgeError
from llmbridge.core.events import StreamEvent
from llmbridge.core.model_info import ModelInfo
from llmbridge.core.request import ChatRequest
from llmbridge.dialects import openai, responses
from llmbridge.dialects.framing import aiter_sse
from llmbridge.dialects.responses.relay import (
    DIALECT,
    ResponsesStreamRelay,
    relay_reply,
    relay_request,
)

__all__ = ["OpenAIResponsesBackend"]

log = logging.getLogger("llmbridge.backends")


class OpenAIResponsesBackend(Backend):
    """Speaks the Responses API to ``base_url`` (``/v1`` added when it has no path)."""

    kind = "openai_responses"
    # The API enforces tool_choice and takes effort levels; it has no stop sequences,
    # seed or penalties, so serving/prepare/sampling.py drops those (and says so).
    capabilities = Capabilities(
        tool_choice=True,
        sampling=frozenset({"max_tokens", "temperature", "top_p"}),
        compaction=True,
        relays=DIALECT,
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
        if urlsplit(self.base_url).hostname in FIRST_PARTY_HOSTS:
            self.capabilities = replace(self.capabilities, trusted_tool_arguments=True)
        headers = {"authorization": f"Bearer {api_key}"} if api_key else None
        self._http = HTTPTransport(name, self.base_url, http or HTTPSettings(), headers)
        self._encode = partial(responses.encode_chat_request, origin=name)

    async def aclose(self) -> None:
        await self._http.aclose()

    def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        # The pass-through path's stream is handed out as it is, not re-yielded.
        if request.relay is not None:
            return self._http.relay(request, partial(self._relay_call, request))
        return self._translated(request)

    async def _translated(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        # Encoded off the event loop when the request is large (backends/http.py).
        body = await self._http.encode(replace(request, stream=True), self._encode)
        async with self._http.stream("responses", body) as chunks:
            async for event in responses.decode_chat_stream(aiter_sse(chunks), origin=self.name):
                yield event

    def _relay_call(self, request: ChatRequest) -> RelayCall:
        """The pass-through path: the client's body, the reply's bytes relayed."""
        body, client_model = relay_request(request)
        if not request.stream:
            reply = partial(relay_reply, client_model=client_model)
            return RelayCall("responses", body, reply=reply)
        relayed = ResponsesStreamRelay(client_model)
        recover = partial(self._failed, relayed)
        return RelayCall("responses", body, relayed, recover=recover)

    def _failed(self, relayed: ResponsesStreamRelay, exc: LLMBridgeError) -> list[StreamEvent]:
        """A relayed stream's failure: raised before the first byte (retried, a
        fallback, or the HTTP error); after it, the stream ends as the translated path
        ends it, numbered after the backend's last event (dialects/responses/relay.py)."""
        if not relayed.started:
            raise exc
        log.warning("stream from backend %s failed: %s", self.name, exc.message)
        return [relayed.failed(exc)]

    async def list_models(self) -> list[ModelInfo]:
        reply = await self._http.request_json("GET", "models")
        return [replace(m, backend=self.name) for m in openai.decode_models(reply)]

    async def health(self) -> BackendHealth:
        verdict, _ = await self._http.probe("models")
        return verdict

"""Google's Interactions API as a backend (``type: gemini_interactions``), beside the
``generateContent`` one (``type: gemini``, backends/gemini.py).

Chats go to ``POST /v1beta/interactions``, always streamed (a non-streamed reply is the
gateway's accumulation of the same events) and never stored (``"store": false``): the
gateway sends each request's whole conversation, as it does to every backend, so no
state on Google's side can disagree with the client's history. The body and the
stream are the Interactions dialect's client side (``dialects/interactions/request.py``,
``decode.py``).

Thought signatures: Google sends a ``thought`` step's ``signature`` and wants it back
with the conversation; the decoder tags it with this backend's name
(``dialects/interactions/steps.INTERACTIONS``) and the encoder sends back only this
backend's own, as the ``gemini`` backend does with ``thoughtSignature``. Thinking from
other servers is not sent.

Everything else is the ``gemini`` backend's, on the same key and host (the
``x-goog-api-key`` header, never ``?key=``): the model list, one model's details,
embeddings, exact token counts (``:countTokens``), the health probe, Google's errors
(a 429's ``RetryInfo`` its ``retry_after``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import replace
from functools import partial

from llmbridge.backends.gemini import API_VERSION, GEMINI_URL, GeminiBackend, retry_delay
from llmbridge.backends.http import HTTPSettings
from llmbridge.core.errors import BackendHTTPError
from llmbridge.core.events import StreamEvent
from llmbridge.core.request import ChatRequest
from llmbridge.dialects import interactions
from llmbridge.dialects.framing import aiter_sse

__all__ = ["INTERACTIONS_PATH", "GeminiInteractionsBackend"]

INTERACTIONS_PATH = f"/{API_VERSION}/interactions"


class GeminiInteractionsBackend(GeminiBackend):
    """Speaks the Interactions API to ``base_url`` (with or without ``/v1beta``)."""

    kind = "gemini_interactions"
    # generation_config has no top_k and no penalties: serving/prepare/sampling.py
    # reports them dropped. tool_choice and thinking_level carry the rest.
    capabilities = replace(
        GeminiBackend.capabilities,
        sampling=frozenset({"max_tokens", "temperature", "top_p", "stop", "seed"}),
    )

    def __init__(
        self,
        name: str,
        base_url: str = GEMINI_URL,
        *,
        api_key: str | None = None,
        http: HTTPSettings | None = None,
    ) -> None:
        super().__init__(name, base_url, api_key=api_key, http=http)
        self._encode_interaction = partial(interactions.encode_chat_request, origin=name)

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        # Encoded off the event loop when the request is large (backends/http.py).
        body = await self._http.encode(replace(request, stream=True), self._encode_interaction)
        try:
            async with self._http.stream(INTERACTIONS_PATH, body) as chunks:
                events = interactions.decode_chat_stream(aiter_sse(chunks), origin=self.name)
                async for event in events:
                    yield event
        except BackendHTTPError as exc:
            if exc.retry_after is None:
                exc.retry_after = retry_delay(exc.body)
            raise

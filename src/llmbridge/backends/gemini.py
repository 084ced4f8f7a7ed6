"""Google's Gemini API (the ``generativelanguage`` API of Google AI Studio) as a backend.

Chats go to ``/v1beta/models/{model}:streamGenerateContent?alt=sse``, always streamed
(a non-streamed reply is the gateway's accumulation of the same events), through the
Gemini dialect's client side (``dialects/gemini/request.py``, ``stream.py``). The key
travels in the ``x-goog-api-key`` header, never in the URL's ``?key=``: URLs end up in
logs and error messages, headers do not.

Thought signatures: Gemini attaches an opaque ``thoughtSignature`` to parts of a
reply and wants it back on the same part in the next request (a thinking model's tool
loop fails without it: "Function call is missing a thought_signature"). The decoder
carries it in a thinking part's signature tagged with this backend's name
(``dialects/gemini/thoughts.py``), and the encoder sends back only this backend's own,
as the ``openai_responses`` backend does with encrypted reasoning. Gemini 3 models
refuse a tool call in the history without its signature (HTTP 400 "Function call is
missing a thought_signature"), and most clients (Ollama's, OpenAI's chat completions)
cannot carry one: for those models a model turn whose calls lost their signature gets
Google's documented placeholder instead (``SKIP_SIGNATURE``).

Also here: the paged model list (``GET /v1beta/models``), one model's details for the
serving layer's capability checks (Gemini reports ``thinking`` per model),
embeddings through ``:batchEmbedContents``, and exact token counts through
``:countTokens``. Google's error body (``{"error": {"code", "message", "status"}}``)
becomes a ``BackendHTTPError`` with Google's message (``backends/http.py``); a 429's
``RetryInfo.retryDelay``, Google's way of saying ``Retry-After``, becomes its
``retry_after``.

A Gemini client's own body goes on the pass-through path (``dialects/gemini/relay.py``,
docs/PASSTHROUGH.md): ``:generateContent`` for a reply sent whole, ``:streamGenerateContent
?alt=sse`` for a stream, and Google's bytes go back as they came.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncGenerator
from dataclasses import replace
from functools import partial
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from llmbridge.backends.base import Backend, BackendHealth, Capabilities
from llmbridge.backends.http import HTTPSettings, HTTPTransport, RelayCall
from llmbridge.core.errors import BackendHTTPError, BackendProtocolError, LLMBridgeError
from llmbridge.core.events import StreamEvent
from llmbridge.core.model_info import ModelInfo
from llmbridge.core.request import ChatRequest, EmbedRequest
from llmbridge.core.response import EmbedResponse
from llmbridge.dialects.framing import aiter_sse
from llmbridge.dialects.gemini import model_list as gemini_model_list
from llmbridge.dialects.gemini import relay as gemini_relay
from llmbridge.dialects.gemini import request as gemini_request
from llmbridge.dialects.gemini import response as gemini_response
from llmbridge.dialects.gemini import stream as gemini_stream

__all__ = [
    "GEMINI_URL",
    "SKIP_SIGNATURE",
    "GeminiBackend",
    "encode_for_google",
    "model_path",
    "resource_name",
    "retry_delay",
    "validates_signatures",
]

log = logging.getLogger("llmbridge.backends.gemini")

GEMINI_URL = "https://generativelanguage.googleapis.com"
FIRST_PARTY_HOSTS = frozenset({"generativelanguage.googleapis.com"})
"""Hosts whose function calls need no healing (Google's own API: ``args`` come as an
object): a request with tools there may take the pass-through path
(``Capabilities.trusted_tool_arguments``)."""
API_VERSION = "v1beta"
"""Thinking, ``parametersJsonSchema`` and thought signatures exist only in v1beta."""

PAGE_SIZE = 1000
"""Models per page of ``GET /v1beta/models`` (the API's maximum)."""
MAX_PAGES = 20
"""Pages read at most: a server that keeps answering ``nextPageToken`` cannot hold a
model listing forever."""

_COUNTED_FIELDS = ("contents", "systemInstruction", "tools", "toolConfig")
"""What ``:countTokens`` counts of a request: the prompt, not how to sample the reply."""

SKIP_SIGNATURE = "skip_thought_signature_validator"
"""The placeholder signature Google documents for a function call whose real signature
is lost (https://ai.google.dev/gemini-api/docs/thought-signatures): the
Vercel AI SDK (vercel/ai#15560) and Strands (strands-agents/sdk-python#1298) send it
the same way."""
_UNVALIDATED = ("gemini-1", "gemini-2")
"""Model generations that do not validate thought signatures (they get no placeholder)."""


def validates_signatures(model: str) -> bool:
    """Whether ``model`` refuses a function call sent back without its signature: the
    Gemini models from 3 on. A name that is not a Gemini model's (another llmbridge's
    ``qwen3:8b`` behind a Gemini front) is left alone."""
    name = model.removeprefix("models/")
    return name.startswith("gemini-") and not name.startswith(_UNVALIDATED)


def encode_for_google(request: ChatRequest, *, origin: str) -> dict[str, Any]:
    """The dialect's ``generateContent`` body for ``request``, and, for a model that
    validates signatures, ``SKIP_SIGNATURE`` on the first ``functionCall`` of each model
    turn that carries no signature at all (Google validates the first call of each
    step; a turn with a real signature keeps it)."""
    body = gemini_request.encode_chat_request(request, origin=origin)
    if not validates_signatures(request.model):
        return body
    for turn in body.get("contents", ()):
        parts = turn.get("parts") or []
        if turn.get("role") != "model" or any("thoughtSignature" in p for p in parts):
            continue
        first_call = next((p for p in parts if "functionCall" in p), None)
        if first_call is not None:
            first_call["thoughtSignature"] = SKIP_SIGNATURE
    return body


def resource_name(model: str) -> str:
    """Google's name for ``model``: ``models/{model}``. A leading ``models/`` is
    accepted (Google's own spelling); ``tunedModels/...`` keeps its collection."""
    if model.startswith("tunedModels/"):
        return model
    return "models/" + model.removeprefix("models/")


def model_path(model: str, method: str | None = None) -> str:
    """``/v1beta/models/{model}:{method}`` (no method: the model itself). The name is
    quoted, so a ``:`` in it (an Ollama tag behind another llmbridge) cannot be read
    as the method."""
    path = f"/{API_VERSION}/{quote(resource_name(model), safe='/')}"
    return path if method is None else f"{path}:{method}"


class GeminiBackend(Backend):
    """Speaks the Gemini API to ``base_url`` (with or without a trailing ``/v1beta``)."""

    kind = "gemini"
    # toolConfig enforces the tool choice; thinkingConfig takes a budget, which the
    # encoder derives from an effort level; generationConfig has all of these.
    capabilities = Capabilities(
        tool_choice=True,
        thinking_effort=True,
        sampling=frozenset(
            {
                "max_tokens",
                "temperature",
                "top_p",
                "top_k",
                "stop",
                "seed",
                "frequency_penalty",
                "presence_penalty",
            }
        ),
        tokenizer=True,
        relays="gemini",
    )

    def __init__(
        self,
        name: str,
        base_url: str = GEMINI_URL,
        *,
        api_key: str | None = None,
        http: HTTPSettings | None = None,
    ) -> None:
        super().__init__(name)
        self.base_url = base_url.rstrip("/").removesuffix(f"/{API_VERSION}").removesuffix("/v1")
        headers = {"x-goog-api-key": api_key} if api_key else None
        self._http = HTTPTransport(name, self.base_url, http or HTTPSettings(), headers)
        self._encode = partial(encode_for_google, origin=name)
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
        if not request.stream:  # the client wants it whole: asked for whole
            decode = partial(gemini_response.decode_chat_response, origin=self.name)
            path = model_path(request.model, "generateContent")
            try:
                whole = await self._http.whole(path, request, self._encode, decode)
            except BackendHTTPError as exc:
                _add_retry_delay(exc)
                raise
            for event in whole:
                yield event
            return
        # Encoded off the event loop when the request is large (backends/http.py).
        body = await self._http.encode(request, self._encode)
        path = model_path(request.model, "streamGenerateContent") + "?alt=sse"
        try:
            async with self._http.stream(path, body) as chunks:
                events = gemini_stream.decode_chat_stream(aiter_sse(chunks), origin=self.name)
                async for event in events:
                    yield event
        except BackendHTTPError as exc:
            _add_retry_delay(exc)
            raise

    @staticmethod
    def _relay_call(request: ChatRequest) -> RelayCall:
        """The pass-through path: the client's body, Google's bytes relayed."""
        placeholder = SKIP_SIGNATURE if validates_signatures(request.model) else None
        body, client_model = gemini_relay.relay_request(request, placeholder=placeholder)
        if not request.stream:
            path = model_path(request.model, "generateContent")
            reply = partial(gemini_relay.relay_reply, client_model=client_model)
            return RelayCall(path, body, reply=reply, recover=_retry_delayed)
        path = model_path(request.model, "streamGenerateContent") + "?alt=sse"
        relayed = gemini_relay.StreamRelay(client_model)
        return RelayCall(path, body, relayed, recover=_retry_delayed)

    async def embed(self, request: EmbedRequest) -> EmbedResponse:
        body = gemini_request.encode_embed_request(request)
        path = model_path(request.model, "batchEmbedContents")
        try:
            reply = await self._http.request_json("POST", path, body)
        except BackendHTTPError as exc:
            _add_retry_delay(exc)
            raise
        return replace(gemini_response.decode_batch_embed_response(reply), model=request.model)

    async def count_tokens(self, request: ChatRequest) -> int | None:
        """Google's own count of the prompt (system instruction and tools included),
        from ``:countTokens`` with the request as a ``generateContentRequest``."""
        body = self._encode(request)
        counted: dict[str, Any] = {k: body[k] for k in _COUNTED_FIELDS if k in body}
        counted["model"] = resource_name(request.model)
        path = model_path(request.model, "countTokens")
        reply = await self._http.request_json("POST", path, {"generateContentRequest": counted})
        total = reply.get("totalTokens") if isinstance(reply, dict) else None
        if isinstance(total, bool) or not isinstance(total, int):
            raise BackendProtocolError(
                f"backend '{self.name}' sent a countTokens reply without totalTokens",
                backend=self.name,
            )
        return total

    async def list_models(self) -> list[ModelInfo]:
        models: list[ModelInfo] = []
        query = {"pageSize": str(PAGE_SIZE)}
        for _ in range(MAX_PAGES):
            reply = await self._http.request_json(
                "GET", f"/{API_VERSION}/models?{urlencode(query)}"
            )
            models.extend(gemini_model_list.decode_models(reply))
            token = reply.get("nextPageToken") if isinstance(reply, dict) else None
            if not isinstance(token, str) or not token:
                break
            query["pageToken"] = token
        else:
            log.warning("backend %s: model list cut at %d pages", self.name, MAX_PAGES)
        return [self._served(m, m.backend_model or m.name) for m in models]

    async def show_model(self, model: str) -> ModelInfo:
        """``GET /v1beta/models/{model}``: one request, rather than the whole paged
        list, for the serving layer's capability check (whether the model thinks)."""
        reply = await self._http.request_json("GET", model_path(model))
        found = gemini_model_list.decode_models({"models": [reply]})
        if not found:
            raise BackendProtocolError(
                f"backend '{self.name}' described model '{model}' without a name",
                backend=self.name,
            )
        return self._served(found[0], model)

    def _served(self, info: ModelInfo, model: str) -> ModelInfo:
        """``info`` as this backend serves it: under ``model`` (the router matches
        configured routes on ``backend_model``), and, for a Gemini chat model, able to
        call tools and read images. Google's model resource does not say so, but every
        ``gemini-*`` model that generates content does both, and Ollama clients read
        them from ``/api/show`` before they offer tools (Anthropic's backend says the
        same of Claude)."""
        capabilities = info.capabilities
        if "completion" in capabilities and model.removeprefix("models/").startswith("gemini-"):
            capabilities = capabilities | {"tools", "vision"}
        return replace(
            info, name=model, backend=self.name, backend_model=model, capabilities=capabilities
        )

    async def health(self) -> BackendHealth:
        verdict, _ = await self._http.probe(f"/{API_VERSION}/models?pageSize=1")
        return verdict


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


def _retry_delayed(exc: LLMBridgeError) -> list[StreamEvent]:
    """A relayed call's error, raised: an HTTP error with Google's retry delay."""
    if isinstance(exc, BackendHTTPError):
        _add_retry_delay(exc)
    raise exc


def _add_retry_delay(exc: BackendHTTPError) -> None:
    """Give ``exc`` a ``retry_after`` from Google's ``RetryInfo`` detail when no
    ``Retry-After`` header said it: a 429 from the Gemini API carries
    ``{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"}`` in
    ``error.details`` (a protobuf Duration in JSON: seconds with an ``s``)."""
    if exc.retry_after is None:
        exc.retry_after = retry_delay(exc.body)


def retry_delay(body: object) -> float | None:
    """Seconds in a Google error body's ``RetryInfo.retryDelay``, if it has one."""
    error = body.get("error") if isinstance(body, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    for detail in details if isinstance(details, list) else ():
        if not isinstance(detail, dict) or not str(detail.get("@type", "")).endswith(
            "google.rpc.RetryInfo"
        ):
            continue
        delay = detail.get("retryDelay")
        match = _DURATION.match(delay) if isinstance(delay, str) else None
        if match:
            return float(match.group(1))
    return None

"""Google's Gemini API (``generativelanguage``): ``POST /{v1beta|v1}/models/{model}:{method}``
for ``generateContent``, ``streamGenerateContent``, ``countTokens``, ``embedContent`` and
``batchEmbedContents``, and ``GET /{v1beta|v1}/models[/{model}]``.

The model is the path between ``models/`` and the LAST colon: model names may hold colons
(Ollama's ``qwen3:8b``) and slashes. Some clients send the colon as ``%3A``; uvicorn
decodes the path before routing, so both arrive alike. A leading ``models/`` or
``tunedModels/`` left in the name is dropped. Any other method after the colon is a 404
in Gemini's shape naming it (``unknown_methods``, registered after every other route).

``streamGenerateContent?alt=sse`` streams server-sent events; without ``alt=sse`` the
reply is one JSON array written as it is generated, which the Google SDKs also read
(dialects/gemini/stream.py). ``alt`` given twice, or other than ``sse`` and ``json``, is
a 400 naming it, on every method (``dialects/gemini/request.decode_alt``). Errors
before the reply starts are HTTP errors in Google's shape (web/render.py), after it the
last event or array element.

A Gemini client of a ``gemini`` backend takes the pass-through path where serving
changed nothing (docs/PASSTHROUGH.md, dialects/gemini/relay.py): ``generateContent``
and ``streamGenerateContent?alt=sse`` keep the client's body, naming the URL's model.

``GET /v1/models`` is also OpenAI's (and Anthropic's by header): it is answered here only
for a Gemini client, one that sends ``x-goog-api-key``, ``x-goog-api-client`` or a ``key``
query parameter (``_GeminiClientRoute``); every other request goes on to OpenAI's route
unchanged. ``/v1beta`` is Gemini's alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import Scope

from llmbridge.core.errors import InvalidRequestError, MethodNotAllowedError, NotFoundError
from llmbridge.core.request import ChatRequest, EmbedRequest
from llmbridge.core.request_limits import RequestLimits
from llmbridge.core.response import EmbedResponse
from llmbridge.dialects.framing import dumps
from llmbridge.dialects.gemini import model_list as gemini_model_list
from llmbridge.dialects.gemini import relay as gemini_relay
from llmbridge.dialects.gemini import request as gemini_request
from llmbridge.dialects.gemini import response as gemini_response
from llmbridge.dialects.gemini import stream as gemini_stream
from llmbridge.gateway.exchange.admission import visible_models
from llmbridge.gateway.exchange.exchange import Exchange
from llmbridge.gateway.exchange.handler import exchanged
from llmbridge.gateway.pipeline import (
    ChatCodec,
    counted_tokens,
    read_codec_chat,
    serve_chat,
    serve_embed,
)
from llmbridge.web.bodies import read_json
from llmbridge.web.render import GEMINI_METHODS, Dialect, is_gemini_client

__all__ = ["routes", "unknown_methods"]

_PREFIXES = ("/v1beta", "/v1")
_MODEL_PREFIXES = ("models/", "tunedModels/")


def _endpoint(method: str) -> str:
    """The metrics' and the ledger's endpoint: one label for both prefixes."""
    return f"/v1beta/models/{{model}}:{method}"


def _codec(method: str, encode_stream: Any, media_type: str, *, relays: bool) -> ChatCodec:
    return ChatCodec(
        dialect=Dialect.GEMINI,
        endpoint=_endpoint(method),
        encode_stream=encode_stream,
        encode_response=gemini_response.encode_chat_response,
        stream_media_type=media_type,
        # A gemini backend relays it (core/relay.py, dialects/gemini/relay.py).
        relay_dialect="gemini" if relays else None,
        relay_error=gemini_stream.error_frame if relays else None,
    )


GENERATE = _codec(
    "generateContent", gemini_stream.encode_chat_stream, "text/event-stream", relays=True
)
STREAM_SSE = _codec(
    "streamGenerateContent", gemini_stream.encode_chat_stream, "text/event-stream", relays=True
)
# Without alt=sse: one JSON array, sent element by element as the reply is generated
# (always translated: its elements are not frames a relay can pass on whole).
STREAM_ARRAY = _codec(
    "streamGenerateContent",
    gemini_stream.encode_chat_stream_array,
    "application/json",
    relays=False,
)


def _headers(request_id: str) -> dict[str, str]:
    return {"x-request-id": request_id}


def _json(body: object, request_id: str) -> Response:
    return Response(dumps(body), media_type="application/json", headers=_headers(request_id))


def _model_name(raw: str) -> str:
    """The model a path names: ``models/`` or ``tunedModels/`` dropped, never empty."""
    for prefix in _MODEL_PREFIXES:
        if raw.startswith(prefix):
            raw = raw[len(prefix) :]
            break
    if not raw:
        raise InvalidRequestError("the path names no model: expected models/{model}", param="model")
    return raw


def _alt(request: Request) -> str | None:
    """``alt``, Google's system parameter for the reply's encoding, checked on every
    method: given twice, or other than ``sse`` and ``json``, a 400 naming it."""
    return gemini_request.decode_alt(request.query_params.getlist("alt"))


def _codec_for(stream: bool, alt: str | None) -> ChatCodec:
    """For a stream, ``alt=sse`` is server-sent events, ``json`` (the default) one
    JSON array."""
    if not stream:
        return GENERATE
    return STREAM_SSE if alt == "sse" else STREAM_ARRAY


@exchanged(_endpoint("generateContent"), Dialect.GEMINI)
async def generate_content(request: Request, exchange: Exchange) -> Response:
    """``:generateContent``."""
    return await _generate(request, exchange, stream=False)


@exchanged(_endpoint("streamGenerateContent"), Dialect.GEMINI)
async def stream_generate_content(request: Request, exchange: Exchange) -> Response:
    """``:streamGenerateContent`` (``alt=sse``: SSE; else one JSON array)."""
    return await _generate(request, exchange, stream=True)


async def _generate(request: Request, exchange: Exchange, *, stream: bool) -> Response:
    codec = _codec_for(stream, _alt(request))
    model = _model_name(request.path_params["model"])
    exchange.asked(model, streamed=stream)
    decode = partial(gemini_request.decode_chat_request, model=model, stream=stream)
    chat = _relayable(await read_codec_chat(request, exchange, codec, decode), model)
    return await serve_chat(request, chat, codec, exchange=exchange)


def _relayable(chat: ChatRequest, model: str) -> ChatRequest:
    """``chat`` with its kept body naming the model the URL named (the reply's
    ``modelVersion`` where the route maps it), or none where only the translated path
    sends the body right (``translated_only``)."""
    relay = chat.relay
    if relay is None:
        return chat
    if gemini_relay.translated_only(relay):
        return replace(chat, relay=None)
    return replace(chat, relay=replace(relay, model=model))


@exchanged(_endpoint("countTokens"), Dialect.GEMINI)
async def count_tokens(request: Request, exchange: Exchange) -> Response:
    """``{"totalTokens": N}``: seed 001's word / four-character estimate over every part
    and tool declaration; with ``tokenizer: backend``, the backend's exact count where
    it can tokenize (the embedded model can), the estimate where it cannot."""
    _alt(request)
    model = _model_name(request.path_params["model"])
    exchange.asked(model)
    decode: Callable[[Any, RequestLimits], ChatRequest] = partial(
        gemini_request.decode_count_tokens_request, model=model
    )
    total = await counted_tokens(request, exchange, decode)
    return _json({"totalTokens": total}, exchange.request_id)


async def _embed(
    request: Request,
    exchange: Exchange,
    decode: Callable[..., EmbedRequest],
    encode: Callable[[EmbedResponse], dict[str, Any]],
) -> Response:
    """One embedding request through the backend the model resolves to, as
    routes/openai.py's ``/v1/embeddings`` does."""
    state = exchange.state
    _alt(request)
    model = _model_name(request.path_params["model"])
    exchange.asked(model)
    embed_request = decode(await read_json(request, state.limits), model=model)
    result = await serve_embed(request, embed_request, exchange=exchange)
    return _json(encode(result), exchange.request_id)


@exchanged(_endpoint("embedContent"), Dialect.GEMINI)
async def embed_content(request: Request, exchange: Exchange) -> Response:
    return await _embed(
        request,
        exchange,
        gemini_request.decode_embed_request,
        gemini_response.encode_embed_response,
    )


@exchanged(_endpoint("batchEmbedContents"), Dialect.GEMINI)
async def batch_embed_contents(request: Request, exchange: Exchange) -> Response:
    return await _embed(
        request,
        exchange,
        gemini_request.decode_batch_embed_request,
        gemini_response.encode_batch_embed_response,
    )


@exchanged(_endpoint("{method}"), Dialect.GEMINI)
async def unknown_method(request: Request, exchange: Exchange) -> Response:
    """A method after the colon that llmbridge does not serve: a 404 naming it."""
    served = ", ".join(sorted(GEMINI_METHODS))
    raise NotFoundError(
        f"method '{request.path_params['method']}' is not found for POST models/{{model}}:"
        f"{{method}}; llmbridge serves {served}"
    )


@exchanged("/v1beta/models", Dialect.GEMINI)
async def list_models(request: Request, exchange: Exchange) -> Response:
    """``{"models": [...], "nextPageToken"?}``, paged by ``pageSize`` / ``pageToken``."""
    state = exchange.state
    _alt(request)
    models = visible_models(request, await state.models.router.list_models())
    return _json(
        gemini_model_list.encode_model_list(models, request.query_params), exchange.request_id
    )


@exchanged("/v1beta/models/{model}", Dialect.GEMINI)
async def get_model(request: Request, exchange: Exchange) -> Response:
    """One model: listed, or servable (a glob route or the default backend)."""
    state = exchange.state
    raw = request.path_params["model_id"]
    _alt(request)
    if raw.rpartition(":")[2] in GEMINI_METHODS:  # GET models/x:generateContent
        raise MethodNotAllowedError(f"method GET is not allowed on {request.url.path}")
    name = _model_name(raw)
    exchange.admit_model(name)  # a model the key may not use is not found
    for info in await state.models.router.list_models():
        if info.name == name:
            return _json(gemini_model_list.encode_model(info), exchange.request_id)
    resolved = state.models.router.resolve(name)
    info = await state.models.router.show(name)
    return _json(
        gemini_model_list.encode_model(replace(info, backend=resolved.backend.name)),
        exchange.request_id,
    )


class _GeminiClientRoute(Route):
    """A route that matches only requests from a Gemini client (``is_gemini_client``):
    any other goes on to the next route with the same path (OpenAI's ``/v1/models``)."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] == "http" and not is_gemini_client(scope):
            return Match.NONE, {}
        return super().matches(scope)


_HANDLERS = {
    "generateContent": generate_content,
    "streamGenerateContent": stream_generate_content,
    "countTokens": count_tokens,
    "embedContent": embed_content,
    "batchEmbedContents": batch_embed_contents,
}
assert set(_HANDLERS) == GEMINI_METHODS

routes = [
    *(
        # {model:path}: slashes and colons; the regex is greedy, so the method is
        # what follows the last colon.
        Route(f"{prefix}/models/{{model:path}}:{method}", handler, methods=["POST"])
        for prefix in _PREFIXES
        for method, handler in _HANDLERS.items()
    ),
    Route("/v1beta/models", list_models, methods=["GET"]),
    Route("/v1beta/models/{model_id:path}", get_model, methods=["GET"]),
    _GeminiClientRoute("/v1/models", list_models, methods=["GET"]),
    # model_id, as OpenAI's route with the same path names it (one OpenAPI operation)
    _GeminiClientRoute("/v1/models/{model_id:path}", get_model, methods=["GET"]),
]

unknown_methods = [
    Route(f"{prefix}/models/{{model:path}}:{{method}}", unknown_method, methods=["POST"])
    for prefix in _PREFIXES
]
"""Any other method after the colon: registered after every other route."""

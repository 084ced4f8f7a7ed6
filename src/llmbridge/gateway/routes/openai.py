"""OpenAI's API: /v1/chat/completions, /v1/models, /v1/models/{id}, /v1/embeddings.

``/v1/models`` is shared with Anthropic's API: a request with an ``anthropic-version``
header (the Anthropic SDKs, Claude Code) gets Anthropic's model list and errors
(dialects/anthropic/model_list.py), any other OpenAI's. The Anthropic list also names each
model as Claude Code's gateway discovery can keep it (``anthropic/<name>``).
"""

from __future__ import annotations

from dataclasses import replace

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmbridge.dialects import openai
from llmbridge.dialects.anthropic import model_list as anthropic_model_list
from llmbridge.dialects.framing import dumps
from llmbridge.dialects.openai.stream import error_chunk
from llmbridge.gateway.exchange.admission import visible_models
from llmbridge.gateway.exchange.exchange import Exchange
from llmbridge.gateway.exchange.handler import exchanged
from llmbridge.gateway.pipeline import ChatCodec, chat_endpoint, serve_embed
from llmbridge.gateway.routes.anthropic import discovered_model
from llmbridge.web.bodies import read_json
from llmbridge.web.render import Dialect

__all__ = ["routes"]

CHAT = ChatCodec(
    dialect=Dialect.OPENAI,
    endpoint="/v1/chat/completions",
    encode_stream=openai.encode_chat_stream,
    encode_response=openai.encode_chat_response,
    stream_media_type="text/event-stream",
    relay_dialect="openai",  # an OpenAI-compatible backend relays it (core/relay.py)
    relay_error=error_chunk,
)


def _json(body: object) -> Response:
    return Response(dumps(body), media_type="application/json")


def _asks_anthropic(request: Request) -> bool:
    # Every Anthropic client sends this header (the API requires it); no OpenAI one does.
    return "anthropic-version" in request.headers


def _caller(request: Request) -> Dialect:
    return Dialect.ANTHROPIC if _asks_anthropic(request) else Dialect.OPENAI


@exchanged("/v1/models", _caller)
async def list_models(request: Request, exchange: Exchange) -> Response:
    state = exchange.state
    # A database key sees the models its globs allow (gateway/exchange/admission.py).
    models = visible_models(request, await state.models.router.list_models())
    if exchange.dialect is Dialect.ANTHROPIC:
        listed = anthropic_model_list.discoverable(models)
        return _json(anthropic_model_list.encode_model_page(listed, request.query_params))
    return _json(openai.encode_models(models))


@exchanged("/v1/models/{model_id}", _caller)
async def get_model(request: Request, exchange: Exchange) -> Response:
    state = exchange.state
    model_id = request.path_params["model_id"]
    anthropic = exchange.dialect is Dialect.ANTHROPIC
    encode = anthropic_model_list.encode_model if anthropic else openai.encode_model
    # A discovery id (``anthropic/smollm2``) is its model, under the id asked for.
    name = discovered_model(state.models.router, model_id) if anthropic else model_id
    exchange.admit_model(name)  # a model the key may not use is not found
    for info in await state.models.router.list_models():
        if info.name == name:
            return _json(encode(replace(info, name=model_id)))
    # Not listed, but servable (a glob route or the default backend): say so.
    resolved = state.models.router.resolve(name)
    info = await state.models.router.show(name)
    return _json(encode(replace(info, name=model_id, backend=resolved.backend.name)))


@exchanged("/v1/embeddings", Dialect.OPENAI)
async def embeddings(request: Request, exchange: Exchange) -> Response:
    state = exchange.state
    embed_request = openai.decode_embed_request(await read_json(request, state.limits))
    result = await serve_embed(request, embed_request, exchange=exchange)
    return _json(openai.encode_embed_response(result, embed_request))


routes = [
    Route(
        "/v1/chat/completions",
        chat_endpoint(CHAT, openai.decode_chat_request),
        methods=["POST"],
    ),
    Route("/v1/models", list_models, methods=["GET"]),
    Route("/v1/models/{model_id:path}", get_model, methods=["GET"]),
    Route("/v1/embeddings", embeddings, methods=["POST"]),
]

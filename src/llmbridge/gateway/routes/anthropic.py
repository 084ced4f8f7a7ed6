"""Anthropic's Messages API: /v1/messages (also ``?beta=true``) and /v1/messages/count_tokens.

Besides the body, two things only this front knows about are read here: the
``anthropic-beta`` header (features/anthropic_beta.py: what an Anthropic backend gets),
and a model id of Claude Code's gateway discovery, ``anthropic/<name>``
(dialects/anthropic/model_list.py), which names the gateway's model ``<name>`` unless a
route of its own matches it.

Where some backend relays Anthropic (the pass-through path, core/relay.py), the body is
kept beside the decoded request when it may go out as the client wrote it
(``as_written.sent_as_written``); a discovery id is then the gateway's name in it too, so
the backend and the reply say the name the translated path says.
"""

from __future__ import annotations

from dataclasses import replace

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmbridge.core.errors import ModelNotFoundError
from llmbridge.core.hosted_mcp import hosted_mcp_of
from llmbridge.core.relay import RelayBody
from llmbridge.core.request import ChatRequest
from llmbridge.dialects import anthropic
from llmbridge.dialects.anthropic.as_written import sent_as_written
from llmbridge.dialects.anthropic.mcp_reply import encode_hosted_response, encode_hosted_stream
from llmbridge.dialects.anthropic.model_list import listed_name
from llmbridge.dialects.anthropic.stream import error_event
from llmbridge.dialects.framing import dumps
from llmbridge.features.anthropic_beta import parse_betas, with_betas
from llmbridge.gateway.exchange.exchange import Exchange
from llmbridge.gateway.exchange.handler import exchanged
from llmbridge.gateway.hosted.serve import HostedCodec, serve_hosted
from llmbridge.gateway.pipeline import ChatCodec, count_chat_tokens, read_codec_chat, serve_chat
from llmbridge.serving.router import ModelRouter
from llmbridge.web.bodies import read_chat
from llmbridge.web.render import Dialect

__all__ = ["discovered_model", "routes"]

MESSAGES = ChatCodec(
    dialect=Dialect.ANTHROPIC,
    endpoint="/v1/messages",
    encode_stream=anthropic.encode_chat_stream,
    encode_response=anthropic.encode_chat_response,
    stream_media_type="text/event-stream",
    announces_input_tokens=True,
    relay_dialect="anthropic",  # an Anthropic backend relays it (core/relay.py)
    relay_error=error_event,
)
HOSTED_MESSAGES = HostedCodec(
    dialect=Dialect.ANTHROPIC,
    encode_stream=encode_hosted_stream,
    encode_response=encode_hosted_response,
    announces_input_tokens=True,
)
"""A request with the MCP connector (``mcp_servers``): the gateway's MCP loop."""


def discovered_model(router: ModelRouter, model: str) -> str:
    """The model ``model`` names: for a discovery id (``anthropic/smollm2``) that no
    route matches, the gateway's own name (``smollm2``); else ``model`` itself."""
    name = listed_name(model)
    if name is None:
        return model
    try:
        routed = router.resolve(model).route is not None
    except ModelNotFoundError:
        routed = False
    return model if routed else name


def _fitted(chat: ChatRequest, request: Request, router: ModelRouter) -> ChatRequest:
    model = discovered_model(router, chat.model)
    if model != chat.model:
        chat = replace(chat, model=model, relay=_renamed(chat.relay, model))
    return with_betas(chat, parse_betas(request.headers.getlist("anthropic-beta")))


def _renamed(relay: RelayBody | None, model: str) -> RelayBody | None:
    """The kept body naming the gateway's model for a discovery id (rare: written
    again once), so what the backend gets and the reply says are as translated."""
    if relay is None:
        return None
    body = {**relay.body, "model": model}
    return RelayBody(relay.dialect, body, orjson.dumps(body))


async def _read(request: Request, exchange: Exchange) -> ChatRequest:
    """The body decoded, kept for the pass-through path where it may relay."""
    chat = await read_codec_chat(request, exchange, MESSAGES, anthropic.decode_chat_request)
    if chat.relay is not None and not sent_as_written(chat.relay.body):
        chat = replace(chat, relay=None)  # the translated path rewrites something
    return chat


@exchanged(MESSAGES.endpoint, MESSAGES.dialect)
async def messages(request: Request, exchange: Exchange) -> Response:
    chat = _fitted(await _read(request, exchange), request, exchange.state.models.router)
    exchange.asked(chat.model, streamed=chat.stream)
    hosted = hosted_mcp_of(chat)
    if hosted is not None:
        chat = replace(chat, relay=None)  # the gateway's MCP loop: every turn translated
        return await serve_hosted(request, chat, hosted, HOSTED_MESSAGES, exchange=exchange)
    return await serve_chat(request, chat, MESSAGES, exchange=exchange)


@exchanged("/v1/messages/count_tokens", Dialect.ANTHROPIC)
async def count_tokens(request: Request, exchange: Exchange) -> Response:
    """Seed 001's word / four-character estimate over every block and tool definition;
    with ``tokenizer: backend``, the backend's exact count where it can tokenize (the
    embedded model can), falling back to the estimate where it cannot."""
    state = exchange.state
    chat = await read_chat(request, state.limits, anthropic.decode_count_tokens_request)
    chat = _fitted(chat, request, state.models.router)
    input_tokens = await count_chat_tokens(chat, exchange)
    return Response(
        dumps({"input_tokens": input_tokens}),
        media_type="application/json",
        headers={"request-id": exchange.request_id},
    )


routes = [
    Route("/v1/messages", messages, methods=["POST"]),
    Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
]

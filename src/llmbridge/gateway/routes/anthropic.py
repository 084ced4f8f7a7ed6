"""Anthropic's Messages API: /v1/messages (also ``?beta=true``) and /v1/messages/count_tokens."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmbridge.dialects import anthropic
from llmbridge.dialects.framing import dumps
from llmbridge.gateway.exchange import Exchange, exchanged
from llmbridge.gateway.pipeline import ChatCodec, chat_endpoint, counted_tokens
from llmbridge.web.render import Dialect

__all__ = ["routes"]

MESSAGES = ChatCodec(
    dialect=Dialect.ANTHROPIC,
    endpoint="/v1/messages",
    encode_stream=anthropic.encode_chat_stream,
    encode_response=anthropic.encode_chat_response,
    stream_media_type="text/event-stream",
    announces_input_tokens=True,
)


@exchanged("/v1/messages/count_tokens", Dialect.ANTHROPIC)
async def count_tokens(request: Request, exchange: Exchange) -> Response:
    """Seed 001's word / four-character estimate over every block and tool definition;
    with ``tokenizer: backend``, the backend's exact count where it can tokenize (the
    embedded model can), falling back to the estimate where it cannot."""
    input_tokens = await counted_tokens(request, exchange, anthropic.decode_count_tokens_request)
    return Response(
        dumps({"input_tokens": input_tokens}),
        media_type="application/json",
        headers={"request-id": exchange.request_id},
    )


routes = [
    Route("/v1/messages", chat_endpoint(MESSAGES, anthropic.decode_chat_request), methods=["POST"]),
    Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
]

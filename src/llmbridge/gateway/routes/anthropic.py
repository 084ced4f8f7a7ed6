"""Anthropic's Messages API: /v1/messages (also ``?beta=true``) and /v1/messages/count_tokens."""

from __future__ import annotations

from dataclasses import replace

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmbridge.core.errors import LLMBridgeError
from llmbridge.dialects import anthropic
from llmbridge.dialects.framing import dumps
from llmbridge.features.token_count import count_request_tokens
from llmbridge.gateway.admission import admitted
from llmbridge.gateway.pipeline import ChatCodec, chat_endpoint
from llmbridge.gateway.state import state_of
from llmbridge.web.bodies import read_chat
from llmbridge.web.render import Dialect, error_response, new_request_id

__all__ = ["routes"]

MESSAGES = ChatCodec(
    dialect=Dialect.ANTHROPIC,
    endpoint="/v1/messages",
    encode_stream=anthropic.encode_chat_stream,
    encode_response=anthropic.encode_chat_response,
    stream_media_type="text/event-stream",
    announces_input_tokens=True,
)


async def count_tokens(request: Request) -> Response:
    """Seed 001's word / four-character estimate over every block and tool definition;
    with ``tokenizer: backend``, the backend's exact count where it can tokenize (the
    embedded model can), falling back to the estimate where it cannot."""
    state = state_of(request)
    request_id = new_request_id()
    try:
        chat = await read_chat(request, state.limits, anthropic.decode_count_tokens_request)
        # The key's models and requests per minute (gateway/admission.py).
        await (await admitted(request, chat.model, state)).finish(0)
        resolved = state.models.router.resolve(chat.model)
        counted = None
        if state.config.tokenizer == "backend" and resolved.backend.capabilities.tokenizer:
            backend_chat = replace(chat, model=resolved.backend_model)
            counted = await resolved.backend.count_tokens(backend_chat)
    except LLMBridgeError as exc:
        return error_response(Dialect.ANTHROPIC, exc, request_id)
    return Response(
        dumps({"input_tokens": count_request_tokens(chat) if counted is None else counted}),
        media_type="application/json",
        headers={"request-id": request_id},
    )


routes = [
    Route("/v1/messages", chat_endpoint(MESSAGES, anthropic.decode_chat_request), methods=["POST"]),
    Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
]

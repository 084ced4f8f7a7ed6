"""OpenAI's Responses API: ``POST /v1/responses`` and ``POST /v1/responses/input_tokens``.

Errors are OpenAI's body (``web/render.py`` renders every ``/v1/*`` path but Anthropic's
that way, which is also the Responses API's). Besides the ``x-llmbridge-*`` headers of
what serving changed (``pipeline.change_headers``), two say what this dialect left out:
``x-llmbridge-ignored-tools`` names the hosted tools (``web_search``...) no backend here
runs, and ``x-llmbridge-dropped-reasoning`` counts reasoning items whose
``encrypted_content`` another server issued (dialects/responses/reasoning.py).
"""

from __future__ import annotations

from dataclasses import replace

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmbridge.core.errors import LLMBridgeError
from llmbridge.core.request import ChatRequest
from llmbridge.dialects import responses
from llmbridge.dialects.framing import dumps
from llmbridge.dialects.responses.request import DETAILS_KEY, decode_input_tokens_request
from llmbridge.features.token_count import count_request_tokens
from llmbridge.gateway.pipeline import ChatCodec, serve_chat
from llmbridge.gateway.state import state_of
from llmbridge.web.bodies import read_chat
from llmbridge.web.render import Dialect, error_response, new_request_id

__all__ = ["IGNORED_TOOLS_HEADER", "routes"]

IGNORED_TOOLS_HEADER = "x-llmbridge-ignored-tools"
DROPPED_REASONING_HEADER = "x-llmbridge-dropped-reasoning"

RESPONSES = ChatCodec(
    dialect=Dialect.OPENAI,
    endpoint="/v1/responses",
    encode_stream=responses.encode_chat_stream,
    encode_response=responses.encode_chat_response,
    stream_media_type="text/event-stream",
)


def dialect_headers(chat: ChatRequest) -> dict[str, str]:
    """What the decoded request left out, as headers."""
    details = (chat.provider_details or {}).get(DETAILS_KEY) or {}
    headers: dict[str, str] = {}
    if details.get("ignored_tools"):
        headers[IGNORED_TOOLS_HEADER] = ",".join(details["ignored_tools"])
    if details.get("dropped_reasoning"):
        headers[DROPPED_REASONING_HEADER] = str(details["dropped_reasoning"])
    return headers


async def create_response(request: Request) -> Response:
    state = state_of(request)
    request_id = new_request_id()
    try:
        # Large bodies are parsed and decoded off the event loop (web/bodies.py).
        chat = await read_chat(request, state.limits, responses.decode_chat_request)
    except LLMBridgeError as exc:
        return error_response(Dialect.OPENAI, exc, request_id)
    response = await serve_chat(request, chat, RESPONSES, state=state, request_id=request_id)
    response.headers.update(dialect_headers(chat))
    return response


async def input_tokens(request: Request) -> Response:
    """The prompt's size, counted as ``/v1/messages/count_tokens`` counts it."""
    state = state_of(request)
    request_id = new_request_id()
    try:
        chat = await read_chat(request, state.limits, decode_input_tokens_request)
        resolved = state.models.router.resolve(chat.model)
        counted = None
        if state.config.tokenizer == "backend" and resolved.backend.capabilities.tokenizer:
            counted = await resolved.backend.count_tokens(
                replace(chat, model=resolved.backend_model)
            )
    except LLMBridgeError as exc:
        return error_response(Dialect.OPENAI, exc, request_id)
    tokens = count_request_tokens(chat) if counted is None else counted
    return Response(
        dumps({"object": "response.input_tokens", "input_tokens": tokens}),
        media_type="application/json",
        headers={"x-request-id": request_id},
    )


routes = [
    Route("/v1/responses", create_response, methods=["POST"]),
    Route("/v1/responses/input_tokens", input_tokens, methods=["POST"]),
]

"""Serve a model request whose tools include an MCP server's: ``serve_hosted``, the
hosted loop's ``serve_chat`` (gateway/pipeline.py), in the route's ``Exchange``.

As ``serve_chat`` does: the key admits the request first; a refusal, a server the
gateway does not run (loop.py ``plan``) or a failure before the first round's first
event is an HTTP error in the caller's dialect; after it, the dialect's in-stream
error. A client that leaves cancels the loop (the round, or the tool call, in
progress). However it ends, the loop is closed (``McpLoop.aclose``: the servers the
request connected are disconnected). The loop's events are encoded by the route's
``HostedCodec``: streamed, or collected (core/hosted_mcp.py ``collect_hosted``) and
encoded whole.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from llmbridge.core.errors import LLMBridgeError
from llmbridge.core.hosted_mcp import HostedEvent, HostedMcp, HostedReply, collect_hosted
from llmbridge.core.request import ChatRequest
from llmbridge.dialects.framing import dumps
from llmbridge.gateway.exchange.exchange import Exchange
from llmbridge.gateway.hosted.loop import McpLoop
from llmbridge.gateway.pipeline import change_headers
from llmbridge.web.render import Dialect, error_response, to_bridge_error
from llmbridge.web.streaming import ClientDisconnected, StreamingBody, run_until_disconnect

__all__ = ["HostedCodec", "serve_hosted"]


@dataclass(frozen=True, slots=True)
class HostedCodec:
    """How one route renders the loop's answer in its dialect."""

    dialect: Dialect
    encode_stream: Callable[[AsyncIterator[HostedEvent], ChatRequest], AsyncIterator[bytes]]
    encode_response: Callable[[HostedReply, ChatRequest], dict[str, Any]]
    stream_media_type: str = "text/event-stream"
    announces_input_tokens: bool = False
    """The dialect states the prompt size before generating (Anthropic ``message_start``)."""


async def serve_hosted(
    request: Request,
    chat: ChatRequest,
    hosted: HostedMcp,
    codec: HostedCodec,
    *,
    exchange: Exchange,
) -> Response:
    """Answer ``chat`` through the MCP loop (module docstring)."""
    state = exchange.state
    await exchange.admit_chat(chat)
    chat = state.models.with_affinity(chat, request.headers)
    loop = McpLoop(exchange, chat, hosted, announce=codec.announces_input_tokens)
    loop.plan()  # a 400 for a server the gateway does not run, rendered by exchanged
    request_id = exchange.request_id
    headers = {"request-id": request_id, "x-request-id": request_id, **exchange.headers()}

    async def whole() -> HostedReply:
        try:
            await loop.open()
            return collect_hosted([event async for event in loop.events()])
        finally:
            await loop.aclose()

    try:
        if chat.stream:
            await run_until_disconnect(request.receive, loop.open())
        else:
            reply = await run_until_disconnect(request.receive, whole())
    except ClientDisconnected:
        await loop.aclose()
        return Response(status_code=499)
    except Exception as exc:  # noqa: BLE001 - rendered in the caller's dialect
        await loop.aclose()
        error = to_bridge_error(exc)
        if not isinstance(exc, LLMBridgeError) or exchange.status == 200:
            exchange.failed(error)
        failed = change_headers(loop.changes)
        return error_response(codec.dialect, error, request_id, headers=failed)
    headers.update(change_headers(loop.changes))
    if not chat.stream:
        return Response(
            dumps(codec.encode_response(reply, chat)),
            media_type="application/json",
            headers=headers,
        )

    async def on_close(disconnected: bool) -> None:
        try:
            await loop.aclose()
        finally:
            await exchange.finish(499 if disconnected else None)

    return StreamingBody(
        codec.encode_stream(loop.events(), chat),
        media_type=codec.stream_media_type,
        headers=headers,
        on_close=on_close,
    )

"""Ollama's native API: /api/chat, /api/generate, /api/tags, /api/show, /api/ps,
/api/version, /api/embed and /api/embeddings; the model-management routes (/api/pull,
/api/push, /api/delete, /api/copy, /api/create) are ``ollama_models``'.

A chat or generate request with nothing to generate is answered here, as Ollama
answers it: a load (``done_reason: "load"``), or with ``keep_alive`` 0 an unload
(``"unload"``), which the backends that hold models in memory are told of first (an
Ollama server, the embedded model: ``Backend.unload``); one with nothing to free (a
remote API) has nothing to do.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmbridge import __version__
from llmbridge.core.errors import LLMBridgeError
from llmbridge.core.events import StreamEvent
from llmbridge.core.request import ChatRequest
from llmbridge.dialects import ollama
from llmbridge.dialects.framing import dumps
from llmbridge.dialects.ollama.relay import relay_error_line
from llmbridge.dialects.ollama.types import keep_alive_seconds
from llmbridge.gateway.exchange.admission import visible_models
from llmbridge.gateway.exchange.exchange import Exchange
from llmbridge.gateway.exchange.handler import exchanged
from llmbridge.gateway.pipeline import Answer, ChatCodec, Shortcut, chat_endpoint, serve_embed
from llmbridge.gateway.routes import ollama_models
from llmbridge.serving.router import Resolved
from llmbridge.web.bodies import read_json
from llmbridge.web.render import Dialect

__all__ = ["OLLAMA_VERSION", "routes"]

OLLAMA_VERSION = "0.13.5"
"""The Ollama API version we report: clients gate features on it (tools, thinking).
Codex CLI's ``--oss`` mode refuses an Ollama older than 0.13.4, the first with
``/v1/responses``, which llmbridge serves."""

_NDJSON = "application/x-ndjson"

CHAT = ChatCodec(
    dialect=Dialect.OLLAMA,
    endpoint="/api/chat",
    encode_stream=ollama.encode_chat_stream,
    encode_response=ollama.encode_chat_response,
    stream_media_type=_NDJSON,
    relay_dialect="ollama",  # an Ollama backend relays it (dialects/ollama/relay.py)
    relay_error_for=lambda chat, first: relay_error_line(chat.model, first),
)


def _encode_generate_stream(
    events: AsyncIterator[StreamEvent], request: ChatRequest
) -> AsyncIterator[bytes]:
    return ollama.encode_chat_stream(events, request, generate=True)


GENERATE = ChatCodec(
    dialect=Dialect.OLLAMA,
    endpoint="/api/generate",
    encode_stream=_encode_generate_stream,
    encode_response=ollama.encode_generate_response,
    stream_media_type=_NDJSON,
)


def _json(body: object, status: int = 200) -> Response:
    return Response(dumps(body), status_code=status, media_type="application/json")


def _nothing_to_generate(generate: bool) -> Shortcut:
    """Ollama answers a request with nothing to generate (a chat without messages, a
    generate without a prompt) by loading the model, or with ``keep_alive`` 0 by
    unloading it (Open WebUI's eject sends ``/api/generate`` so)."""

    def shortcut(chat: ChatRequest) -> Answer | None:
        if (chat.completion is not None) if generate else bool(chat.messages):
            return None
        unload = keep_alive_seconds(chat.keep_alive) == 0

        async def answer(exchange: Exchange, chat: ChatRequest) -> Response:
            resolved = exchange.state.models.router.resolve(chat.model)  # unknown: 404
            if unload:
                await _unload(exchange, resolved)
            return _empty_reply(chat, generate, "unload" if unload else "load")

        return answer

    return shortcut


async def _unload(exchange: Exchange, resolved: Resolved) -> None:
    """Tell the backend (each server of a route with several) to free the model."""
    router = exchange.state.models.router
    pool = router.pool(resolved)
    targets = [resolved]
    if pool is not None:
        targets = [router.deployment(resolved, d.name) for d in pool.deployments]
    exchange.served_by(resolved)  # the ledger's backend; the wait on it is the backend's
    for target in targets:
        await target.backend.unload(target.backend_model)
    exchange.backend_answered()


def _empty_reply(chat: ChatRequest, generate: bool, reason: str) -> Response:
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    body: dict[str, object] = {"model": chat.model, "created_at": now}
    if generate:
        body["response"] = ""
    else:
        body["message"] = {"role": "assistant", "content": ""}
    body.update({"done_reason": reason, "done": True})
    return _json(body)


@exchanged("/api/tags", Dialect.OLLAMA)
async def tags(request: Request, exchange: Exchange) -> Response:
    state = exchange.state
    # A database key sees the models its globs allow (gateway/exchange/admission.py).
    models = visible_models(request, await state.models.router.list_models())
    return _json(ollama.encode_tags(models))


@exchanged("/api/show", Dialect.OLLAMA)
async def show(request: Request, exchange: Exchange) -> Response:
    state = exchange.state
    name = ollama.decode_show_request(await read_json(request, state.limits))
    exchange.admit_model(name)  # a model the key may not use is not found
    info = await state.models.router.show(name)
    return _json(ollama.encode_show(info))


@exchanged("/api/ps", Dialect.OLLAMA)
async def ps(request: Request, exchange: Exchange) -> Response:
    state = exchange.state
    running = []
    for backend in state.models.backends.values():
        try:
            running.extend(await backend.running_models())
        except LLMBridgeError:
            continue
    return _json(ollama.encode_ps(visible_models(request, running)))


@exchanged("/api/version", Dialect.OLLAMA)
async def version(request: Request, exchange: Exchange) -> Response:
    return _json({"version": OLLAMA_VERSION, "llmbridge": __version__})


@exchanged("/api/embed", Dialect.OLLAMA)
async def embed(request: Request, exchange: Exchange) -> Response:
    state = exchange.state
    started = time.perf_counter_ns()
    embed_request = ollama.decode_embed_request(await read_json(request, state.limits))
    result = await serve_embed(request, embed_request, exchange=exchange)
    body = ollama.encode_embed_response(result, embed_request)
    body.setdefault("total_duration", time.perf_counter_ns() - started)
    return _json(body)


@exchanged("/api/embeddings", Dialect.OLLAMA)
async def embeddings(request: Request, exchange: Exchange) -> Response:
    """One prompt, one vector: served as ``/api/embed`` is (admitted, counted and
    recorded alike), answered in the older route's shape. An empty prompt loads the
    model and gets an empty vector, as from Ollama."""
    state = exchange.state
    embed_request = ollama.decode_embeddings_request(await read_json(request, state.limits))
    result = await serve_embed(request, embed_request, exchange=exchange)
    return _json(ollama.encode_embeddings_response(result))


routes = [
    Route(
        "/api/chat",
        chat_endpoint(CHAT, ollama.decode_chat_request, _nothing_to_generate(generate=False)),
        methods=["POST"],
    ),
    Route(
        "/api/generate",
        chat_endpoint(
            GENERATE, ollama.decode_generate_request, _nothing_to_generate(generate=True)
        ),
        methods=["POST"],
    ),
    Route("/api/tags", tags, methods=["GET", "HEAD"]),
    Route("/api/show", show, methods=["POST"]),
    Route("/api/ps", ps, methods=["GET"]),
    Route("/api/version", version, methods=["GET", "HEAD"]),
    Route("/api/embed", embed, methods=["POST"]),
    Route("/api/embeddings", embeddings, methods=["POST"]),
    *ollama_models.routes,
]

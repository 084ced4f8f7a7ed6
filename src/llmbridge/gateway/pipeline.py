"""Serve one chat request: resolve, call the backend, stream or accumulate.

This is the only place that joins a route's codec to a backend's event stream, so
every dialect gets the same behaviour: errors before the first event are an HTTP
error in the caller's dialect; errors after it are the dialect's in-stream error,
after which the stream ends cleanly; a client disconnect cancels the backend call;
non-streaming replies are the accumulated stream. Admission, the usage ledger and
the metrics are the request's ``Exchange`` (gateway/exchange/), which every route
goes through.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from llmbridge.core.context_edits import with_applied_edits
from llmbridge.core.errors import LLMBridgeError
from llmbridge.core.events import ResponseStart, StreamEvent
from llmbridge.core.request import ChatRequest, EmbedRequest
from llmbridge.core.request_limits import RequestLimits
from llmbridge.core.response import ChatResponse, EmbedResponse, Usage
from llmbridge.core.stream import EventStream
from llmbridge.dialects.framing import dumps
from llmbridge.features.thinking import THINKING_HEADER
from llmbridge.features.token_count import count_text_tokens
from llmbridge.gateway.exchange.exchange import Exchange
from llmbridge.gateway.exchange.handler import exchanged
from llmbridge.serving.models import Reply
from llmbridge.serving.prepare import Changes, Prepared
from llmbridge.web.bodies import read_chat, read_relayable_chat
from llmbridge.web.render import Dialect, error_response, to_bridge_error
from llmbridge.web.streaming import ClientDisconnected, StreamingBody, run_until_disconnect

__all__ = [
    "COMPACTION_HEADER",
    "DROPPED_ITEMS_HEADER",
    "ChatCodec",
    "change_headers",
    "chat_endpoint",
    "count_chat_tokens",
    "counted_tokens",
    "serve_chat",
    "serve_embed",
]

log = logging.getLogger("llmbridge.gateway")


@dataclass(frozen=True, slots=True)
class ChatCodec:
    """How one route renders a chat reply in its dialect."""

    dialect: Dialect
    endpoint: str
    """Metrics label, e.g. ``/api/chat``."""
    encode_stream: Callable[[AsyncIterator[StreamEvent], ChatRequest], AsyncIterator[bytes]]
    encode_response: Callable[[ChatResponse, ChatRequest], dict[str, Any]]
    stream_media_type: str
    announces_input_tokens: bool = False
    """The dialect states the prompt size before generating (Anthropic ``message_start``)."""
    relay_dialect: str | None = None
    """The dialect a backend relays (``Capabilities.relays``) when this route's body is
    kept for the pass-through path (core/relay.py); ``None``: always translated."""
    relay_error: Callable[[LLMBridgeError], bytes] | None = None
    """The dialect's in-stream error on the pass-through path, for a failure the gateway
    saw after the first byte (``Exchange.relay``)."""
    relay_error_for: (
        Callable[[ChatRequest, StreamEvent], Callable[[LLMBridgeError], bytes]] | None
    ) = None
    """``relay_error`` made for each request from it and its stream's first event, where
    the dialect's in-stream error names them (Ollama's last line names the model the
    client asked for and the stream's start time)."""


TOOLS_HEADER = "x-llmbridge-tools"
FALLBACK_HEADER = "x-llmbridge-fallback"
"""Set when a fallback served the reply: ``backend/model``."""
PARAMS_HEADER = "x-llmbridge-params"
"""Sampling parameters converted or dropped for the backend (serving/prepare/sampling.py)."""
DROPPED_ITEMS_HEADER = "x-llmbridge-dropped-items"
"""Opaque items of another backend left out of the history: ``reasoning=2,compaction=1``
(serving/prepare/carried_state.py; a front adds what it could not read itself)."""
COMPACTION_HEADER = "x-llmbridge-compaction"
"""How a compaction was made: ``native`` or ``summary`` (features/compaction.py)."""
CONTEXT_EDITS_HEADER = "x-llmbridge-context-edits"
"""The client's context edits the gateway applied, ``<type>=<count cleared>`` each
(features/context_editing.py): tool results, or turns' thinking."""
PATH_HEADER = "x-llmbridge-path"
"""``passthrough`` on a reply the pass-through path served (core/relay.py): the request
log's row says it too (its ``x-llmbridge-*`` facts). A translated reply has none."""


def change_headers(changes: Changes) -> dict[str, str]:
    """What serving changed in a request (serving/prepare/changes.py), as response headers."""
    headers: dict[str, str] = {}
    if changes.thinking_dropped:
        headers[THINKING_HEADER] = "dropped"
    if changes.tools_emulated:
        headers[TOOLS_HEADER] = "emulated"
    if changes.params:
        headers[PARAMS_HEADER] = ",".join(changes.params)
    if changes.fallback is not None:
        headers[FALLBACK_HEADER] = changes.fallback
    if changes.dropped_items:
        headers[DROPPED_ITEMS_HEADER] = ",".join(changes.dropped_items)
    if changes.compaction is not None:
        headers[COMPACTION_HEADER] = changes.compaction
    if changes.context_edits:
        headers[CONTEXT_EDITS_HEADER] = ",".join(
            f"{edit.type}={edit.cleared_tool_uses or edit.cleared_thinking_turns or 0}"
            for edit in changes.context_edits
        )
    return headers


def _failure_headers(tried: Prepared) -> dict[str, str]:
    """A failed request's headers: what serving changed, and the path it took; a
    relayed one says so on a failure too, as the route's own headers (the Responses
    front's dropped reasoning) are for the translated path only."""
    headers = change_headers(tried.changes)
    if tried.request.relay is not None:
        headers[PATH_HEADER] = "passthrough"
    return headers


async def serve_chat(
    request: Request,
    chat: ChatRequest,
    codec: ChatCodec,
    *,
    exchange: Exchange,
) -> Response:
    """Answer ``chat`` from the backend its model name resolves to (or a fallback),
    admitted and recorded by ``exchange`` (gateway/exchange/). A refusal or a
    request that cannot be prepared is raised for ``exchanged`` to render; a failure
    once a backend was chosen is rendered here, with what serving changed."""
    state = exchange.state
    models = state.models
    request_id = exchange.request_id
    # The key's limits first (gateway/exchange/): a refused request costs nothing.
    await exchange.admit_chat(chat)
    # The session key (a header, prompt_cache_key...) for a route with affinity.
    chat = models.with_affinity(chat, request.headers)
    prepared = await models.prepare(chat)
    headers = {"request-id": request_id, "x-request-id": request_id, **exchange.headers()}
    exchange.served_by(prepared.target)
    reply: Reply | None = None

    async def opened() -> StreamEvent:
        """The first event, ready to send; an error before it is raised."""
        nonlocal reply
        reply = await models.open(chat, prepared)
        first = reply.first
        exchange.served(reply)  # its target (a fallback's, if one served), tries, first event
        if isinstance(first, ResponseStart):
            tokens = first.input_tokens
            if tokens is None and codec.announces_input_tokens:
                # Anthropic's message_start estimate, a word count over the whole
                # prompt: off the event loop for a large one (core/request_size.py).
                tokens = await exchange.estimate_prompt(chat)
            first = replace(first, model=chat.model, input_tokens=tokens)
        return first

    async def completed() -> ChatResponse | bytes:
        first = await opened()
        assert reply is not None
        if reply.prepared.request.relay is not None:
            return await exchange.collect_relayed(first, reply.rest)
        return await exchange.collect(first, reply.rest)

    try:
        if chat.stream:
            first = await run_until_disconnect(request.receive, opened())
        else:
            # One disconnect watcher for the whole non-streamed request.
            response = await run_until_disconnect(request.receive, completed())
    except ClientDisconnected:
        # An opening cancelled closes its own stream; an opened one is closed here
        # (a no-op when Exchange.collect already did).
        if reply is not None:
            await reply.rest.aclose()
        return Response(status_code=499)
    except Exception as exc:  # noqa: BLE001 - rendered in the caller's dialect
        if reply is not None:
            await reply.rest.aclose()
        error = to_bridge_error(exc)
        if not isinstance(exc, LLMBridgeError) or exchange.status == 200:
            exchange.failed(error)
        # web/render.py adds Retry-After for an error that carries one.
        failed = _failure_headers(reply.prepared if reply else prepared)
        return error_response(codec.dialect, error, request_id, headers=failed)

    assert reply is not None
    headers.update(change_headers(reply.prepared.changes))
    relayed = reply.prepared.request.relay is not None
    if relayed:
        headers[PATH_HEADER] = "passthrough"
    # What the gateway cleared for the client's context edits, for its reply to say.
    answered = with_applied_edits(chat, reply.prepared.changes.context_edits)
    if not chat.stream:
        # The relayed bytes as they came, or the reply encoded.
        whole = (
            response if isinstance(response, bytes) else codec.encode_response(response, answered)
        )
        return Response(
            whole if isinstance(whole, bytes) else dumps(whole),
            media_type="application/json",
            headers=headers,
        )

    async def on_close(disconnected: bool) -> None:
        await exchange.finish(499 if disconnected else None)

    # The stream's end finishes the exchange (``exchanged`` leaves it to on_close).
    return StreamingBody(
        _stream_body(codec, answered, exchange, first, reply.rest, relayed=relayed),
        media_type=codec.stream_media_type,
        headers=headers,
        on_close=on_close,
    )


def _stream_body(
    codec: ChatCodec,
    chat: ChatRequest,
    exchange: Exchange,
    first: StreamEvent,
    rest: EventStream,
    *,
    relayed: bool,
) -> AsyncIterator[bytes]:
    """The stream's bytes: the relayed ones as they came (the pass-through path), or
    the events encoded; either way noted by the exchange as they pass."""
    if relayed:
        made = codec.relay_error_for
        error = codec.relay_error if made is None else made(chat, first)
        assert error is not None  # no relay body is read otherwise
        return exchange.relay(first, rest, error)
    return codec.encode_stream(exchange.watch(first, rest), chat)


def _embed_tokens(embed_request: EmbedRequest) -> int:
    return sum(count_text_tokens(text) for text in embed_request.inputs)


async def serve_embed(
    request: Request, embed_request: EmbedRequest, *, exchange: Exchange
) -> EmbedResponse:
    """Embed with the backend ``embed_request``'s model resolves to, admitted and
    recorded by ``exchange`` (its tokens: the input's). A client that leaves cancels
    the batch (it used to hold the model 26 s more): ``ClientDisconnected``."""
    exchange.asked(embed_request.model)
    record = exchange.record
    prompt = 0
    if record is not None and (record.tpm is not None or record.budget_usd is not None):
        prompt = _embed_tokens(embed_request)
        exchange.counted_prompt(prompt)
    # The key's models, budget and per-minute limits (gateway/exchange/).
    await exchange.admit_call(prompt_tokens=prompt, max_output_tokens=0)
    resolved = await exchange.state.models.embed_target(embed_request.model)  # a deployment
    exchange.served_by(resolved)
    work = resolved.backend.embed(replace(embed_request, model=resolved.backend_model))
    result = await run_until_disconnect(request.receive, work)
    exchange.backend_answered()  # the overhead header excludes the wait
    exchange.add_usage(Usage(input_tokens=result.input_tokens))
    return result


async def count_chat_tokens(chat: ChatRequest, exchange: Exchange) -> int:
    """``chat``'s prompt size, admitted and recorded by ``exchange``: the key's globs,
    budget and per-minute requests (a count generates nothing and takes no tokens from
    the key's window), then seed 001's word / four-character estimate, or with
    ``tokenizer: backend`` the backend's exact count where it can tokenize. The
    estimate of a large prompt is made off the event loop (core/request_size.py)."""
    state = exchange.state
    exchange.asked(chat.model, chat=chat)
    await exchange.admit_call(max_output_tokens=0)
    resolved = state.models.router.resolve(chat.model)
    exchange.served_by(resolved)
    if state.config.tokenizer == "backend" and resolved.backend.capabilities.tokenizer:
        counted = await resolved.backend.count_tokens(replace(chat, model=resolved.backend_model))
        exchange.backend_answered()
        if counted is not None:
            return counted
    return await exchange.estimate_prompt(chat)


async def counted_tokens(
    request: Request, exchange: Exchange, decode: Callable[[object, RequestLimits], ChatRequest]
) -> int:
    """A token-count route's body read, decoded and counted (``count_chat_tokens``)."""
    chat = await read_chat(request, exchange.state.limits, decode)
    return await count_chat_tokens(chat, exchange)


Endpoint = Callable[[Request], Awaitable[Response]]
Answer = Callable[[Exchange, ChatRequest], Awaitable[Response]]
Shortcut = Callable[[ChatRequest], Answer | None]
"""Whether a decoded chat is answered without a generation: ``None`` to go on, else
how it is answered (Ollama's load and unload replies)."""


async def read_codec_chat(
    request: Request,
    exchange: Exchange,
    codec: ChatCodec,
    decode: Callable[[Any, RequestLimits], ChatRequest],
) -> ChatRequest:
    """The request's body, ``decode``d (large bodies off the event loop: web/bodies.py),
    and kept beside it for the pass-through path where some backend relays ``codec``'s
    dialect (core/relay.py): a route of another dialect does not pay for the copy."""
    state = exchange.state
    relay = codec.relay_dialect
    if relay is not None and relay in state.models.relayed_dialects:
        return await read_relayable_chat(request, state.limits, decode, relay)
    return await read_chat(request, state.limits, decode)


def chat_endpoint(
    codec: ChatCodec,
    decode: Callable[[object, RequestLimits], ChatRequest],
    shortcut: Shortcut | None = None,
) -> Endpoint:
    """A route handler: read the body, ``decode`` it, then ``serve_chat``, in one
    ``Exchange``.

    ``shortcut`` may answer a decoded request without a generation (Ollama's "load
    the model" and "unload it" replies to an empty conversation); it returns ``None``
    to go on. Its answer is admitted (the key's globs) before it runs, and recorded
    like any other.
    """

    @exchanged(codec.endpoint, codec.dialect)
    async def endpoint(request: Request, exchange: Exchange) -> Response:
        chat = await read_codec_chat(request, exchange, codec, decode)
        exchange.asked(chat.model, streamed=chat.stream)
        if shortcut is not None and (answer := shortcut(chat)) is not None:
            exchange.admit_model(chat.model, refuse=True)  # as a chat would be
            return await answer(exchange, chat)
        return await serve_chat(request, chat, codec, exchange=exchange)

    return endpoint

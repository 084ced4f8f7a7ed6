"""Serve one chat request: resolve, call the backend, stream or accumulate, account.

This is the only place that joins a route's codec to a backend's event stream, so
every dialect gets the same behaviour: errors before the first event are an HTTP
error in the caller's dialect; errors after it are the dialect's in-stream error,
after which the stream ends cleanly; a client disconnect cancels the backend call;
non-streaming replies are the accumulated stream.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from llmbridge.accounts.limits import OPEN
from llmbridge.backends.base import Backend
from llmbridge.core.accumulate import Accumulator
from llmbridge.core.errors import LLMBridgeError
from llmbridge.core.events import (
    ResponseEnd,
    ResponseStart,
    StreamError,
    StreamEvent,
    UsageUpdate,
)
from llmbridge.core.limits import RequestLimits
from llmbridge.core.request import ChatRequest, EmbedRequest
from llmbridge.core.request_size import larger_than
from llmbridge.core.response import ChatResponse, EmbedResponse, Usage
from llmbridge.core.stream import EventStream
from llmbridge.dialects.framing import dumps
from llmbridge.features.thinking import THINKING_HEADER
from llmbridge.features.token_count import count_request_tokens
from llmbridge.gateway.accounting import Metered, metered
from llmbridge.gateway.admission import (
    admit_chat,
    admitted,
    counted_reply,
    refusal_headers,
    total_tokens,
)
from llmbridge.gateway.metrics import GatewayMetrics
from llmbridge.gateway.state import GatewayState, state_of
from llmbridge.serving.models import Reply
from llmbridge.serving.prepare import Changes
from llmbridge.web.bodies import read_chat
from llmbridge.web.render import Dialect, error_response, new_request_id, to_bridge_error
from llmbridge.web.streaming import ClientDisconnected, StreamingBody, run_until_disconnect

__all__ = ["ChatCodec", "change_headers", "chat_endpoint", "serve_chat", "serve_embed"]

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


class _Tracker:
    """Metrics, logging and the usage ledger's record for one request."""

    __slots__ = ("backend", "done", "m", "metered", "metrics", "model", "started", "status")

    def __init__(
        self,
        metrics: GatewayMetrics,
        endpoint: str,
        backend: str,
        model: str,
        metered: Metered | None = None,
    ) -> None:
        self.metrics, self.backend, self.model = metrics, backend, model
        self.m = metrics.bound(endpoint, backend, model)
        self.metered = metered
        self.started = time.perf_counter()
        self.status = 200
        self.done = False
        self.m.in_flight.inc()

    def served_by(self, backend: Backend) -> None:
        if self.metered is not None:
            self.metered.backend = backend

    def first_event(self) -> None:
        self.m.first_token.observe(time.perf_counter() - self.started)
        if self.metered is not None:
            self.metered.first_event()

    def error(self, error: LLMBridgeError) -> None:
        self.status = error.status_code
        self.m.error(type(error).__name__)

    def finish(self, status: int | None = None) -> None:
        if self.done:
            return
        self.done = True
        self.m.in_flight.dec()
        self.m.latency.observe(time.perf_counter() - self.started)
        self.m.request_done(status if status is not None else self.status)
        if self.metered is not None:
            self.metered.finish(status if status is not None else self.status)


async def _guarded(
    first: StreamEvent,
    events: EventStream,
    tracker: _Tracker,
) -> AsyncGenerator[StreamEvent, None]:
    """The backend's stream with failures after the first event turned into a
    ``StreamError`` (so the encoder renders the dialect's in-stream error) and usage
    recorded."""
    meter = tracker.metered
    try:
        if meter is not None and isinstance(first, ResponseStart) and first.input_tokens:
            meter.add_usage(Usage(input_tokens=first.input_tokens))  # as accumulate reads it
        yield first
        async for event in events:
            if isinstance(event, ResponseEnd):
                tracker.metrics.record_usage(tracker.backend, tracker.model, event.usage)
                if meter is not None:
                    meter.add_usage(event.usage)
            elif isinstance(event, StreamError):
                tracker.error(event.error)
            elif meter is not None and isinstance(event, UsageUpdate):
                meter.add_usage(event.usage)
            yield event
    except Exception as exc:  # noqa: BLE001 - every failure becomes an in-stream error
        error = to_bridge_error(exc)
        tracker.error(error)
        log.warning("stream from backend %s failed: %s", tracker.backend, error.message)
        yield StreamError(error)
    finally:
        await events.aclose()


def _refused(meter: Metered | None, error: LLMBridgeError) -> None:
    """A request answered with ``error`` before any backend was called (an unknown
    model, a refused request), for the usage ledger."""
    if meter is not None:
        meter.finish(error.status_code)


TOOLS_HEADER = "x-llmbridge-tools"
FALLBACK_HEADER = "x-llmbridge-fallback"
"""Set when a fallback served the reply: ``backend/model``."""
PARAMS_HEADER = "x-llmbridge-params"
"""Sampling parameters converted or dropped for the backend (serving/params.py)."""


def change_headers(changes: Changes) -> dict[str, str]:
    """What serving changed in a request (serving/prepare.py), as response headers."""
    headers: dict[str, str] = {}
    if changes.thinking_dropped:
        headers[THINKING_HEADER] = "dropped"
    if changes.tools_emulated:
        headers[TOOLS_HEADER] = "emulated"
    if changes.params:
        headers[PARAMS_HEADER] = ",".join(changes.params)
    if changes.fallback is not None:
        headers[FALLBACK_HEADER] = changes.fallback
    return headers


async def serve_chat(
    request: Request,
    chat: ChatRequest,
    codec: ChatCodec,
    *,
    state: GatewayState,
    request_id: str,
) -> Response:
    """Answer ``chat`` from the backend its model name resolves to (or a fallback)."""
    headers = {"request-id": request_id, "x-request-id": request_id}
    models = state.models
    meter = metered(
        state.ledger,
        state.prices,
        request.scope,
        request_id=request_id,
        model=chat.model,
        endpoint=codec.endpoint,
        streamed=chat.stream,
    )
    admission = OPEN
    try:
        # The key's limits first (gateway/admission.py): a refused request costs nothing.
        admission = await admit_chat(request, chat, state)
        # The session key (a header, prompt_cache_key...) for a route with affinity.
        chat = models.with_affinity(chat, request.headers)
        prepared = await models.prepare(chat)
    except LLMBridgeError as exc:
        _refused(meter, exc)
        await admission.finish()
        refused = refusal_headers(exc, codec.dialect)  # Retry-After, x-ratelimit-*
        return error_response(codec.dialect, exc, request_id, headers=refused)
    headers.update(admission.headers(codec.dialect))
    target = prepared.target
    tracker = _Tracker(
        state.metrics, codec.endpoint, target.backend.name, target.backend_model, meter
    )
    tracker.served_by(target.backend)
    reply: Reply | None = None

    async def opened() -> StreamEvent:
        """The first event, ready to send; an error before it is raised."""
        nonlocal reply
        reply = await models.open(chat, prepared)
        reply = counted_reply(reply, chat, admission)  # a stream's tokens, for tpm
        first = reply.first
        tracker.served_by(reply.prepared.target.backend)  # a fallback's, if one served
        tracker.first_event()
        if isinstance(first, ResponseStart):
            tokens = first.input_tokens
            if tokens is None and codec.announces_input_tokens:
                # Anthropic's message_start estimate, a word count over the whole
                # prompt: off the event loop for a large one (core/request_size.py).
                if larger_than(chat, state.limits.offload_bytes):
                    tokens = await asyncio.to_thread(count_request_tokens, chat)
                else:
                    tokens = count_request_tokens(chat)
            first = replace(first, model=chat.model, input_tokens=tokens)
        return first

    async def completed() -> ChatResponse:
        first = await opened()
        assert reply is not None
        return await _accumulate(_guarded(first, reply.rest, tracker))

    try:
        if chat.stream:
            first = await run_until_disconnect(request.receive, opened())
        else:
            # One disconnect watcher for the whole non-streamed request.
            response = await run_until_disconnect(request.receive, completed())
    except ClientDisconnected:
        # An opening cancelled closes its own stream; an opened one is closed here
        # (a no-op when _accumulate already did).
        if reply is not None:
            await reply.rest.aclose()
        tracker.finish(499)
        await admission.finish()
        return Response(status_code=499)
    except Exception as exc:  # noqa: BLE001 - rendered in the caller's dialect
        if reply is not None:
            await reply.rest.aclose()
        error = to_bridge_error(exc)
        if not isinstance(exc, LLMBridgeError) or tracker.status == 200:
            tracker.error(error)
        tracker.finish()
        await admission.finish()
        # web/render.py adds Retry-After for an error that carries one.
        failed = change_headers((reply.prepared if reply else prepared).changes)
        return error_response(codec.dialect, error, request_id, headers=failed)

    assert reply is not None
    headers.update(change_headers(reply.prepared.changes))
    if not chat.stream:
        tracker.finish()
        await admission.finish(total_tokens(response.usage))
        return Response(
            dumps(codec.encode_response(response, chat)),
            media_type="application/json",
            headers=headers,
        )

    async def on_close(disconnected: bool) -> None:
        tracker.finish(499 if disconnected else None)
        await admission.finish()

    return StreamingBody(
        codec.encode_stream(_guarded(first, reply.rest, tracker), chat),
        media_type=codec.stream_media_type,
        headers=headers,
        on_close=on_close,
    )


async def _accumulate(stream: EventStream) -> ChatResponse:
    acc = Accumulator()
    try:
        async for event in stream:
            acc.add(event)
    finally:
        await asyncio.shield(stream.aclose())
    return acc.response()


async def serve_embed(
    request: Request,
    embed_request: EmbedRequest,
    *,
    state: GatewayState,
    request_id: str,
    endpoint: str,
) -> EmbedResponse:
    """Embed with the backend ``embed_request``'s model resolves to, recorded in the
    usage ledger (its tokens: the input's). A client that leaves cancels the batch
    (issue 13: it held the model 26 s more): ``ClientDisconnected``, recorded as 499."""
    meter = metered(
        state.ledger,
        state.prices,
        request.scope,
        request_id=request_id,
        model=embed_request.model,
        endpoint=endpoint,
        streamed=False,
    )
    admission = OPEN
    try:
        # The key's models and requests per minute (gateway/admission.py).
        admission = await admitted(request, embed_request.model, state)
        resolved = await state.models.embed_target(embed_request.model)  # a deployment
        if meter is not None:
            meter.backend = resolved.backend
        work = resolved.backend.embed(replace(embed_request, model=resolved.backend_model))
        result = await run_until_disconnect(request.receive, work)
    except ClientDisconnected:
        if meter is not None:
            meter.finish(499)
        raise
    except LLMBridgeError as exc:
        _refused(meter, exc)
        raise
    finally:
        await admission.finish(0)
    if meter is not None:
        meter.add_usage(Usage(input_tokens=result.input_tokens))
        meter.finish(200)
    return result


Endpoint = Callable[[Request], Awaitable[Response]]
Shortcut = Callable[[GatewayState, ChatRequest], Response | None]


def chat_endpoint(
    codec: ChatCodec,
    decode: Callable[[object, RequestLimits], ChatRequest],
    shortcut: Shortcut | None = None,
) -> Endpoint:
    """A route handler: read the body, ``decode`` it, then ``serve_chat``.

    ``shortcut`` may answer a decoded request without a backend (Ollama's "load the
    model" reply to an empty conversation); it returns ``None`` to go on.
    """

    async def endpoint(request: Request) -> Response:
        state = state_of(request)
        request_id = new_request_id()
        try:
            # Large bodies are parsed and decoded off the event loop (web/bodies.py).
            chat = await read_chat(request, state.limits, decode)
            if shortcut is not None and (early := shortcut(state, chat)) is not None:
                return early
        except LLMBridgeError as exc:
            return error_response(codec.dialect, exc, request_id)
        return await serve_chat(request, chat, codec, state=state, request_id=request_id)

    return endpoint

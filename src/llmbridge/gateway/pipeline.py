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
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from llmbridge.backends.base import Backend
from llmbridge.core.accumulate import Accumulator
from llmbridge.core.errors import (
    BackendError,
    BackendProtocolError,
    BackendTimeoutError,
    LLMBridgeError,
)
from llmbridge.core.events import ResponseEnd, ResponseStart, StreamError, StreamEvent
from llmbridge.core.limits import RequestLimits
from llmbridge.core.models import ModelInfo
from llmbridge.core.request import ChatRequest
from llmbridge.core.request_size import larger_than
from llmbridge.core.response import ChatResponse
from llmbridge.dialects.framing import dumps
from llmbridge.features.thinking import THINKING_HEADER, apply_thinking_policy, can_think
from llmbridge.features.token_count import count_request_tokens
from llmbridge.features.tool_choice import apply_tool_choice
from llmbridge.features.tool_emulation import emulate_tool_calls
from llmbridge.features.tool_healing import heal_tool_calls
from llmbridge.gateway.config import ModelRoute
from llmbridge.gateway.metrics import GatewayMetrics
from llmbridge.gateway.state import GatewayState, state_of
from llmbridge.serving.resilience import CircuitBreaker, is_transient
from llmbridge.serving.router import ModelRouter, Resolved
from llmbridge.web.bodies import read_chat
from llmbridge.web.render import Dialect, error_response, new_request_id, to_bridge_error
from llmbridge.web.streaming import ClientDisconnected, StreamingBody, run_until_disconnect

__all__ = ["ChatCodec", "chat_endpoint", "serve_chat"]

Events = AsyncIterator[StreamEvent]

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
    """Metrics and logging for one request."""

    __slots__ = ("backend", "done", "m", "metrics", "model", "started", "status")

    def __init__(self, metrics: GatewayMetrics, endpoint: str, backend: str, model: str) -> None:
        self.metrics, self.backend, self.model = metrics, backend, model
        self.m = metrics.bound(endpoint, backend, model)
        self.started = time.perf_counter()
        self.status = 200
        self.done = False
        self.m.in_flight.inc()

    def first_event(self) -> None:
        self.m.first_token.observe(time.perf_counter() - self.started)

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


async def _guarded(
    first: StreamEvent,
    events: AsyncIterator[StreamEvent],
    tracker: _Tracker,
) -> AsyncIterator[StreamEvent]:
    """The backend's stream with failures after the first event turned into a
    ``StreamError`` (so the encoder renders the dialect's in-stream error) and usage
    recorded."""
    try:
        yield first
        async for event in events:
            if isinstance(event, ResponseEnd):
                tracker.metrics.record_usage(tracker.backend, tracker.model, event.usage)
            elif isinstance(event, StreamError):
                tracker.error(event.error)
            yield event
    except Exception as exc:  # noqa: BLE001 - every failure becomes an in-stream error
        error = to_bridge_error(exc)
        tracker.error(error)
        log.warning("stream from backend %s failed: %s", tracker.backend, error.message)
        yield StreamError(error)
    finally:
        await _close(events)


TOOLS_HEADER = "x-llmbridge-tools"
FALLBACK_HEADER = "x-llmbridge-fallback"
"""Set when a fallback served the reply: ``backend/model``."""


def has_native_tools(backend: Backend, info: ModelInfo | None, route: ModelRoute | None) -> bool:
    """Whether the model calls tools itself: never on a backend without tools
    (OpenCode); else the route's ``tools`` setting; else the backend's report where it
    reports capabilities (Ollama, the embedded model); else yes: OpenAI-compatible
    servers and Anthropic take tools natively."""
    if not backend.capabilities.tools:
        return False
    if route is not None and route.tools is not None:
        return route.tools
    if backend.capabilities.model_capabilities and info is not None:
        return "tools" in info.capabilities
    return True


async def prepare(
    chat: ChatRequest, resolved: Resolved, router: ModelRouter, thinking_policy: str
) -> tuple[ChatRequest, dict[str, str]]:
    """The request as the resolved backend should get it, and headers that say what
    was changed: the backend's model name; thinking per the policy
    (features/thinking.py); ``max_tokens`` clamped to the model's limit; tool choice
    in a form the backend honours (features/tool_choice.py); and, for a model without
    tools, ``x-llmbridge-tools: emulated`` (features/tool_emulation.py)."""
    backend = resolved.backend
    route = resolved.route
    chat = replace(chat, model=resolved.backend_model)
    headers: dict[str, str] = {}
    wants_thinking = chat.thinking is not None and chat.thinking.enabled
    info = None
    if wants_thinking or chat.params.max_tokens is not None or chat.tools:
        info = await router.model_info(resolved)
    if wants_thinking:
        capable = can_think(chat.model, info, route.thinking if route else None)
        chat, dropped = apply_thinking_policy(
            chat,
            capable=capable,
            policy="strict" if thinking_policy == "strict" else "drop",
            effort_levels=backend.capabilities.thinking_effort,
        )
        if dropped:
            headers[THINKING_HEADER] = "dropped"
    limits = [x for x in (route and route.max_tokens, info and info.context_length) if x]
    wanted = chat.params.max_tokens
    if limits and wanted is not None and wanted > min(limits):
        # Claude Code asks for 32000 and more; a backend may reject or mis-size that.
        chat = replace(chat, params=replace(chat.params, max_tokens=min(limits)))
    chat = apply_tool_choice(chat, native=backend.capabilities.tool_choice)
    if chat.tools and not has_native_tools(backend, info, route):
        headers[TOOLS_HEADER] = "emulated"
    return chat, headers


def _backend_events(resolved: Resolved, prepared: ChatRequest, emulated: bool) -> Events:
    # Every dialect's output gets healed tool arguments (features/tool_healing.py); the
    # wrapper costs one isinstance check per event.
    backend = resolved.backend
    source = emulate_tool_calls(backend.chat, prepared) if emulated else backend.chat(prepared)
    return heal_tool_calls(source, prepared.tools)


class _Opener:
    """Gets a reply's first event, retrying and falling back while nothing has been
    sent to the client (serving/resilience.py). ``events`` is then the live stream."""

    __slots__ = ("changed", "chat", "events", "first_prepared", "resolved", "router", "state")

    def __init__(
        self,
        state: GatewayState,
        chat: ChatRequest,
        resolved: Resolved,
        prepared: ChatRequest,
        changed: dict[str, str],
    ) -> None:
        self.state, self.router, self.chat = state, state.router, chat
        self.resolved, self.first_prepared, self.changed = resolved, prepared, changed
        self.events = _backend_events(resolved, prepared, changed.get(TOOLS_HEADER) == "emulated")

    async def first(self) -> StreamEvent:
        breaker = self.router.breakers[self.resolved.backend.name]
        error: LLMBridgeError
        if breaker.state == "closed":  # the fast path: nothing to probe, no fallback yet
            try:
                return await self._try_first(breaker)
            except LLMBridgeError as exc:
                if not is_transient(exc):
                    raise
                error = exc
            event = await self._retry(self.resolved, breaker, error)
            if event is not None:
                return event
        elif await breaker.admit():
            outcome = await self._attempts(self.resolved, self.first_prepared, self.changed)
            if not isinstance(outcome, LLMBridgeError):
                return outcome
            error = outcome
        else:
            error = breaker.open_error()
        for target in self.router.fallbacks(self.resolved):
            fallback_breaker = self.router.breakers[target.backend.name]
            if not await fallback_breaker.admit():
                error = fallback_breaker.open_error()
                continue
            prepared, changed = await prepare(
                self.chat, target, self.router, self.state.config.thinking
            )
            outcome = await self._attempts(target, prepared, changed)
            if isinstance(outcome, LLMBridgeError):
                error = outcome
                continue
            self.changed[FALLBACK_HEADER] = f"{target.backend.name}/{target.backend_model}"
            self.state.metrics.fallback(target.backend.name)
            return outcome
        raise error

    async def _try_first(self, breaker: CircuitBreaker) -> StreamEvent:
        try:
            first = await _first_event(self.events)
            if isinstance(first, StreamError):
                raise first.error
        except LLMBridgeError as exc:
            await _close(self.events)
            breaker.failure(exc)
            raise
        breaker.success()
        return first

    async def _retry(
        self, target: Resolved, breaker: CircuitBreaker, error: LLMBridgeError
    ) -> StreamEvent | None:
        """Retries after a first failure on ``target``; ``None`` when they all fail."""
        emulated = self.changed.get(TOOLS_HEADER) == "emulated"
        if isinstance(error, BackendTimeoutError):
            return None  # it already took the whole deadline: try the next target instead
        for attempt in range(1, self.router.retry.retries + 1):
            delay = self.router.retry.delay(attempt, error)
            if delay is None or breaker.state == "open":
                return None
            self.state.metrics.retry(target.backend.name)
            await asyncio.sleep(delay)
            self.events = _backend_events(target, self.first_prepared, emulated)
            try:
                return await self._try_first(breaker)
            except LLMBridgeError as exc:
                if not is_transient(exc):
                    raise
                if isinstance(exc, BackendTimeoutError):
                    return None
                error = exc
        return None

    async def _attempts(
        self, target: Resolved, prepared: ChatRequest, changed: dict[str, str]
    ) -> StreamEvent | LLMBridgeError:
        """The first event from ``target`` with its retries, or the last error."""
        breaker = self.router.breakers[target.backend.name]
        self.changed = changed
        self.first_prepared = prepared
        self.events = _backend_events(target, prepared, changed.get(TOOLS_HEADER) == "emulated")
        try:
            return await self._try_first(breaker)
        except LLMBridgeError as exc:
            if not is_transient(exc):
                raise
            retried = await self._retry(target, breaker, exc)
            return exc if retried is None else retried


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
    router, metrics = state.router, state.metrics
    try:
        resolved = router.resolve(chat.model)
        backend_chat, changed = await prepare(chat, resolved, router, state.config.thinking)
    except LLMBridgeError as exc:
        return error_response(codec.dialect, exc, request_id)
    tracker = _Tracker(metrics, codec.endpoint, resolved.backend.name, resolved.backend_model)
    opener = _Opener(state, chat, resolved, backend_chat, changed)

    async def opened() -> StreamEvent:
        """The first event, ready to send; an error before it is raised."""
        first = await opener.first()
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
        return await _accumulate(_guarded(first, opener.events, tracker))

    try:
        if chat.stream:
            first = await run_until_disconnect(request.receive, opened())
        else:
            # One disconnect watcher for the whole non-streamed request.
            response = await run_until_disconnect(request.receive, completed())
    except ClientDisconnected:
        await _close(opener.events)
        tracker.finish(499)
        return Response(status_code=499)
    except Exception as exc:  # noqa: BLE001 - rendered in the caller's dialect
        await _close(opener.events)
        error = to_bridge_error(exc)
        if not isinstance(exc, LLMBridgeError) or tracker.status == 200:
            tracker.error(error)
        tracker.finish()
        failed = dict(opener.changed)
        if isinstance(error, BackendError) and error.retry_after is not None:
            failed["retry-after"] = str(math.ceil(error.retry_after))
        return error_response(codec.dialect, error, request_id, headers=failed)

    headers.update(opener.changed)
    if not chat.stream:
        tracker.finish()
        return Response(
            dumps(codec.encode_response(response, chat)),
            media_type="application/json",
            headers=headers,
        )

    async def on_close(disconnected: bool) -> None:
        tracker.finish(499 if disconnected else None)

    return StreamingBody(
        codec.encode_stream(_guarded(first, opener.events, tracker), chat),
        media_type=codec.stream_media_type,
        headers=headers,
        on_close=on_close,
    )


async def _first_event(events: AsyncIterator[StreamEvent]) -> StreamEvent:
    try:
        return await anext(events)
    except StopAsyncIteration:
        raise BackendProtocolError("the backend ended its reply without sending anything") from None


async def _accumulate(stream: AsyncIterator[StreamEvent]) -> ChatResponse:
    acc = Accumulator()
    try:
        async for event in stream:
            acc.add(event)
    finally:
        await asyncio.shield(_close(stream))
    return acc.response()


async def _close(stream: AsyncIterator[StreamEvent]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()


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

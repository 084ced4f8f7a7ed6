"""One way to call a model: ``Models`` and ``open_models``.

``async with open_models(config) as models:`` builds the configured backends
(serving/build.py), starts them, and routes by public model name
(serving/router.py); leaving the block closes them. The gateway, the agent, the
profiler and the CLI all call models through a ``Models``:

- ``chat(request)`` streams the reply to a request naming a public model: the
  request is fitted to the backend (serving/prepare.py), tools are emulated where
  the model has none, every reply's tool arguments are healed
  (features/tool_healing.py), and before the first event transient failures are
  retried, an open circuit is skipped and the route's fallbacks are tried
  (serving/resilience.py). After the first event nothing is retried: the caller
  has already seen part of the reply.
- ``open(request)`` does the same up to the first event and returns it with the
  live rest of the stream and what serving changed (``Changes``), for a caller that
  must decide on its response before streaming (the gateway sends headers).

Only this layer retries: backends report failures and never retry themselves.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Protocol

from llmbridge.backends.base import Backend
from llmbridge.core.errors import BackendProtocolError, BackendTimeoutError, LLMBridgeError
from llmbridge.core.events import StreamError, StreamEvent
from llmbridge.core.models import ModelInfo
from llmbridge.core.request import ChatRequest
from llmbridge.core.stream import EventStream
from llmbridge.features.tool_emulation import emulate_tool_calls
from llmbridge.features.tool_healing import heal_tool_calls
from llmbridge.serving.build import Host, build_backends
from llmbridge.serving.config import ServingConfig
from llmbridge.serving.prepare import Prepared, prepare
from llmbridge.serving.resilience import CircuitBreaker, is_transient
from llmbridge.serving.router import ModelRouter, Resolved

__all__ = ["Models", "Reply", "ServingObserver", "open_models"]

log = logging.getLogger("llmbridge.serving")


class ServingObserver(Protocol):
    """Told of each retry and each fallback that served a reply (the gateway's
    metrics count them)."""

    def retry(self, backend: str) -> None: ...

    def fallback(self, backend: str) -> None: ...


class _Unobserved:
    def retry(self, backend: str) -> None:
        pass

    def fallback(self, backend: str) -> None:
        pass


@dataclass(frozen=True, slots=True)
class Reply:
    """A reply whose first event has arrived: ``first``, then the live ``rest``,
    from ``prepared.target`` with ``prepared.changes`` (a fallback included)."""

    first: StreamEvent
    rest: EventStream
    prepared: Prepared


def open_models(
    config: ServingConfig,
    *,
    host: Host | None = None,
    backends: dict[str, Backend] | None = None,
    observer: ServingObserver | None = None,
) -> Models:
    """The configured models, to use as ``async with open_models(config) as models``.

    ``backends`` replaces construction from ``config`` (tests and benchmarks pass
    scripted ones); ``host`` is what backends need to know of the serving process.
    """
    if backends is None:
        backends = build_backends(config, host)
    return Models(config, backends, observer=observer)


class Models:
    """Every configured model, callable by public name (module docstring)."""

    def __init__(
        self,
        config: ServingConfig,
        backends: dict[str, Backend],
        *,
        observer: ServingObserver | None = None,
    ) -> None:
        self.config = config
        self.backends = backends
        self.router = ModelRouter(config, backends)
        self.observer: ServingObserver = observer or _Unobserved()
        self.failed_to_start: dict[str, LLMBridgeError] = {}
        """Backends whose ``start`` failed, and why (``start`` fills it)."""

    async def __aenter__(self) -> Models:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Start every backend. One that fails is logged and left down (``/health``
        reports it; its routes fall back or answer 503): the others keep serving."""
        for backend in self.backends.values():
            try:
                await backend.start()
            except LLMBridgeError as exc:
                self.failed_to_start[backend.name] = exc
                log.error("backend %s failed to start: %s", backend.name, exc.message)

    async def aclose(self) -> None:
        for backend in self.backends.values():
            try:
                await backend.aclose()
            except Exception:
                log.exception("backend %s failed to close", backend.name)

    # -- what a model is -----------------------------------------------------------

    def resolve(self, model: str) -> Resolved:
        """Where a request for ``model`` goes (``ModelNotFoundError`` if nowhere)."""
        return self.router.resolve(model)

    def backend_name(self, model: str) -> str:
        """The configured backend ``model`` resolves to."""
        return self.router.resolve(model).backend.name

    async def context_window(self, model: str) -> int | None:
        """``model``'s context window in tokens: the route's ``context_length``, else
        the backend's report (cached by the router), else ``None`` (unknown)."""
        resolved = self.router.resolve(model)
        if resolved.route is not None and resolved.route.context_length:
            return resolved.route.context_length
        info = await self.router.model_info(resolved)
        return info.context_length if info is not None and info.context_length else None

    async def list_models(self) -> list[ModelInfo]:
        return await self.router.list_models()

    async def prepare(self, request: ChatRequest, target: Resolved | None = None) -> Prepared:
        """``request`` fitted to the backend ``target`` (default: where its model
        resolves), with what changed (serving/prepare.py)."""
        target = target or self.router.resolve(request.model)
        return await prepare(request, target, self.router, self.config.thinking)

    # -- calling it ----------------------------------------------------------------

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        """Stream the reply to ``request`` (``request.model`` is the public name).
        Closing this stream closes the backend's."""
        reply = await self.open(request)
        async with aclosing(reply.rest) as rest:
            yield reply.first
            async for event in rest:
                yield event

    async def open(self, request: ChatRequest, prepared: Prepared | None = None) -> Reply:
        """The reply's first event, retrying and falling back while nothing has been
        sent (module docstring). ``prepared`` is ``request`` already prepared for
        where its model resolves. Raises the last failure when every try failed."""
        if prepared is None:
            prepared = await self.prepare(request)
        return await _Opening(self, request).first(prepared)


class _Opening:
    """One reply being opened: the tries in order, and the stream of the current one
    (closed if the opening fails or is cancelled)."""

    __slots__ = ("models", "request", "stream")

    def __init__(self, models: Models, request: ChatRequest) -> None:
        self.models = models
        self.request = request
        self.stream: EventStream | None = None

    async def first(self, prepared: Prepared) -> Reply:
        try:
            return await self._first(prepared)
        except BaseException:
            # A failure or the caller's cancellation (its client left): release the
            # backend's stream now, not at garbage collection.
            if self.stream is not None:
                await asyncio.shield(self.stream.aclose())
            raise

    async def _first(self, prepared: Prepared) -> Reply:
        router = self.models.router
        breaker = router.breakers[prepared.target.backend.name]
        error: LLMBridgeError
        if breaker.state == "closed":  # the fast path: nothing to probe, no fallback yet
            try:
                return await self._try(prepared, breaker)
            except LLMBridgeError as exc:
                if not is_transient(exc):
                    raise
                error = exc
            reply = await self._retry(prepared, breaker, error)
            if reply is not None:
                return reply
        elif await breaker.admit():
            outcome = await self._attempts(prepared)
            if isinstance(outcome, Reply):
                return outcome
            error = outcome
        else:
            error = breaker.open_error()
        for target in router.fallbacks(prepared.target):
            fallback_breaker = router.breakers[target.backend.name]
            if not await fallback_breaker.admit():
                error = fallback_breaker.open_error()
                continue
            outcome = await self._attempts(await self.models.prepare(self.request, target))
            if isinstance(outcome, LLMBridgeError):
                error = outcome
                continue
            self.models.observer.fallback(target.backend.name)
            served = f"{target.backend.name}/{target.backend_model}"
            changes = replace(outcome.prepared.changes, fallback=served)
            return replace(outcome, prepared=replace(outcome.prepared, changes=changes))
        raise error

    def _events(self, prepared: Prepared) -> EventStream:
        # Every reply gets healed tool arguments (features/tool_healing.py); the
        # wrapper costs one isinstance check per event.
        backend, request = prepared.target.backend, prepared.request
        source: EventStream
        if prepared.changes.tools_emulated:
            source = emulate_tool_calls(backend.chat, request)
        else:
            source = backend.chat(request)
        return heal_tool_calls(source, request.tools)

    async def _try(self, prepared: Prepared, breaker: CircuitBreaker) -> Reply:
        events = self.stream = self._events(prepared)
        try:
            try:
                first = await anext(events)
            except StopAsyncIteration:
                raise BackendProtocolError(
                    "the backend ended its reply without sending anything"
                ) from None
            if isinstance(first, StreamError):
                raise first.error
        except LLMBridgeError as exc:
            await events.aclose()
            breaker.failure(exc)
            raise
        breaker.success()
        return Reply(first, events, prepared)

    async def _retry(
        self, prepared: Prepared, breaker: CircuitBreaker, error: LLMBridgeError
    ) -> Reply | None:
        """Retries after a first failure on ``prepared.target``; ``None`` when they
        all fail."""
        if isinstance(error, BackendTimeoutError):
            return None  # it already took the whole deadline: try the next target instead
        policy = self.models.router.retry
        for attempt in range(1, policy.retries + 1):
            delay = policy.delay(attempt, error)
            if delay is None or breaker.state == "open":
                return None
            self.models.observer.retry(prepared.target.backend.name)
            await asyncio.sleep(delay)
            try:
                return await self._try(prepared, breaker)
            except LLMBridgeError as exc:
                if not is_transient(exc):
                    raise
                if isinstance(exc, BackendTimeoutError):
                    return None
                error = exc
        return None

    async def _attempts(self, prepared: Prepared) -> Reply | LLMBridgeError:
        """The first event from ``prepared.target`` with its retries, or the last error."""
        breaker = self.models.router.breakers[prepared.target.backend.name]
        try:
            return await self._try(prepared, breaker)
        except LLMBridgeError as exc:
            if not is_transient(exc):
                raise
            retried = await self._retry(prepared, breaker, exc)
            return exc if retried is None else retried

"""One way to call a model: ``Models`` and ``open_models``.

``async with open_models(config) as models:`` builds the configured backends
(serving/build.py), starts them, and routes by public model name
(serving/router.py); leaving the block closes them. The gateway, the agent, the
profiler and the CLI all call models through a ``Models``:

- ``chat(request)`` streams the reply to a request naming a public model: the
  request is fitted to the backend (serving/prepare/), tools are emulated where
  the model has none, every reply's tool arguments are healed
  (features/tool_healing.py), and before the first event transient failures are
  retried, an open circuit is skipped and the route's fallbacks are tried
  (serving/resilience.py). After the first event nothing is retried: the caller
  has already seen part of the reply.
- ``open(request)`` does the same up to the first event and returns it with the
  live rest of the stream and what serving changed (``Changes``), for a caller that
  must decide on its response before streaming (the gateway sends headers).

A route with several servers (``backends:``) has its deployments ordered per request
by its strategy or the request's session (serving/deployments.py); the first that
answers serves, the others come before the route's fallbacks. Their requests in
flight are counted in the shared state (``state``, ``state/``: this process's memory,
or Redis across replicas) from the try's start until its stream closes, whichever
way it closes (the end, an error, the caller's cancellation).

Only this layer retries: backends report failures and never retry themselves.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Coroutine, Mapping
from contextlib import aclosing
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any, Protocol

from llmbridge.backends.base import Backend
from llmbridge.core.errors import BackendProtocolError, BackendTimeoutError, LLMBridgeError
from llmbridge.core.events import StreamError, StreamEvent
from llmbridge.core.frozen import faster_frozen_init
from llmbridge.core.model_info import ModelInfo
from llmbridge.core.request import ChatRequest
from llmbridge.core.stream import EventStream
from llmbridge.core.tracing import REQUEST_TRACE
from llmbridge.features.tool_emulation import emulate_tool_calls
from llmbridge.features.tool_healing import heal_tool_calls
from llmbridge.serving.build import Host, build_backends
from llmbridge.serving.config import ServingConfig
from llmbridge.serving.deployments import (
    client_session,
    in_flight_key,
    latency_key,
    session_key,
)
from llmbridge.serving.prepare import Prepared, prepare
from llmbridge.serving.resilience import CircuitBreaker, attempt_span, is_transient
from llmbridge.serving.router import ModelRouter, Resolved
from llmbridge.state.base import SharedState
from llmbridge.state.local import LocalState

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


@faster_frozen_init
@dataclass(frozen=True, slots=True)
class Reply:
    """A reply whose first event has arrived: ``first``, then the live ``rest``,
    from ``prepared.target`` with ``prepared.changes`` (a fallback included)."""

    first: StreamEvent
    rest: EventStream
    prepared: Prepared
    retries: int = 0
    """Tries of a target again before this reply (the usage ledger's ``retries``)."""
    fallbacks: int = 0
    """Fallback targets tried before this reply, the one that answered included."""

    @property
    def deployment(self) -> str:
        """The configured backend that serves it (after deployments and fallbacks)."""
        return self.prepared.target.backend.name


def open_models(
    config: ServingConfig,
    *,
    host: Host | None = None,
    backends: dict[str, Backend] | None = None,
    observer: ServingObserver | None = None,
    state: SharedState | None = None,
) -> Models:
    """The configured models, to use as ``async with open_models(config) as models``.

    ``backends`` replaces construction from ``config`` (tests and benchmarks pass
    scripted ones); ``host`` is what backends need to know of the serving process;
    ``state`` is where deployments' counts are shared (default: this process).
    """
    if backends is None:
        backends = build_backends(config, host)
    return Models(config, backends, observer=observer, state=state)


class Models:
    """Every configured model, callable by public name (module docstring)."""

    def __init__(
        self,
        config: ServingConfig,
        backends: dict[str, Backend],
        *,
        observer: ServingObserver | None = None,
        state: SharedState | None = None,
    ) -> None:
        self.config = config
        self.backends = backends
        self.router = ModelRouter(config, backends)
        self.relayed_dialects = frozenset(
            b.capabilities.relays for b in backends.values() if b.capabilities.relays
        )
        """The client dialects some backend relays (the pass-through path, core/relay.py):
        a route of another dialect does not keep the client's body for it."""
        self.observer: ServingObserver = observer or _Unobserved()
        self.state: SharedState = state or LocalState()
        """Where deployments' in-flight counts, latencies and turns are kept; the
        gateway puts its shared state here when it opens one (read per request)."""
        self.failed_to_start: dict[str, LLMBridgeError] = {}
        """Backends whose ``start`` failed, and why (``start`` fills it)."""
        self._tasks: set[asyncio.Task[None]] = set()
        """Shared-state updates off the reply's path (a latency sample)."""

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
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=1.0)
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
        """The configured backend ``model`` resolves to (a route's first server)."""
        return self.router.resolve(model).backend.name

    def with_affinity(self, request: ChatRequest, headers: Mapping[str, str]) -> ChatRequest:
        """``request`` with its session key (``affinity_key``) when its route keeps
        sessions on one server (``affinity``): the route's ``affinity_header`` from
        ``headers``, else the client's session (``deployments.client_session``). Raises
        ``ModelNotFoundError`` for a model served nowhere."""
        route = self.router.resolve(request.model).route
        if route is None or not route.affinity or request.affinity_key:
            return request
        header = route.affinity_header
        key = (headers.get(header) if header else None) or client_session(
            headers, request.provider_details
        )
        return replace(request, affinity_key=key) if key else request

    async def embed_target(self, model: str) -> Resolved:
        """Where an embedding request for ``model`` goes: its route's backend, or of a
        route's deployments the first its strategy orders (no session: embeddings
        keep no conversation) whose circuit is not open, else the first. One short
        call, not counted in flight and not moved to another deployment on failure."""
        resolved = self.router.resolve(model)
        pool = self.router.pool(resolved)
        if pool is None:
            return resolved
        order = await pool.order(self.state, None)
        targets = [self.router.deployment(resolved, pool.deployments[i].name) for i in order]
        for target in targets:
            if await self.router.breakers[target.backend.name].admit():
                return target
        return targets[0]

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
        resolves), with what changed (serving/prepare/)."""
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

    # -- deployments' shared counts ------------------------------------------------

    async def counted(self, backend: str, source: EventStream) -> AsyncGenerator[StreamEvent, None]:
        """``source`` (a reply from the deployment ``backend``) holding one of its
        in-flight slots from the first read until it closes, however it closes; its
        first event's delay is a latency sample for ``latency`` routes."""
        state = self.state  # the slot goes back where it was taken, even if swapped
        slot = in_flight_key(backend)
        await self._acquire(state, slot)
        try:
            async with aclosing(source) as events:
                started = time.perf_counter()
                timed = backend in self.router.timed
                async for event in events:
                    if timed:
                        timed = False
                        if not isinstance(event, StreamError):  # a fast failure is no sample
                            sample = state.observe_latency(
                                latency_key(backend), time.perf_counter() - started
                            )
                            if state.kind == "local":
                                await sample  # never suspends: the sample counts at once
                            else:
                                self._spawn(sample)  # the first event waits for no round trip
                    yield event
        finally:
            if state.kind == "local":
                await state.release(slot)  # never suspends: nothing to shield
            else:
                # Shielded: a second cancellation (the server shutting down) must not
                # leave the count taken.
                await asyncio.shield(state.release(slot))

    async def _acquire(self, state: SharedState, slot: str) -> None:
        if state.kind == "local":
            await state.acquire(slot, None)  # never suspends (state/local.py)
            return
        # Over the network the increment may land after our caller was cancelled
        # (its client left): then the slot is given back when it does.
        acquiring = asyncio.ensure_future(state.acquire(slot, None))
        try:
            await asyncio.shield(acquiring)
        except asyncio.CancelledError:

            def give_back(task: asyncio.Future[bool]) -> None:
                if not task.cancelled() and task.exception() is None:
                    self._spawn(state.release(slot))

            acquiring.add_done_callback(give_back)
            raise

    def _spawn(self, update: Coroutine[Any, Any, None]) -> None:
        """Run a shared-state update without waiting for it (kept referenced until done)."""
        task = asyncio.ensure_future(update)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning("a shared-state update failed: %r", exc)


class _Opening:
    """One reply being opened: the tries in order, and the stream of the current one
    (closed if the opening fails or is cancelled)."""

    __slots__ = ("fallback", "fallbacks", "models", "request", "retries", "stream")

    def __init__(self, models: Models, request: ChatRequest) -> None:
        self.models = models
        self.request = request
        self.stream: EventStream | None = None
        self.retries = 0
        self.fallbacks = 0
        """Counted for the reply (``Reply.retries``, ``Reply.fallbacks``)."""
        self.fallback = False
        """The tries are the route's fallbacks' (a traced request's spans say it)."""

    async def first(self, prepared: Prepared) -> Reply:
        try:
            reply = await self._first(prepared)
        except BaseException:
            # A failure or the caller's cancellation (its client left): release the
            # backend's stream now, not at garbage collection.
            if self.stream is not None:
                await asyncio.shield(self.stream.aclose())
            raise
        if self.retries or self.fallbacks:
            return replace(reply, retries=self.retries, fallbacks=self.fallbacks)
        return reply

    async def _first(self, prepared: Prepared) -> Reply:
        models, router = self.models, self.models.router
        error: LLMBridgeError | None = None
        for target in await self._deployments(prepared.target):
            breaker = router.breakers[target.backend.name]
            if not await breaker.admit():  # open: skipped, or probed when due
                error = breaker.open_error()
                continue
            if target.backend is not prepared.target.backend:
                prepared = await models.prepare(self.request, target)
            outcome = await self._attempts(prepared)
            if isinstance(outcome, Reply):
                return outcome
            error = outcome
        self.fallback = True
        for target in router.fallbacks(prepared.target):
            fallback_breaker = router.breakers[target.backend.name]
            if not await fallback_breaker.admit():
                error = fallback_breaker.open_error()
                continue
            self.fallbacks += 1
            outcome = await self._attempts(await models.prepare(self.request, target))
            if isinstance(outcome, LLMBridgeError):
                error = outcome
                continue
            models.observer.fallback(target.backend.name)
            served = f"{target.backend.name}/{target.backend_model}"
            changes = replace(outcome.prepared.changes, fallback=served)
            return replace(outcome, prepared=replace(outcome.prepared, changes=changes))
        assert error is not None  # every target was tried or skipped, each with its error
        raise error

    async def _deployments(self, resolved: Resolved) -> list[Resolved]:
        """Where to try ``resolved``'s route, in order: its one backend, or its
        deployments as its strategy or the request's session orders them."""
        router = self.models.router
        pool = router.pool(resolved)
        if pool is None:
            return [resolved]
        key = None
        if pool.affinity:
            key = self.request.affinity_key or session_key(self.request.provider_details)
        order = await pool.order(self.models.state, key)
        return [router.deployment(resolved, pool.deployments[i].name) for i in order]

    def _events(self, prepared: Prepared) -> EventStream:
        # A reply to a request with tools gets its tool calls' arguments healed
        # (features/tool_healing.py). Without tools there is no schema to heal against
        # and a call is not expected: the reply skips the wrapper, one async-generator
        # hop an event.
        backend, request = prepared.target.backend, prepared.request
        source: EventStream
        if prepared.changes.tools_emulated:
            source = emulate_tool_calls(
                backend.chat, request, structured=backend.capabilities.structured_output
            )
        else:
            source = backend.chat(request)
        # The pass-through path relays bytes: there is nothing to heal (fit.py says when).
        if request.relay is not None or not request.tools:
            healed = source
        else:
            healed = heal_tool_calls(source, request.tools)
        if backend.name in self.models.router.counted:
            return self.models.counted(backend.name, healed)
        return healed

    async def _try(self, prepared: Prepared, breaker: CircuitBreaker) -> Reply:
        trace = REQUEST_TRACE.get()  # None unless the gateway traces this request
        span = None
        if trace is not None:  # each try its own span: retries, deployments, fallbacks
            target = prepared.target
            span = attempt_span(trace, target.backend, target.backend_model, fallback=self.fallback)
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
            if span is not None:
                span.fail(exc)
                span.end()
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
            self.retries += 1
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

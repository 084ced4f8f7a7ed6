"""The OpenCode server as a plain-LLM backend (seed 000, with its optimisations).

A request becomes one prompt in a session of its own (backends/opencode/prompt.py),
sent with ``prompt_async`` after the request has subscribed to the session's events
on the shared ``/event`` stream (event_hub.py); the reply streams as OpenCode produces
it (turn.py), and the turn ends on ``session.status`` idle. Nothing is polled.

Deadlines (``OpenCodeTimeouts``, the seed's 20 / 30 / 5 s by default; longer for a
model on a local provider, deadlines.py): the prompt must be accepted and produce
output within ``prompt`` seconds; after that the reply may take as long as it keeps
streaming, and fails only when ``idle`` seconds pass without an event from the
session (or, if set, ``total`` seconds after the prompt); past any of them, the
session is aborted and the request fails with a 504 (or an in-stream error once
output has been sent) saying which deadline passed and how to raise it. The seed
polled for at most 30 s in all, which cut a long reply that was streaming steadily
(Claude Code writing a file): its 30 s is the idle deadline here.
The backend never retries: only the serving layer does (serving/models.py, its
``resilience.retries``), and only before the reply's first event, which this backend
holds back until there is output. It raises each failure so that
``serving.resilience.is_transient`` judges it: the server unreachable or restarted,
the event stream lost, a session not created within ``prompt`` seconds and a warm
session gone are ``BackendUnavailableError`` (transient); a provider error OpenCode
reports carries OpenCode's ``isRetryable`` as ``BackendError.retryable``; a deadline
missed after the prompt is a ``BackendTimeoutError``, not retried. A spawned server
that died is restarted once before a request fails.

Sessions come from a warm pool and are deleted (aborted first if unfinished) in the
background (sessions.py). Each request logs its latency breakdown (the seed's
"Performance Considerations") once its cleanup is done: parse, session, prompt,
first token, completion, convert, cleanup.

Tools: OpenCode's own are off on every prompt and in its configuration; this backend
reports ``Capabilities(tools=False)``, so the gateway emulates tool calling over it
(features/tool_emulation.py) for every client that offers tools.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from llmbridge.backends.base import Backend, BackendHealth, Capabilities
from llmbridge.backends.http import HTTPSettings, HTTPTransport
from llmbridge.backends.opencode.deadlines import (
    Deadlines,
    OpenCodeTimeouts,
    Stage,
)
from llmbridge.backends.opencode.event_hub import EventHub
from llmbridge.backends.opencode.prompt import (
    ModelRef,
    parse_model_ref,
    prompt_body,
    resolve_model,
)
from llmbridge.backends.opencode.server import (
    AGENT_NAME,
    OpenCodeServer,
    SpawnSettings,
    local_providers,
)
from llmbridge.backends.opencode.sessions import SessionPool
from llmbridge.backends.opencode.turn import Turn, as_dict
from llmbridge.core.errors import (
    BackendHTTPError,
    BackendTimeoutError,
    BackendUnavailableError,
    LLMBridgeError,
)
from llmbridge.core.events import ResponseEnd, ResponseStart, StreamEvent
from llmbridge.core.hosts import is_loopback_url
from llmbridge.core.ids import new_id
from llmbridge.core.model_info import Capability, ModelInfo
from llmbridge.core.request import ChatRequest

__all__ = ["LatencyBreakdown", "OpenCodeBackend", "OpenCodeTimeouts"]

log = logging.getLogger("llmbridge.opencode")

_CONNECT_SECONDS = 5.0


@dataclass(slots=True)
class LatencyBreakdown:
    """Where one request's time went, in seconds (``None``: that stage never ran)."""

    session_id: str = ""
    pooled: bool = False
    parse: float | None = None
    session: float | None = None
    prompt: float | None = None
    first_token: float | None = None
    completion: float | None = None
    convert: float = 0.0
    cleanup: float | None = None
    outcome: str = "ok"
    cleaned: bool = False
    """Whether the background cleanup has finished (``cleanup`` is final then)."""

    def line(self) -> str:
        def ms(value: float | None) -> str:
            return "-" if value is None else f"{value * 1000:.1f}ms"

        return (
            f"opencode {self.session_id or '(no session)'} {self.outcome}: "
            f"parse={ms(self.parse)} session={ms(self.session)}"
            f"{' (pooled)' if self.pooled else ''} prompt={ms(self.prompt)} "
            f"first_token={ms(self.first_token)} completion={ms(self.completion)} "
            f"convert={ms(self.convert)} cleanup={ms(self.cleanup)}"
        )


def _outcome(exc: BaseException) -> str:
    if isinstance(exc, GeneratorExit | asyncio.CancelledError):
        return "cancelled"
    return type(exc).__name__


class OpenCodeBackend(Backend):
    """Serves chat from an OpenCode server, spawned (``spawn``) or by ``url``."""

    kind = "opencode"
    # A plain prompt: no tools (emulated), and its agent configuration sets sampling.
    capabilities = Capabilities(tools=False, sampling=frozenset())

    def __init__(
        self,
        name: str,
        *,
        url: str | None = None,
        password: str | None = None,
        spawn: SpawnSettings | None = None,
        default_model: str | None = None,
        timeouts: OpenCodeTimeouts | None = None,
        local_timeouts: OpenCodeTimeouts | None = None,
        pool_size: int = 2,
    ) -> None:
        super().__init__(name)
        self.server = OpenCodeServer(url=url, password=password, spawn=spawn)
        self.timeouts = timeouts or OpenCodeTimeouts()
        self.local_timeouts = local_timeouts
        """The deadlines of a model on a local provider (deadlines.py); ``None``: the
        same as every other model's."""
        self.local_providers = local_providers(spawn)
        """The providers that serve their models from this machine: ``self`` or a
        loopback URL (more are added from OpenCode's own list once it is read)."""
        self.default_model = parse_model_ref(default_model) if default_model else None
        self.pool = SessionPool(
            self._call, size=pool_size, delete_timeout=self.timeouts.delete, backend=name
        )
        self.hub = EventHub(self._event_transport, name)
        self.breakdowns: deque[LatencyBreakdown] = deque(maxlen=1024)
        """The latest requests' breakdowns, in the order they ended (benchmarks read
        them); each is logged once its session's cleanup is done."""
        self._http: HTTPTransport | None = None
        self._events_http: HTTPTransport | None = None
        self._generation = -1
        self._providers: dict[str, dict[str, Any]] | None = None
        self._server_default: ModelRef | None = None
        self._agent: str | None = None
        self._background: set[asyncio.Task[Any]] = set()

    def timeouts_for(self, model: ModelRef) -> OpenCodeTimeouts:
        """The deadlines of a prompt to ``model``: longer when its provider is local."""
        if self.local_timeouts is not None and model.provider in self.local_providers:
            return self.local_timeouts
        return self.timeouts

    @property
    def public_name(self) -> str | None:
        """The model every name that is not an OpenCode PROVIDER/MODEL gets."""
        model = self.default_model or self._server_default
        return None if model is None else str(model)

    # -- lifecycle --------------------------------------------------------------

    async def start(self) -> None:
        await self.server.start()
        await self._ensure_ready()
        self.pool.refill()

    async def aclose(self) -> None:
        await self.pool.aclose()
        # Replies to OpenCode's permission and question requests still in flight: each
        # is bounded by its own deadline, and none may outlive the transports.
        if self._background:
            await asyncio.wait(list(self._background), timeout=self.timeouts.delete + 1)
        for task in list(self._background):
            task.cancel()
        await self.hub.aclose()
        for transport in (self._http, self._events_http):
            if transport is not None:
                await transport.aclose()
        await self.server.stop()

    async def _ensure_ready(self) -> None:
        """A live server (restarted once if a spawned one died), transports to its
        current address, and an open event stream."""
        await self.server.restart_if_exited()
        if self._generation != self.server.restarts:
            await self._connect()
        # The stream opens in milliseconds when the server is up; a dead one should
        # fail the request (or its one retry) quickly, not at the prompt deadline.
        await self.hub.wait_connected(min(self.timeouts.prompt, _CONNECT_SECONDS))
        if self._providers is None:
            await self._discover()

    async def _connect(self) -> None:
        assert self.server.url is not None
        old = (self._http, self._events_http)
        self._generation = self.server.restarts
        headers = self.server.headers
        # No single answer from OpenCode's API takes longer than the longest wait
        # for an event (prompt_async answers at once; the reply comes as events).
        longest = [self.timeouts, *([self.local_timeouts] if self.local_timeouts else [])]
        read = max(t for ts in longest for t in (ts.prompt, ts.idle)) + 5
        self._http = HTTPTransport(
            self.name, self.server.url, HTTPSettings(connect=5, read=read), headers
        )
        # The event stream carries a heartbeat every 10 s: 30 s of silence means dead.
        self._events_http = HTTPTransport(
            self.name, self.server.url, HTTPSettings(connect=5, read=30), headers
        )
        for transport in old:
            if transport is not None:
                await transport.aclose()
        self.pool.reset()
        self.hub.reconnect()

    def _event_transport(self) -> HTTPTransport:
        assert self._events_http is not None
        return self._events_http

    async def _call(self, method: str, path: str, body: Any = None) -> object:
        if self._http is None:
            raise BackendUnavailableError(
                f"backend '{self.name}': the OpenCode server is not running", backend=self.name
            )
        return await self._http.request_json(method, path, body)

    async def _discover(self) -> None:
        """Which providers and models OpenCode has, its default model, and whether
        our plain agent exists (a server reached by URL may not define it)."""
        try:
            providers = await self._call("GET", "config/providers")
            config = await self._call("GET", "config")
            agents = await self._call("GET", "agent")
        except LLMBridgeError as exc:
            log.warning("backend %s: could not read OpenCode's providers: %s", self.name, exc)
            return
        listed = providers.get("providers") if isinstance(providers, dict) else None
        self._providers = {
            str(p["id"]): p for p in listed or [] if isinstance(p, dict) and "id" in p
        }
        for pid, provider in self._providers.items():
            base_url = as_dict(provider.get("options")).get("baseURL")
            if isinstance(base_url, str) and is_loopback_url(base_url):
                self.local_providers.add(pid)
        model = config.get("model") if isinstance(config, dict) else None
        if isinstance(model, str) and "/" in model:
            self._server_default = parse_model_ref(model)
        names = (
            {a.get("name") for a in agents if isinstance(a, dict)}
            if isinstance(agents, list)
            else set()
        )
        self._agent = AGENT_NAME if AGENT_NAME in names else None
        if self._agent is None:
            log.warning(
                "backend %s: the OpenCode server defines no '%s' agent, so its default "
                "coding-agent prompt precedes every request's system text (tools stay off)",
                self.name,
                AGENT_NAME,
            )

    # -- chat ---------------------------------------------------------------------

    def _model_for(self, name: str) -> ModelRef:
        known = None if self._providers is None else set(self._providers)
        return resolve_model(name, self.default_model or self._server_default, known)

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        """One prompt in a session of its own; no retry here (module docstring)."""
        breakdown = LatencyBreakdown()
        clock = time.perf_counter
        began = clock()
        model = self._model_for(request.model)
        body = prompt_body(request, model, self._agent)
        breakdown.parse = clock() - began
        await self._ensure_ready()  # BackendUnavailableError when the server is not there
        timeouts = self.timeouts_for(model)
        began = clock()
        try:
            async with asyncio.timeout(timeouts.prompt):
                sid, breakdown.pooled = await self.pool.acquire()
        except (TimeoutError, BackendTimeoutError) as exc:
            # Nothing was prompted yet: the server is not taking work, and a second try
            # may find it back (unlike a prompt's deadline, which is not retried).
            raise BackendUnavailableError(
                f"backend '{self.name}': OpenCode did not create a session within "
                f"{timeouts.prompt:g} s (`prompt_timeout`)",
                backend=self.name,
            ) from exc
        breakdown.session = clock() - began
        breakdown.session_id = sid
        finished = False
        try:
            # aclosing: a client that hangs up ends the turn's event subscription now,
            # so the session's abort and deletion start at once, not at GC time.
            turn = self._run_turn(sid, request, body, timeouts, breakdown)
            async with aclosing(turn) as turn_events:
                async for event in turn_events:
                    # The turn is over once its end is out: a streaming consumer stops
                    # reading there, and closing this generator then is no cancellation
                    # (no abort for a session that finished, and the outcome stays ok).
                    finished = finished or isinstance(event, ResponseEnd)
                    yield event
            finished = True
        except BaseException as exc:
            if not finished:
                breakdown.outcome = _outcome(exc)
            raise
        finally:
            self.breakdowns.append(breakdown)
            cleanup = self.pool.discard(sid, abort=not finished)
            cleanup.add_done_callback(lambda task: self._log_breakdown(breakdown, task))

    async def _run_turn(
        self,
        sid: str,
        request: ChatRequest,
        body: dict[str, Any],
        timeouts: OpenCodeTimeouts,
        breakdown: LatencyBreakdown,
    ) -> AsyncGenerator[StreamEvent, None]:
        clock = time.perf_counter
        turn = Turn(self.name)
        started = False
        with self.hub.subscribe(sid) as queue:
            sent = clock()
            deadlines = Deadlines(timeouts, sent)
            try:
                async with asyncio.timeout(timeouts.prompt):
                    await self._call("POST", f"session/{sid}/prompt_async", body)
            except TimeoutError:
                raise self._timeout(deadlines, deadlines.accept, None) from None
            except BackendHTTPError as exc:
                if exc.backend_status != 404:
                    raise
                # Not the caller's 404: the warm session is gone (OpenCode restarted, or
                # deleted it), and a retry takes another one.
                raise BackendUnavailableError(
                    f"backend '{self.name}': OpenCode's session {sid} is gone ({exc.message})",
                    backend=self.name,
                ) from exc
            breakdown.prompt = clock() - sent
            while not turn.done:
                event = await self._next_event(queue, deadlines, turn)
                converting = clock()
                out = turn.feed(event)
                breakdown.convert += clock() - converting
                if not turn.retry_report:
                    deadlines.heard(converting)
                if turn.to_reject:
                    self._reject(turn.to_reject)
                    turn.to_reject = []
                if turn.failure is not None:
                    raise turn.failure
                if out:
                    if not started:
                        started = True
                        breakdown.first_token = clock() - sent
                        yield self._response_start(request)
                    for item in out:
                        yield item
            if not started:
                yield self._response_start(request)
            breakdown.completion = clock() - sent
            for item in turn.finish():
                yield item

    async def _next_event(
        self, queue: asyncio.Queue[dict[str, Any] | None], deadlines: Deadlines, turn: Turn
    ) -> dict[str, Any]:
        if queue.empty():
            remaining, stage = deadlines.next(turn.produced, time.perf_counter())
            try:
                async with asyncio.timeout(max(remaining, 0)):
                    event = await queue.get()
            except TimeoutError:
                raise self._timeout(deadlines, stage, turn.retry_message) from None
        else:
            event = queue.get_nowait()
        if event is None:
            raise BackendUnavailableError(
                f"backend '{self.name}': the connection to OpenCode's event stream was lost",
                backend=self.name,
            )
        return event

    def _timeout(
        self, deadlines: Deadlines, stage: Stage, retrying: str | None
    ) -> BackendTimeoutError:
        message = deadlines.message(self.name, stage, time.perf_counter(), retrying)
        return BackendTimeoutError(message, backend=self.name)

    def _response_start(self, request: ChatRequest) -> ResponseStart:
        return ResponseStart(id=new_id("opencode-"), model=request.model, created=time.time())

    def _reject(self, requests: list[tuple[str, str]]) -> None:
        """Refuse OpenCode's permission and question requests (no tool runs for us)."""
        for kind, rid in requests:
            if kind == "permission":
                work = self._call(
                    "POST",
                    f"permission/{rid}/reply",
                    {"reply": "reject", "message": "llmbridge uses OpenCode as a plain LLM"},
                )
            else:
                work = self._call("POST", f"question/{rid}/reject", {})
            log.warning("backend %s: OpenCode asked for %s %s; refused", self.name, kind, rid)
            task = asyncio.create_task(self._quietly(work))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _quietly(self, work: Any) -> None:
        try:
            async with asyncio.timeout(self.timeouts.delete):
                await work
        except (LLMBridgeError, TimeoutError) as exc:
            log.warning("backend %s: OpenCode refused our reply: %s", self.name, exc)

    def _log_breakdown(self, breakdown: LatencyBreakdown, cleanup: asyncio.Task[Any]) -> None:
        if not cleanup.cancelled() and cleanup.exception() is None:
            breakdown.cleanup = cleanup.result()
        breakdown.cleaned = True
        log.info("%s", breakdown.line())

    # -- models and health ----------------------------------------------------------

    async def list_models(self) -> list[ModelInfo]:
        if self._providers is None:
            await self._ensure_ready()
        infos = []
        for pid, provider in sorted((self._providers or {}).items()):
            models = provider.get("models")
            for mid, spec in sorted(models.items() if isinstance(models, dict) else []):
                infos.append(self._model_info(f"{pid}/{mid}", spec))
        return infos

    def _model_info(self, name: str, spec: Any) -> ModelInfo:
        spec = as_dict(spec)
        limit = as_dict(spec.get("limit"))
        caps = as_dict(spec.get("capabilities"))
        inputs = as_dict(caps.get("input"))
        # Tools are always emulated over OpenCode, so every model offers them.
        capabilities: set[Capability] = {"completion", "tools"}
        if caps.get("reasoning"):
            capabilities.add("thinking")
        if inputs.get("image"):
            capabilities.add("vision")
        context = limit.get("context")
        return ModelInfo(
            name=name,
            backend=self.name,
            backend_model=name,
            capabilities=frozenset(capabilities),
            context_length=context if isinstance(context, int) and context > 0 else None,
            family=spec.get("family") if isinstance(spec.get("family"), str) else None,
            details={"provider": name.partition("/")[0]},
        )

    async def health(self) -> BackendHealth:
        try:
            await self._ensure_ready()
        except LLMBridgeError as exc:
            return BackendHealth(ok=False, detail=exc.message)
        assert self._http is not None
        verdict, body = await self._http.probe("global/health")
        healthy = isinstance(body, dict) and body.get("healthy") is True
        version = body.get("version") if isinstance(body, dict) else None
        where = "spawned" if self.server.spawned else "external"
        detail = f"OpenCode {version or '?'} ({where}, restarts: {self.server.restarts})"
        if not self.hub.is_connected:
            detail += "; event stream reconnecting"
        ok = verdict.ok and healthy and self.hub.is_connected
        return BackendHealth(
            ok=ok,
            detail=detail if ok else f"{verdict.detail}; {detail}",
            latency_ms=verdict.latency_ms,
        )

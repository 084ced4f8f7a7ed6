"""One request, from its key's admission to its ledger row: ``Exchange``.

Every route that serves the model API (every dialect's chats, completions, token
counts, embeddings, model lists and lookups, stored responses, and the agent API's
turns through ``gateway/agent_gate.py``) goes through ONE ``Exchange``, so a request
cannot be served without being admitted and recorded (four objects used to
watch the same stream, each finished by hand on up to four exit paths, and requests
slipped past them). Its life:

1. **admit** (``admit_chat``, ``admit_call``, ``admit_model``): the request's database
   key checked in ONE shared-state step (accounts/limits.py): its model globs, its
   budget (a reservation of the request's worst-case cost, so concurrent requests
   cannot overspend it by more than one request), its parallel slot, its requests and
   tokens per minute. A model lookup (``admit_model``) checks the globs only: looking a
   model up costs the key nothing.
2. **watch** (``watch``): the reply's events pass through once; their usage, their
   first event's time and the text generated so far are noted, and a failure after
   the first event becomes the dialect's in-stream error.
3. **settle and record** (``finish``, once, however the request ends): the slot and
   the reservation given back and the actual cost added to the key's spend in one
   shared-state step, one usage-ledger row (accounts/ledger.py) with the client's
   session id (``session_id``), the Prometheus metrics. A stream the client dropped
   is billed for what was generated: the backend's usage when it came, else the
   tokens counted from the streamed text and the prompt's estimate (a dropped stream
   used to be free).

``exchanged(endpoint, dialect)`` makes a route handler of a function that takes the
``Exchange``; it finishes the exchange with the response's status (or, for a stream,
when the stream closes), renders an ``LLMBridgeError`` in the caller's dialect with
its ``Retry-After`` and rate-limit headers, and marks the handler so
``tests/gateway/test_every_route_exchanged.py`` can prove no route is left out.

Metric labels (gateway/metrics.py) carry model names the configuration names, and
names a backend served (at most ``metrics.MAX_PASSED_ON_LABELS``); any other name a client
sent counts under ``other`` (``metric_model``), so no client can grow ``/metrics``
without bound.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Scope

from llmbridge.accounts.kept_bodies import DROPPED_FACT
from llmbridge.accounts.keys import KeyRecord
from llmbridge.accounts.ledger import UsageRecord
from llmbridge.accounts.limits import OPEN, Admission, KeyLimitError, limit_headers
from llmbridge.accounts.service import ACCOUNT
from llmbridge.accounts.usage_record import facts_of, with_fact
from llmbridge.backends.base import Backend
from llmbridge.core.accumulate import Accumulator
from llmbridge.core.errors import LLMBridgeError, ModelNotFoundError, PermissionDeniedError
from llmbridge.core.events import (
    PartDelta,
    ResponseEnd,
    ResponseStart,
    StreamError,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolArgsDelta,
    UsageUpdate,
)
from llmbridge.core.request import ChatRequest
from llmbridge.core.request_size import larger_than
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.core.stream import EventStream
from llmbridge.features.token_count import count_request_tokens, count_text_tokens
from llmbridge.gateway.state import GatewayState, state_of
from llmbridge.serving.deployments import raw_client_session
from llmbridge.serving.router import Resolved
from llmbridge.web.auth import KEY_IDENTITY
from llmbridge.web.render import Dialect, error_response, new_request_id, to_bridge_error
from llmbridge.web.streaming import ClientDisconnected, StreamingBody

if TYPE_CHECKING:
    from llmbridge.gateway.telemetry import GatewayTrace

__all__ = [
    "EXCHANGED",
    "OVERHEAD_HEADER",
    "RESERVE_OUTPUT_TOKENS",
    "Exchange",
    "caller_key",
    "exchanged",
    "log_left_mid_body",
    "metric_model",
]

log = logging.getLogger("llmbridge.gateway")

RESERVE_OUTPUT_TOKENS = 4096
"""The output a budget reservation assumes for a request that sets no ``max_tokens``
(docs/DEPLOY.md, "Budgets")."""

ExchangeHandler = Callable[[Request, "Exchange"], Awaitable[Response]]
Endpoint = Callable[[Request], Awaitable[Response]]


def caller_key(scope: Scope) -> tuple[str | None, str | None]:
    """The key a request came with, as the ledger names it: ``(id, name)``. A
    database key by its id and name, a static key as ``static:<identity prefix>``
    (it has no row), no auth as nothing."""
    account: Any = scope.get(ACCOUNT)
    if account is not None:
        return getattr(account, "id", None), getattr(account, "name", None)
    identity = scope.get(KEY_IDENTITY)
    if isinstance(identity, str):
        return None, f"static:{identity[:12]}"
    return None, None


def metric_model(resolved: Resolved, default_model: str | None) -> str | None:
    """The model label of ``resolved`` when the configuration names it (an exact
    route or alias, a route's ``model:``, the default backend's model); ``None`` for a
    name a glob route or a default backend passes on as the client sent it, which
    earns a label of its own only once a backend served it (``GatewayMetrics.
    model_label``): each made-up name would otherwise be a label (400
    requests with 4 KB names grew /metrics from 0.5 to 63 MB)."""
    route = resolved.route
    if route is not None:
        configured = route.model is not None or route.name == resolved.public_name
        if configured or resolved.public_name in route.aliases:
            return resolved.backend_model
        return None
    if default_model is not None and resolved.backend_model == default_model:
        return default_model
    return None


def _account(scope: Scope) -> KeyRecord | None:
    record = scope.get(ACCOUNT)
    return record if isinstance(record, KeyRecord) else None


class Exchange:
    """One request from admission to its ledger row (module docstring)."""

    __slots__ = (
        "_counting",
        "admission",
        "backend",
        "chat",
        "dialect",
        "done",
        "endpoint",
        "error_kind",
        "error_message",
        "fallbacks",
        "generated",
        "kept_reply",
        "label",
        "model",
        "overhead_ms",
        "passed_on",
        "prompt_tokens",
        "reply_headers",
        "request_id",
        "retries",
        "scope",
        "started",
        "state",
        "status",
        "stop_reason",
        "streamed",
        "trace",
        "trace_id",
        "ttft_s",
        "usage",
        "waited_s",
        "waiting_since",
    )

    def __init__(
        self,
        state: GatewayState,
        scope: Scope,
        *,
        endpoint: str,
        dialect: Dialect,
        request_id: str | None = None,
    ) -> None:
        self.state, self.scope = state, scope
        self.endpoint, self.dialect = endpoint, dialect
        self.request_id = request_id or new_request_id()
        self.started = time.perf_counter()
        self.model = ""
        """The public model name the caller asked for ("" before it is known)."""
        self.streamed = False
        self.admission: Admission = OPEN
        self.backend: Backend | None = None
        """The backend that served (or was to serve) it: set again after a fallback."""
        self.label: str | None = None
        """The metrics' model label when the configuration names it (``metric_model``)."""
        self.passed_on = ""
        """The backend model name otherwise (the client's own)."""
        self.usage: Usage | None = None
        self.ttft_s: float | None = None
        self.chat: ChatRequest | None = None
        """The chat asked for, once decoded (a cut reply's prompt is estimated from it)."""
        self.prompt_tokens: int | None = None
        """The prompt's estimate, when it was made (limits, a dropped stream's bill)."""
        self.generated: list[str] = []
        """Text deltas streamed so far: what a dropped stream is billed for when the
        backend's usage never came."""
        self.status = 200
        self.error_kind: str | None = None
        self.error_message: str | None = None
        """A failed request's message (the ledger's ``error``, cut there)."""
        self.retries: int | None = None
        self.fallbacks: int | None = None
        """Tries of a target again, and fallback targets tried, before the reply's first
        event (serving/models.py ``Reply``); ``None`` when no reply came."""
        self.reply_headers: list[tuple[bytes, bytes]] | None = None
        """The response's headers: its ``x-llmbridge-*`` ones are the ledger's ``facts``."""
        self.kept_reply: ChatResponse | Accumulator | None = None
        """The reply, kept only when the ledger keeps bodies (``ledger.keep_bodies``)."""
        self.done = False
        self._counting = False
        """Whether this request counts in the in-flight gauge (a backend was chosen)."""
        self.trace_id: str | None = None
        """The request's OpenTelemetry trace id, 32 hex digits (``None`` when tracing
        is off): the ledger row links to the trace."""
        self.overhead_ms: float | None = None
        """Time spent in the gateway excluding the wait on the backend, in milliseconds:
        what the ``x-llmbridge-overhead-ms`` header says, the final figure once the
        reply is done (the request log shows it)."""
        self.stop_reason: StopReason | None = None
        """Why the reply ended, when it said (the trace's finish reasons)."""
        self.waiting_since = 0.0
        """When the backend was first asked (``served_by``: ``perf_counter``)."""
        self.waited_s = 0.0
        """Time spent waiting on the backend: to its first event for a stream, to its
        last for a reply sent whole (``overhead_ms`` is the rest)."""
        tracing = state.tracing
        self.trace: GatewayTrace | None = None
        """The request's span when tracing is on (gateway/telemetry.py)."""
        if tracing is not None:
            key_name = caller_key(scope)[1]
            self.trace = tracing.request(endpoint, dialect.value, self.request_id, key_name)
            self.trace_id = self.trace.trace_id

    # -- what was asked, and admission -----------------------------------------------

    def asked(self, model: str, *, streamed: bool = False) -> None:
        """The model the caller named and whether it asked for a stream."""
        self.model, self.streamed = model, streamed

    @property
    def record(self) -> KeyRecord | None:
        """The request's database key (``None``: a static key or auth off)."""
        return _account(self.scope)

    async def admit_chat(self, chat: ChatRequest) -> None:
        """Admit ``chat`` on the request's key (module docstring, step 1): its prompt's
        estimate (off the event loop for a large one) for the tokens per minute and the
        budget's reservation, its ``max_tokens`` (or ``RESERVE_OUTPUT_TOKENS``) for the
        reservation."""
        self.asked(chat.model, streamed=chat.stream)
        self.chat = chat
        record = self.record
        if record is None:
            return
        needs_estimate = record.tpm is not None or (
            record.budget_usd is not None and self.state.prices.price(chat.model) is not None
        )
        prompt = await self.estimate_prompt(chat) if needs_estimate else 0
        await self.admit_call(prompt_tokens=prompt, max_output_tokens=chat.params.max_tokens)

    async def estimate_prompt(self, chat: ChatRequest) -> int:
        """Seed 001's estimate of ``chat``'s prompt, off the event loop for a large one
        (core/request_size.py), made once per request."""
        if self.prompt_tokens is None:
            if larger_than(chat, self.state.limits.offload_bytes):
                self.prompt_tokens = await asyncio.to_thread(count_request_tokens, chat)
            else:
                self.prompt_tokens = count_request_tokens(chat)
        return self.prompt_tokens

    async def admit_call(
        self, *, prompt_tokens: int = 0, max_output_tokens: int | None = None
    ) -> None:
        """Admit a model call to ``self.model`` (a chat, an embedding, a token count)
        on the request's key; ``PermissionDeniedError`` or ``KeyLimitError`` when over
        a limit. ``max_output_tokens`` bounds the budget's reservation (0 for a call
        that generates nothing)."""
        record = self.record
        if record is None:
            return
        reserve = self._worst_case_cost(record, prompt_tokens, max_output_tokens)
        self.admission = await self.state.accounts.admit(
            record, self.model, prompt_tokens, reserve_usd=reserve
        )

    def admit_model(self, model: str, *, refuse: bool = False) -> None:
        """A model lookup (``GET /v1/models/{id}``, ``/api/show``...): the key's globs
        only. A model it may not use is a 404, as one that does not exist is (a key
        learns nothing of models it cannot use); with ``refuse``, the 403 a chat gets
        (Ollama's load request, which is a chat with no messages)."""
        self.asked(model, streamed=self.streamed)
        record = self.record
        if record is None or record.allows(model):
            return
        if refuse:
            raise PermissionDeniedError(
                f"the key {record.name!r} may not use the model {model!r}", param="model"
            )
        raise ModelNotFoundError(model)

    def _worst_case_cost(
        self, record: KeyRecord, prompt_tokens: int, max_output_tokens: int | None
    ) -> float:
        """What the call could cost at most, reserved against the key's budget."""
        if record.budget_usd is None:
            return 0.0
        price = self.state.prices.price(self.model)
        if price is None:
            return 0.0
        output = RESERVE_OUTPUT_TOKENS if max_output_tokens is None else max_output_tokens
        output_price = max(price.output, price.reasoning or 0.0)
        return (prompt_tokens * price.input + max(output, 0) * output_price) * 1e-6

    def headers(self) -> dict[str, str]:
        """The admission's rate-limit headers in the caller's dialect."""
        return self.admission.headers(self.dialect)

    def refusal_headers(self, error: LLMBridgeError) -> dict[str, str]:
        """``Retry-After`` and the rate-limit headers of a refusal (none for a 403)."""
        return self.refusal_headers_of(error, self.dialect)

    @staticmethod
    def refusal_headers_of(error: LLMBridgeError, dialect: Dialect) -> dict[str, str]:
        """``refusal_headers`` in ``dialect``."""
        if isinstance(error, KeyLimitError):
            return limit_headers(dialect, error.requests, error.tokens, error.retry_after)
        return {}

    # -- serving ---------------------------------------------------------------------

    def served_by(self, resolved: Resolved) -> None:
        """The backend chosen (again after a fallback): the ledger's backend and the
        metrics' labels; the first call counts the request in flight."""
        self.backend = resolved.backend
        self.label = metric_model(resolved, self.state.models.router.default_model)
        self.passed_on = resolved.backend_model
        if not self._counting:
            self._counting = True
            self.state.metrics.in_flight_of(self.endpoint).inc()
            self.waiting_since = time.perf_counter()  # the backend is asked next

    def first_event(self) -> None:
        if self.ttft_s is None:
            now = time.perf_counter()
            self.ttft_s = now - self.started
            self.waited_s = now - self.waiting_since

    def backend_answered(self) -> None:
        """The backend's whole answer is in (a reply sent whole, an embedding): the
        wait on it ends now (``overhead_ms``)."""
        self.waited_s = time.perf_counter() - self.waiting_since

    def add_usage(self, usage: Usage) -> None:
        """Counts from the stream; later values win, as ``core.accumulate`` merges
        them, so the ledger holds what the reply's ``usage`` said."""
        self.usage = usage if self.usage is None else self.usage.merged(usage)

    def failed(self, error: LLMBridgeError) -> None:
        """The request failed with ``error`` (before or inside the reply)."""
        self.status = error.status_code
        self.error_kind = type(error).__name__
        self.error_message = error.message

    def _note(self, event: StreamEvent) -> None:
        """What the ledger needs from one event of the reply: text generated, usage,
        a failure."""
        if isinstance(event, PartDelta):
            delta = event.delta
            if isinstance(delta, TextDelta | ThinkingDelta):
                self.generated.append(delta.text)
            elif isinstance(delta, ToolArgsDelta):
                self.generated.append(delta.json_fragment)
        elif isinstance(event, ResponseEnd):
            self.add_usage(event.usage)
            self.stop_reason = event.stop_reason
        elif isinstance(event, UsageUpdate):
            self.add_usage(event.usage)
        elif isinstance(event, StreamError):
            self.failed(event.error)

    def _note_kept(self, event: StreamEvent) -> None:
        """``_note``, and the event added to the reply kept for the request log."""
        self._note(event)
        if isinstance(self.kept_reply, Accumulator) and not isinstance(event, StreamError):
            self.kept_reply.add(event)

    def _note_first(self, first: StreamEvent) -> None:
        if isinstance(first, ResponseStart) and first.input_tokens:
            self.add_usage(Usage(input_tokens=first.input_tokens))  # as accumulate reads it

    def _stream_failed(self, exc: Exception) -> LLMBridgeError:
        error = to_bridge_error(exc)
        self.failed(error)
        name = self.backend.name if self.backend is not None else "?"
        log.warning("stream from backend %s failed: %s", name, error.message)
        return error

    async def watch(
        self, first: StreamEvent, events: EventStream
    ) -> AsyncGenerator[StreamEvent, None]:
        """The reply's events (``first`` already read), with its usage and generated
        text noted, and a failure after the first event turned into a ``StreamError``
        (the encoder renders the dialect's in-stream error)."""
        note = self._note
        ledger = self.state.ledger
        if ledger is not None and ledger.bodies is not None:  # bodies kept: the reply too
            note = self._note_kept
            self.kept_reply = Accumulator()
            self.kept_reply.add(first)
        try:
            self._note_first(first)
            yield first
            async for event in events:
                note(event)
                yield event
        except Exception as exc:  # noqa: BLE001 - every failure becomes an in-stream error
            yield StreamError(self._stream_failed(exc))
        finally:
            await events.aclose()

    async def collect(self, first: StreamEvent, events: EventStream) -> ChatResponse:
        """The non-streamed reply, ``first`` already read: ``watch``'s noting, with the
        events accumulated in place (one async-generator hop fewer per event than
        accumulating ``watch``). A failure is raised, noted."""
        acc = Accumulator()
        note = self._note
        ended = False
        try:
            self._note_first(first)
            acc.add(first)
            async for event in events:
                note(event)
                acc.add(event)  # a StreamError raises its error
            ended = True  # the stream ran out: nothing of it is left open to close
        except Exception as exc:  # noted, logged, and raised as an LLMBridgeError
            error = self._stream_failed(exc)
            if error is exc:
                raise
            raise error from exc
        finally:
            if not ended:
                # Shielded: a client that left must not leave the backend's stream open.
                await asyncio.shield(events.aclose())
            self.backend_answered()
        response = acc.response()
        ledger = self.state.ledger
        if ledger is not None and ledger.bodies is not None:  # kept for the request log
            self.kept_reply = response
        return response

    # -- the end -----------------------------------------------------------------------

    def _billed_usage(self) -> Usage | None:
        """The usage to bill: the reply's, or for a reply without its final counts
        (the client left mid-stream, the stream failed, a backend that reports none),
        what was generated so far and the prompt's estimate."""
        usage = self.usage
        if not self.generated or (usage is not None and usage.output_tokens is not None):
            return usage
        counted = Usage(
            input_tokens=self.prompt_tokens,
            output_tokens=count_text_tokens("".join(self.generated)),
        )
        return counted if usage is None else counted.merged(usage)

    async def finish(self, status: int | None = None) -> None:
        """Settle the key's admission, write the ledger row and count the metrics,
        once (later calls do nothing). ``status``: the response's, when it is not the
        one a failure already noted."""
        if self.done:
            return
        self.done = True
        if status is not None and not (status == 200 and self.status != 200):
            self.status = status
        status = self.status
        state = self.state
        elapsed = time.perf_counter() - self.started
        counts_missing = self.usage is None or self.usage.output_tokens is None
        if self.generated and counts_missing and self.chat is not None:
            await self.estimate_prompt(self.chat)  # a cut reply's bill needs the prompt
        usage = self._billed_usage()
        backend = self.backend
        cost = None
        if usage is not None and self.model:
            kind = backend.kind if backend is not None else None
            cost = state.prices.cost(self.model, usage, backend_kind=kind)
        try:
            # The key's slot and reservation back, its tokens and cost counted: first,
            # so the spend is in the shared state before the ledger row is queued.
            spend_counted = await self.admission.finish(_total_tokens(usage), cost or 0.0)
        except Exception:  # the shared state failed over and still failed: keep the row
            log.exception("settling request %s's key limits failed", self.request_id)
            spend_counted = False
        self._record(status, usage, cost, elapsed, spend_counted=spend_counted)
        self._count(status, usage, elapsed)
        if self.trace is not None:
            try:
                self.trace.finish(self, usage)
            except Exception:  # a tracing bug must not fail the request
                log.exception("ending request %s's span failed", self.request_id)

    def _record(
        self,
        status: int,
        usage: Usage | None,
        cost: float | None,
        elapsed: float,
        *,
        spend_counted: bool,
    ) -> None:
        ledger = self.state.ledger
        if ledger is None:
            return
        key_id, key_name = caller_key(self.scope)
        backend = self.backend
        headers, stop = self.reply_headers, self.stop_reason
        record = UsageRecord(
            request_id=self.request_id,
            model=self.model,
            status=status,
            key_id=key_id,
            key_name=key_name,
            backend=backend.kind if backend is not None else None,
            deployment=backend.name if backend is not None else None,
            endpoint=self.endpoint,
            input_tokens=usage.input_tokens if usage else None,
            output_tokens=usage.output_tokens if usage else None,
            reasoning_tokens=usage.reasoning_tokens if usage else None,
            cached_tokens=usage.cache_read_input_tokens if usage else None,
            cost_usd=cost,
            latency_ms=elapsed * 1000,
            ttft_ms=None if self.ttft_s is None else self.ttft_s * 1000,
            streamed=self.streamed,
            replica=ledger.replica,
            session_id=self.session_id(),
            dialect=ledger_dialect(self.endpoint, self.dialect),
            served_model=self.passed_on or None,
            retries=self.retries,
            fallbacks=self.fallbacks,
            facts=None if headers is None else facts_of(headers),
            trace_id=self.trace_id,
            overhead_ms=self.overhead_ms,
            finish_reason=None if stop is None else stop.value,
            error=self.error_message,
        )
        # Kept for the request log (ledger.keep_bodies): queued with the row, cut to
        # their bound; when no room is left for them, the row says they were dropped.
        if ledger.bodies is not None and not ledger.keep_bodies(
            record, self.chat, self._kept_reply()
        ):
            record = dataclasses.replace(
                record, facts=with_fact(record.facts, "bodies", DROPPED_FACT)
            )
        ledger.record(record, spend_counted=spend_counted)

    def _kept_reply(self) -> object:
        """The reply to keep: the whole response, or what a stream that did not end
        had finished."""
        reply = self.kept_reply
        if isinstance(reply, Accumulator):
            try:
                return reply.response()
            except LLMBridgeError:  # it did not end: its finished parts, said so
                return {"incomplete": True, "parts": reply.parts, "usage": reply.usage}
        return reply

    def session_id(self) -> str | None:
        """The client's session (serving/deployments.py ``client_session``): its
        session header, else what the decoded chat's body names; a request with no
        chat (an embedding, a model list) by its header alone."""
        chat = self.chat
        details = chat.provider_details if chat is not None else None
        return raw_client_session(self.scope.get("headers", ()), details)

    def mark_overhead(self, response: Response) -> None:
        """The gateway's own time so far, without the wait on the backend, as
        ``overhead_ms`` and the ``x-llmbridge-overhead-ms`` header of ``response``
        (before its head is written): for a stream, up to its head; for a reply sent
        whole, all of it but the serialisation that follows."""
        overhead = (time.perf_counter() - self.started - self.waited_s) * 1000
        self.overhead_ms = overhead
        response.raw_headers.append((OVERHEAD_HEADER_BYTES, b"%.3f" % overhead))

    def _count(self, status: int, usage: Usage | None, elapsed: float) -> None:
        metrics = self.state.metrics
        if not self._counting:
            metrics.unserved(self.endpoint, status)
            return
        metrics.in_flight_of(self.endpoint).dec()
        backend = self.backend.name if self.backend is not None else ""
        label = self.label
        if label is None:
            label = metrics.model_label(self.passed_on, served=status == 200)
        bound = metrics.bound(self.endpoint, backend, label)
        bound.latency.observe(elapsed)
        if self.ttft_s is not None:
            bound.first_token.observe(self.ttft_s)
        bound.request_done(status)
        if self.error_kind is not None:
            bound.error(self.error_kind)
        if usage is not None and status == 200:
            metrics.record_usage(backend, label, usage)


def _total_tokens(usage: Usage | None) -> int:
    if usage is None:
        return 0
    return (usage.input_tokens or 0) + (usage.output_tokens or 0)


def log_left_mid_body(request: Request) -> None:
    """One line for a client that left while sending its body (499), where a
    traceback of 80 lines used to be."""
    client = f"{request.client.host}:{request.client.port}" if request.client else "a client"
    log.info(
        "%s disconnected while sending the body of %s %s (499)",
        client,
        request.method,
        request.url.path,
    )


OVERHEAD_HEADER = "x-llmbridge-overhead-ms"
"""Milliseconds the gateway spent on a reply, excluding the wait on the backend."""
OVERHEAD_HEADER_BYTES = OVERHEAD_HEADER.encode("latin-1")


@functools.lru_cache(maxsize=256)
def ledger_dialect(endpoint: str, dialect: Dialect) -> str:
    """The API a request spoke, as the usage ledger's ``dialect`` names it: the
    caller's dialect, told apart where one dialect has several APIs (``responses``,
    ``completions``) and ``agent`` for the agent service. ``endpoint`` is a route's
    template, so the cache stays small."""
    if endpoint.startswith("/v1/responses"):
        return "responses"
    if endpoint == "/v1/completions":
        return "completions"
    if endpoint.startswith("/agent"):
        return "agent"
    return dialect.value


EXCHANGED = "__llmbridge_exchanged__"
"""The attribute ``exchanged`` sets on the route handlers it makes."""


def exchanged(
    endpoint: str, dialect: Dialect | Callable[[Request], Dialect]
) -> Callable[[ExchangeHandler], Endpoint]:
    """A route handler of ``handler(request, exchange)`` (module docstring).
    ``dialect``: the caller's, or a function of the request that picks it (a path
    shared by two APIs)."""

    def wrap(handler: ExchangeHandler) -> Endpoint:
        async def endpoint_fn(request: Request) -> Response:
            caller = dialect if isinstance(dialect, Dialect) else dialect(request)
            exchange = Exchange(state_of(request), request.scope, endpoint=endpoint, dialect=caller)
            try:
                response = await handler(request, exchange)
            except ClientDisconnect:  # starlette's: the client left while sending its body
                log_left_mid_body(request)
                await exchange.finish(499)
                return Response(status_code=499)
            except ClientDisconnected:  # the client left before the reply was complete
                await exchange.finish(499)
                return Response(status_code=499)
            except LLMBridgeError as exc:
                exchange.failed(exc)
                headers = {"x-request-id": exchange.request_id, **exchange.refusal_headers(exc)}
                failed = error_response(caller, exc, exchange.request_id, headers=headers)
                exchange.mark_overhead(failed)
                await exchange.finish()
                return failed
            except BaseException:
                exchange.status = 500
                await asyncio.shield(exchange.finish())
                raise
            exchange.mark_overhead(response)  # before finish: the ledger row has it
            exchange.reply_headers = response.raw_headers  # its facts, for the ledger
            if not (isinstance(response, StreamingBody) and response.on_close is not None):
                await exchange.finish(response.status_code)  # a stream's ``on_close`` does
            return response

        setattr(endpoint_fn, EXCHANGED, True)
        endpoint_fn.__name__ = getattr(handler, "__name__", "endpoint")
        endpoint_fn.__doc__ = handler.__doc__
        return endpoint_fn

    return wrap

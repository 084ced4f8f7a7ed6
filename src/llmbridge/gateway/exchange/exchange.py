"""One request, from its key's admission to its ledger row: ``Exchange``.

Every route that serves the model API goes through ONE ``Exchange`` (the package's
docstring says why and how), made by ``exchanged`` (handler.py) or, for the agent API's
turns, by ``KeyGate`` (agent_gate.py). Its life:

1. **admit** (``admit_chat``, ``admit_call``, ``admit_model``): the request's database
   key checked in ONE shared-state step (accounts/limits.py): its model globs, its
   budget (a reservation of the request's worst-case cost, admission.py
   ``worst_case_cost``, so concurrent requests cannot overspend it by more than one
   request), its parallel slot, its requests and tokens per minute. A model lookup
   (``admit_model``) checks the globs only: looking a model up costs the key nothing.
2. **serve** (``served_by``, ``served``, ``first_event``, ``backend_answered``): the
   backend chosen (again after a fallback), the reply's tries and fallbacks, the time to
   its first event and the wait on it.
3. **watch** (``watch``, ``collect``): the reply's events pass once through its
   ``ReplyMeter`` (meter.py), which notes their usage, the text generated and a
   failure after the first event.
4. **settle and record** (``finish``, once, however the request ends): the slot and
   the reservation given back and the actual cost added to the key's spend in one
   shared-state step (``settle``), then the ledger row, the metrics and the span
   (``write_records``, record.py). The route handler settles before the response goes
   and leaves the records for after it is sent (handler.py).

Everything the Exchange records is written through these methods: its fields are
private, read through read-only properties, so no route, pipeline or gate can set half
of what the ledger reads (``tests/unit/test_exchange_encapsulated.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING, NamedTuple

from starlette.responses import Response
from starlette.types import Scope

from llmbridge.accounts.keys import KeyRecord
from llmbridge.accounts.limits import OPEN, Admission
from llmbridge.backends.base import Backend
from llmbridge.core.errors import LLMBridgeError, ModelNotFoundError, PermissionDeniedError
from llmbridge.core.events import StreamEvent
from llmbridge.core.request import ChatRequest
from llmbridge.core.request_size import larger_than
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.core.stream import EventStream
from llmbridge.features.token_count import count_request_tokens
from llmbridge.gateway.exchange.admission import (
    account_of,
    caller_key,
    refusal_headers,
    worst_case_cost,
)
from llmbridge.gateway.exchange.meter import ReplyMeter
from llmbridge.gateway.exchange.record import (
    count_metrics,
    end_span,
    metric_model,
    write_ledger_row,
)
from llmbridge.gateway.state import GatewayState
from llmbridge.serving.deployments import raw_client_session
from llmbridge.serving.models import Reply
from llmbridge.serving.router import Resolved
from llmbridge.web.render import Dialect, new_request_id

if TYPE_CHECKING:
    from llmbridge.gateway.telemetry import GatewayTrace

__all__ = ["OVERHEAD_HEADER", "Exchange"]

log = logging.getLogger("llmbridge.gateway")

OVERHEAD_HEADER = "x-llmbridge-overhead-ms"
"""Milliseconds the gateway spent on a reply, excluding the wait on the backend."""
OVERHEAD_HEADER_BYTES = OVERHEAD_HEADER.encode("latin-1")


class Exchange:
    """One request from admission to its ledger row (module docstring)."""

    __slots__ = (
        "_admission",
        "_backend",
        "_chat",
        "_counting",
        "_dialect",
        "_done",
        "_endpoint",
        "_fallbacks",
        "_label",
        "_meter",
        "_model",
        "_overhead_ms",
        "_passed_on",
        "_prompt_tokens",
        "_reply_headers",
        "_request_id",
        "_retries",
        "_scope",
        "_settled",
        "_started",
        "_state",
        "_status",
        "_streamed",
        "_trace",
        "_trace_id",
        "_ttft_s",
        "_waited_s",
        "_waiting_since",
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
        self._state, self._scope = state, scope
        self._endpoint, self._dialect = endpoint, dialect
        self._request_id = request_id or new_request_id()
        self._started = time.perf_counter()
        self._model = ""
        self._streamed = False
        self._admission: Admission = OPEN
        self._backend: Backend | None = None
        self._label: str | None = None
        self._passed_on = ""
        self._ttft_s: float | None = None
        self._chat: ChatRequest | None = None
        self._prompt_tokens: int | None = None
        """The prompt's estimate, when it was made (limits, a dropped stream's bill)."""
        self._meter = ReplyMeter()
        self._status: int | None = None
        """The status ``finish`` settled on (``status`` reads it, or the failure noted)."""
        self._retries: int | None = None
        self._fallbacks: int | None = None
        self._reply_headers: list[tuple[bytes, bytes]] | None = None
        self._done = False
        self._settled: _Settled | None = None
        """What ``settle`` worked out, until ``write_records`` writes it."""
        self._counting = False
        """Whether this request counts in the in-flight gauge (a backend was chosen)."""
        self._trace_id: str | None = None
        self._overhead_ms: float | None = None
        self._waiting_since = 0.0
        """When the backend was first asked (``served_by``: ``perf_counter``)."""
        self._waited_s = 0.0
        """Time spent waiting on the backend: to its first event for a stream, to its
        last for a reply sent whole (``overhead_ms`` is the rest)."""
        tracing = state.tracing
        self._trace: GatewayTrace | None = None
        if tracing is not None:
            key_name = caller_key(scope)[1]
            self._trace = tracing.request(endpoint, dialect.value, self._request_id, key_name)
            self._trace_id = self._trace.trace_id

    # -- what it is, read only -------------------------------------------------------

    @property
    def state(self) -> GatewayState:
        """The gateway serving it."""
        return self._state

    @property
    def scope(self) -> Scope:
        """The request's ASGI scope (its key, its headers, its path parameters)."""
        return self._scope

    @property
    def request_id(self) -> str:
        return self._request_id

    @property
    def endpoint(self) -> str:
        """The route's path template (the metrics' and the ledger's endpoint)."""
        return self._endpoint

    @property
    def dialect(self) -> Dialect:
        """The caller's dialect: refusals and errors are rendered in it."""
        return self._dialect

    @property
    def model(self) -> str:
        """The public model name the caller asked for ("" before it is known)."""
        return self._model

    @property
    def streamed(self) -> bool:
        """Whether the caller asked for a stream."""
        return self._streamed

    @property
    def chat(self) -> ChatRequest | None:
        """The chat asked for, once decoded (a cut reply's prompt is estimated from it)."""
        return self._chat

    @property
    def record(self) -> KeyRecord | None:
        """The request's database key (``None``: a static key or auth off)."""
        return account_of(self._scope)

    @property
    def done(self) -> bool:
        """Whether ``finish`` has run (the row is written)."""
        return self._done

    @property
    def backend(self) -> Backend | None:
        """The backend that served (or was to serve) it: set again after a fallback."""
        return self._backend

    @property
    def label(self) -> str | None:
        """The metrics' model label when the configuration names it (``metric_model``)."""
        return self._label

    @property
    def passed_on(self) -> str:
        """The backend model name otherwise (the client's own)."""
        return self._passed_on

    @property
    def retries(self) -> int | None:
        """Tries of a target again before the reply's first event (serving/models.py
        ``Reply``); ``None`` when no reply came."""
        return self._retries

    @property
    def fallbacks(self) -> int | None:
        """Fallback targets tried before the reply's first event; ``None`` when no
        reply came."""
        return self._fallbacks

    @property
    def status(self) -> int:
        """The response's status: 200 until a failure is noted (``failed``, or the
        reply's), then the failure's; once finished, the one ``finish`` settled on."""
        if self._status is not None:
            return self._status
        failure = self._meter.failure
        return 200 if failure is None else failure.status_code

    @property
    def error_kind(self) -> str | None:
        """The failure's class name, when the request failed."""
        failure = self._meter.failure
        return None if failure is None else type(failure).__name__

    @property
    def error_message(self) -> str | None:
        """A failed request's message (the ledger's ``error``, cut there)."""
        failure = self._meter.failure
        return None if failure is None else failure.message

    @property
    def stop_reason(self) -> StopReason | None:
        """Why the reply ended, when it said (the trace's finish reasons)."""
        return self._meter.stop_reason

    @property
    def ttft_s(self) -> float | None:
        """Seconds from the request to the reply's first event."""
        return self._ttft_s

    @property
    def overhead_ms(self) -> float | None:
        """Time spent in the gateway excluding the wait on the backend, in milliseconds:
        what the ``x-llmbridge-overhead-ms`` header says, the final figure once the
        reply is done (the request log shows it)."""
        return self._overhead_ms

    @property
    def reply_headers(self) -> list[tuple[bytes, bytes]] | None:
        """The response's headers: its ``x-llmbridge-*`` ones are the ledger's ``facts``."""
        return self._reply_headers

    @property
    def trace(self) -> GatewayTrace | None:
        """The request's span when tracing is on (gateway/telemetry.py)."""
        return self._trace

    @property
    def trace_id(self) -> str | None:
        """The request's OpenTelemetry trace id, 32 hex digits (``None`` when tracing
        is off): the ledger row links to the trace."""
        return self._trace_id

    # -- what was asked, and admission -----------------------------------------------

    def asked(self, model: str, *, streamed: bool = False, chat: ChatRequest | None = None) -> None:
        """The model the caller named, whether it asked for a stream, and the chat it
        sent once decoded (``None`` leaves the one noted before)."""
        self._model, self._streamed = model, streamed
        if chat is not None:
            self._chat = chat

    async def admit_chat(self, chat: ChatRequest) -> None:
        """Admit ``chat`` on the request's key (module docstring, step 1): its prompt's
        estimate (off the event loop for a large one) for the tokens per minute and the
        budget's reservation, its ``max_tokens`` (or ``RESERVE_OUTPUT_TOKENS``) for the
        reservation."""
        self.asked(chat.model, streamed=chat.stream, chat=chat)
        record = self.record
        if record is None:
            return
        needs_estimate = record.tpm is not None or (
            record.budget_usd is not None and self._state.prices.price(chat.model) is not None
        )
        prompt = await self.estimate_prompt(chat) if needs_estimate else 0
        await self.admit_call(prompt_tokens=prompt, max_output_tokens=chat.params.max_tokens)

    async def estimate_prompt(self, chat: ChatRequest) -> int:
        """Seed 001's estimate of ``chat``'s prompt, off the event loop for a large one
        (core/request_size.py), made once per request."""
        if self._prompt_tokens is None:
            if larger_than(chat, self._state.limits.offload_bytes):
                self._prompt_tokens = await asyncio.to_thread(count_request_tokens, chat)
            else:
                self._prompt_tokens = count_request_tokens(chat)
        return self._prompt_tokens

    def counted_prompt(self, tokens: int) -> None:
        """The prompt's size as the route counted it (an embedding's inputs, an agent
        turn's text): the one a cut reply is billed for, and ``estimate_prompt``'s."""
        self._prompt_tokens = tokens

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
        state = self._state
        reserve = worst_case_cost(
            record, state.prices, self._model, prompt_tokens, max_output_tokens
        )
        self._admission = await state.accounts.admit(
            record, self._model, prompt_tokens, reserve_usd=reserve
        )

    def admitted_within(self) -> None:
        """This model call is made inside a request the key already admitted (a later
        round of the MCP tool loop), which holds its slot: nothing is taken now, and
        ``finish`` counts the call's tokens to the key (``Accounts.within_request``)."""
        self._admission = self._state.accounts.within_request(self.record)

    def admit_model(self, model: str, *, refuse: bool = False) -> None:
        """A model lookup (``GET /v1/models/{id}``, ``/api/show``...): the key's globs
        only. A model it may not use is a 404, as one that does not exist is (a key
        learns nothing of models it cannot use); with ``refuse``, the 403 a chat gets
        (Ollama's load request, which is a chat with no messages)."""
        self.asked(model, streamed=self._streamed)
        record = self.record
        if record is None or record.allows(model):
            return
        if refuse:
            raise PermissionDeniedError(
                f"the key {record.name!r} may not use the model {model!r}", param="model"
            )
        raise ModelNotFoundError(model)

    def headers(self) -> dict[str, str]:
        """The admission's rate-limit headers in the caller's dialect."""
        return self._admission.headers(self._dialect)

    def refusal_headers(self, error: LLMBridgeError) -> dict[str, str]:
        """``Retry-After`` and the rate-limit headers of a refusal (none for a 403)."""
        return refusal_headers(error, self._dialect)

    # -- serving ---------------------------------------------------------------------

    def served_by(self, resolved: Resolved) -> None:
        """The backend chosen (again after a fallback): the ledger's backend and the
        metrics' labels; the first call counts the request in flight."""
        self._backend = resolved.backend
        self._label = metric_model(resolved, self._state.models.router.default_model)
        self._passed_on = resolved.backend_model
        if not self._counting:
            self._counting = True
            self._state.metrics.in_flight_of(self._endpoint).inc()
            self._waiting_since = time.perf_counter()  # the backend is asked next

    def served(self, reply: Reply) -> None:
        """The reply's first event is in: from ``reply.prepared.target`` (a fallback's,
        if one served), after its tries again and fallbacks (the ledger's ``retries``
        and ``fallbacks``); the time to it is the first token's."""
        self.served_by(reply.prepared.target)
        self._retries, self._fallbacks = reply.retries, reply.fallbacks
        self.first_event()

    def first_event(self) -> None:
        """The reply's first event is in (the first call's time counts)."""
        if self._ttft_s is None:
            now = time.perf_counter()
            self._ttft_s = now - self._started
            self._waited_s = now - self._waiting_since

    def backend_answered(self) -> None:
        """The backend's whole answer is in (a reply sent whole, an embedding): the
        wait on it ends now (``overhead_ms``)."""
        self._waited_s = time.perf_counter() - self._waiting_since

    def add_usage(self, usage: Usage) -> None:
        """Counts of the reply (an embedding's input, a stream's counts): later values
        win, as ``core.accumulate`` merges them."""
        self._meter.add_usage(usage)

    def agent_usage(self, usage: Usage) -> None:
        """The usage of every model call an agent request made, summed (agent_gate.py):
        it replaces what was noted."""
        self._meter.usage = usage

    def failed(self, error: LLMBridgeError) -> None:
        """The request failed with ``error`` (before or inside the reply)."""
        self._meter.failed(error)

    def _keeps_bodies(self) -> bool:
        ledger = self._state.ledger
        return ledger is not None and ledger.bodies is not None

    def watch(self, first: StreamEvent, events: EventStream) -> EventStream:
        """The reply's events (``first`` already read), noted as they pass
        (``ReplyMeter.watch``): a failure after the first event becomes a
        ``StreamError`` (the encoder renders the dialect's in-stream error)."""
        return self._meter.watch(first, events, backend=self._backend, keep=self._keeps_bodies())

    def relay(
        self,
        first: StreamEvent,
        events: EventStream,
        error_frame: Callable[[LLMBridgeError], bytes],
    ) -> AsyncGenerator[bytes, None]:
        """A relayed stream's bytes (``first`` already read), noted as they pass
        (``ReplyMeter.relay``): a failure after the first byte is ``error_frame``."""
        return self._meter.relay(
            first,
            events,
            error_frame=error_frame,
            backend=self._backend,
            keep=self._keeps_bodies(),
        )

    async def collect(self, first: StreamEvent, events: EventStream) -> ChatResponse:
        """The non-streamed reply, ``first`` already read, noted and accumulated
        (``ReplyMeter.collect``); a failure is raised, noted. The wait on the backend
        ends when its stream is done with."""
        return await self._meter.collect(
            first,
            events,
            backend=self._backend,
            keep=self._keeps_bodies(),
            answered=self.backend_answered,
        )

    async def collect_relayed(self, first: StreamEvent, events: EventStream) -> bytes:
        """``collect`` on the pass-through path: the reply's bytes as the backend sent
        them (``ReplyMeter.collect_relayed``)."""
        return await self._meter.collect_relayed(
            first,
            events,
            backend=self._backend,
            keep=self._keeps_bodies(),
            answered=self.backend_answered,
        )

    # -- the end -----------------------------------------------------------------------

    def mark_overhead(self, response: Response) -> None:
        """The gateway's own time so far, without the wait on the backend, as
        ``overhead_ms`` and the ``x-llmbridge-overhead-ms`` header of ``response``
        (before its head is written): for a stream, up to its head; for a reply sent
        whole, all of it but the serialisation that follows."""
        overhead = (time.perf_counter() - self._started - self._waited_s) * 1000
        self._overhead_ms = overhead
        response.raw_headers.append((OVERHEAD_HEADER_BYTES, b"%.3f" % overhead))

    def replied(self, response: Response) -> None:
        """The route answered with ``response`` (before its head is written): its
        overhead header (``mark_overhead``), and its headers kept for the ledger (its
        ``x-llmbridge-*`` ones are the row's facts)."""
        self.mark_overhead(response)  # before finish: the ledger row has it
        self._reply_headers = response.raw_headers

    async def finish(self, status: int | None = None) -> None:
        """Settle the key's admission, then write the ledger row, count the metrics and
        end the span (``settle``, then ``write_records``), once (later calls do
        nothing). ``status``: the response's, when it is not the one a failure already
        noted."""
        if await self.settle(status):
            self.write_records()

    async def settle(self, status: int | None = None) -> bool:
        """``finish``'s first half, once: the request's status, usage, cost and time
        taken settled, and the key's slot and reservation given back with its tokens and
        cost counted, so the next request of the key sees them. ``False`` when it ran
        already (nothing is done). ``write_records`` writes what it settled: the handler
        leaves that for after the response is sent (handler.py)."""
        if self._done:
            return False
        self._done = True
        settled = self.status
        if status is not None and not (status == 200 and settled != 200):
            settled = status
        self._status = status = settled
        state = self._state
        elapsed = time.perf_counter() - self._started
        meter = self._meter
        if meter.cut_short and self._chat is not None:
            await self.estimate_prompt(self._chat)  # a cut reply's bill needs the prompt
        usage = meter.billed_usage(self._prompt_tokens)
        backend = self._backend
        cost = None
        if usage is not None and self._model:
            kind = backend.kind if backend is not None else None
            cost = state.prices.cost(self._model, usage, backend_kind=kind)
        try:
            # The key's slot and reservation back, its tokens and cost counted: first,
            # so the spend is in the shared state before the ledger row is queued.
            spend_counted = await self._admission.finish(_total_tokens(usage), cost or 0.0)
        except Exception:  # the shared state failed over and still failed: keep the row
            log.exception("settling request %s's key limits failed", self._request_id)
            spend_counted = False
        self._settled = _Settled(status, usage, cost, elapsed, spend_counted)
        return True

    def write_records(self) -> None:
        """``finish``'s second half, once, with what ``settle`` settled: the ledger row
        (queued), the metrics and the span."""
        settled = self._settled
        if settled is None:
            return
        self._settled = None
        status, usage, cost, elapsed = settled.status, settled.usage, settled.cost, settled.elapsed
        write_ledger_row(self, status, usage, cost, elapsed, spend_counted=settled.spend_counted)
        count_metrics(self, status, usage, elapsed, in_flight=self._counting)
        end_span(self, usage)

    def session_id(self) -> str | None:
        """The client's session (serving/deployments.py ``client_session``): its
        session header, else what the decoded chat's body names; a request with no
        chat (an embedding, a model list) by its header alone."""
        chat = self._chat
        details = chat.provider_details if chat is not None else None
        return raw_client_session(self._scope.get("headers", ()), details)

    def kept_reply(self) -> object:
        """The reply the ledger keeps with the row (``ReplyMeter.kept_reply``)."""
        return self._meter.kept_reply()


class _Settled(NamedTuple):
    """What ``Exchange.settle`` worked out for ``write_records``."""

    status: int
    usage: Usage | None
    cost: float | None
    elapsed: float
    """Seconds from the request's start to its settling (the ledger's latency)."""
    spend_counted: bool


def _total_tokens(usage: Usage | None) -> int:
    if usage is None:
        return 0
    return (usage.input_tokens or 0) + (usage.output_tokens or 0)

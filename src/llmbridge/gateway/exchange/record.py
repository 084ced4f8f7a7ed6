"""What a finished request leaves behind: its usage-ledger row, its metrics, its span.

The request's ``Exchange`` (exchange.py) calls these once, from ``finish``, after the
key's admission is settled, with what it worked out there (the status, the usage billed,
the cost, the time taken):

- ``write_ledger_row``: one ``UsageRecord`` (accounts/ledger.py, written in batches),
  with the client's session, the dialect as the ledger names it (``ledger_dialect``),
  the reply's ``x-llmbridge-*`` headers as its facts, and the request's bodies when the
  ledger keeps them (cut to their bound; when no room is left, the row says they were
  dropped);
- ``count_metrics``: the Prometheus metrics (gateway/metrics.py) of the request's
  endpoint, backend and model label. Labels carry model names the configuration names
  (``metric_model``) and names a backend served (at most
  ``metrics.MAX_PASSED_ON_LABELS``); any other name a client sent counts under
  ``other``, so no client can grow ``/metrics`` without bound. A request that ended
  before a backend was chosen counts as unserved;
- ``end_span``: the request's OpenTelemetry span, when tracing is on
  (gateway/telemetry.py).

They read the exchange through ``Recorded``, the read-only view the ``Exchange`` gives
(a protocol, so this module does not import the class that calls it).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import TYPE_CHECKING, Protocol

from starlette.types import Scope

from llmbridge.accounts.kept_bodies import DROPPED_FACT
from llmbridge.accounts.ledger import UsageRecord
from llmbridge.accounts.usage_record import facts_of, with_fact
from llmbridge.backends.base import Backend
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import StopReason, Usage
from llmbridge.gateway.exchange.admission import caller_key
from llmbridge.gateway.state import GatewayState
from llmbridge.serving.router import Resolved
from llmbridge.web.render import Dialect

if TYPE_CHECKING:
    from llmbridge.gateway.telemetry import GatewayTrace

__all__ = [
    "Recorded",
    "count_metrics",
    "end_span",
    "ledger_dialect",
    "metric_model",
    "write_ledger_row",
]

log = logging.getLogger("llmbridge.gateway")


class Recorded(Protocol):
    """What the record reads of a finished request (the ``Exchange``'s properties)."""

    @property
    def state(self) -> GatewayState: ...
    @property
    def scope(self) -> Scope: ...
    @property
    def request_id(self) -> str: ...
    @property
    def endpoint(self) -> str: ...
    @property
    def dialect(self) -> Dialect: ...
    @property
    def model(self) -> str: ...
    @property
    def streamed(self) -> bool: ...
    @property
    def chat(self) -> ChatRequest | None: ...
    @property
    def backend(self) -> Backend | None: ...
    @property
    def label(self) -> str | None: ...
    @property
    def passed_on(self) -> str: ...
    @property
    def retries(self) -> int | None: ...
    @property
    def fallbacks(self) -> int | None: ...
    @property
    def status(self) -> int: ...
    @property
    def error_kind(self) -> str | None: ...
    @property
    def error_message(self) -> str | None: ...
    @property
    def stop_reason(self) -> StopReason | None: ...
    @property
    def ttft_s(self) -> float | None: ...
    @property
    def overhead_ms(self) -> float | None: ...
    @property
    def reply_headers(self) -> list[tuple[bytes, bytes]] | None: ...
    @property
    def trace(self) -> GatewayTrace | None: ...
    @property
    def trace_id(self) -> str | None: ...

    def session_id(self) -> str | None: ...
    def kept_reply(self) -> object: ...


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


@functools.lru_cache(maxsize=256)
def ledger_dialect(endpoint: str, dialect: Dialect) -> str:
    """The API a request spoke, as the usage ledger's ``dialect`` names it: the
    caller's dialect, told apart where one dialect has several APIs (``responses``,
    ``completions``, Google's ``interactions``) and ``agent`` for the agent service.
    ``endpoint`` is a route's template, so the cache stays small."""
    if endpoint.startswith("/v1/responses"):
        return "responses"
    if endpoint.startswith("/v1beta/interactions"):
        return "interactions"
    if endpoint == "/v1/completions":
        return "completions"
    if endpoint.startswith("/agent"):
        return "agent"
    return dialect.value


def write_ledger_row(
    exchange: Recorded,
    status: int,
    usage: Usage | None,
    cost: float | None,
    elapsed: float,
    *,
    spend_counted: bool,
) -> None:
    """The request's one usage-ledger row, when the gateway keeps a ledger.
    ``spend_counted``: its cost is already in the key's spend (the shared state)."""
    ledger = exchange.state.ledger
    if ledger is None:
        return
    key_id, key_name = caller_key(exchange.scope)
    backend = exchange.backend
    headers, stop = exchange.reply_headers, exchange.stop_reason
    ttft_s = exchange.ttft_s
    record = UsageRecord(
        request_id=exchange.request_id,
        model=exchange.model,
        status=status,
        key_id=key_id,
        key_name=key_name,
        backend=backend.kind if backend is not None else None,
        deployment=backend.name if backend is not None else None,
        endpoint=exchange.endpoint,
        input_tokens=usage.input_tokens if usage else None,
        output_tokens=usage.output_tokens if usage else None,
        reasoning_tokens=usage.reasoning_tokens if usage else None,
        cached_tokens=usage.cache_read_input_tokens if usage else None,
        cost_usd=cost,
        latency_ms=elapsed * 1000,
        ttft_ms=None if ttft_s is None else ttft_s * 1000,
        streamed=exchange.streamed,
        replica=ledger.replica,
        session_id=exchange.session_id(),
        dialect=ledger_dialect(exchange.endpoint, exchange.dialect),
        served_model=exchange.passed_on or None,
        retries=exchange.retries,
        fallbacks=exchange.fallbacks,
        facts=None if headers is None else facts_of(headers),
        trace_id=exchange.trace_id,
        overhead_ms=exchange.overhead_ms,
        finish_reason=None if stop is None else stop.value,
        error=exchange.error_message,
    )
    # Kept for the request log (ledger.keep_bodies): queued with the row, cut to
    # their bound; when no room is left for them, the row says they were dropped.
    if ledger.bodies is not None and not ledger.keep_bodies(
        record, exchange.chat, exchange.kept_reply()
    ):
        record = dataclasses.replace(record, facts=with_fact(record.facts, "bodies", DROPPED_FACT))
    ledger.record(record, spend_counted=spend_counted)


def count_metrics(
    exchange: Recorded, status: int, usage: Usage | None, elapsed: float, *, in_flight: bool
) -> None:
    """The request's metrics. ``in_flight``: it was counted in the in-flight gauge (a
    backend was chosen); otherwise it ended unserved."""
    metrics = exchange.state.metrics
    endpoint = exchange.endpoint
    if not in_flight:
        metrics.unserved(endpoint, status)
        return
    metrics.in_flight_of(endpoint).dec()
    served_by = exchange.backend
    backend = served_by.name if served_by is not None else ""
    label = exchange.label
    if label is None:
        label = metrics.model_label(exchange.passed_on, served=status == 200)
    bound = metrics.bound(endpoint, backend, label)
    bound.latency.observe(elapsed)
    ttft_s = exchange.ttft_s
    if ttft_s is not None:
        bound.first_token.observe(ttft_s)
    bound.request_done(status)
    error_kind = exchange.error_kind
    if error_kind is not None:
        bound.error(error_kind)
    if usage is not None and status == 200:
        metrics.record_usage(backend, label, usage)


def end_span(exchange: Recorded, usage: Usage | None) -> None:
    """The request's span ended with its attributes, when tracing is on; a tracing
    bug is logged, never the request's failure."""
    trace = exchange.trace
    if trace is None:
        return
    try:
        trace.finish(exchange, usage)
    except Exception:  # a tracing bug must not fail the request
        log.exception("ending request %s's span failed", exchange.request_id)

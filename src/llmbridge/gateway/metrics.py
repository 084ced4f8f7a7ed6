"""Prometheus metrics: requests, errors, latency, in-flight, tokens per backend and model.

Each app gets its own registry, so several gateways in one process (tests) do not
share counters. Model labels use the *resolved* backend model name, never an
arbitrary client-supplied string: a name the configuration names, or one a backend
served (at most ``MAX_PASSED_ON_LABELS``), else ``other`` (``model_label``), so label
cardinality stays bounded whatever clients send.
A request that ends before any backend is chosen (the client left while sending its
body: 499; its body came too slowly: 408) is counted with empty backend and model and
its route's path template as the endpoint. Connections closed while their headers were
read (gateway/server/read_limits.py) have no endpoint; they are counted by reason.

With ``llmbridge serve --workers N`` each worker process counts in its own files, in
the directory the parent named in ``PROMETHEUS_MULTIPROC_DIR`` before starting them
(prometheus_client's multiprocess mode, chosen when the library is imported), and a
scrape of any worker reads every worker's files: one scrape shows the sum. Counters and
histograms add up; the gauges are ``livesum``, the sum over the workers alive (a dead
worker's files are dropped by ``gateway/server/workers.py``). The event-loop task gauge,
computed on scrape in one process, is set each second by each worker instead.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector

from llmbridge.core.response import Usage

__all__ = [
    "CONTENT_TYPE_LATEST",
    "MAX_PASSED_ON_LABELS",
    "OTHER_MODEL",
    "BoundMetrics",
    "GatewayMetrics",
]

OTHER_MODEL = "other"
"""The model label of every name neither configured nor served (``model_label``)."""

MAX_PASSED_ON_LABELS = 100
"""Model names passed on as clients sent them that may each have a label."""

_MAX_LABEL_CHARS = 200

# The *_created timestamp series double the output and no dashboard reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


def _task_count() -> float:
    try:
        return float(len(asyncio.all_tasks()))
    except RuntimeError:  # scraped outside the event loop
        return 0.0


class GatewayMetrics:
    """One gateway's metrics. ``multiprocess_dir``: this process is one of several
    workers counting into that directory (the module docstring); ``render`` then reads
    them all."""

    def __init__(self, multiprocess_dir: str | Path | None = None) -> None:
        self.multiprocess_dir = None if multiprocess_dir is None else str(multiprocess_dir)
        self._bound: dict[tuple[str, str, str], BoundMetrics] = {}
        self._in_flight: dict[str, Any] = {}
        self._token_children: dict[tuple[str, str, str], Any] = {}
        self._passed_on: set[str] = set()
        self.registry = CollectorRegistry()
        labels = ("endpoint", "backend", "model")
        self.requests = Counter(
            "llmbridge_requests",
            "Requests completed, by endpoint, backend, model and HTTP status.",
            (*labels, "status"),
            registry=self.registry,
        )
        self.errors = Counter(
            "llmbridge_errors",
            "Requests that failed, by error type (including failures mid-stream).",
            (*labels, "error"),
            registry=self.registry,
        )
        self.latency = Histogram(
            "llmbridge_request_duration_seconds",
            "Time from request to the last byte of the response.",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.first_token = Histogram(
            "llmbridge_time_to_first_token_seconds",
            "Time from request to the first generated event.",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "llmbridge_in_flight_requests",
            "Generation requests being served right now.",
            ("endpoint",),
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        self.retries = Counter(
            "llmbridge_backend_retries",
            "Requests sent again to a backend after a transient failure, before any output.",
            ("backend",),
            registry=self.registry,
        )
        self.fallbacks = Counter(
            "llmbridge_fallbacks",
            "Replies served by a fallback backend, by that backend.",
            ("backend",),
            registry=self.registry,
        )
        self.tasks = Gauge(
            "llmbridge_event_loop_tasks",
            "Asyncio tasks alive in the gateway's event loop (a leak shows as growth).",
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        if self.multiprocess_dir is None:
            self.tasks.set_function(_task_count)
        self.tokens = Counter(
            "llmbridge_tokens",
            "Tokens processed, by direction (input or output).",
            ("backend", "model", "direction"),
            registry=self.registry,
        )
        self.usage_dropped = Counter(
            "llmbridge_usage_records_dropped",
            "Usage ledger records dropped: the database stayed unreachable while more "
            "than the ledger's buffer (100,000 records) waited (accounts/ledger.py).",
            registry=self.registry,
        )
        self.usage_set_aside = Counter(
            "llmbridge_usage_records_set_aside",
            "Usage ledger records the database refused for their values, set aside "
            "(logged with their request id) so the rows behind them are written "
            "(accounts/ledger.py).",
            registry=self.registry,
        )
        self.kept_bodies_dropped = Counter(
            "llmbridge_kept_bodies_dropped",
            "Requests whose kept bodies (ledger.keep_bodies) were not written: the "
            "bodies waiting for the database already held ledger.max_pending_body_bytes, "
            "or their write failed; their usage rows are written (accounts/kept_bodies.py).",
            registry=self.registry,
        )
        self.usage_pending_cleanup = Gauge(
            "llmbridge_usage_rows_pending_cleanup",
            "Usage ledger rows older than ledger.retention_days not yet rolled up into "
            "daily totals (accounts/rollups.py).",
            registry=self.registry,
            multiprocess_mode="max",
        )
        self.rejected_connections = Counter(
            "llmbridge_rejected_connections",
            "Connections closed while their request headers were read, by reason "
            "(header_timeout, headers_too_large, too_many_headers).",
            ("reason",),
            registry=self.registry,
        )

    def retry(self, backend: str) -> None:
        self.retries.labels(backend).inc()

    def fallback(self, backend: str) -> None:
        self.fallbacks.labels(backend).inc()

    def unserved(self, endpoint: str, status: int) -> None:
        """A request that ended before a backend was chosen (499, 408)."""
        self.requests.labels(endpoint, "", "", str(status)).inc()

    def rejected_connection(self, reason: str) -> None:
        self.rejected_connections.labels(reason).inc()

    def model_label(self, name: str, *, served: bool) -> str:
        """The label of a model name that a glob route or a default backend passed on
        as the client sent it (gateway/exchange/record.py ``metric_model``): its own once a
        backend has served it, for at most ``MAX_PASSED_ON_LABELS`` names; otherwise
        ``OTHER_MODEL``. A name a client made up is refused by the backend and never
        becomes a label."""
        if name in self._passed_on:
            return name
        if served and len(self._passed_on) < MAX_PASSED_ON_LABELS and len(name) <= _MAX_LABEL_CHARS:
            self._passed_on.add(name)
            return name
        return OTHER_MODEL

    def bound(self, endpoint: str, backend: str, model: str) -> BoundMetrics:
        """The metrics of one (endpoint, backend, model), labelled once and reused:
        ``labels()`` takes a lock and a dict lookup per call, several times a request."""
        key = (endpoint, backend, model)
        bound = self._bound.get(key)
        if bound is None:
            bound = self._bound[key] = BoundMetrics(self, endpoint, backend, model)
        return bound

    def in_flight_of(self, endpoint: str) -> Any:
        """The in-flight gauge's child for ``endpoint``, labelled once (``bound``)."""
        child = self._in_flight.get(endpoint)
        if child is None:
            child = self._in_flight[endpoint] = self.in_flight.labels(endpoint)
        return child

    def record_usage(self, backend: str, model: str, usage: Usage) -> None:
        if usage.input_tokens:
            self._tokens(backend, model, "input").inc(usage.input_tokens)
        if usage.output_tokens:
            self._tokens(backend, model, "output").inc(usage.output_tokens)

    def _tokens(self, backend: str, model: str, direction: str) -> Any:
        key = (backend, model, direction)
        child = self._token_children.get(key)
        if child is None:
            child = self._token_children[key] = self.tokens.labels(*key)
        return child

    def refresh(self) -> None:
        """Each second in a worker (gateway/server/workers.py): what a single process computes
        when scraped, written where the other workers' scrapes read it."""
        if self.multiprocess_dir is not None:
            self.tasks.set(_task_count())

    def own_totals(self) -> tuple[int, int]:
        """This process's requests completed and generation requests in flight (a
        worker's line in ``/health``)."""
        return _sample_sum(self.requests), _sample_sum(self.in_flight)

    def render(self) -> bytes:
        if self.multiprocess_dir is None:
            return generate_latest(self.registry)
        registry = CollectorRegistry(auto_describe=False)
        MultiProcessCollector(registry, path=self.multiprocess_dir)  # type: ignore[no-untyped-call]
        return generate_latest(registry)


def _sample_sum(metric: Counter | Gauge) -> int:
    # No *_created samples to leave out: they are disabled above.
    return int(sum(sample.value for family in metric.collect() for sample in family.samples))


class BoundMetrics:
    """One label set's children of each metric (see ``GatewayMetrics.bound``)."""

    __slots__ = ("_parent", "_requests", "errors", "first_token", "in_flight", "labels", "latency")

    def __init__(self, parent: GatewayMetrics, endpoint: str, backend: str, model: str) -> None:
        self._parent = parent
        self.labels = (endpoint, backend, model)
        self.latency = parent.latency.labels(*self.labels)
        self.first_token = parent.first_token.labels(*self.labels)
        self.in_flight = parent.in_flight_of(endpoint)
        self._requests: dict[int, Any] = {}

    def request_done(self, status: int) -> None:
        child = self._requests.get(status)
        if child is None:
            child = self._requests[status] = self._parent.requests.labels(*self.labels, str(status))
        child.inc()

    def error(self, kind: str) -> None:
        self._parent.errors.labels(*self.labels, kind).inc()

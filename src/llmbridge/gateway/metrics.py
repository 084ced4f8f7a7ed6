"""Prometheus metrics: requests, errors, latency, in-flight, tokens per backend and model.

Each app gets its own registry, so several gateways in one process (tests) do not
share counters. Model labels use the *resolved* backend model name, never an
arbitrary client-supplied string, to keep label cardinality bounded by configuration.
A request that ends before any backend is chosen (the client left while sending its
body: 499; its body came too slowly: 408) is counted with empty backend and model and
its route's path template as the endpoint. Connections closed while their headers were
read (gateway/read_limits.py) have no endpoint; they are counted by reason.
"""

from __future__ import annotations

import asyncio
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

from llmbridge.core.response import Usage

__all__ = ["CONTENT_TYPE_LATEST", "BoundMetrics", "GatewayMetrics"]

# The *_created timestamp series double the output and no dashboard reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


def _task_count() -> float:
    try:
        return float(len(asyncio.all_tasks()))
    except RuntimeError:  # scraped outside the event loop
        return 0.0


class GatewayMetrics:
    def __init__(self) -> None:
        self._bound: dict[tuple[str, str, str], BoundMetrics] = {}
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
        )
        self.tasks.set_function(_task_count)
        self.tokens = Counter(
            "llmbridge_tokens",
            "Tokens processed, by direction (input or output).",
            ("backend", "model", "direction"),
            registry=self.registry,
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

    def bound(self, endpoint: str, backend: str, model: str) -> BoundMetrics:
        """The metrics of one (endpoint, backend, model), labelled once and reused:
        ``labels()`` takes a lock and a dict lookup per call, several times a request."""
        key = (endpoint, backend, model)
        bound = self._bound.get(key)
        if bound is None:
            bound = self._bound[key] = BoundMetrics(self, endpoint, backend, model)
        return bound

    def record_usage(self, backend: str, model: str, usage: Usage) -> None:
        if usage.input_tokens:
            self.tokens.labels(backend, model, "input").inc(usage.input_tokens)
        if usage.output_tokens:
            self.tokens.labels(backend, model, "output").inc(usage.output_tokens)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class BoundMetrics:
    """One label set's children of each metric (see ``GatewayMetrics.bound``)."""

    __slots__ = ("_parent", "_requests", "errors", "first_token", "in_flight", "labels", "latency")

    def __init__(self, parent: GatewayMetrics, endpoint: str, backend: str, model: str) -> None:
        self._parent = parent
        self.labels = (endpoint, backend, model)
        self.latency = parent.latency.labels(*self.labels)
        self.first_token = parent.first_token.labels(*self.labels)
        self.in_flight = parent.in_flight.labels(endpoint)
        self._requests: dict[int, Any] = {}

    def request_done(self, status: int) -> None:
        child = self._requests.get(status)
        if child is None:
            child = self._requests[status] = self._parent.requests.labels(*self.labels, str(status))
        child.inc()

    def error(self, kind: str) -> None:
        self._parent.errors.labels(*self.labels, kind).inc()

"""A real OTLP/HTTP trace receiver on loopback, for the gateway's tracing tests.

What an OpenTelemetry collector does with ``POST /v1/traces``: the body is an
``ExportTraceServiceRequest`` in protobuf (gzip-compressed when the exporter says so),
decoded here with the official ``opentelemetry-proto`` package, and answered with an
empty ``ExportTraceServiceResponse``. Every span received is kept as a
``ReceivedSpan`` (ids in hex, attributes as Python values, its resource's attributes);
a test waits for the spans it expects with a bounded wait (tests/waiting.py), never a
sleep. No mock exporter: the gateway's own SDK exporter sends these over TCP.

``OtlpReceiver(hang=True)`` is a collector that hangs: it reads each post and answers
none of them (``held`` counts them) until it is closed.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.conftest import RunningServer
from tests.waiting import wait_until

__all__ = ["OtlpReceiver", "ReceivedSpan"]

SERVER = Span.SPAN_KIND_SERVER
CLIENT = Span.SPAN_KIND_CLIENT
INTERNAL = Span.SPAN_KIND_INTERNAL
ERROR = Status.STATUS_CODE_ERROR


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for pair in pairs:
        assert isinstance(pair, KeyValue)
        found[pair.key] = _value(pair.value)
    return found


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the receiver decoded it."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    kind: int
    attributes: dict[str, Any]
    status: int
    resource: dict[str, Any]
    start_ns: int
    end_ns: int

    def children(self, spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
        """The spans whose parent this is, in start order."""
        return sorted(
            (s for s in spans if s.parent_id == self.span_id and s.trace_id == self.trace_id),
            key=lambda s: s.start_ns,
        )


class OtlpReceiver:
    """``POST /v1/traces`` on 127.0.0.1 (module docstring); use as a context manager.
    ``url`` is the base URL to configure (``telemetry.otlp_endpoint``); ``hang``: answer
    nothing until closed (module docstring)."""

    def __init__(self, *, hang: bool = False) -> None:
        self.spans: list[ReceivedSpan] = []
        self.exports: list[ExportTraceServiceRequest] = []
        """Every request received, as it came (a collector's file exporter writes these)."""
        self.posts = 0
        self.held = 0
        """Posts received and not answered (``hang``)."""
        self._hang = hang
        self._closing = threading.Event()
        self._lock = threading.Lock()
        app = Starlette(routes=[Route("/v1/traces", self._traces, methods=["POST"])])
        self._server = RunningServer(app)
        self.url = self._server.url

    async def _traces(self, request: Request) -> Response:
        body = await request.body()
        if self._hang:
            with self._lock:
                self.held += 1
            await run_in_threadpool(self._closing.wait)  # answered only once closed
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        assert request.headers.get("content-type") == "application/x-protobuf"
        export = ExportTraceServiceRequest()
        export.ParseFromString(body)
        received: list[ReceivedSpan] = []
        for resource_spans in export.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex() or None,
                            kind=span.kind,
                            attributes=_attributes(span.attributes),
                            status=span.status.code,
                            resource=resource,
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                        )
                    )
        with self._lock:
            self.posts += 1
            self.spans.extend(received)
            self.exports.append(export)
        return Response(
            ExportTraceServiceResponse().SerializeToString(),
            media_type="application/x-protobuf",
        )

    def __enter__(self) -> OtlpReceiver:
        self._server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()  # a held post ends, so the server can stop
        self._server.__exit__(*exc)

    def snapshot(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self.spans)

    def wait_for(
        self, found: Callable[[list[ReceivedSpan]], bool], what: str
    ) -> list[ReceivedSpan]:
        """Every span received, once ``found`` holds of them (a bounded wait)."""
        wait_until(lambda: found(self.snapshot()), what)
        return self.snapshot()

    def trace_of(self, request_id: str, count: int) -> tuple[ReceivedSpan, list[ReceivedSpan]]:
        """The request span whose ``llmbridge.request_id`` is ``request_id`` and the
        spans of its trace, once ``count`` of them (the request's included) are in."""

        def spans_of(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
            roots = [s for s in spans if s.attributes.get("llmbridge.request_id") == request_id]
            return [s for s in spans if roots and s.trace_id == roots[0].trace_id]

        spans = self.wait_for(
            lambda spans: len(spans_of(spans)) >= count,
            f"{count} spans of request {request_id}",
        )
        mine = spans_of(spans)
        root = next(s for s in mine if s.attributes.get("llmbridge.request_id") == request_id)
        return root, mine

"""An OTLP/HTTP trace receiver that decodes and counts what it gets, for measuring the
gateway with tracing on (docs/DEPLOY.md, "Tracing (OpenTelemetry)").

Run it, then the overhead benchmark with the gateway pointed at it through
OpenTelemetry's own variable (the gateway subprocesses inherit the environment; a
baseline checkout from before tracing ignores it)::

    .venv/bin/python -m bench otlp_sink --port 4318 &
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 \\
        .venv/bin/python -m bench overhead --only nonstream-c1 --only stream-c1 \\
        --baseline-src /tmp/before/src
    kill %1        # prints the spans and posts received

Each ``POST /v1/traces`` body is parsed as an ``ExportTraceServiceRequest`` (the
official ``opentelemetry-proto`` types), as a collector would, so the gateway's
exporter does all of its work. Loopback only.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator

import uvicorn
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

counts = {"posts": 0, "spans": 0}
_OK = ExportTraceServiceResponse().SerializeToString()


async def traces(request: Request) -> Response:
    export = ExportTraceServiceRequest()
    export.ParseFromString(await request.body())
    counts["posts"] += 1
    counts["spans"] += sum(
        len(scope.spans) for resource in export.resource_spans for scope in resource.scope_spans
    )
    return Response(_OK, media_type="application/x-protobuf")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=4318)
    args = parser.parse_args(argv)
    app = Starlette(routes=[Route("/v1/traces", traces, methods=["POST"])], lifespan=lifespan)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    yield
    # uvicorn stops on SIGTERM or Ctrl-C (then re-raises the signal): print before that.
    print(f"otlp_sink: {counts['spans']} spans in {counts['posts']} posts", flush=True)


if __name__ == "__main__":
    main()

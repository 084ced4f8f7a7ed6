"""A session trace as spans named by the OpenTelemetry GenAI semantic conventions.

One ``invoke_agent`` span per session, a ``chat`` span per LLM step (turn) and an
``execute_tool`` span per tool call, with the conventions' attribute names
(``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.request.model``,
``gen_ai.conversation.id``, ``gen_ai.usage.input_tokens`` / ``output_tokens``,
``gen_ai.usage.cache_read.input_tokens`` / ``cache_creation.input_tokens``,
``gen_ai.usage.reasoning.output_tokens``, ``gen_ai.response.finish_reasons``,
``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``error.type``). The spans are plain
dictionaries written to ``traces.jsonl``; ``export_otlp`` sends them to an OTLP/HTTP
collector with the OpenTelemetry SDK (the optional ``otlp`` extra; ``profile run
--otlp-endpoint`` asks ``exporter_installed`` before the run starts).
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Iterable
from typing import Any

from llmbridge.profiler.records.types import ProviderConfig, SessionTrace, TokenMetrics

__all__ = ["EXPORTER_MISSING", "export_otlp", "exporter_installed", "trace_spans"]

EXPORTER_MISSING = "--otlp-endpoint needs the OpenTelemetry exporter: pip install 'llmbridge[otlp]'"
"""Why ``profile run --otlp-endpoint`` is refused where the ``otlp`` extra is not installed."""
_EXPORTER_PACKAGES = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")


def exporter_installed() -> bool:
    """Whether the ``otlp`` extra (the OpenTelemetry SDK and its OTLP/HTTP exporter) is
    installed: its packages are looked up, not imported."""
    try:
        return all(importlib.util.find_spec(name) is not None for name in _EXPORTER_PACKAGES)
    except (ImportError, ValueError):  # a parent package missing, or a broken entry
        return False


def _usage(tokens: TokenMetrics) -> dict[str, int]:
    return {
        "gen_ai.usage.input_tokens": tokens.input,
        "gen_ai.usage.output_tokens": tokens.output + tokens.reasoning,
        "gen_ai.usage.reasoning.output_tokens": tokens.reasoning,
        "gen_ai.usage.cache_read.input_tokens": tokens.cache_read,
        "gen_ai.usage.cache_creation.input_tokens": tokens.cache_write,
    }


def _ids(session_id: str, name: str) -> str:
    return hashlib.sha256(f"{session_id}/{name}".encode()).hexdigest()[:16]


def trace_spans(trace: SessionTrace, config: ProviderConfig, provider: str) -> list[dict[str, Any]]:
    """The spans of one session (times in Unix milliseconds; ``None`` when unknown)."""
    provider_name = config.model.partition("/")[0] if "/" in config.model else provider
    common = {"gen_ai.provider.name": provider_name, "gen_ai.request.model": config.model}
    trace_id = hashlib.sha256(trace.session_id.encode()).hexdigest()[:32]
    root_id = _ids(trace.session_id, "root")
    spans: list[dict[str, Any]] = []
    starts = [t.events[0].timestamp_ms for t in trace.turns if t.events[0].timestamp_ms]
    ends = [
        (t.events[0].timestamp_ms or 0) + (t.events[0].duration_ms or 0)
        for t in trace.turns
        if t.events[0].timestamp_ms
    ]
    finishes = [t.events[0].status for t in trace.turns if t.events[0].status]
    root_attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": config.mode,
        "gen_ai.conversation.id": trace.session_id,
        **common,
        **_usage(trace.summary.tokens),
        "gen_ai.response.finish_reasons": finishes[-1:],
    }
    if trace.summary.errors:
        root_attributes["error.type"] = "agent_error"
    spans.append(
        {
            "name": f"invoke_agent {config.mode}",
            "trace_id": trace_id,
            "span_id": root_id,
            "parent_id": None,
            "start_ms": min(starts) if starts else None,
            "end_ms": max(ends) if ends else None,
            "attributes": root_attributes,
        }
    )
    for turn in trace.turns:
        boundary = turn.events[0]
        turn_id = _ids(trace.session_id, f"turn{turn.index}")
        start = boundary.timestamp_ms
        spans.append(
            {
                "name": f"chat {config.model}",
                "trace_id": trace_id,
                "span_id": turn_id,
                "parent_id": root_id,
                "start_ms": start,
                "end_ms": None if start is None else start + (boundary.duration_ms or 0),
                "attributes": {
                    "gen_ai.operation.name": "chat",
                    **common,
                    **_usage(turn.tokens),
                    "gen_ai.response.finish_reasons": [boundary.status] if boundary.status else [],
                },
            }
        )
        results = {e.call_id: e for e in turn.events if e.type in ("tool_result", "error")}
        for call in (e for e in turn.events if e.type == "tool_call"):
            outcome = results.get(call.call_id)
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": call.tool,
                "gen_ai.tool.call.id": call.call_id,
            }
            if outcome is not None and outcome.type == "error":
                attributes["error.type"] = "tool_error"
            end = None
            if call.timestamp_ms is not None and outcome is not None and outcome.duration_ms:
                end = call.timestamp_ms + outcome.duration_ms
            spans.append(
                {
                    "name": f"execute_tool {call.tool}",
                    "trace_id": trace_id,
                    "span_id": _ids(trace.session_id, f"tool{call.call_id}"),
                    "parent_id": turn_id,
                    "start_ms": call.timestamp_ms,
                    "end_ms": end,
                    "attributes": attributes,
                }
            )
    return spans


def export_otlp(spans: Iterable[dict[str, Any]], endpoint: str) -> int:
    """Send spans to an OTLP/HTTP collector (``http://host:4318/v1/traces``); returns
    how many were sent. Needs ``pip install 'llmbridge[otlp]'``."""
    try:
        from opentelemetry import trace as otel_trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    except ImportError as exc:
        raise RuntimeError(
            "OTLP export needs the OpenTelemetry SDK: pip install 'llmbridge[otlp]'"
        ) from exc
    provider = TracerProvider(resource=Resource.create({"service.name": "llmbridge-profiler"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    tracer = provider.get_tracer("llmbridge.profiler")
    contexts: dict[str, Any] = {}
    sent = 0
    for span in spans:
        parent = contexts.get(span["parent_id"]) if span["parent_id"] else None
        start = span["start_ms"]
        live = tracer.start_span(
            span["name"],
            context=otel_trace.set_span_in_context(parent) if parent is not None else None,
            start_time=int(start * 1e6) if start is not None else None,
            attributes={k: v for k, v in span["attributes"].items() if v is not None},
        )
        if span["attributes"].get("error.type"):
            live.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR))
        contexts[span["span_id"]] = live
        end = span["end_ms"]
        live.end(end_time=int(end * 1e6) if end is not None else None)
        sent += 1
    provider.shutdown()
    return sent

"""Every request a trace, exported to an OpenTelemetry collector: ``Tracing``.

Off unless ``telemetry.otlp_endpoint`` (or ``OTEL_EXPORTER_OTLP_ENDPOINT``) is set
(docs/DEPLOY.md, "Tracing (OpenTelemetry)"). This module imports the OpenTelemetry
SDK, so the gateway imports it only then (gateway/app.py's lifespan): off, no SDK is
loaded, no span object is made, and a request pays for a ``None`` check
(``GatewayState.tracing``, ``core.tracing.REQUEST_TRACE``).

On, each process (each of ``llmbridge serve --workers N``) has its own
``TracerProvider`` with a ``BatchSpanProcessor``: spans are queued and sent over
OTLP/HTTP (protobuf) by the SDK's thread, never on a request's path, and flushed at
shutdown (``Tracing.shutdown``). The provider is the gateway's own, not the
process-wide global, so two gateways in one process (tests) do not mix their spans.

Shutdown waits at most ``SHUTDOWN_TIMEOUT_S`` (2 s) on the exporter, whatever the
collector does. The SDK's own shutdown waits up to 30 s for its thread, and that thread
sends each batch within the exporter's timeout (10 s, ``OTEL_EXPORTER_OTLP_TIMEOUT``),
retrying a refused connection within it: a collector that hung held the gateway's
shutdown 13 s, one that refused 6 s. So the SDK's shutdown runs in a daemon thread
that the gateway stops waiting for at the deadline; the spans still queued then are
dropped (logged), the SDK's threads (daemons) end with the process, and the provider
registers no exit hook that would wait for them again (``shutdown_on_exit=False``).

The spans, named and attributed after the OpenTelemetry GenAI semantic conventions:

- the **request** (``GatewayTrace``, kind SERVER): ``chat {model}`` (or
  ``text_completion``, ``embeddings``; ``{method} {route}`` for what generates
  nothing), started when the request's ``Exchange`` is made and ended when it
  finishes (a stream's end); ``gen_ai.operation.name``, ``gen_ai.provider.name`` and
  ``gen_ai.system`` (the serving backend's), ``gen_ai.request.model`` (the name the
  client asked for), ``gen_ai.response.model`` (the backend's), token usage,
  ``gen_ai.response.finish_reasons`` (llmbridge's neutral stop reasons),
  ``gen_ai.request.max_tokens`` / ``temperature`` / ``top_p`` where set, the client's
  session as ``session.id`` and ``gen_ai.conversation.id``, the key's name (never the
  key), the route, the dialect, the status, ``error.type``, the overhead;
- each **backend attempt** (kind CLIENT, serving/models.py): ``chat {backend model}``
  with ``server.address`` / ``server.port``, the deployment, its number among the
  request's attempts, whether it is a retry (the same deployment and model again) or a
  route fallback, and its failure; the attempt that served gets the usage;
- tool emulation's **decision** and **answer** calls (features/tool_emulation.py),
  children of the attempt they run in.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

from llmbridge.gateway.config import OTLP_EXTRA_MISSING, ConfigError

try:
    from opentelemetry import trace as otel_trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode
except ImportError as exc:  # the `otlp` extra (pyproject.toml) is not installed
    raise ConfigError(OTLP_EXTRA_MISSING) from exc

from llmbridge import __version__
from llmbridge.backends.base import Backend
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import StopReason, Usage
from llmbridge.core.tracing import REQUEST_TRACE, AttributeValue, usage_attributes
from llmbridge.dialects.responses.continuation import PREVIOUS_RESPONSE_ID
from llmbridge.dialects.responses.request import DETAILS_KEY

__all__ = ["DEFAULT_SERVICE_NAME", "SHUTDOWN_TIMEOUT_S", "GatewayTrace", "Tracing", "traces_url"]

log = logging.getLogger("llmbridge.telemetry")

DEFAULT_SERVICE_NAME = "llmbridge"
"""``service.name`` when neither ``telemetry.service_name`` nor ``OTEL_SERVICE_NAME`` says."""

TRACES_PATH = "/v1/traces"

SHUTDOWN_TIMEOUT_S = 2.0
"""The most the gateway's shutdown waits on the exporter for the spans still queued
(module docstring)."""

PROVIDERS = {
    "openai": "openai",
    "openai_responses": "openai",
    "anthropic": "anthropic",
    "gemini": "gcp.gemini",
    "gemini_interactions": "gcp.gemini",
}
"""Backend kinds with a ``gen_ai.provider.name`` of the conventions' own; any other
kind (ollama, embedded, opencode, scripted) is named by its kind."""


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of ``endpoint``: a collector's base URL, as
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` gives it (``http://collector:4318``), gets
    ``/v1/traces`` added, as the SDK does for that variable; a URL already ending in
    it is used as it is."""
    url = endpoint.rstrip("/")
    return url if url.endswith(TRACES_PATH) else url + TRACES_PATH


def _clean(attributes: Mapping[str, AttributeValue | None]) -> dict[str, Any]:
    return {key: value for key, value in attributes.items() if value is not None}


def _server(url: str | None) -> tuple[str | None, int | None]:
    """``server.address`` and ``server.port`` of a backend's URL."""
    if not url:
        return None, None
    try:
        parts = urlsplit(url)
        port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    except ValueError:
        return None, None
    return parts.hostname, port


def provider_name(kind: str) -> str:
    """``gen_ai.provider.name`` of a backend kind."""
    return PROVIDERS.get(kind, kind)


class _Child:
    """A child span (``core.tracing.TraceSpan``)."""

    __slots__ = ("ended", "failed", "span")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.ended = False
        self.failed = False

    def set(self, attributes: Mapping[str, AttributeValue | None]) -> None:
        if not self.ended:
            self.span.set_attributes(_clean(attributes))

    def fail(self, error: BaseException) -> None:
        if self.ended:
            return
        self.failed = True
        kind = type(error).__name__
        self.span.set_attribute("error.type", kind)
        status = getattr(error, "backend_status", None) or getattr(error, "status_code", None)
        if isinstance(status, int):
            self.span.set_attribute("http.response.status_code", status)
        self.span.set_status(Status(StatusCode.ERROR, str(error)[:200] or kind))

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self.span.end()


class Finished(Protocol):
    """What ``GatewayTrace.finish`` reads of the request (gateway/exchange/exchange.py's
    ``Exchange``; a protocol, so this module does not import it)."""

    @property
    def model(self) -> str: ...
    @property
    def passed_on(self) -> str: ...
    @property
    def backend(self) -> Backend | None: ...
    @property
    def chat(self) -> ChatRequest | None: ...
    @property
    def status(self) -> int: ...
    @property
    def error_kind(self) -> str | None: ...
    @property
    def streamed(self) -> bool: ...
    @property
    def ttft_s(self) -> float | None: ...
    @property
    def overhead_ms(self) -> float | None: ...
    @property
    def stop_reason(self) -> StopReason | None: ...
    @property
    def scope(self) -> Any: ...

    def session_id(self) -> str | None: ...


class GatewayTrace:
    """One request's span and its children (``core.tracing.RequestTrace``)."""

    __slots__ = ("_attempts", "_children", "_last", "endpoint", "span", "trace_id", "tracer")

    def __init__(self, tracer: otel_trace.Tracer, span: Span, endpoint: str) -> None:
        self.tracer = tracer
        self.span = span
        self.endpoint = endpoint
        self.trace_id = format(span.get_span_context().trace_id, "032x")
        self._children: list[_Child] = []
        self._attempts: list[tuple[str, str]] = []
        self._last: _Child | None = None
        """The latest attempt: the parent of tool emulation's calls."""

    def _child(self, name: str, parent: Span, kind: SpanKind, attributes: dict[str, Any]) -> _Child:
        context = otel_trace.set_span_in_context(parent)
        child = _Child(self.tracer.start_span(name, context, kind, attributes))
        self._children.append(child)
        return child

    def attempt(
        self, *, deployment: str, kind: str, model: str, url: str | None, fallback: bool
    ) -> _Child:
        retry = bool(self._attempts) and self._attempts[-1] == (deployment, model)
        self._attempts.append((deployment, model))
        address, port = _server(url)
        provider = provider_name(kind)
        attributes = _clean(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": provider,
                "gen_ai.system": provider,
                "gen_ai.request.model": model,
                "server.address": address,
                "server.port": port,
                "llmbridge.deployment": deployment,
                "llmbridge.backend.kind": kind,
                "llmbridge.attempt": len(self._attempts),
                "llmbridge.retry": retry,
                "llmbridge.fallback": fallback,
            }
        )
        self._last = self._child(f"chat {model}", self.span, SpanKind.CLIENT, attributes)
        return self._last

    def step(self, name: str, model: str) -> _Child:
        parent = self._last.span if self._last is not None else self.span
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
            "llmbridge.tool_emulation.step": name,
        }
        return self._child(f"tool_emulation {name}", parent, SpanKind.INTERNAL, attributes)

    def finish(self, request: Finished, usage: Usage | None) -> None:
        """The request's attributes, then its open children and itself ended."""
        chat = request.chat
        backend = request.backend
        usage_of = usage_attributes(usage) if usage is not None else {}
        stop = request.stop_reason
        reasons = [str(stop)] if stop is not None else None
        last = self._last
        if last is not None and not last.failed and not last.ended:
            last.set(
                {
                    **usage_of,
                    "gen_ai.response.model": request.passed_on or None,
                    "gen_ai.response.finish_reasons": reasons,
                }
            )
        for child in self._children:
            child.end()
        operation = _operation(self.endpoint, chat)
        span = self.span
        method = request.scope.get("method", "")
        if operation is not None and request.model:
            span.update_name(f"{operation} {request.model}")
        else:
            span.update_name(f"{method} {self.endpoint}".strip())
        provider = provider_name(backend.kind) if backend is not None else None
        attributes: dict[str, AttributeValue | None] = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": provider,
            "gen_ai.system": provider,
            "gen_ai.request.model": request.model or None,
            "gen_ai.response.model": request.passed_on or None,
            "gen_ai.response.finish_reasons": reasons,
            **usage_of,
            "http.request.method": method or None,
            "http.route": self.endpoint,
            "http.response.status_code": request.status,
            "llmbridge.deployment": backend.name if backend is not None else None,
            "llmbridge.streamed": request.streamed,
            "llmbridge.overhead_ms": request.overhead_ms,
            "llmbridge.ttft_ms": None if request.ttft_s is None else request.ttft_s * 1000,
        }
        if chat is not None:
            params = chat.params
            attributes["gen_ai.request.max_tokens"] = params.max_tokens
            attributes["gen_ai.request.temperature"] = params.temperature
            attributes["gen_ai.request.top_p"] = params.top_p
        session = _session(request, chat)
        attributes["session.id"] = session
        attributes["gen_ai.conversation.id"] = session
        attributes["llmbridge.previous_response_id"] = _previous_response(chat)
        status = request.status
        if request.error_kind is not None or status >= 400:
            attributes["error.type"] = request.error_kind or str(status)
        span.set_attributes(_clean(attributes))
        if status >= 500:
            span.set_status(Status(StatusCode.ERROR, request.error_kind or str(status)))
        span.end()


def _operation(endpoint: str, chat: ChatRequest | None) -> str | None:
    """``gen_ai.operation.name`` of a route: ``None`` for one that generates nothing
    (a model list, a token count, a stored response)."""
    lowered = endpoint.lower()
    if "embed" in lowered:
        return "embeddings"
    if chat is None or "token" in lowered:
        return None
    return "text_completion" if chat.completion is not None else "chat"


def _previous_response(chat: ChatRequest | None) -> str | None:
    details = chat.provider_details if chat is not None else None
    responses = details.get(DETAILS_KEY) if details else None
    value = responses.get(PREVIOUS_RESPONSE_ID) if isinstance(responses, dict) else None
    return value if isinstance(value, str) else None


def _session(request: Finished, chat: ChatRequest | None) -> str | None:
    """The client's session (serving/deployments.py ``client_session``: its session
    header, ``prompt_cache_key``, Claude Code's ``metadata.user_id``); else the stored
    response a Responses request continues (``previous_response_id``); else the agent
    session a turn belongs to (``/agent/sessions/{session_id}/...``)."""
    session = request.session_id() or _previous_response(chat)
    if session is None:
        params = request.scope.get("path_params")
        value = params.get("session_id") if isinstance(params, dict) else None
        session = value if isinstance(value, str) else None
    return session


class Tracing:
    """One process's tracer: the SDK's provider, its batch processor and the OTLP/HTTP
    exporter (module docstring). ``exporter`` replaces the OTLP one (benchmarks)."""

    def __init__(
        self,
        endpoint: str,
        service_name: str,
        *,
        exporter: SpanExporter | None = None,
        shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S,
    ) -> None:
        self.endpoint = traces_url(endpoint)
        self.shutdown_timeout_s = shutdown_timeout_s
        """The most ``shutdown`` waits for the spans still queued."""
        # service.instance.id tells the workers of --workers N (and replicas) apart.
        instance = f"{socket.gethostname()}:{os.getpid()}"
        resource = Resource.create(
            {
                "service.name": service_name,
                "service.version": __version__,
                "service.instance.id": instance,
            }
        )
        # No exit hook: the gateway's lifespan shuts the provider down within its
        # deadline, and a hook would wait on a stuck exporter again at exit.
        self.provider = TracerProvider(resource=resource, shutdown_on_exit=False)
        # Headers (OTEL_EXPORTER_OTLP_HEADERS), timeout and compression come from the
        # SDK's own environment variables.
        self.provider.add_span_processor(
            BatchSpanProcessor(exporter or OTLPSpanExporter(endpoint=self.endpoint))
        )
        self.tracer = self.provider.get_tracer("llmbridge.gateway", __version__)

    def request(
        self, endpoint: str, dialect: str, request_id: str, key: str | None
    ) -> GatewayTrace:
        """A request's span, started now and made the current request's trace for the
        layers below (``core.tracing.REQUEST_TRACE``). ``key``: the key's name."""
        attributes = _clean(
            {
                "llmbridge.request_id": request_id,
                "llmbridge.dialect": dialect,
                "llmbridge.key.name": key,
            }
        )
        span = self.tracer.start_span(endpoint, kind=SpanKind.SERVER, attributes=attributes)
        trace = GatewayTrace(self.tracer, span, endpoint)
        REQUEST_TRACE.set(trace)
        return trace

    def shutdown(self) -> bool:
        """Send what is queued and stop the exporter's thread, waiting at most
        ``shutdown_timeout_s`` (module docstring); whether it finished in time. Blocks:
        call it off the event loop."""
        finished = threading.Event()

        def shut_down() -> None:
            try:
                self.provider.shutdown()
            except Exception:  # a collector that is gone must not fail the shutdown
                log.exception("flushing the traces to %s failed", self.endpoint)
            finally:
                finished.set()

        # A daemon thread: one the collector holds must not hold the process's exit.
        threading.Thread(target=shut_down, name="llmbridge-tracing-shutdown", daemon=True).start()
        if finished.wait(self.shutdown_timeout_s):
            return True
        log.warning(
            "the trace collector at %s did not take the last spans within %g s: the spans "
            "still queued are dropped",
            self.endpoint,
            self.shutdown_timeout_s,
        )
        return False

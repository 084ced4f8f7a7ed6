"""The MCP gateway's tool calls, admitted and recorded as the model API's requests
are: ``McpCallGate`` fills the hook mcp/gate.py names, and gateway/app.py hands it to
the ``McpGateway``, as ``agent_gate`` fills the agent's. This is the one module of the
MCP gateway that touches the gateway's instruments (the key's limits, the ledger, the
metrics registry, the tracer); a tool call has no ``Exchange``: it calls no model.

- **admit**: the request's database key (``ACCOUNT``; a static key, the master key or
  auth off counts nothing) takes one request of its ``rpm`` window and one
  ``max_parallel`` slot, the counters its model requests take
  (accounts/limits.py ``admit_tool_call``); over either, the call is refused with the
  429's JSON-RPC error, recorded.
- **record**, once per call however it ends (a result, the tool's own ``isError``
  result, an upstream failure or timeout, a refusal, the client cancelling: 499): one
  usage-ledger row, which is the request log's row (``model`` ``mcp:<server>/<tool>``,
  ``backend`` ``mcp``, ``deployment`` the server, ``dialect`` ``mcp``, the latency,
  the error; no tokens, no cost; ``facts`` the bytes in and out, the protocol
  revision and whether the tool answered with an error), the arguments and the
  result as its kept bodies when ``ledger.keep_bodies`` is on (redacted and cut as
  every body is); the ``llmbridge_mcp_tool_calls_total`` counter (server, tool,
  status), the ``llmbridge_mcp_tool_call_duration_seconds`` histogram and the bytes
  counter; and, with tracing on, a span ``execute_tool <tool>`` after the
  OpenTelemetry GenAI conventions (``gen_ai.operation.name: execute_tool``,
  ``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.type: extension``) and
  the MCP ones (``mcp.method.name``, ``mcp.session.id``, ``mcp.protocol.version``,
  ``jsonrpc.request.id``), with ``error.type`` on a failure.

Tool labels are the names a configured server listed; a name no server has counts
as ``other``, so clients cannot grow ``/metrics``. ``counts`` reads the calls counter
back, by server, for the console's MCP page.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from prometheus_client import Counter, Histogram

from llmbridge.accounts.kept_bodies import DROPPED_FACT
from llmbridge.accounts.keys import KeyRecord
from llmbridge.accounts.ledger import UsageRecord
from llmbridge.accounts.limits import OPEN, Admission
from llmbridge.accounts.service import ACCOUNT
from llmbridge.core.errors import LLMBridgeError
from llmbridge.gateway.exchange.admission import caller_key
from llmbridge.gateway.state import GatewayState
from llmbridge.mcp.gate import CallPass, Outcome, ToolCall
from llmbridge.web.render import new_request_id

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = ["McpCallGate", "ToolCallCounts"]

log = logging.getLogger("llmbridge.gateway")

OTHER_TOOL = "other"
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class _Metrics:
    """The MCP gateway's counters, in the gateway's registry (gateway/metrics.py)."""

    def __init__(self, state: GatewayState) -> None:
        registry = state.metrics.registry
        self.calls = Counter(
            "llmbridge_mcp_tool_calls",
            "MCP tool calls through /mcp, by server, tool and status (the HTTP status the "
            "same outcome has on the model APIs; 200 includes a tool's isError result).",
            ("server", "tool", "status"),
            registry=registry,
        )
        self.duration = Histogram(
            "llmbridge_mcp_tool_call_duration_seconds",
            "Time from an MCP tool call's arrival to its result, by server.",
            ("server",),
            buckets=_BUCKETS,
            registry=registry,
        )
        self.bytes = Counter(
            "llmbridge_mcp_tool_call_bytes",
            "Bytes of MCP tool call arguments (in) and results (out), as JSON, by server.",
            ("server", "direction"),
            registry=registry,
        )


@dataclass(frozen=True, slots=True)
class ToolCallCounts:
    """One server's tool calls recorded by this process, from its counters."""

    calls: int = 0
    errors: int = 0
    """Those whose status is 400 or more (refusals, upstream failures, timeouts)."""


class _Pass:
    """One admitted call (``mcp.gate.CallPass``)."""

    __slots__ = ("admission", "call", "done", "gate", "span", "started")

    def __init__(
        self,
        gate: McpCallGate,
        call: ToolCall,
        started: float,
        admission: Admission,
        span: Span | None,
    ) -> None:
        self.gate, self.call, self.started = gate, call, started
        self.admission, self.span = admission, span
        self.done = False

    async def finish(self, outcome: Outcome) -> None:
        if self.done:
            return
        self.done = True
        try:
            await self.admission.finish()
        except Exception:  # the shared state failed over and still failed: keep the row
            log.exception("settling MCP call %s's key limits failed", self.call.request_id)
        self.gate.record(self.call, outcome, self.started, self.span)


class McpCallGate:
    """``mcp.gate.CallGate`` over this gateway's keys, ledger, metrics and tracer."""

    def __init__(self, state: GatewayState) -> None:
        self.state = state
        self.metrics = _Metrics(state)

    def counts(self) -> dict[str, ToolCallCounts]:
        """The tool calls this process recorded, by server (the calls counter's samples:
        what ``/metrics`` says of this worker)."""
        totals: dict[str, list[int]] = {}
        for metric in self.metrics.calls.collect():
            for sample in metric.samples:
                if not sample.name.endswith("_total"):
                    continue
                tally = totals.setdefault(sample.labels["server"], [0, 0])
                tally[0] += int(sample.value)
                if int(sample.labels["status"]) >= 400:
                    tally[1] += int(sample.value)
        return {server: ToolCallCounts(*tally) for server, tally in totals.items()}

    def _begin(self, call: ToolCall) -> tuple[float, Span | None]:
        call.request_id = new_request_id()
        return time.perf_counter(), self._span(call)

    async def admit(self, call: ToolCall) -> CallPass:
        started, span = self._begin(call)
        record = call.scope.get(ACCOUNT)
        admission = OPEN
        if isinstance(record, KeyRecord) and not call.within_request:
            try:
                admission = await self.state.accounts.admit_tool_call(record)
            except LLMBridgeError as exc:
                self.record(call, Outcome(exc.status_code, error=exc), started, span)
                raise
        return _Pass(self, call, started, admission, span)

    async def refused(self, call: ToolCall, error: LLMBridgeError) -> None:
        started, span = self._begin(call)
        self.record(call, Outcome(error.status_code, error=error), started, span)

    # -- recording ---------------------------------------------------------------------

    def record(self, call: ToolCall, outcome: Outcome, started: float, span: Span | None) -> None:
        """The call's ledger row, metrics and span (module docstring), once."""
        elapsed = time.perf_counter() - started
        trace_id = None
        try:
            if span is not None:
                trace_id = format(span.get_span_context().trace_id, "032x")
                _end_span(span, call, outcome)
        except Exception:  # a tracing bug must not lose the row
            log.exception("ending MCP call %s's span failed", call.request_id)
        try:
            self._count(call, outcome, elapsed)
        except Exception:
            log.exception("counting MCP call %s failed", call.request_id)
        self._ledger_row(call, outcome, elapsed, trace_id)

    def _count(self, call: ToolCall, outcome: Outcome, elapsed: float) -> None:
        server = call.server or OTHER_TOOL
        tool = call.tool if call.known else OTHER_TOOL
        metrics = self.metrics
        metrics.calls.labels(server, tool, str(outcome.status)).inc()
        metrics.duration.labels(server).observe(elapsed)
        if call.arguments_bytes:
            metrics.bytes.labels(server, "in").inc(call.arguments_bytes)
        if outcome.result_bytes:
            metrics.bytes.labels(server, "out").inc(outcome.result_bytes)

    def _ledger_row(
        self, call: ToolCall, outcome: Outcome, elapsed: float, trace_id: str | None
    ) -> None:
        ledger = self.state.ledger
        if ledger is None:
            return
        key_id, key_name = caller_key(call.scope)
        facts: dict[str, str] = {
            "mcp-bytes-in": str(call.arguments_bytes),
            "mcp-bytes-out": str(outcome.result_bytes),
        }
        if call.protocol_version:
            facts["mcp-protocol-version"] = call.protocol_version
        if outcome.tool_error:
            facts["mcp-tool-error"] = "true"
        model = f"mcp:{call.server}/{call.tool}" if call.known else f"mcp:{call.name}"
        record = UsageRecord(
            request_id=call.request_id,
            model=model,
            status=outcome.status,
            key_id=key_id,
            key_name=key_name,
            backend="mcp",
            deployment=call.server or None,
            endpoint=call.endpoint,
            latency_ms=elapsed * 1000,
            streamed=False,
            replica=ledger.replica,
            session_id=call.session_id,
            dialect="mcp",
            served_model=call.tool if call.known else None,
            facts=orjson.dumps(facts).decode(),
            trace_id=trace_id,
            error=outcome.error.message if outcome.error is not None else None,
        )
        if ledger.bodies is not None:
            request = {"name": call.name, "arguments": call.arguments}
            if not ledger.keep_bodies(record, request, outcome.result):
                facts = {"bodies": DROPPED_FACT, **facts}
                record = _with_facts(record, facts)
        ledger.record(record)

    # -- tracing -----------------------------------------------------------------------

    def _span(self, call: ToolCall) -> Span | None:
        tracing = self.state.tracing
        if tracing is None:
            return None
        from opentelemetry.trace import SpanKind

        key_name = caller_key(call.scope)[1]
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.tool,
            "gen_ai.tool.type": "extension",
            "mcp.method.name": "tools/call",
            "llmbridge.request_id": call.request_id,
            "llmbridge.dialect": "mcp",
            "http.route": call.endpoint,
        }
        optional = {
            "gen_ai.tool.call.id": None if call.jsonrpc_id is None else str(call.jsonrpc_id),
            "jsonrpc.request.id": None if call.jsonrpc_id is None else str(call.jsonrpc_id),
            "mcp.session.id": call.session_id,
            "mcp.protocol.version": call.protocol_version,
            "llmbridge.mcp.server": call.server or None,
            "llmbridge.key.name": key_name,
        }
        attributes.update({k: v for k, v in optional.items() if v is not None})
        return tracing.tracer.start_span(
            f"execute_tool {call.tool}", kind=SpanKind.SERVER, attributes=attributes
        )


def _end_span(span: Span, call: ToolCall, outcome: Outcome) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("http.response.status_code", outcome.status)
    if outcome.error is not None:
        kind = type(outcome.error).__name__
        span.set_attribute("error.type", kind)
        span.set_status(Status(StatusCode.ERROR, outcome.error.message[:200] or kind))
    elif outcome.tool_error:
        span.set_attribute("error.type", "tool_error")
        span.set_status(Status(StatusCode.ERROR, "the tool answered with isError"))
    elif outcome.status >= 400:
        span.set_attribute("error.type", str(outcome.status))
    span.end()


def _with_facts(record: UsageRecord, facts: dict[str, str]) -> UsageRecord:
    import dataclasses

    return dataclasses.replace(record, facts=orjson.dumps(facts).decode())

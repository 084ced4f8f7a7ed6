"""What the console's "MCP servers" page shows, read from what the gateway already
knows: each server's supervisor (mcp/upstream.py ``Upstream.status()``, the same as
``/health``'s ``mcp``: its state, why it is down, its transport and protocol, what it
lists, its connections, calls and failed calls, its breaker) and the tool calls this
process recorded (gateway/exchange/mcp_gate.py's counters, by server). Both are this
process's: under ``--workers N`` each worker has its own connections, breakers and
counters (docs/MCP.md, "Workers").
"""

from __future__ import annotations

from dataclasses import dataclass

from llmbridge.gateway.exchange.mcp_gate import McpCallGate, ToolCallCounts
from llmbridge.gateway.state import GatewayState

__all__ = ["McpServerRow", "mcp_servers"]


@dataclass(frozen=True, slots=True)
class McpServerRow:
    name: str
    state: str
    """``up``, ``starting``, ``down`` or ``stopped``."""
    error: str | None
    """Why it is down, or last went down."""
    transport: str
    """``stdio``, ``streamable_http`` or ``sse``."""
    protocol: str | None
    """The revision it speaks, once connected."""
    tools: int
    resources: int
    prompts: int
    connections: int
    """Connections made (more than one: it was restarted or reconnected)."""
    calls: int
    """Calls sent to it: tool calls, resource reads, prompts."""
    failed_calls: int
    """Those it failed (down, unreachable, past the call's bound, malformed)."""
    breaker: str
    """``closed``, ``open`` or ``half-open``."""
    tool_calls: int
    """Tool calls recorded for it (refusals included)."""
    tool_errors: int
    """Those recorded with a status of 400 or more."""


def mcp_servers(state: GatewayState) -> list[McpServerRow] | None:
    """Every configured server, in the configuration's order; ``None`` when the
    gateway serves no MCP."""
    gateway = state.mcp
    if gateway is None:
        return None
    gate = gateway.gate
    counts = gate.counts() if isinstance(gate, McpCallGate) else {}
    rows = []
    for name, status in gateway.status().items():
        recorded = counts.get(name, ToolCallCounts())
        rows.append(
            McpServerRow(
                name=name,
                state=str(status["state"]),
                error=status["error"],
                transport=str(status["transport"]),
                protocol=status["protocol"],
                tools=int(status["tools"]),
                resources=int(status["resources"]),
                prompts=int(status["prompts"]),
                connections=int(status["connections"]),
                calls=int(status["calls"]),
                failed_calls=int(status["failed_calls"]),
                breaker=str(status["breaker"]),
                tool_calls=recorded.calls,
                tool_errors=recorded.errors,
            )
        )
    return rows

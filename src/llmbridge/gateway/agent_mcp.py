"""The agent's MCP tools over this gateway's ``McpGateway``: ``AgentMcpTools`` fills
the hook agent/mcp_tools.py names (``McpTools``), and gateway/app.py hands it to the
agent runtime, as ``KeyGate`` fills the agent's model gate.

- ``tools_for`` is ``McpGateway.tools_for(None, scope)``: the tools of the servers
  that are up, named as ``/mcp`` names them (``<server>__<tool>``), that the key of
  the turn's request may see (its ``mcp_tools``).
- ``call`` is ``McpGateway.call_tool(None, ...)``, the one path a tool call takes:
  the key's permission, its ``rpm`` and ``max_parallel``, the call, one ledger row
  (endpoint: the agent route that started the turn), the metrics and the span. Its
  result reaches the model as text (mcp/results.py); a tool's ``isError`` result, the
  gateway's refusals and faults (a permission, a limit, a server that is down, a
  result over ``mcp.max_result_bytes``) and the server's own JSON-RPC error are
  error outcomes with their message, for the model to read.

A turn's request always has a scope in the gateway; without one (the service used on
its own) the call is made as with auth off.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mcp.shared.exceptions import MCPError
from starlette.types import Scope

from llmbridge.agent.mcp_tools import MCP_SEPARATOR, McpToolInfo, McpToolOutcome
from llmbridge.core.errors import LLMBridgeError
from llmbridge.mcp.endpoints import McpGateway
from llmbridge.mcp.results import result_text

__all__ = ["RECORDING_MARGIN_S", "AgentMcpTools"]

RECORDING_MARGIN_S = 5.0
"""Added to a server's call bound for the agent's own: the gateway's answer (a
timeout included, recorded) arrives before the agent gives up on the call."""


class AgentMcpTools:
    """``agent.mcp_tools.McpTools`` over ``gateway`` (module docstring)."""

    def __init__(self, gateway: McpGateway) -> None:
        self.gateway = gateway

    def tools_for(self, scope: Scope | None) -> Sequence[McpToolInfo]:
        return [
            McpToolInfo(
                name=tool.name,
                description=tool.description or tool.title or "",
                input_schema=dict(tool.input_schema),
                timeout_s=self._bound(tool.name),
            )
            for tool in self.gateway.tools_for(None, scope or {})
        ]

    def _bound(self, name: str) -> float:
        upstream = self.gateway.upstreams.get(name.partition(MCP_SEPARATOR)[0])
        call_bound = upstream.call_timeout_s if upstream else self.gateway.config.call_timeout_s
        return call_bound + RECORDING_MARGIN_S

    async def call(
        self, name: str, arguments: dict[str, Any], *, scope: Scope | None, endpoint: str
    ) -> McpToolOutcome:
        try:
            result = await self.gateway.call_tool(
                None, name, arguments, scope=scope or {}, endpoint=endpoint
            )
        except LLMBridgeError as exc:
            return McpToolOutcome(exc.message, is_error=True)
        except MCPError as exc:  # the server's own JSON-RPC error (bad arguments)
            return McpToolOutcome(
                f"the MCP server answered {name!r} with an error: {exc.message}", is_error=True
            )
        return McpToolOutcome(result_text(result), is_error=bool(result.is_error))

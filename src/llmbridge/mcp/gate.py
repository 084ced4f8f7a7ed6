"""What admits and records each MCP tool call: the hook ``CallGate``, which the
gateway fills (gateway/exchange/mcp_gate.py: the key's limits, the usage ledger and request
log, ``/metrics``, the trace's span); ``OPEN_GATE`` admits everything and records
nothing (an ``McpGateway`` built without a gateway: tests of this package).

Every ``tools/call`` that reaches the gateway is one ``ToolCall`` and ends in one
``finish``, whatever happens: ``admit`` (its key's ``rpm`` and ``max_parallel``:
accounts/limits.py ``admit_tool_call``) raises a refusal after recording it; a call
refused before that (an unknown tool, a tool outside the key's ``mcp_tools``) is
recorded by ``refused``; an admitted call is recorded by its pass's ``finish`` with
its outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.types import Scope

from llmbridge.core.errors import LLMBridgeError

__all__ = ["OPEN_GATE", "CallGate", "CallPass", "Outcome", "ToolCall"]


@dataclass(slots=True)
class ToolCall:
    """One ``tools/call`` as the gateway received it."""

    server: str
    """The configured server it goes to ("" when the name led to none)."""
    tool: str
    """The server's own name of the tool (the name called, when it led to none)."""
    name: str
    """The name the client called (``<server>__<tool>`` on ``/mcp``)."""
    endpoint: str
    """The route: ``/mcp`` or ``/mcp/{server}``."""
    scope: Scope
    """The HTTP request that carried it: its key, its headers."""
    arguments: dict[str, Any] | None
    arguments_bytes: int
    """The arguments' size as JSON."""
    session_id: str | None = None
    """The client's MCP session (``Mcp-Session-Id``), when it has one."""
    protocol_version: str | None = None
    jsonrpc_id: str | int | None = None
    known: bool = True
    """Whether the tool is one a server listed (metrics label unknown names ``other``)."""
    within_request: bool = False
    """Made inside a model request the gateway admitted (a hosted ``mcp`` tool, an
    agent turn): that request holds the key's slot and counted its request, so the call
    takes neither again (a key with ``max_parallel: 1`` would otherwise refuse every
    such call), and is still checked against ``mcp_tools`` and recorded."""
    request_id: str = field(default="")
    """The gateway's id of the call (the ledger row's), set by the gate."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an admitted call ended."""

    status: int
    """200 for a result (a tool's own ``isError`` result included), else the error's."""
    error: LLMBridgeError | None = None
    result: dict[str, Any] | None = None
    """The result as sent (kept for the request log when bodies are kept)."""
    result_bytes: int = 0
    tool_error: bool = False
    """The tool answered with ``isError: true``."""


class CallPass(Protocol):
    """An admitted call: ``finish`` settles its key's slot and records it, once."""

    async def finish(self, outcome: Outcome) -> None: ...


class CallGate(Protocol):
    async def admit(self, call: ToolCall) -> CallPass:
        """Admit ``call`` on its key's limits; a refusal is recorded, then raised."""
        ...

    async def refused(self, call: ToolCall, error: LLMBridgeError) -> None:
        """Record a call refused before admission (unknown tool, permission)."""
        ...


class _OpenPass:
    async def finish(self, outcome: Outcome) -> None:
        return None


class _OpenGate:
    async def admit(self, call: ToolCall) -> CallPass:
        return _OpenPass()

    async def refused(self, call: ToolCall, error: LLMBridgeError) -> None:
        return None


OPEN_GATE: CallGate = _OpenGate()

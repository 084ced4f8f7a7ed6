"""MCP tools in agent turns: the ``McpTools`` hook, and a turn's MCP tools made of it.

A persona names MCP tools by globs (``AgentSettings.mcp_tools``: ``["files__*",
"search__web"]``, the names ``/mcp`` gives them, ``<server>__<tool>``). The MCP
gateway that serves them sits above the agent (docs/ARCHITECTURE.md, "Layers"), so
the agent names what it needs here and gateway/app.py fills it
(gateway/agent_mcp.py, over ``McpGateway``):

- ``tools_for(scope)``: the tools of the servers that are up that the key of the
  HTTP request ``scope`` may see (its ``mcp_tools``);
- ``call(name, arguments, scope=..., endpoint=...)``: the call made through
  ``McpGateway.call_tool``, the one path a tool call takes (the key's permission, its
  limits, the ledger row, metrics, the span), its outcome as text for the model.

``McpTurnTools`` is one turn's share: the tools both the persona's globs and the key
allow, offered beside the agent's own (``web_search`` stays one of them), each called
with the key of the request that started the turn (``TurnCaller``). A call the model
makes to a name the globs match that was not offered (the key may not see it, or its
server listed it since) goes to the gateway all the same, as the fallback of the
turn's registry: the gateway refuses it on the key's permission, and records the
refusal, and the model reads why. A name the globs do not match is an unknown tool.
Every failure (a refusal, a server that is down, a result over
``mcp.max_result_bytes``, the tool's own ``isError``) is an error result the model
reads, never a failed turn; the calls count in the turn's tool rounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Protocol

from starlette.types import Scope

from llmbridge.agent.tools import Tool, ToolError, ToolHandler
from llmbridge.core.messages import ToolCallPart, ToolResultPart

__all__ = [
    "MCP_SEPARATOR",
    "McpToolInfo",
    "McpToolOutcome",
    "McpTools",
    "McpTurnTools",
    "TurnCaller",
]

MCP_SEPARATOR = "__"
"""Between a server's name and its tool's in the names ``/mcp`` gives tools."""


@dataclass(frozen=True, slots=True)
class McpToolInfo:
    """One MCP tool as the agent offers it."""

    name: str
    """``<server>__<tool>``."""
    description: str
    input_schema: dict[str, Any]
    timeout_s: float
    """The agent's bound on a call: the gateway's own (the server's call bound) and
    a margin for recording it, so the gateway's answer arrives first."""


@dataclass(frozen=True, slots=True)
class McpToolOutcome:
    """What a call gave the model: the result's text, or why it failed."""

    text: str
    is_error: bool = False


class McpTools(Protocol):
    """The MCP gateway as the agent uses it (module docstring)."""

    def tools_for(self, scope: Scope | None) -> Sequence[McpToolInfo]:
        """The tools the key of ``scope`` may see, from the servers that are up
        (``None``: no request, no key: every tool)."""
        ...

    async def call(
        self, name: str, arguments: dict[str, Any], *, scope: Scope | None, endpoint: str
    ) -> McpToolOutcome:
        """Call ``name`` for the key of ``scope``, recorded under ``endpoint``;
        refusals and faults are outcomes with ``is_error``, never exceptions."""
        ...


@dataclass(frozen=True, slots=True)
class TurnCaller:
    """Whose key a turn's MCP tool calls are made with: the HTTP request that started
    the turn (its ASGI scope, where the auth middleware put the key) and the route
    its records name."""

    scope: Scope | None = field(repr=False, compare=False)
    endpoint: str = "/agent"


class McpTurnTools:
    """The MCP tools of one turn (module docstring); the registry's fallback."""

    def __init__(
        self,
        source: McpTools,
        globs: Sequence[str],
        caller: TurnCaller | None,
        *,
        names: Sequence[str] | None = None,
    ) -> None:
        self.source = source
        self.globs = tuple(globs)
        self.caller = caller or TurnCaller(None)
        self.names = frozenset(names) if names is not None else None
        """The turn's chosen tools (``AgentRequest.tools``), ``None``: all."""

    def claims(self, name: str) -> bool:
        """Whether ``name`` is one of the persona's MCP tools (its globs match it)."""
        if self.names is not None and name not in self.names:
            return False
        return MCP_SEPARATOR in name and any(fnmatchcase(name, glob) for glob in self.globs)

    def tools(self) -> list[Tool]:
        """The tools offered: the key's (``tools_for``) that the globs match."""
        listed = self.source.tools_for(self.caller.scope) if self.globs else ()
        return [self._tool(info) for info in listed if self.claims(info.name)]

    def _tool(self, info: McpToolInfo) -> Tool:
        return Tool(
            name=info.name,
            description=info.description,
            parameters=info.input_schema,
            handler=self._handler(info.name),
            timeout=info.timeout_s,
        )

    def _handler(self, name: str) -> ToolHandler:
        async def handler(arguments: dict[str, Any]) -> str:
            outcome = await self.source.call(
                name, arguments, scope=self.caller.scope, endpoint=self.caller.endpoint
            )
            if outcome.is_error:
                raise ToolError(outcome.text)
            return outcome.text

        return handler

    async def run(self, call: ToolCallPart) -> ToolResultPart:
        """A call to a claimed name the turn did not offer: made all the same, so
        the gateway says why not (the key's permission) and records it."""
        if call.raw_arguments is not None:
            content = f"Error: the arguments are not a JSON object: {call.raw_arguments!r}"
            return ToolResultPart(call.id, content, is_error=True, name=call.name)
        try:
            outcome = await self.source.call(
                call.name,
                dict(call.arguments),
                scope=self.caller.scope,
                endpoint=self.caller.endpoint,
            )
        except Exception as exc:  # noqa: BLE001 - the model reads the failure
            outcome = McpToolOutcome(f"{type(exc).__name__}: {exc}", is_error=True)
        content = f"Error: {outcome.text}" if outcome.is_error else outcome.text
        return ToolResultPart(call.id, content, is_error=outcome.is_error, name=call.name)

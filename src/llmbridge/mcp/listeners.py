"""List-changed notifications to the gateway's MCP clients: ``Listeners``, one per
endpoint (view).

When a server's tools, resources or prompts change (it said so, it came up, it went
down: mcp/upstream.py), every client that may see them is told, in its revision's way:

- **Handshake revisions** (2024-11-05 to 2025-11-25): ``notifications/tools/
  list_changed`` (and the resources' and prompts') on the connection's own stream (the
  GET stream a streamable HTTP client opens after ``initialize``). The gateway keeps
  each stateful connection that has listed something; the SDK unwinds the
  connection's exit stack when it ends, which forgets it. The SDK 2.3.0 hands a
  handler the connection only on ``ServerSession``'s private ``_connection`` (the
  reason the ``mcp`` pin is exact: pyproject.toml). Stateless serving
  (``mcp.stateless``) has no such stream: its clients are not told.
- **2026-07-28**: a ``subscriptions/listen`` stream the client opened (the SDK's
  ``ListenHandler`` over an in-process bus), which carries the events it asked for.

``listChanged`` is advertised accordingly (mcp/endpoints.py).
"""

from __future__ import annotations

import logging
from typing import Any

from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ToolsListChanged,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

__all__ = ["MAX_CONNECTIONS", "Listeners"]

log = logging.getLogger("llmbridge.mcp")

MAX_CONNECTIONS = 10_000
"""Connections one endpoint keeps to notify (the SDK's own default session limit)."""


class Listeners:
    """The clients of one endpoint that are told when its lists change."""

    def __init__(self, *, stateful: bool) -> None:
        self.stateful = stateful
        self.bus = InMemorySubscriptionBus()
        self.listen = ListenHandler(self.bus)
        """The ``subscriptions/listen`` handler (2026-07-28 clients)."""
        self._connections: set[Connection] = set()

    def __len__(self) -> int:
        return len(self._connections)

    def note(self, ctx: ServerRequestContext[Any, Any]) -> None:
        """Keep the connection of a handshake-revision request (a list it made), to be
        told of changes."""
        if not self.stateful or ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return
        connection = getattr(ctx.session, "_connection", None)
        if not isinstance(connection, Connection) or connection in self._connections:
            return
        if connection.session_id is None or len(self._connections) >= MAX_CONNECTIONS:
            return
        self._connections.add(connection)
        connection.exit_stack.callback(self._connections.discard, connection)

    async def changed(self, kinds: frozenset[str]) -> None:
        """Tell every client kept, and every listen stream, that ``kinds`` changed."""
        for connection in list(self._connections):
            # Connection.notify never raises: a stream that is gone drops it.
            if "tools" in kinds:
                await connection.send_tool_list_changed()
            if "resources" in kinds:
                await connection.send_resource_list_changed()
            if "prompts" in kinds:
                await connection.send_prompt_list_changed()
        if "tools" in kinds:
            await self.bus.publish(ToolsListChanged())
        if "resources" in kinds:
            await self.bus.publish(ResourcesListChanged())
        if "prompts" in kinds:
            await self.bus.publish(PromptsListChanged())

    def close(self) -> None:
        """End the listen streams gracefully (at shutdown)."""
        self.listen.close()
        self._connections.clear()

"""What the caller's key may do through the MCP gateway: ``Permissions``.

A database key's ``mcp_tools`` (``llmbridge keys create --mcp-tools``, the admin
API's and the console's ``mcp_tools``; accounts/keys.py) are globs of tool names as
``/mcp`` names them, ``<server>__<tool>``, whichever endpoint the tool is reached
through (``/mcp/files``'s ``read_file`` is ``files__read_file`` to the globs). A key
without them, a static key, the master key, and every caller while auth is off may
use every tool.

- ``tools/list`` shows a key only the tools its globs match; a tool it may not use is
  not hinted at.
- ``tools/call`` of another tool is refused (403, the JSON-RPC error naming the key
  and the ``mcp_tools`` permission), and recorded like any call.
- Resources and prompts carry no tool name: a key restricted by ``mcp_tools`` sees
  none of them and reads none (per-key globs for them are not done yet, docs/MCP.md);
  an unrestricted key sees them all.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.types import Scope

from llmbridge.accounts.keys import KeyRecord
from llmbridge.accounts.service import ACCOUNT
from llmbridge.core.errors import PermissionDeniedError

__all__ = ["Permissions"]


@dataclass(frozen=True, slots=True)
class Permissions:
    """One request's key, as the MCP gateway reads it (module docstring)."""

    record: KeyRecord | None

    @classmethod
    def of(cls, scope: Scope | None) -> Permissions:
        """The permissions of the HTTP request ``scope`` (the auth middleware put its
        database key there; ``None``: a static key, the master key or no auth)."""
        record = scope.get(ACCOUNT) if scope is not None else None
        return cls(record if isinstance(record, KeyRecord) else None)

    @property
    def restricted(self) -> bool:
        """Whether the key's ``mcp_tools`` limit it to some tools."""
        return self.record is not None and self.record.mcp_tools is not None

    def allows(self, name: str) -> bool:
        """Whether the key may list and call the tool ``name`` (``<server>__<tool>``)."""
        return self.record is None or self.record.allows_tool(name)

    def refusal(self, name: str) -> PermissionDeniedError:
        """The refusal of a call to ``name``, naming the key and its permission."""
        assert self.record is not None
        globs = ", ".join(self.record.mcp_tools or ())
        return PermissionDeniedError(
            f"the key {self.record.name!r} may not call the MCP tool {name!r}: its "
            f"mcp_tools permission allows {globs}",
            param="mcp_tools",
            code="mcp_tool_not_allowed",
        )

    def resources_refusal(self) -> PermissionDeniedError:
        """The refusal of a resource read or prompt to a restricted key."""
        assert self.record is not None
        return PermissionDeniedError(
            f"the key {self.record.name!r} is restricted to some MCP tools (its mcp_tools "
            "permission): it may not read resources or get prompts",
            param="mcp_tools",
            code="mcp_tool_not_allowed",
        )

"""What the caller's key may do through the MCP gateway: ``Permissions``.

A database key's ``mcp_tools`` (``llmbridge keys create --mcp-tools``, the admin
API's and the console's ``mcp_tools``; accounts/keys.py) are globs of names as
``/mcp`` gives them, ``<server>__<name>``, whichever endpoint a tool or prompt is
reached through (``/mcp/files``'s ``read_file`` is ``files__read_file`` to the globs).
A key without them, a static key, the master key, and every caller while auth is off
may use every tool, prompt and resource.

- **Tools**: ``tools/list`` shows a key only the tools its globs match; a tool it may
  not use is not hinted at. ``tools/call`` of another tool is refused (403, the
  JSON-RPC error naming the key and the ``mcp_tools`` permission), and recorded like
  any call.
- **Prompts** follow the same globs under the same names: ``prompts/list`` shows the
  matching ones, ``prompts/get`` of another is refused (403). A glob does not say
  which of the two it means: ``box__greet`` allows a tool or a prompt named ``greet``.
- **Resources** carry no name of that form, so they are allowed per server: a key
  reaches a server's resources and resource templates when one of its globs matches
  some name that begins with ``<server>__`` (``files__*``, ``files__read_*``, ``f*``
  and ``*`` reach ``files``; ``search__*`` does not; accounts/key_fields.py
  ``GlobSet.may_start_with``). Lists show only the servers it reaches; a read of a
  URI that only other servers serve is refused (403).
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.types import Scope

from llmbridge.accounts.keys import KeyRecord
from llmbridge.accounts.service import ACCOUNT
from llmbridge.core.errors import PermissionDeniedError
from llmbridge.mcp.catalog import SEPARATOR

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

    def allows(self, name: str) -> bool:
        """Whether the key may list and call the tool, or list and get the prompt,
        ``name`` (``<server>__<name>``)."""
        return self.record is None or self.record.allows_tool(name)

    def reaches(self, server: str) -> bool:
        """Whether the key may list and read the resources of ``server``."""
        record = self.record
        if record is None or record.tool_globs is None:
            return True
        return record.tool_globs.may_start_with(server + SEPARATOR)

    def refusal(self, name: str) -> PermissionDeniedError:
        """The refusal of a call to the tool ``name``, naming the key and its permission."""
        return self._refused(f"call the MCP tool {name!r}", "mcp_tool_not_allowed")

    def prompt_refusal(self, name: str) -> PermissionDeniedError:
        """The refusal of the prompt ``name``."""
        return self._refused(f"get the MCP prompt {name!r}", "mcp_prompt_not_allowed")

    def resource_refusal(self, uri: str, server: str) -> PermissionDeniedError:
        """The refusal of a read of ``uri``, which (only) ``server`` serves to others."""
        return self._refused(
            f"read the MCP resource {uri!r} of the server {server!r} (no glob matches a "
            f"name {server}{SEPARATOR}...)",
            "mcp_resource_not_allowed",
        )

    def _refused(self, what: str, code: str) -> PermissionDeniedError:
        assert self.record is not None
        globs = ", ".join(self.record.mcp_tools or ())
        return PermissionDeniedError(
            f"the key {self.record.name!r} may not {what}: its mcp_tools permission allows {globs}",
            param="mcp_tools",
            code=code,
        )

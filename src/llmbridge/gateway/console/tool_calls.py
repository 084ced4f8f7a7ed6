"""How an MCP tool call reads in the console's request log: ``tool_call``.

The MCP gateway records each tool call as a request-log row
(gateway/exchange/mcp_gate.py): ``backend`` and ``dialect`` ``mcp``, ``model``
``mcp:<server>/<tool>`` (``mcp:<name>`` for a tool no server has), ``deployment`` the
server, ``served_model`` its tool, no tokens and no cost, and ``facts`` with the bytes
of its arguments and result (``mcp-bytes-in``, ``mcp-bytes-out``), its protocol
revision and whether the tool answered with an error. The request list and detail
templates read such a row through ``tool_call`` (a template global, web.py): the tool
and its server where a model request has its models and backend, the bytes where it has
tokens, and the facts left over.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmbridge.accounts.request_log import RequestRow

__all__ = ["ToolCallView", "tool_call"]

BYTES_IN, BYTES_OUT = "mcp-bytes-in", "mcp-bytes-out"
PROTOCOL, TOOL_ERROR = "mcp-protocol-version", "mcp-tool-error"
_SHOWN = frozenset({BYTES_IN, BYTES_OUT, PROTOCOL, TOOL_ERROR})


@dataclass(frozen=True, slots=True)
class ToolCallView:
    """One recorded MCP tool call, as the console shows it."""

    tool: str
    """The server's own name of the tool, or the name asked for when no server has it."""
    server: str | None
    """The server it went to (``None``: no server has that tool)."""
    known: bool
    """Whether a server listed the tool."""
    bytes_in: int | None
    """The arguments' JSON."""
    bytes_out: int | None
    """The result's JSON (0 when there was none)."""
    protocol: str | None
    tool_error: bool
    """The tool answered with ``isError``: a result, not a gateway failure."""
    other_facts: dict[str, str]
    """The row's other facts (``bodies`` when its kept bodies were dropped)."""


def tool_call(row: RequestRow) -> ToolCallView | None:
    """``row`` as an MCP tool call, or ``None`` when it is a model request."""
    if row.backend != "mcp" or row.dialect != "mcp":
        return None
    facts = row.facts or {}
    known = row.served_model is not None
    tool = row.served_model if known else row.model.removeprefix("mcp:")
    return ToolCallView(
        tool=tool or row.model,
        server=row.deployment,
        known=known,
        bytes_in=_count(facts.get(BYTES_IN)),
        bytes_out=_count(facts.get(BYTES_OUT)),
        protocol=facts.get(PROTOCOL),
        tool_error=facts.get(TOOL_ERROR) == "true",
        other_facts={k: v for k, v in facts.items() if k not in _SHOWN},
    )


def _count(text: str | None) -> int | None:
    """A byte count from a fact (``None`` when absent or not a count)."""
    if text is None or not text.isascii() or not text.isdigit():
        return None
    return int(text)

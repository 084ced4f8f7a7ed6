"""Responses ``mcp`` tools and MCP input items, decoded for the gateway's MCP loop
(core/hosted_mcp.py; docs/MCP.md, "MCP tools for any model").

- An ``mcp`` tool is a ``McpServerUse``: ``server_label``, ``server_url``,
  ``allowed_tools`` (names or ``{tool_names}``), ``require_approval`` (``always``,
  OpenAI's documented default, ``never``, or ``{always: {tool_names}, never:
  {tool_names}}``), ``headers`` and ``authorization``.
- Input items of an earlier answer become what the model saw: an ``mcp_call`` is the
  assistant's call of ``<server>__<tool>`` and its result; ``mcp_list_tools`` adds
  nothing (the tools are offered again); an ``mcp_approval_request`` answered by an
  ``mcp_approval_response`` becomes the call with an empty result that the loop fills
  (``McpApproval``), unless an ``mcp_call`` of that approval is already in the input.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.hosted_mcp import McpApproval, McpServerUse, model_tool_name
from llmbridge.core.messages import Message, Part, ToolCallPart, ToolResultPart
from llmbridge.core.tool_arguments import parse_request_tool_arguments
from llmbridge.dialects.responses.types import (
    McpApprovalRequestItem,
    McpApprovalResponseItem,
    McpCallItem,
    McpItem,
    McpTool,
)

__all__ = ["McpInput", "decode_mcp_tool"]


def _names(value: object, where: str) -> tuple[str, ...]:
    if isinstance(value, dict):
        value = value.get("tool_names") or []
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise InvalidRequestError(
            f"Invalid '{where}': expected a list of tool names or {{'tool_names': [...]}}.",
            param=where,
        )
    return tuple(value)


def decode_mcp_tool(tool: McpTool, where: str) -> McpServerUse:
    """The server an ``mcp`` tool names, with its filters and approval policy."""
    allowed = None
    if tool.allowed_tools is not None:
        allowed = _names(tool.allowed_tools, f"{where}.allowed_tools")
    approval = tool.require_approval
    approve_all = True
    always: tuple[str, ...] = ()
    never: tuple[str, ...] = ()
    if approval == "never":
        approve_all = False
    elif isinstance(approval, dict):
        approve_all = False  # the filters say which need it; others do not
        if "always" in approval:
            always = _names(approval["always"], f"{where}.require_approval.always")
        if "never" in approval:
            never = _names(approval["never"], f"{where}.require_approval.never")
    elif approval not in (None, "always"):
        raise InvalidRequestError(
            f"Invalid '{where}.require_approval': expected 'always', 'never' or a filter.",
            param=f"{where}.require_approval",
        )
    headers = dict(tool.headers or {})
    if tool.authorization:
        headers["Authorization"] = f"Bearer {tool.authorization}"
    return McpServerUse(
        label=tool.server_label,
        param=where,
        url=tool.server_url,
        headers=tuple(headers.items()),
        allowed_tools=allowed,
        approve_all=approve_all,
        always_approve=always,
        never_approve=never,
    )


class McpInput:
    """The MCP items of one request's input, decoded in their places."""

    def __init__(self, items: Sequence[object], max_json_depth: int) -> None:
        self.max_json_depth = max_json_depth
        self.requests: dict[str, McpApprovalRequestItem] = {}
        self.approvals: list[McpApproval] = []
        # Approvals whose call an earlier answer already ran (its mcp_call names them).
        self.ran = {
            item.approval_request_id
            for item in items
            if isinstance(item, McpCallItem) and item.approval_request_id
        }

    def decode(
        self,
        item: McpItem,
        where: str,
        turn: list[Part],
        close_turn: Callable[[], None],
        messages: list[Message],
    ) -> None:
        """Append what ``item`` was to the model (module docstring)."""
        if isinstance(item, McpCallItem):
            name = model_tool_name(item.server_label, item.name)
            arguments, raw = parse_request_tool_arguments(
                item.arguments, f"{where}.arguments", self.max_json_depth
            )
            turn.append(ToolCallPart(item.id, name, arguments, raw))
            close_turn()
            failed = item.error is not None
            text = _error_text(item.error) if failed else item.output or ""
            result = ToolResultPart(item.id, text, is_error=failed, name=name)
            messages.append(Message("tool", (result,)))
        elif isinstance(item, McpApprovalRequestItem):
            self.requests[item.id] = item
        elif isinstance(item, McpApprovalResponseItem):
            self._answered(item, where, turn, close_turn, messages)

    def _answered(
        self,
        item: McpApprovalResponseItem,
        where: str,
        turn: list[Part],
        close_turn: Callable[[], None],
        messages: list[Message],
    ) -> None:
        asked = self.requests.get(item.approval_request_id)
        if asked is None:
            raise InvalidRequestError(
                f"Invalid '{where}.approval_request_id': no mcp_approval_request "
                f"{item.approval_request_id!r} comes before it in the input (send the "
                "earlier response's items, or its id as previous_response_id).",
                param=f"{where}.approval_request_id",
            )
        if asked.id in self.ran:
            return
        name = model_tool_name(asked.server_label, asked.name)
        arguments, raw = parse_request_tool_arguments(
            asked.arguments, f"{where}.arguments", self.max_json_depth
        )
        turn.append(ToolCallPart(asked.id, name, arguments, raw))
        close_turn()
        messages.append(Message("tool", (ToolResultPart(asked.id, "", name=name),)))
        self.approvals.append(
            McpApproval(
                request_id=asked.id,
                server=asked.server_label,
                tool=asked.name,
                arguments=asked.arguments,
                approve=item.approve,
                reason=item.reason,
            )
        )


def _error_text(error: Any) -> str:
    if isinstance(error, str):
        return error
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return orjson.dumps(error).decode()

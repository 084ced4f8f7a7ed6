"""MCP tools the gateway runs for the model, in neutral terms (docs/MCP.md, "MCP tools
for any model").

A client may ask the gateway to run an MCP server's tools for the model: a Responses
``mcp`` tool, the Anthropic MCP connector's ``mcp_servers``. Each dialect decodes its
request into a ``HostedMcp`` (the servers asked for, the approvals the client answered)
kept in the request's ``provider_details[HOSTED_MCP]``; the gateway's loop
(gateway/hosted/) offers the servers' tools to the model as function tools named
``<server>__<tool>``, runs the calls and feeds their results back. What it did comes
out as ``HostedItem`` values between the rounds' core events, which each dialect encodes
as its own items or blocks (``mcp_list_tools``, ``mcp_call``, ``mcp_approval_request``;
``mcp_tool_use`` and ``mcp_tool_result``), and ``HostedReply`` is a whole such answer,
collected for a reply that is not streamed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from llmbridge.core.errors import BackendProtocolError
from llmbridge.core.events import (
    PartEnd,
    ResponseEnd,
    ResponseStart,
    StreamError,
    StreamEvent,
    UsageUpdate,
)
from llmbridge.core.messages import Part
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import StopReason, Usage

__all__ = [
    "HOSTED_MCP",
    "TOOL_SEPARATOR",
    "HostedEvent",
    "HostedItem",
    "HostedMcp",
    "HostedReply",
    "McpApprovalAsked",
    "McpCallEnded",
    "McpCallStarted",
    "McpRoundsSpent",
    "McpServerUse",
    "McpToolsListed",
    "collect_hosted",
    "hosted_mcp_of",
    "model_tool_name",
]

HOSTED_MCP = "hosted_mcp"
"""The ``provider_details`` key of a request's ``HostedMcp``."""
TOOL_SEPARATOR = "__"
"""Between a server's name and its tool's in the name the model sees (as on ``/mcp``)."""


def model_tool_name(server: str, tool: str) -> str:
    """The function name the model calls ``tool`` of ``server`` by."""
    return f"{server}{TOOL_SEPARATOR}{tool}"


@dataclass(frozen=True, slots=True)
class McpServerUse:
    """One MCP server a request asks the gateway to run tools of."""

    label: str
    """The server's name: a configured ``mcp.servers`` entry (Responses ``server_label``,
    Anthropic ``name``)."""
    param: str
    """Where the request named it (``tools.2``, ``mcp_servers.0``): errors say so."""
    url: str | None = None
    """The URL the request gave (``server_url``, ``url``); checked against
    ``mcp.allowed_urls``."""
    url_field: str = "server_url"
    """The URL's field in the dialect (``server_url``, ``url``): errors name it."""
    headers: tuple[tuple[str, str], ...] = ()
    """Headers for a server the request connects to (``headers``, the bearer of
    ``authorization_token``)."""
    allowed_tools: tuple[str, ...] | None = None
    """The server's own tool names the model may use; ``None``: every one."""
    denied_tools: tuple[str, ...] = ()
    """Tools the model may not use, whatever ``allowed_tools`` says."""
    approve_all: bool = True
    """Whether a call needs the client's approval unless ``never_approve`` names it."""
    always_approve: tuple[str, ...] = ()
    """Tools that need approval whatever ``approve_all`` says."""
    never_approve: tuple[str, ...] = ()
    """Tools that never need approval."""

    def allows(self, tool: str) -> bool:
        if tool in self.denied_tools:
            return False
        return self.allowed_tools is None or tool in self.allowed_tools

    def needs_approval(self, tool: str) -> bool:
        if tool in self.always_approve:
            return True
        if tool in self.never_approve:
            return False
        return self.approve_all


@dataclass(frozen=True, slots=True)
class McpApproval:
    """The client's answer to an approval request the gateway made earlier."""

    request_id: str
    """The ``mcp_approval_request`` item's id; also the tool call's id the model sees."""
    server: str
    tool: str
    arguments: str
    """The arguments the model wrote, a JSON string."""
    approve: bool
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class HostedMcp:
    """What a request asks of the gateway's MCP loop."""

    servers: tuple[McpServerUse, ...]
    approvals: tuple[McpApproval, ...] = ()
    """Answered approval requests not yet run: the decoded conversation has each as
    a tool call whose result is empty, for the loop to fill."""


def hosted_mcp_of(request: ChatRequest) -> HostedMcp | None:
    """The request's ``HostedMcp``, when it asks for one."""
    found = (request.provider_details or {}).get(HOSTED_MCP)
    return found if isinstance(found, HostedMcp) else None


# -- what the loop did, between the rounds' events -------------------------------------


@dataclass(frozen=True, slots=True)
class McpToolsListed:
    """The tools of one server the model was offered."""

    item_id: str
    server: str
    tools: tuple[dict[str, Any], ...]
    """Each ``{"name", "description", "input_schema", "annotations"}``."""
    error: str | None = None
    kind: str = field(default="mcp_list_tools", init=False)


@dataclass(frozen=True, slots=True)
class McpCallStarted:
    """The gateway is calling a tool the model asked for (streams show it)."""

    item_id: str
    server: str
    tool: str
    arguments: str
    kind: str = field(default="mcp_call_started", init=False)


@dataclass(frozen=True, slots=True)
class McpCallEnded:
    """A tool call done: its text output, or an error."""

    item_id: str
    server: str
    tool: str
    arguments: str
    output: str | None = None
    error: str | None = None
    """The gateway's refusal or fault, or the tool's own error (``is_error``)."""
    error_status: int | None = None
    """The HTTP status of a refusal or fault; ``None`` for the tool's own error."""
    approval_request_id: str | None = None
    arguments_object: dict[str, Any] = field(default_factory=dict)
    kind: str = field(default="mcp_call", init=False)


@dataclass(frozen=True, slots=True)
class McpApprovalAsked:
    """A call the model asked for that waits on the client's approval."""

    item_id: str
    server: str
    tool: str
    arguments: str
    kind: str = field(default="mcp_approval_request", init=False)


@dataclass(frozen=True, slots=True)
class McpRoundsSpent:
    """The loop stopped at ``mcp.max_tool_rounds`` with calls still wanted: the
    ``ResponseEnd`` that follows says ``max_tokens`` (Anthropic answers ``pause_turn``)."""

    rounds: int
    kind: str = field(default="mcp_rounds_spent", init=False)


HostedItem = McpToolsListed | McpCallEnded | McpApprovalAsked
HostedEvent = StreamEvent | HostedItem | McpCallStarted | McpRoundsSpent
"""What the loop yields: the rounds' core events (one ``ResponseStart``, one
``ResponseEnd``) with its own items between them."""


@dataclass(frozen=True, slots=True)
class HostedReply:
    """A whole answer of the loop: the parts and items in their order."""

    id: str
    created: float
    entries: tuple[Part | HostedItem, ...]
    stop_reason: StopReason
    usage: Usage
    stop_sequence: str | None = None
    rounds_spent: bool = False
    """The loop stopped at ``mcp.max_tool_rounds`` (``McpRoundsSpent``)."""


def collect_hosted(events: Iterable[HostedEvent]) -> HostedReply:
    """The loop's events as one reply; a ``StreamError`` is raised."""
    start: ResponseStart | None = None
    entries: list[Part | HostedItem] = []
    usage = Usage()
    spent = False
    for event in events:
        if isinstance(event, ResponseStart):
            start = start or event
            if event.input_tokens is not None:
                usage = usage.merged(Usage(input_tokens=event.input_tokens))
        elif isinstance(event, PartEnd):
            entries.append(event.part)
        elif isinstance(event, McpToolsListed | McpCallEnded | McpApprovalAsked):
            entries.append(event)
        elif isinstance(event, UsageUpdate):
            usage = usage.merged(event.usage)
        elif isinstance(event, McpRoundsSpent):
            spent = True
        elif isinstance(event, ResponseEnd):
            return HostedReply(
                start.id if start else "",
                start.created if start else 0.0,
                tuple(entries),
                event.stop_reason,
                usage.merged(event.usage),
                event.stop_sequence,
                spent,
            )
        elif isinstance(event, StreamError):
            raise event.error
    raise BackendProtocolError("the model's reply ended before it was complete")

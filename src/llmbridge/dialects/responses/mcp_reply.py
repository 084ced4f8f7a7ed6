"""Responses answers of the gateway's MCP loop: the rounds' items with ``mcp_list_tools``,
``mcp_call`` and ``mcp_approval_request`` items between them (core/hosted_mcp.py), as
the openai SDK's ``response_output_item.py`` has them.

Streamed (``encode_hosted_stream``), an ``mcp_list_tools`` item is
``output_item.added``, ``response.mcp_list_tools.in_progress``, ``.completed`` (or
``.failed``), ``output_item.done``; an ``mcp_call`` is ``output_item.added``,
``response.mcp_call.in_progress``, ``response.mcp_call_arguments.delta`` and ``.done``,
then, once the tool answered, ``response.mcp_call.completed`` (or ``.failed``) and
``output_item.done``; an approval request is its ``added`` and ``done``. The rest is
the stream encoder's (stream.py), one stream for every round. Not streamed
(``encode_hosted_response``), the same items in the same order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from llmbridge.core.errors import BackendProtocolError
from llmbridge.core.hosted_mcp import (
    HostedEvent,
    HostedItem,
    HostedReply,
    McpApprovalAsked,
    McpCallEnded,
    McpCallStarted,
    McpRoundsSpent,
    McpToolsListed,
)
from llmbridge.core.request import ChatRequest
from llmbridge.dialects.framing import escape_line_breaks
from llmbridge.dialects.responses.response import (
    envelope,
    incomplete_reason,
    output_items,
    response_id,
)
from llmbridge.dialects.responses.stream import StreamEncoder

__all__ = ["encode_hosted_response", "encode_hosted_stream", "hosted_item"]


def _call_error(ended: McpCallEnded) -> dict[str, Any] | None:
    if ended.error is None:
        return None
    if ended.error_status is None:  # the tool's own error
        return {
            "type": "mcp_tool_execution_error",
            "content": [{"type": "text", "text": ended.error}],
        }
    return {"type": "mcp_protocol_error", "code": ended.error_status, "message": ended.error}


def hosted_item(item: HostedItem | McpCallStarted) -> dict[str, Any]:
    """The output item of one thing the loop did (``McpCallStarted``: in progress)."""
    if isinstance(item, McpToolsListed):
        listed: dict[str, Any] = {
            "id": item.item_id,
            "type": "mcp_list_tools",
            "server_label": item.server,
            "tools": list(item.tools),
        }
        if item.error is not None:
            listed["error"] = item.error
        return listed
    if isinstance(item, McpApprovalAsked):
        return {
            "id": item.item_id,
            "type": "mcp_approval_request",
            "server_label": item.server,
            "name": item.tool,
            "arguments": item.arguments,
        }
    call: dict[str, Any] = {
        "id": item.item_id,
        "type": "mcp_call",
        "server_label": item.server,
        "name": item.tool,
        "arguments": item.arguments,
    }
    if isinstance(item, McpCallStarted):
        return {**call, "arguments": "", "status": "in_progress"}
    call.update(
        output=item.output,
        error=_call_error(item),
        status="failed" if item.error is not None else "completed",
        approval_request_id=item.approval_request_id,
    )
    return call


def encode_hosted_response(reply: HostedReply, request: ChatRequest) -> dict[str, Any]:
    """The ``response`` object of a whole answer."""
    output: list[dict[str, Any]] = []
    for entry in reply.entries:
        if isinstance(entry, McpToolsListed | McpCallEnded | McpApprovalAsked):
            output.append(hosted_item(entry))
        else:
            output += output_items((entry,), request)
    incomplete = incomplete_reason(reply.stop_reason)
    return envelope(
        request,
        response_id(reply.id),
        reply.created,
        "incomplete" if incomplete else "completed",
        output,
        usage=reply.usage,
        incomplete=incomplete,
    )


class _HostedStream:
    """The stream encoder, with the loop's items between its parts."""

    def __init__(self, encoder: StreamEncoder) -> None:
        self.encoder = encoder
        self.calls: dict[str, int] = {}
        """The output index of each ``mcp_call`` in progress, by item id."""

    def item(self, item: HostedItem | McpCallStarted) -> bytes:
        encoder = self.encoder
        if isinstance(item, McpToolsListed):
            chunk, index = encoder.open_item({**hosted_item(item), "tools": []})
            ids = {"item_id": item.item_id, "output_index": index}
            chunk += encoder.event("response.mcp_list_tools.in_progress", ids)
            ended = "failed" if item.error is not None else "completed"
            chunk += encoder.event(f"response.mcp_list_tools.{ended}", ids)
            return chunk + encoder.close_item(index, hosted_item(item))
        if isinstance(item, McpApprovalAsked):
            chunk, index = encoder.open_item(hosted_item(item))
            return chunk + encoder.close_item(index, hosted_item(item))
        if isinstance(item, McpCallStarted):
            chunk, index = encoder.open_item(hosted_item(item))
            self.calls[item.item_id] = index
            ids = {"item_id": item.item_id, "output_index": index}
            chunk += encoder.event("response.mcp_call.in_progress", ids)
            chunk += encoder.event(
                "response.mcp_call_arguments.delta", {**ids, "delta": item.arguments}
            )
            return chunk + encoder.event(
                "response.mcp_call_arguments.done", {**ids, "arguments": item.arguments}
            )
        chunk = b""
        index = self.calls.pop(item.item_id, -1)
        if index < 0:  # an approved call run before the rounds: not announced
            started = McpCallStarted(item.item_id, item.server, item.tool, item.arguments)
            chunk = self.item(started)
            index = self.calls.pop(item.item_id)
        ids = {"item_id": item.item_id, "output_index": index}
        ended = "failed" if item.error is not None else "completed"
        chunk += encoder.event(f"response.mcp_call.{ended}", ids)
        return chunk + encoder.close_item(index, hosted_item(item))


async def encode_hosted_stream(
    events: AsyncIterator[HostedEvent],
    request: ChatRequest,
    on_end: Callable[[dict[str, Any]], None] | None = None,
) -> AsyncIterator[bytes]:
    """SSE bytes of the loop's answer (module docstring); ``on_end`` as for
    stream.py's ``encode_chat_stream``."""
    encoder = StreamEncoder(request, on_end)
    hosted = _HostedStream(encoder)
    async for event in events:
        if isinstance(event, McpToolsListed | McpCallStarted | McpCallEnded | McpApprovalAsked):
            chunk = hosted.item(event)
        elif isinstance(event, McpRoundsSpent):
            continue  # the ResponseEnd after it says max_tokens: incomplete
        else:
            chunk = encoder.encode(event)
        if chunk:
            yield escape_line_breaks(chunk)
        if encoder.finished:
            return
    error = BackendProtocolError("the backend's stream ended before it was complete")
    yield escape_line_breaks(encoder.fail(error))

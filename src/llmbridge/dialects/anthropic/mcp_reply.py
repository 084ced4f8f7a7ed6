"""Anthropic answers of the gateway's MCP loop (core/hosted_mcp.py): the rounds' blocks
with an ``mcp_tool_use`` block and an ``mcp_tool_result`` block for each call the
gateway ran (the anthropic SDK's ``BetaMCPToolUseBlock`` and ``BetaMCPToolResultBlock``).

Streamed, each is a ``content_block_start`` carrying the whole block (the tool use's
input then one ``input_json_delta``, as a ``tool_use`` block's) and its
``content_block_stop``, numbered with the other blocks. The server's tool list and
approvals have no block here (the connector asks for none). A loop stopped at
``mcp.max_tool_rounds`` ends with ``stop_reason: pause_turn``, the API's word for a
server-side loop that stopped before the end (send the answer back to go on).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from llmbridge.core.errors import BackendProtocolError
from llmbridge.core.hosted_mcp import (
    HostedEvent,
    HostedReply,
    McpApprovalAsked,
    McpCallEnded,
    McpCallStarted,
    McpRoundsSpent,
    McpToolsListed,
)
from llmbridge.core.request import ChatRequest
from llmbridge.dialects.anthropic.response import (
    encode_block,
    encode_stop_reason,
    encode_usage,
    message_id,
    thinking_omitted,
)
from llmbridge.dialects.anthropic.stream import StreamEncoder, error_event
from llmbridge.dialects.framing import escape_line_breaks

__all__ = ["encode_hosted_response", "encode_hosted_stream"]

PAUSE_TURN = "pause_turn"


def tool_use_block(
    call: McpCallStarted | McpCallEnded, *, with_input: bool = True
) -> dict[str, Any]:
    arguments: Any = {}
    if with_input:
        try:
            arguments = orjson.loads(call.arguments or "{}")
        except orjson.JSONDecodeError:
            arguments = {"raw": call.arguments}
    return {
        "type": "mcp_tool_use",
        "id": call.item_id,
        "name": call.tool,
        "server_name": call.server,
        "input": arguments,
    }


def tool_result_block(ended: McpCallEnded) -> dict[str, Any]:
    text = ended.error if ended.error is not None else ended.output or ""
    return {
        "type": "mcp_tool_result",
        "tool_use_id": ended.item_id,
        "is_error": ended.error is not None,
        "content": [{"type": "text", "text": text}],
    }


def encode_hosted_response(reply: HostedReply, request: ChatRequest) -> dict[str, Any]:
    """The ``message`` of a whole answer."""
    content: list[dict[str, Any]] = []
    saw_tool_call = False
    omit = thinking_omitted(request)
    for entry in reply.entries:
        if isinstance(entry, McpCallEnded):
            content += [tool_use_block(entry), tool_result_block(entry)]
        elif isinstance(entry, McpToolsListed | McpApprovalAsked):
            continue
        elif (block := encode_block(entry, omit)) is not None:
            content.append(block)
            saw_tool_call = saw_tool_call or block["type"] == "tool_use"
    stop = (
        PAUSE_TURN if reply.rounds_spent else encode_stop_reason(reply.stop_reason, saw_tool_call)
    )
    return {
        "id": message_id(reply.id),
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": reply.stop_sequence,
        "usage": encode_usage(reply.usage),
    }


async def encode_hosted_stream(
    events: AsyncIterator[HostedEvent], request: ChatRequest
) -> AsyncIterator[bytes]:
    """Anthropic SSE of the loop's answer (module docstring)."""
    encoder = StreamEncoder(request.model, omit_thinking=thinking_omitted(request))
    async for event in events:
        if isinstance(event, McpCallStarted):
            chunk = encoder.whole_block(tool_use_block(event, with_input=False), event.arguments)
        elif isinstance(event, McpCallEnded):
            chunk = b""
            if event.approval_request_id is not None:  # not announced before
                chunk = encoder.whole_block(
                    tool_use_block(event, with_input=False), event.arguments
                )
            chunk += encoder.whole_block(tool_result_block(event))
        elif isinstance(event, McpRoundsSpent):
            encoder.stop_override = PAUSE_TURN
            continue
        elif isinstance(event, McpToolsListed | McpApprovalAsked):
            continue
        else:
            chunk = encoder.feed(event)
        if chunk:
            yield escape_line_breaks(chunk)
        if encoder.done:
            return
    yield error_event(BackendProtocolError("the stream ended before it was complete"))

"""A cheap estimate of a chat request's size as JSON, to decide where work on it runs.

Work that grows with a request (encoding it for the backend, counting its tokens) holds
the interpreter for as long as it takes: 0.2-0.4 s for the largest bodies the limits
allow (docs/PERFORMANCE.md, "/health while a large request is read"). The gateway does
such work in a worker thread for requests above ``RequestLimits.offload_bytes``, the
threshold the raw body is judged by when it is read (web/bodies.py). Past the
decoder only the neutral request is left, so its size is estimated here instead: the
text it carries plus a flat allowance per message, part and tool. The walk stops as
soon as the threshold is passed, so it costs a few microseconds for a small request
and no more than that threshold's worth of parts for a large one.
"""

from __future__ import annotations

from llmbridge.core.messages import (
    ImagePart,
    Part,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)
from llmbridge.core.request import ChatRequest

__all__ = ["larger_than"]

_MESSAGE_BYTES = 32
"""A message's envelope: ``{"role":"assistant","content":...}``."""
_PART_BYTES = 32
"""A part's envelope: ``{"type":"text","text":""}``."""
_ARGUMENTS_BYTES = 64
"""Tool-call arguments held only as a dict (not measured: that would mean encoding them)."""
_TOOL_BYTES = 512
"""A tool definition besides its description: name and a small JSON Schema. Real
schemas vary (Claude Code's run to a few kB); a flat figure keeps the walk cheap."""


def _part_bytes(part: Part) -> int:
    if isinstance(part, TextPart):
        return len(part.text)
    if isinstance(part, ToolResultPart):
        return len(part.content)
    if isinstance(part, ToolCallPart):
        arguments = part.raw_arguments
        return len(part.name) + (len(arguments) if arguments is not None else _ARGUMENTS_BYTES)
    if isinstance(part, ThinkingPart):
        return len(part.text) + len(part.signature or "") + len(part.redacted or "")
    if isinstance(part, ImagePart):
        return len(part.data or part.url or "")
    return 0


def larger_than(request: ChatRequest, size: int) -> bool:
    """Whether ``request`` written as JSON would take more than about ``size`` bytes."""
    total = len(request.tools) * _TOOL_BYTES
    for tool in request.tools:
        total += len(tool.description)
    if total > size:
        return True
    for message in request.messages:
        total += _MESSAGE_BYTES
        for part in message.parts:
            total += _PART_BYTES + _part_bytes(part)
        if total > size:
            return True
    return False

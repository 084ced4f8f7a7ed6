"""Complete response -> events: so a backend answering non-streamed still streams.

The inverse of ``accumulate``: a backend that got one complete reply yields these
events, and the gateway treats it exactly like a streamed reply.
"""

from __future__ import annotations

import orjson

from llmbridge.core.events import (
    PartDelta,
    PartEnd,
    PartStart,
    ResponseEnd,
    ResponseStart,
    SignatureDelta,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolArgsDelta,
)
from llmbridge.core.messages import TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.response import ChatResponse

__all__ = ["events_from_response"]


def events_from_response(response: ChatResponse) -> list[StreamEvent]:
    """The event stream that accumulates back to ``response``."""
    events: list[StreamEvent] = [
        ResponseStart(
            id=response.id,
            model=response.model,
            created=response.created,
            input_tokens=response.usage.input_tokens,
        )
    ]
    for index, part in enumerate(response.message.parts):
        if isinstance(part, TextPart):
            events.append(PartStart(index, TextPart("")))
            events.append(PartDelta(index, TextDelta(part.text)))
        elif isinstance(part, ThinkingPart):
            events.append(PartStart(index, ThinkingPart("", redacted=part.redacted)))
            if part.text:
                events.append(PartDelta(index, ThinkingDelta(part.text)))
            if part.signature:
                events.append(PartDelta(index, SignatureDelta(part.signature)))
        elif isinstance(part, ToolCallPart):
            events.append(PartStart(index, ToolCallPart(id=part.id, name=part.name)))
            args = part.raw_arguments or orjson.dumps(part.arguments).decode()
            events.append(PartDelta(index, ToolArgsDelta(args)))
        else:
            events.append(PartStart(index, part))
        events.append(PartEnd(index, part))
    events.append(
        ResponseEnd(
            stop_reason=response.stop_reason,
            usage=response.usage,
            timings=response.timings,
            stop_sequence=response.stop_sequence,
            provider_details=response.provider_details,
        )
    )
    return events

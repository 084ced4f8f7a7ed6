"""The client's bytes on the pass-through path (core/relay.py): ``relay_stream``, what
every dialect's relayed stream goes out as.

The reply's ``Relayed`` bytes go on as they came; nothing else of the events is
written (the start, usage and end were read from those bytes). A failure the gateway
itself saw after the first byte (the connection dropped, the backend went silent) is
the dialect's in-stream error (``error_frame``), as on the translated path; the
backend's own in-band error is relayed as it sent it, and ends the stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from llmbridge.core.errors import BackendProtocolError, LLMBridgeError
from llmbridge.core.events import Relayed, ResponseEnd, StreamError, StreamEvent

__all__ = ["relay_stream"]


async def relay_stream(
    events: AsyncIterator[StreamEvent], error_frame: Callable[[LLMBridgeError], bytes]
) -> AsyncIterator[bytes]:
    """The bytes of a relayed stream (module docstring)."""
    async for event in events:
        if isinstance(event, Relayed):
            if event.data:
                yield event.data
            if event.error is not None:
                return
        elif isinstance(event, ResponseEnd):
            return
        elif isinstance(event, StreamError):
            yield error_frame(event.error)
            return
    yield error_frame(BackendProtocolError("the backend's stream ended before it was complete"))

"""How each dialect's stream encoder is run over a reply's events: ``encoded``.

Every front's ``encode_chat_stream`` is an encoder object (the state of one stream,
its bytes for each event) run by this one loop: the bytes of each event in turn, until
the encoder says the stream is finished, and the dialect's own error when the events
stop before that (a reply must not end as if it were complete). For a reply read a
batch at a time (``core.stream.EventBatches``) the loop takes each batch's events
together and hands on their bytes joined, one async hop a batch rather than one an
event: the streamed chunk's hot path.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from llmbridge.core.events import StreamEvent
from llmbridge.core.stream import EventBatches
from llmbridge.dialects.framing import escape_line_breaks

__all__ = ["ENDED_EARLY", "encoded"]

ENDED_EARLY = "the backend's stream ended before it was complete"
"""What a reply whose events stopped before its end is told (``unfinished``)."""


def _as_is(data: bytes) -> bytes:
    return data


async def encoded(
    events: AsyncIterator[StreamEvent],
    encode: Callable[[StreamEvent], bytes],
    finished: Callable[[], bool],
    unfinished: Callable[[], bytes],
    *,
    escape: bool = True,
    closing: bytes = b"",
) -> AsyncIterator[bytes]:
    """The bytes ``encode`` gives for each of ``events`` (empty ones left out) until
    ``finished()``, then ``closing`` if any; ``unfinished()`` when the events end
    first. ``escape``: the bytes go through ``framing.escape_line_breaks`` (an
    encoder that frames its own bytes escaped says ``False``)."""
    escaped = escape_line_breaks if escape else _as_is
    if isinstance(events, EventBatches):
        async for batch in events.batches():
            pieces = []
            for event in batch:
                piece = encode(event)
                if piece:
                    pieces.append(piece)
                if finished():
                    break
            if pieces:
                yield escaped(pieces[0] if len(pieces) == 1 else b"".join(pieces))
            if finished():
                if closing:
                    yield closing
                return
    else:
        async for event in events:
            piece = encode(event)
            if piece:
                yield escaped(piece)
            if finished():
                if closing:
                    yield closing
                return
    yield unfinished()

"""What the pass-through relays (``dialects/*/relay.py``) share: the model name a
body is to carry and the client's for the reply (``mapped_model``); and the reading of
a reply: the read buffer that hands on whole frames only (``FrameBuffer`` for SSE, ``LineBuffer``
for NDJSON), so that an error the gateway adds never lands inside a frame; an SSE
frame's event name and data (``event_of``); and a payload parsed as a JSON object, or
the ``BackendProtocolError`` saying it is not one (``json_object``).

The buffers sit on the hot path of every relayed stream: a read that ends on a frame
boundary (the usual one) costs one boundary search, and a frame that spans many reads
grows one ``bytearray`` in place rather than being copied per read.
"""

from __future__ import annotations

from typing import Any

import orjson

from llmbridge.core.errors import BackendProtocolError
from llmbridge.core.request import ChatRequest

__all__ = ["FrameBuffer", "LineBuffer", "event_of", "json_object", "mapped_model"]


def mapped_model(request: ChatRequest) -> tuple[dict[str, Any], str | None]:
    """What to set in ``request``'s body (its ``relay`` set) for the route's model name:
    ``{"model": request.model}`` where the body names another (else nothing), and the
    name the reply is to carry instead of the backend's (``None``: as it came)."""
    relay = request.relay
    assert relay is not None
    asked = relay.body.get("model")
    if asked == request.model:
        return {}, None
    return {"model": request.model}, asked if isinstance(asked, str) else None


class FrameBuffer:
    """The whole SSE frames of a stream's reads: ``feed`` each read, ``tail`` at the
    end. A frame ends at a blank line, ``\\n\\n`` or ``\\r\\n\\r\\n``."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        self.pending = bytearray()
        """The start of a frame whose end has not come yet (a relay may test it to take
        its own fast path for a read of whole frames)."""

    def feed(self, chunk: bytes) -> bytes | None:
        """The whole frames the reads so far complete (through the last boundary), or
        ``None`` while no frame ends; what follows the last boundary is kept."""
        pending = self.pending
        if pending:
            # Only a boundary across the join or in the read can end a frame.
            probe = bytes(pending[-3:]) + chunk
            if b"\n\n" not in probe and b"\r\n\r\n" not in probe:
                pending += chunk
                return None
            data = bytes(pending) + chunk
        else:
            data = chunk
        lf, crlf = data.rfind(b"\n\n"), data.rfind(b"\r\n\r\n")
        if lf < 0 and crlf < 0:  # no frame ends in it yet (pending is empty)
            pending += data
            return None
        cut = max(lf + 2 if lf >= 0 else 0, crlf + 4 if crlf >= 0 else 0)
        self.pending = bytearray(data[cut:])
        return data[:cut]

    def tail(self) -> bytes:
        """What the stream's end left unfinished (``b""``: none), and the buffer emptied."""
        tail, self.pending = bytes(self.pending), bytearray()
        return tail


class LineBuffer:
    """The whole lines of an NDJSON stream's reads: ``feed`` each read, ``tail`` at the
    end (a last line without its newline)."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        self.pending = bytearray()
        """The start of a line whose newline has not come yet."""

    def feed(self, chunk: bytes) -> bytes | None:
        """The whole lines the reads so far complete (through the last newline), or
        ``None`` while no line ends; what follows the last newline is kept."""
        pending = self.pending
        if pending:
            if b"\n" not in chunk:  # a line that spans many reads grows in place
                pending += chunk
                return None
            data = bytes(pending) + chunk
        else:
            data = chunk
        cut = data.rfind(b"\n") + 1
        self.pending = bytearray(data[cut:])
        return data[:cut] if cut else None

    def tail(self) -> bytes:
        """What the stream's end left unfinished (``b""``: none), and the buffer emptied."""
        tail, self.pending = bytes(self.pending), bytearray()
        return tail


def event_of(frame: bytes) -> tuple[bytes | None, bytes | None]:
    """An SSE frame's event name and its data, stripped (each ``None`` where the frame
    has none; data lines are joined with ``\\n``)."""
    if frame.startswith(b"data:") and b"\n" not in frame:  # the usual frame: one line
        return None, frame[5:].strip()
    if frame.startswith(b"event:"):  # the other usual frame: an event line, a data line
        head, _, rest = frame.partition(b"\n")
        if rest.startswith(b"data:") and b"\n" not in rest and b"\r" not in head:
            return head[6:].strip(), rest[5:].strip()
    name = None
    data: list[bytes] = []
    for line in frame.splitlines():
        if line.startswith(b"data:"):
            data.append(line[5:].strip())
        elif line.startswith(b"event:"):
            name = line[6:].strip()
    return name, b"\n".join(data).strip() if data else None


def json_object(payload: bytes | str, what: str, sender: str) -> dict[str, Any]:
    """``payload`` parsed as a JSON object; else ``BackendProtocolError`` saying that
    ``sender`` (``"the Gemini backend"``) sent ``what`` (``"a stream chunk"``) that is not."""
    try:
        value = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise BackendProtocolError(f"{sender} sent {what} that is not JSON") from exc
    if not isinstance(value, dict):
        raise BackendProtocolError(f"{sender} sent {what} that is not a JSON object")
    return value

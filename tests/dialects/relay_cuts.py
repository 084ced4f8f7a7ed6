"""What the dialects' relay tests (tests/dialects/*/test_relay.py) share: a byte stream
cut at given points into the reads a backend's transport might hand over, and a stream
relay fed those reads into the events it gives."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from llmbridge.core.events import StreamEvent


class Codec(Protocol):
    """A dialect's stream relay: fed the backend's reads, then ended."""

    def feed(self, chunk: bytes) -> list[StreamEvent]: ...

    def end(self) -> list[StreamEvent]: ...


class StoppingCodec(Codec, Protocol):
    """A relay that says when the stream has ended in-band (its stop frame or an error)."""

    stopped: bool


def cut(data: bytes, points: Iterable[int]) -> list[bytes]:
    """``data`` cut at each of ``points`` (past the end is the end), empty pieces left out."""
    cuts = sorted({min(p, len(data)) for p in points})
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True) if b > a]


def feed(codec: Codec, reads: Iterable[bytes]) -> list[StreamEvent]:
    """The events ``codec`` gives for every one of ``reads``, then at the end."""
    events: list[StreamEvent] = []
    for read in reads:
        events += codec.feed(read)
    return events + codec.end()


def feed_until_stopped(codec: StoppingCodec, reads: Iterable[bytes]) -> list[StreamEvent]:
    """The events ``codec`` gives for ``reads`` up to the one after which it stopped (none
    is fed after that), then at the end."""
    events: list[StreamEvent] = []
    for read in reads:
        events += codec.feed(read)
        if codec.stopped:
            break
    return events + codec.end()

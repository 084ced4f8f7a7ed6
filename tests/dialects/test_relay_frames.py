"""The pass-through relays' read buffers (dialects/relay_frames.py): however a stream is
cut into reads, the frames handed on are the stream's own, whole, in order."""

from __future__ import annotations

import re
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from llmbridge.dialects.relay_frames import FrameBuffer, LineBuffer, event_of

_SSE_END = re.compile(rb"(?:\r\n\r\n|\n\n)\Z")

_frame = st.sampled_from(
    [
        b'data: {"a":1}',
        b"event: ping\ndata: {}",
        b"event: x\r\ndata: {\r\ndata: 1}",
        b": keep-alive",
        b'data: {"text":"a\\n\\nb"}',
    ]
)
_boundary = st.sampled_from([b"\n\n", b"\r\n\r\n"])


def _reads(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in pairwise(points)]


@given(
    frames=st.lists(st.tuples(_frame, _boundary), min_size=1, max_size=8),
    unfinished=st.sampled_from([b"", b"data: {", b"data: {}\r\n", b"data: {}\n"]),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
)
def test_sse_frames_come_whole_however_cut(
    frames: list[tuple[bytes, bytes]], unfinished: bytes, cuts: list[int]
) -> None:
    whole = b"".join(frame + boundary for frame, boundary in frames)
    buffer = FrameBuffer()
    handed: list[bytes] = []
    for read in _reads(whole + unfinished, cuts):
        complete = buffer.feed(read)
        if complete is not None:
            assert _SSE_END.search(complete), complete  # it ends where a frame ends
            handed.append(complete)
    assert b"".join(handed) == whole
    assert buffer.tail() == unfinished
    assert buffer.tail() == b""  # the tail is handed out once


@given(
    lines=st.lists(st.sampled_from([b'{"a":1}\n', b"{}\r\n", b"\n"]), max_size=8),
    unfinished=st.sampled_from([b"", b'{"done":', b'{"done":true}']),
    cuts=st.lists(st.integers(min_value=0, max_value=120), max_size=8),
)
def test_ndjson_lines_come_whole_however_cut(
    lines: list[bytes], unfinished: bytes, cuts: list[int]
) -> None:
    whole = b"".join(lines)
    buffer = LineBuffer()
    handed: list[bytes] = []
    for read in _reads(whole + unfinished, cuts):
        complete = buffer.feed(read)
        if complete is not None:
            assert complete.endswith(b"\n")
            handed.append(complete)
    assert b"".join(handed) == whole
    assert buffer.tail() == unfinished


def test_an_sse_frame_names_its_event_and_data() -> None:
    assert event_of(b'data: {"a":1} ') == (None, b'{"a":1}')
    assert event_of(b"event: ping\ndata: {}") == (b"ping", b"{}")
    assert event_of(b"event: x\r\ndata: {\r\ndata: 1}") == (b"x", b"{\n1}")
    assert event_of(b": keep-alive") == (None, None)
    assert event_of(b"event: message_stop") == (b"message_stop", None)

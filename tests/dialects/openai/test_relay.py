"""``ChatStreamRelay`` (dialects/openai/relay.py) however the backend's reads cut its
stream: the bytes relayed are the stream's own, whole frames at a time, and what it
read (text, finish, usage) is the same for every cut; a frame the gateway must change
(the counts the client did not ask for, a mapped model name) is changed wherever it
was cut."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmbridge.core.errors import BackendProtocolError
from llmbridge.core.events import Relayed, ResponseEnd, ResponseStart, StreamEvent
from llmbridge.core.response import StopReason
from llmbridge.dialects.openai.relay import ChatStreamRelay
from tests.dialects.relay_cuts import cut, feed

BASE = {"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 1, "model": "m"}
USAGE = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
STREAM = (
    b"".join(
        b"data: " + orjson.dumps(chunk) + b"\n\n"
        for chunk in (
            BASE | {"choices": [{"index": 0, "delta": {"content": "Hé"}}], "usage": None},
            BASE | {"choices": [{"index": 0, "delta": {"content": "llo"}}], "usage": None},
            BASE | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": None},
            BASE | {"choices": [], "usage": USAGE},
        )
    )
    + b": keep-alive\n\ndata: [DONE]\n\n"
)


def _relay(
    reads: list[bytes], client_model: str | None = None, strip: bool = False
) -> list[StreamEvent]:
    return feed(ChatStreamRelay(client_model, strip), reads)


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_cut_relays_the_same_bytes_and_reads_the_same(points: list[int]) -> None:
    events = _relay(cut(STREAM, points))
    relayed = [e for e in events if isinstance(e, Relayed)]
    assert b"".join(e.data for e in relayed) == STREAM
    assert all(e.data.endswith(b"\n\n") for e in relayed)  # whole frames only
    assert "".join(e.text for e in relayed) == "Héllo"
    assert isinstance(events[0], ResponseStart) and events[0].id == "chatcmpl-9"
    end = events[-1]
    assert isinstance(end, ResponseEnd) and end.stop_reason is StopReason.END_TURN
    assert (end.usage.input_tokens, end.usage.output_tokens) == (5, 2)


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_what_the_gateway_added_is_taken_out_however_cut(points: list[int]) -> None:
    events = _relay(cut(STREAM, points), client_model="public", strip=True)
    data = b"".join(e.data for e in events if isinstance(e, Relayed))
    assert b"usage" not in data and b'"model":"m"' not in data
    assert data.count(b'"model":"public"') == 3 and data.endswith(b"data: [DONE]\n\n")
    end = events[-1]
    assert isinstance(end, ResponseEnd) and end.usage.output_tokens == 2  # still read


def test_a_stream_without_its_end_is_a_protocol_error() -> None:
    with pytest.raises(BackendProtocolError, match="before it finished"):
        _relay([STREAM[: STREAM.index(b"data:", 10)]])


def test_crlf_frames_are_relayed_as_they_came() -> None:
    crlf = STREAM.replace(b"\n\n", b"\r\n\r\n")
    events = _relay(cut(crlf, [7, 150, 151]))
    assert b"".join(e.data for e in events if isinstance(e, Relayed)) == crlf


def _frames(stream: bytes) -> list[bytes]:
    """The stream read a frame at a time, as most backends send it."""
    return [frame + b"\n\n" for frame in stream.split(b"\n\n") if frame]


def test_a_frame_a_read_relays_and_reads_as_any_cut_does() -> None:
    events = _relay(_frames(STREAM))
    relayed = [e for e in events if isinstance(e, Relayed)]
    assert b"".join(e.data for e in relayed) == STREAM
    assert "".join(e.text for e in relayed) == "Héllo"
    end = events[-1]
    assert isinstance(end, ResponseEnd) and (end.usage.input_tokens, end.usage.output_tokens) == (
        5,
        2,
    )


def test_counts_spelled_with_spaces_are_taken_out_too() -> None:
    spaced = STREAM.replace(b'"usage":null', b'"usage" : null')
    data = b"".join(e.data for e in _relay(_frames(spaced), strip=True) if isinstance(e, Relayed))
    assert b"usage" not in data and data.count(b"data: {") == 3


def test_an_in_band_error_after_the_first_chunk_ends_the_relayed_stream() -> None:
    error = b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n'
    reads = [*_frames(STREAM)[:2], error, b"data: [DONE]\n\n"]
    events = _relay(reads)
    relayed = [e for e in events if isinstance(e, Relayed)]
    assert relayed[-1].data.startswith(error) and relayed[-1].error is not None
    assert "overloaded" in str(relayed[-1].error)

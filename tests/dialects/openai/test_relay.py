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


@pytest.mark.parametrize(
    "after",
    [
        [b"data: [DONE]\n\n"],  # a read of its own
        [],  # the backend closed without its end
    ],
)
def test_the_error_ends_the_stream_the_same_however_the_reads_fell(after: list[bytes]) -> None:
    """The error as it came, then [DONE], as the translated path ends: what the backend
    sent after it, in the error's own read or a later one, is not passed on."""
    error = b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n'
    ended = error + b"data: [DONE]\n\n"
    stray = STREAM.split(b"\n\n")[1] + b"\n\n"  # a chunk the backend sent after its error
    for reads in (
        [*_frames(STREAM)[:2], error, *after],
        [*_frames(STREAM)[:2], error + stray + b"data: [DONE]\n\n"],
        [*_frames(STREAM)[:2], error + b"data: [DONE]\n\n" + stray],
    ):
        relayed = [e for e in _relay(reads) if isinstance(e, Relayed)]
        assert relayed[-1].data == ended and relayed[-1].error is not None


def _chunk(body: dict[str, object], *, spaced: bool = False) -> bytes:
    payload = orjson.dumps(body)
    if spaced:
        payload = payload.replace(b'"usage":null', b'"usage" : null')
    return b"data: " + payload + b"\n\n"


def _delta(delta: dict[str, object], **more: object) -> dict[str, object]:
    return BASE | {"choices": [{"index": 0, "delta": delta, **more}], "usage": None}


PALETTE = [
    _chunk(_delta({"content": 'a "quoted"\nline: data: [x]'})),
    _chunk(_delta({"content": "tok "})),
    _chunk(_delta({"content": "spaced"}), spaced=True),
    _chunk(_delta({"reasoning_content": "think"})),
    _chunk(_delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":1}'}}]})),
    _chunk(BASE | {"model": "other", "choices": [{"index": 0, "delta": {"content": "o"}}]}),
    _chunk(BASE | {"model": "public", "choices": [{"index": 0, "delta": {"content": "p"}}]}),
    _chunk(BASE | {"choices": [{"index": 0, "delta": {"content": "n"}}]}),  # no usage key
    _chunk(_delta({}, finish_reason="stop")),
    _chunk(BASE | {"choices": [], "usage": USAGE}),
    _chunk(BASE | {"choices": [{"index": 0, "delta": {"content": "u"}}], "usage": USAGE}),
    b": keep-alive\n\n",
    b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n',
    b"data: [DONE]\n\n",
    b"data: [1, 2]\n\n",
]
"""Frames of every kind a relayed stream reads, each as a read of its own or among many."""


def _outcome(reads: list[bytes], client_model: str | None, strip: bool) -> object:
    try:
        events = _relay(reads, client_model=client_model, strip=strip)
    except BackendProtocolError as exc:
        return ("protocol error", str(exc))
    relayed = [e for e in events if isinstance(e, Relayed)]
    end = events[-1]
    return (
        b"".join(e.data for e in relayed),
        "".join(e.text for e in relayed),
        [str(e.error) for e in relayed if e.error is not None],
        (end.stop_reason, end.usage, end.stop_sequence) if isinstance(end, ResponseEnd) else None,
    )


@given(
    st.lists(st.sampled_from(PALETTE), max_size=14),
    st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=14),
    st.sampled_from([None, "public"]),
    st.booleans(),
)
def test_many_frames_a_read_relay_and_read_as_a_frame_a_read_does(
    frames: list[bytes], sizes: list[int], client_model: str | None, strip: bool
) -> None:
    # Reads of several whole frames (one parse for a run of them), the stream's first
    # chunk among them or not, against a frame a read.
    first = _chunk(_delta({"role": "assistant", "content": ""}))
    error = PALETTE[12]
    if error in frames:  # the stream ends there; the rest of its read goes on as it came
        frames = frames[: frames.index(error) + 1]
    grouped: list[bytes] = []
    rest = [first, *frames]
    for size in sizes * len(rest):
        if not rest:
            break
        grouped.append(b"".join(rest[:size]))
        rest = rest[size:]
    single = [first, *frames]
    assert _outcome(grouped, client_model, strip) == _outcome(single, client_model, strip)


def test_a_read_of_many_frames_is_changed_as_each_frame_would_be() -> None:
    frames = [_chunk(_delta({"content": f"t{i}"})) for i in range(5)]
    finish = _chunk(_delta({}, finish_reason="stop")) + b"data: [DONE]\n\n"
    reads = [_chunk(_delta({"content": ""})), b"".join(frames), finish]
    relayed = [e for e in _relay(reads, "public", strip=True) if isinstance(e, Relayed)]
    assert relayed[1].text == "t0t1t2t3t4"
    assert relayed[1].data.count(b'"model":"public"') == 5 and b"usage" not in relayed[1].data

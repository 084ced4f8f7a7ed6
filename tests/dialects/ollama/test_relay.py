"""The Ollama pass-through path's codec (dialects/ollama/relay.py): ``ChatStreamRelay``
however the backend's reads cut its NDJSON stream (the bytes relayed are the stream's
own, whole lines at a time, and what it read is the same for every cut; a mapped model
name is changed wherever the line was cut), the in-band error, a stream cut short, a
reply sent whole, and what ``relay_request`` sets in the client's body."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmbridge.core.errors import BackendError, BackendProtocolError
from llmbridge.core.events import Relayed, ResponseEnd, ResponseStart, StreamError, StreamEvent
from llmbridge.core.relay import RelayBody
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import StopReason
from llmbridge.dialects.ollama import decode_chat_request, encode_chat_stream
from llmbridge.dialects.ollama.relay import (
    ChatStreamRelay,
    relay_error_line,
    relay_reply,
    relay_request,
)
from tests.dialects.ollama.helpers import aiter_of, collect, fixture_bytes
from tests.dialects.relay_cuts import cut, feed_until_stopped

STREAM = fixture_bytes("text.ndjson")
"""Non-ASCII text across lines, a blank line, and the ``done`` line with the counts."""


def _relay(reads: list[bytes], client_model: str | None = None) -> list[StreamEvent]:
    return feed_until_stopped(ChatStreamRelay(client_model), reads)


def _data(events: list[StreamEvent]) -> bytes:
    return b"".join(e.data for e in events if isinstance(e, Relayed))


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_cut_relays_the_same_bytes_and_reads_the_same(points: list[int]) -> None:
    events = _relay(cut(STREAM, points))
    relayed = [e for e in events if isinstance(e, Relayed)]
    assert _data(events) == STREAM
    assert all(e.data.endswith(b"\n") for e in relayed)  # whole lines only
    assert "".join(e.text for e in relayed) == "Héllo, 世界 🌍!"
    start = events[0]
    assert isinstance(start, ResponseStart) and start.model == "llama3.2"
    end = events[-1]
    assert isinstance(end, ResponseEnd) and end.stop_reason is StopReason.END_TURN
    assert (end.usage.input_tokens, end.usage.output_tokens) == (26, 4)
    assert end.timings.total_ns == 912345678


def test_a_line_split_across_reads_waits_for_its_end() -> None:
    first = STREAM.index(b"\n") + 1
    relay = ChatStreamRelay(None)
    assert relay.feed(STREAM[: first - 10]) == []  # inside the first line: nothing yet
    events = relay.feed(STREAM[first - 10 : first + 5])
    assert _data(events) == STREAM[:first]  # the line that ended, not the next one's start
    rest = relay.feed(STREAM[first + 5 :])
    assert _data(events + rest) == STREAM


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_a_mapped_name_is_the_clients_in_every_line_however_cut(points: list[int]) -> None:
    data = _data(_relay(cut(STREAM, points), client_model="public"))
    assert b'"model":"llama3.2"' not in data
    assert data.count(b'"model":"public"') == 4
    assert data == STREAM.replace(b'"model":"llama3.2"', b'"model":"public"')


def test_a_line_that_names_the_model_elsewhere_is_written_again() -> None:
    line = b'{"created_at":"x","model":"m","message":{"content":"hi"},"done":false}\n'
    data = _data(ChatStreamRelay("public").feed(line))
    assert orjson.loads(data) == {**orjson.loads(line), "model": "public"}
    assert data.endswith(b"\n")


def test_thinking_and_tool_calls_are_read_and_billed() -> None:
    thinking = _relay([fixture_bytes("thinking_then_content.ndjson")])
    assert "".join(e.text for e in thinking if isinstance(e, Relayed)) == (
        "The user wants 2+2.2 + 2 ="
    )
    end = thinking[-1]
    assert isinstance(end, ResponseEnd) and end.stop_reason is StopReason.MAX_TOKENS
    tools = _relay([fixture_bytes("tool_calls_in_done_frame.ndjson")])
    called = tools[-1]
    assert isinstance(called, ResponseEnd) and called.stop_reason is StopReason.TOOL_USE
    text = "".join(e.text for e in tools if isinstance(e, Relayed))
    assert orjson.loads(text) == {"city": "Paris", "unit": "celsius"}


def test_an_in_band_error_is_relayed_as_it_came_and_ends_the_stream() -> None:
    raw = fixture_bytes("mid_stream_error.ndjson")
    events = _relay([raw])
    relayed = [e for e in events if isinstance(e, Relayed)]
    error_at = raw.index(b'{"error"')
    assert _data(events) == raw[: raw.index(b"\n", error_at) + 1]  # nothing after it
    failure = relayed[-1].error
    assert isinstance(failure, BackendError) and "unexpected EOF" in failure.message
    assert not any(isinstance(e, ResponseEnd) for e in events)


def test_an_error_before_anything_was_relayed_is_an_error_before_the_first_byte() -> None:
    events = _relay([b'{"error":"model \\"x\\" not found"}\n'])
    assert len(events) == 1 and isinstance(events[0], StreamError)
    assert events[0].error.message == 'model "x" not found'


def test_a_stream_cut_before_its_done_line_is_a_protocol_error() -> None:
    raw = fixture_bytes("truncated_without_done.ndjson")
    relay = ChatStreamRelay(None)
    assert _data(relay.feed(raw)) == raw
    with pytest.raises(BackendProtocolError, match="before its done frame"):
        relay.end()
    cut = ChatStreamRelay(None)
    cut.feed(raw[:-10])  # the last line cut inside: its start is never relayed
    with pytest.raises(BackendProtocolError, match="not JSON"):
        cut.end()


def test_a_reply_sent_whole_is_read_and_renamed() -> None:
    reply = {
        "model": "m",
        "created_at": "2025-03-01T10:00:00Z",
        "message": {"role": "assistant", "content": "Hi."},
        "done_reason": "stop",
        "done": True,
        "prompt_eval_count": 9,
        "eval_count": 2,
    }
    raw = orjson.dumps(reply)
    start, relayed, end = relay_reply(raw, None)
    assert isinstance(start, ResponseStart) and start.model == "m"
    assert isinstance(relayed, Relayed) and relayed.data == raw and relayed.text == "Hi."
    assert isinstance(end, ResponseEnd) and end.usage.output_tokens == 2
    _, renamed, _ = relay_reply(raw, "public")
    assert isinstance(renamed, Relayed) and orjson.loads(renamed.data)["model"] == "public"
    with pytest.raises(BackendError, match="busy"):
        relay_reply(b'{"error":"busy"}', None)


async def test_the_error_line_is_the_translated_paths() -> None:
    start = ResponseStart(id="x", model="backend", created=1_740_823_200.25)
    failure = BackendProtocolError("cut")
    line = relay_error_line("public", start)(failure)
    assert line.endswith(b"\n")
    frame = orjson.loads(line)
    assert frame["model"] == "public" and frame["error"] == "cut"
    assert frame["done"] is True and frame["done_reason"] == "error"
    # Byte for byte the line the translated path ends the same stream with: dated at
    # the stream's start, not at the failure.
    request = ChatRequest(model="public", messages=(), stream=True)
    events: list[StreamEvent] = [start, StreamError(failure)]
    translated = b"".join(await collect(encode_chat_stream(aiter_of(events), request)))
    assert line == translated.splitlines(keepends=True)[-1]
    assert frame["created_at"].startswith("2025-03-01T10:00:00.25")


def test_an_error_line_without_the_streams_start_is_dated_now() -> None:
    frame = orjson.loads(relay_error_line("public")(BackendProtocolError("cut")))
    assert frame["created_at"].startswith(str(datetime.now(UTC).year))


def test_a_body_with_nothing_to_set_goes_out_as_its_bytes_came() -> None:
    raw = b'{"model": "m",  "messages": [{"role": "user", "content": "hi"}]}'
    body = orjson.loads(raw)
    chat = replace(decode_chat_request(body), relay=RelayBody("ollama", body, raw))
    assert relay_request(chat) == (raw, None)


def test_the_model_name_and_num_ctx_are_set_in_the_clients_body() -> None:
    body = {
        "model": "public",
        "messages": [{"role": "user", "content": "hi"}],
        "options": {"temperature": 0.5, "num_ctx": 1024},
        "keep_alive": "5m",
    }
    chat = decode_chat_request(body)
    chat = replace(
        chat,
        model="backend",
        params=replace(chat.params, num_ctx=8192),
        relay=RelayBody("ollama", body, orjson.dumps(body)),
    )
    sent, client_model = relay_request(chat)
    assert client_model == "public"
    assert orjson.loads(sent) == {
        **body,
        "model": "backend",
        "options": {"temperature": 0.5, "num_ctx": 8192},
    }
    assert body["options"] == {"temperature": 0.5, "num_ctx": 1024}  # never changed

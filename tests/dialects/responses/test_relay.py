"""The Responses dialect on the pass-through path (dialects/responses/relay.py): which
bodies relay, what is set in them, and a server's stream relayed as it came and read
for what the gateway records, the same as the decoder reads it, over the golden
captures (tests/fixtures/streams/responses/) in any chunking."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from llmbridge.core.errors import BackendError, BackendProtocolError
from llmbridge.core.events import (
    PartDelta,
    Relayed,
    ResponseEnd,
    ResponseStart,
    StreamError,
    StreamEvent,
)
from llmbridge.core.messages import ThinkingPart
from llmbridge.core.relay import RelayBody
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import StopReason
from llmbridge.dialects.responses.decode import decode_chat_stream
from llmbridge.dialects.responses.reasoning import seal_reasoning
from llmbridge.dialects.responses.relay import (
    DIALECT,
    ResponsesStreamRelay,
    relay_error,
    relay_reply,
    relay_request,
    relayable,
)
from llmbridge.dialects.responses.request import decode_chat_request
from llmbridge.dialects.responses.summary import seal_summary
from tests.dialects.openai.helpers import split_every, sse_events
from tests.dialects.relay_cuts import feed_until_stopped

FIXTURES = Path(__file__).parents[2] / "fixtures" / "streams" / "responses"
GOLDEN = {path.stem: path.read_bytes() for path in sorted(FIXTURES.glob("*.sse"))}
EVENT = TypeAdapter[Any](ResponseStreamEvent)


def _request(body: dict[str, Any], model: str | None = None) -> ChatRequest:
    raw = orjson.dumps(body)
    chat = decode_chat_request(body)
    return replace(chat, model=model or chat.model, relay=RelayBody(DIALECT, body, raw))


def _relay(pieces: list[bytes], client_model: str | None = None) -> list[StreamEvent]:
    return feed_until_stopped(ResponsesStreamRelay(client_model), pieces)


def _bytes(events: list[StreamEvent]) -> bytes:
    return b"".join(e.data for e in events if isinstance(e, Relayed))


def _text(events: list[StreamEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, Relayed))


async def _decoded(raw: bytes) -> list[StreamEvent]:
    return [event async for event in decode_chat_stream(sse_events([raw]), origin="up")]


# -- which bodies relay, and what is set ----------------------------------------------


def test_a_body_holding_what_llmbridge_sealed_does_not_relay() -> None:
    reasoning = seal_reasoning(ThinkingPart("t", signature="s", provider="anthropic"))
    assert reasoning is not None
    for sealed in (reasoning, seal_summary("the summary")):
        item = {"type": "reasoning", "summary": [], "encrypted_content": sealed}
        assert not relayable(orjson.dumps({"model": "m", "input": [item]}))
    opaque = {"type": "reasoning", "summary": [], "encrypted_content": "gAAAA-server"}
    assert relayable(orjson.dumps({"model": "m", "input": [opaque]}))


def test_a_body_that_needs_nothing_set_goes_as_its_bytes() -> None:
    body = {"model": "m", "input": "hi", "store": False, "stream": True}
    request = _request(body)
    assert request.relay is not None
    sent, client_model = relay_request(request)
    assert sent is request.relay.raw and client_model is None


@pytest.mark.parametrize("store", [None, True])
def test_the_backend_is_told_to_keep_nothing(store: bool | None) -> None:
    body = {"model": "m", "input": "hi"} | ({} if store is None else {"store": store})
    sent, _ = relay_request(_request(body))
    assert orjson.loads(sent) == {**body, "store": False}


def test_a_mapped_model_is_the_backends_in_the_body_and_the_clients_in_the_reply() -> None:
    sent, client_model = relay_request(_request({"model": "public", "input": "x"}, "private"))
    assert orjson.loads(sent)["model"] == "private" and client_model == "public"


# -- streams ---------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", GOLDEN)
@pytest.mark.parametrize("size", [1, 7, 64, 100_000])
async def test_a_golden_stream_is_relayed_as_it_came_and_read_as_decoded(
    fixture: str, size: int
) -> None:
    raw = GOLDEN[fixture]
    decoded = await _decoded(raw) if fixture != "truncated" else []
    if decoded and isinstance(decoded[0], StreamError):  # failed before any output
        events = _relay(split_every(raw, size))
        assert len(events) == 1 and isinstance(events[0], StreamError)
        error, expected = events[0].error, decoded[0].error
        assert (type(error), error.message, error.status_code, error.code) == (
            type(expected),
            expected.message,
            expected.status_code,
            expected.code,
        )
        return
    if fixture == "truncated":
        events = _relay(split_every(raw, size))
        whole = raw[: raw.rfind(b"\n\n") + 2]
        assert _bytes(events).startswith(whole)
        assert isinstance(events[-1], Relayed) and events[-1].error is not None
        return
    events = _relay(split_every(raw, size))
    assert isinstance(events[0], ResponseStart)
    assert _bytes(events) == raw  # every frame, byte for byte
    end, decoded_end = events[-1], decoded[-1]
    if isinstance(decoded_end, StreamError):  # the backend's own error, relayed
        assert isinstance(end, Relayed) and end.error is not None
        assert end.error.status_code == decoded_end.error.status_code
        assert end.error.message == decoded_end.error.message
    else:
        assert isinstance(end, ResponseEnd) and isinstance(decoded_end, ResponseEnd)
        assert (end.stop_reason, end.usage) == (decoded_end.stop_reason, decoded_end.usage)
    # The text billed is what the decoder's deltas carry (a summary's paragraphs apart).
    texts = [
        getattr(e.delta, "text", None) or getattr(e.delta, "json_fragment", "")
        for e in decoded
        if isinstance(e, PartDelta)
    ]
    assert _text(events).replace("\n\n", "") == "".join(texts).replace("\n\n", "")


def test_the_start_is_held_back_until_the_first_output_event() -> None:
    raw = (FIXTURES / "text.sse").read_bytes()
    frames = [frame + b"\n\n" for frame in raw.split(b"\n\n") if frame]
    relay = ResponsesStreamRelay(None)
    assert relay.feed(b"".join(frames[:3])) == []  # the comment, created, in_progress
    first = relay.feed(frames[3])  # output_item.added
    assert isinstance(first[0], ResponseStart) and first[0].id == "resp_0a1b2c3d4e5f"
    assert isinstance(first[1], Relayed) and first[1].data == b"".join(frames[:4])


def test_crlf_frames_and_keep_alives_pass_as_they_came() -> None:
    raw = (FIXTURES / "text.sse").read_bytes().replace(b"\n", b"\r\n")
    with_comment = raw.replace(
        b"event: response.output_text.done", b": ping\r\n\r\nevent: response.output_text.done", 1
    )
    events = _relay(split_every(with_comment, 5))
    assert _bytes(events) == with_comment
    assert isinstance(events[-1], ResponseEnd) and events[-1].usage.output_tokens == 7


def test_a_mapped_model_is_the_clients_in_every_response_object() -> None:
    raw = (FIXTURES / "text.sse").read_bytes()
    spaced = raw.replace(
        b'"model":"gpt-4.1-mini-2025-04-14"', b'"model": "gpt-4.1-mini-2025-04-14"', 1
    )
    for stream in (raw, spaced):
        data = _bytes(_relay([stream], client_model="public"))
        events = [
            orjson.loads(line[6:]) for line in data.splitlines() if line.startswith(b"data: ")
        ]
        responses = [e["response"] for e in events if "response" in e]
        assert len(responses) == 3 and {r["model"] for r in responses} == {"public"}
        for event in events:
            EVENT.validate_python(event)  # still what the SDK reads


def test_what_follows_the_end_is_not_passed_on() -> None:
    raw = (FIXTURES / "text.sse").read_bytes()
    events = _relay([raw + b"data: [DONE]\n\n"])
    assert _bytes(events) == raw


def test_a_stream_cut_after_the_first_byte_ends_as_the_translated_path_ends_it() -> None:
    raw = (FIXTURES / "text.sse").read_bytes()
    cut = raw[: raw.index(b"event: response.output_text.done")]
    events = _relay([cut])
    last = events[-1]
    assert isinstance(last, Relayed) and isinstance(last.error, BackendProtocolError)
    frames = [
        orjson.loads(line[6:]) for line in last.data.splitlines() if line.startswith(b"data: ")
    ]
    assert [f["type"] for f in frames] == ["error", "response.failed"]
    assert [f["sequence_number"] for f in frames] == [7, 8]  # after the backend's last, 6
    failed = frames[1]["response"]
    assert failed["id"] == "resp_0a1b2c3d4e5f" and failed["status"] == "failed"
    assert failed["error"] == {"code": "server_error", "message": last.error.message}
    for frame in frames:
        EVENT.validate_python(frame)


def test_a_stream_that_ends_before_its_first_output_fails_before_the_first_byte() -> None:
    raw = (FIXTURES / "text.sse").read_bytes()
    relay = ResponsesStreamRelay(None)
    assert relay.feed(raw[: raw.index(b"event: response.output_item.added")]) == []
    with pytest.raises(BackendProtocolError):
        relay.end()


def test_an_error_event_waits_for_its_response_failed_in_a_later_read() -> None:
    raw = (FIXTURES / "error_mid_stream.sse").read_bytes()
    at = raw.index(b"event: response.failed")
    relay = ResponsesStreamRelay(None)
    before = relay.feed(raw[:at])
    assert not relay.stopped
    assert all(not (isinstance(e, Relayed) and e.error) for e in before)
    after = relay.feed(raw[at:])
    assert relay.stopped and isinstance(after[-1], Relayed)
    error = after[-1].error
    assert isinstance(error, BackendError) and error.status_code == 429
    assert _bytes(before + after) == raw


def test_the_gateways_failure_after_the_backends_error_is_the_backends() -> None:
    raw = (FIXTURES / "error_mid_stream.sse").read_bytes()
    relay = ResponsesStreamRelay(None)
    relay.feed(raw[: raw.index(b"event: response.failed")])
    failed = relay.failed(BackendError("connection dropped"))
    assert failed.data == b"" and failed.error is not None
    assert failed.error.message == "Rate limit reached for gpt-5-codex."


# -- replies sent whole ---------------------------------------------------------------

REPLY = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1764000000,
    "status": "incomplete",
    "incomplete_details": {"reason": "max_output_tokens"},
    "error": None,
    "model": "m",
    "output": [
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "incomplete",
            "content": [{"type": "output_text", "text": "Hello", "annotations": []}],
        }
    ],
    "usage": {"input_tokens": 5, "input_tokens_details": {"cached_tokens": 2}, "output_tokens": 1},
}


def test_a_reply_sent_whole_is_read_for_its_usage_and_stop() -> None:
    raw = orjson.dumps(REPLY)
    start, relayed, end = relay_reply(raw, None)
    assert isinstance(start, ResponseStart) and start.id == "resp_1"
    assert isinstance(relayed, Relayed) and relayed.data is raw and relayed.text == "Hello"
    assert isinstance(end, ResponseEnd) and end.stop_reason is StopReason.MAX_TOKENS
    assert (end.usage.input_tokens, end.usage.cache_read_input_tokens) == (5, 2)
    _, renamed, _ = relay_reply(raw, "public")
    assert isinstance(renamed, Relayed) and orjson.loads(renamed.data)["model"] == "public"


def test_a_failed_reply_sent_whole_raises_its_error() -> None:
    failed = {**REPLY, "status": "failed", "error": {"code": "rate_limit_exceeded", "message": "x"}}
    with pytest.raises(BackendError) as raised:
        relay_reply(orjson.dumps(failed), None)
    assert raised.value.status_code == 429


def test_the_codecs_error_is_the_dialects_two_events() -> None:
    data = relay_error(BackendError("gone", status_code=502))
    assert data.startswith(b"event: error\ndata: ")
    assert b"event: response.failed\ndata: " in data and data.endswith(b"\n\n")

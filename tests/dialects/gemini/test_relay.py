"""Gemini's pass-through path, without I/O (dialects/gemini/relay.py): ``StreamRelay``
however the backend's reads cut its stream (the bytes relayed are Google's own, whole
frames at a time, CRLF or LF; what it read is the same for every cut; a mapped model's
``modelVersion`` renamed wherever it was cut), ``relay_reply`` for a reply sent whole, and
``relay_request``: the client's bytes as they came unless the backend's model needs what
the translated path would send (a thinking level, the signature placeholder)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmbridge.core.errors import BackendHTTPError, BackendProtocolError
from llmbridge.core.events import (
    Relayed,
    ResponseEnd,
    ResponseStart,
    StreamError,
    StreamEvent,
)
from llmbridge.core.relay import RelayBody
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import StopReason
from llmbridge.dialects.gemini.relay import (
    StreamRelay,
    relay_reply,
    relay_request,
    translated_only,
)
from llmbridge.dialects.gemini.request import decode_chat_request
from llmbridge.dialects.gemini.response import decode_chat_response, wire_signature
from llmbridge.dialects.gemini.stream import encode_chat_stream, error_frame
from llmbridge.dialects.gemini.thoughts import GEMINI
from tests.dialects.gemini.test_stream import FIXTURES
from tests.dialects.relay_cuts import cut, feed


def _chunk(parts: list[dict[str, Any]], **more: Any) -> bytes:
    candidate: dict[str, object] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if "finishReason" in more:
        candidate["finishReason"] = more.pop("finishReason")
    body = {"candidates": [candidate], "modelVersion": "gemini-2.5-flash", "responseId": "r-1"}
    # Google's own spelling: a space after each colon and comma between keys.
    return orjson.dumps(body | more).replace(b'":', b'": ')


USAGE = {"promptTokenCount": 5, "candidatesTokenCount": 2, "totalTokenCount": 7}
STREAM = b"".join(
    b"data: " + chunk + b"\r\n\r\n"
    for chunk in (
        _chunk([{"text": "Hé"}], usageMetadata={"promptTokenCount": 5}),
        _chunk([{"text": "llo", "thoughtSignature": "c2ln"}]),
        _chunk([{"text": ""}], finishReason="STOP", usageMetadata=USAGE),
    )
)


def _relay(reads: list[bytes], client_model: str | None = None) -> list[StreamEvent]:
    return feed(StreamRelay(client_model), reads)


def _relayed(events: list[StreamEvent]) -> bytes:
    return b"".join(e.data for e in events if isinstance(e, Relayed))


@pytest.mark.parametrize("boundary", [b"\r\n\r\n", b"\n\n"], ids=["crlf", "lf"])
@given(points=st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_cut_relays_the_same_bytes_and_reads_the_same(
    boundary: bytes, points: list[int]
) -> None:
    stream = STREAM.replace(b"\r\n\r\n", boundary)
    events = _relay(cut(stream, points))
    relayed = [e for e in events if isinstance(e, Relayed)]
    assert b"".join(e.data for e in relayed) == stream
    assert all(e.data.endswith(boundary) for e in relayed)  # whole frames only
    assert "".join(e.text for e in relayed) == "Héllo"
    assert isinstance(events[0], ResponseStart) and events[0].id == "r-1"
    end = events[-1]
    assert isinstance(end, ResponseEnd) and end.stop_reason is StopReason.END_TURN
    assert (end.usage.input_tokens, end.usage.output_tokens) == (5, 2)  # the last counts


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_a_mapped_name_is_the_clients_in_every_chunk_however_cut(points: list[int]) -> None:
    data = _relayed(_relay(cut(STREAM, points), client_model="public"))
    assert b"gemini-2.5-flash" not in data
    assert data.count(b'"modelVersion":"public"') == 3
    assert data.replace(b'"modelVersion":"public"', b'"modelVersion": "gemini-2.5-flash"') == (
        STREAM
    )  # nothing else changed


def test_a_function_call_is_billed_by_its_arguments_and_ends_as_a_tool_use() -> None:
    call = {"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}}
    stream = b"data: " + _chunk([call], finishReason="STOP", usageMetadata=USAGE) + b"\r\n\r\n"
    events = _relay([stream])
    assert "".join(e.text for e in events if isinstance(e, Relayed)) == '{"city":"Oslo"}'
    end = events[-1]
    assert isinstance(end, ResponseEnd) and end.stop_reason is StopReason.TOOL_USE


def test_a_stream_without_its_finish_is_the_translated_paths_protocol_error() -> None:
    with pytest.raises(BackendProtocolError, match="before a finishReason"):
        _relay([STREAM[: STREAM.index(b"data:", 10)]])
    with pytest.raises(BackendProtocolError, match="before its first chunk"):
        _relay([b": keep-alive\n\n"])


def test_the_backends_in_band_error_ends_the_stream_relayed_as_it_came() -> None:
    error = b'data: {"error": {"code": 503, "message": "busy", "status": "UNAVAILABLE"}}\r\n\r\n'
    first = STREAM[: STREAM.index(b"data:", 10)]
    relay = StreamRelay(None)
    events = relay.feed(first + error + b"data: {}\r\n\r\n")
    assert relay.stopped and relay.end() == []
    assert _relayed(events) == first + error  # what came after it is not passed on
    failed = [e.error for e in events if isinstance(e, Relayed) and e.error is not None]
    assert isinstance(failed[0], BackendHTTPError) and failed[0].status_code == 503


def test_an_error_before_the_first_chunk_is_raised_as_the_translated_path_does() -> None:
    error = b'data: {"error": {"code": 429, "message": "slow", "status": "RESOURCE_EXHAUSTED"}}'
    with pytest.raises(BackendHTTPError) as raised:
        StreamRelay(None).feed(error + b"\r\n\r\n")
    assert raised.value.status_code == 429


def test_a_keep_alive_before_the_first_chunk_follows_the_start() -> None:
    events = _relay([b": ping\n\n", STREAM])
    assert isinstance(events[0], ResponseStart)
    assert _relayed(events) == b": ping\n\n" + STREAM


def test_a_frame_left_open_at_the_end_is_read() -> None:
    events = _relay([STREAM.removesuffix(b"\r\n\r\n")])
    assert (
        isinstance(events[-1], ResponseEnd)
        and "".join(e.text for e in events if isinstance(e, Relayed)) == "Héllo"
    )


GOLDEN = sorted(p for p in FIXTURES.glob("reply_*.sse") if not p.stem.startswith("reply_encoded"))


@pytest.mark.parametrize("fixture", GOLDEN, ids=lambda path: path.stem)
def test_golden_streams_relay_byte_for_byte(fixture: Path) -> None:
    raw = fixture.read_bytes()
    relay = StreamRelay(None)
    events = relay.feed(raw)
    whole = raw[: max(raw.rfind(b"\n\n") + 2, raw.rfind(b"\r\n\r\n") + 4)]
    assert _relayed(events) == whole


def test_a_reply_sent_whole_is_googles_json_renamed_only_where_mapped() -> None:
    raw = _chunk([{"text": "Hi"}], finishReason="MAX_TOKENS", usageMetadata=USAGE)
    start, relayed, end = relay_reply(raw, None)
    assert isinstance(start, ResponseStart) and isinstance(relayed, Relayed)
    assert relayed.data == raw and relayed.text == "Hi"
    assert isinstance(end, ResponseEnd) and end.stop_reason is StopReason.MAX_TOKENS
    renamed = relay_reply(raw, "public")[1]
    assert isinstance(renamed, Relayed)
    assert orjson.loads(renamed.data) == orjson.loads(raw) | {"modelVersion": "public"}
    with pytest.raises(BackendHTTPError):
        relay_reply(b'{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED"}}', None)


async def test_the_error_frame_is_what_the_translated_stream_ends_with() -> None:
    error = BackendProtocolError("cut")

    async def failed() -> AsyncIterator[StreamEvent]:
        yield ResponseStart(id="r", model="m", created=0.0)
        yield StreamError(error)

    encoded = [f async for f in encode_chat_stream(failed(), ChatRequest(model="m", messages=()))]
    assert encoded[-1] == error_frame(error)
    assert orjson.loads(error_frame(error)[6:])["error"]["code"] == 502


def _request(body: dict[str, Any], model: str, backend_model: str) -> ChatRequest:
    raw = orjson.dumps(body)
    chat = decode_chat_request(body, model=model, stream=False)
    return ChatRequest(
        model=backend_model,
        messages=chat.messages,
        thinking=chat.thinking,
        provider_details=chat.provider_details,
        relay=RelayBody("gemini", body, raw, model=model),
    )


HI = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


def test_the_body_goes_as_it_came_and_the_client_model_is_named_where_mapped() -> None:
    request = _request(HI, "public", "gemini-2.5-flash")
    assert relay_request(request, placeholder=None) == (orjson.dumps(HI), "public")
    same = _request(HI, "gemini-2.5-flash", "gemini-2.5-flash")
    assert relay_request(same, placeholder=None)[1] is None


def test_a_thinking_level_a_model_does_not_take_is_sent_as_its_budget() -> None:
    thinking = {"thinkingConfig": {"thinkingLevel": "HIGH", "includeThoughts": False}}
    body = HI | {"generationConfig": {"temperature": 0.5} | thinking}
    sent, _ = relay_request(_request(body, "m", "gemini-2.5-pro"), placeholder=None)
    assert orjson.loads(sent)["generationConfig"] == {
        "temperature": 0.5,
        "thinkingConfig": {"thinkingBudget": 24576, "includeThoughts": False},
    }
    kept, _ = relay_request(_request(body, "m", "gemini-3-pro-preview"), placeholder=None)
    assert kept == orjson.dumps(body)  # a model that takes levels gets the client's own


def test_a_model_turns_unsigned_call_gets_the_placeholder() -> None:
    call = {"functionCall": {"name": "f", "args": {}}}
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "hi"}]},
            {"role": "model", "parts": [{"text": "let me"}, call]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]},
        ]
    }
    sent, _ = relay_request(_request(body, "m", "gemini-3-pro-preview"), placeholder="skip")
    turn = orjson.loads(sent)["contents"][1]
    assert turn["parts"] == [{"text": "let me"}, call | {"thoughtSignature": "skip"}]
    signed = orjson.dumps(body).replace(b'"args":{}}', b'"args":{}},"thoughtSignature":"c2ln"')
    again = _request(orjson.loads(signed), "m", "gemini-3-pro-preview")
    assert relay_request(again, placeholder="skip")[0] == signed  # a real one is kept


def _kept(body: dict[str, Any]) -> RelayBody:
    return RelayBody("gemini", body, orjson.dumps(body))


def _turn(part: dict[str, Any]) -> dict[str, Any]:
    return {"contents": [{"role": "model", "parts": [part]}]}


def test_what_only_the_translated_path_sends_right_is_found_in_a_body() -> None:
    wrapped = wire_signature(GEMINI.carry("gem", "token"))
    assert translated_only(_kept(_turn({"text": "", "thoughtSignature": wrapped})))
    assert translated_only(_kept(_turn({"functionCall": {"name": "f", "id": "gcall_6765_69"}})))
    assert translated_only(_kept(_turn({"functionResponse": {"name": "f", "id": "mine"}})))
    assert not translated_only(_kept(_turn({"text": "", "thoughtSignature": "c2ln"})))
    # An "id" elsewhere (a schema's property) is no call id.
    schema = {"type": "object", "properties": {"id": {"type": "string"}}}
    tools = {"tools": [{"functionDeclarations": [{"name": "f", "parameters": schema}]}]}
    assert not translated_only(_kept(HI | tools))


REPLIES = sorted(p for p in FIXTURES.glob("reply_*.json") if "encoded" not in p.stem)
"""Google's recorded replies sent whole."""


@pytest.mark.parametrize("fixture", REPLIES, ids=lambda path: path.stem)
def test_a_recorded_reply_reads_as_the_translated_path_reads_it(fixture: Path) -> None:
    raw = fixture.read_bytes()
    relayed = relay_reply(raw, None)
    translated = decode_chat_response(orjson.loads(raw))
    end = relayed[-1]
    assert isinstance(end, ResponseEnd) and end.stop_reason is translated.stop_reason
    assert end.usage == translated.usage
    assert isinstance(relayed[1], Relayed) and relayed[1].data == raw


def test_a_field_the_relay_reads_spelled_in_snake_case_is_translated() -> None:
    """Google takes both spellings and the translation reads both; the relay reads the
    camelCase ones only (google-genai sends ``thinking_level``)."""
    level = {"generationConfig": {"thinkingConfig": {"thinking_level": "MINIMAL"}}}
    assert translated_only(_kept(HI | level))
    assert translated_only(_kept(_turn({"function_call": {"name": "f", "args": {}}})))
    camel = {"generationConfig": {"thinkingConfig": {"thinkingLevel": "MINIMAL"}}}
    assert not translated_only(_kept(HI | camel))

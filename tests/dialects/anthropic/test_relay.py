"""``MessageStreamRelay`` and ``relay_reply`` (dialects/anthropic/relay.py) however the
backend's reads cut its stream: the bytes relayed are the stream's own, whole frames at a
time, and what it read (text, stop reason, usage with the cached tokens) is the same for
every cut and the same as the translated decoder reads; a mapped model name is changed
wherever the frame was cut. And ``sent_as_written`` (dialects/anthropic/request.py):
which bodies may go to an Anthropic backend as the client wrote them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmbridge.core.accumulate import accumulate
from llmbridge.core.errors import BackendError, BackendProtocolError
from llmbridge.core.events import Relayed, ResponseEnd, ResponseStart, StreamEvent
from llmbridge.core.relay import RelayBody
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import StopReason
from llmbridge.dialects.anthropic import decode_chat_request, decode_chat_stream
from llmbridge.dialects.anthropic.as_written import sent_as_written
from llmbridge.dialects.anthropic.relay import MessageStreamRelay, relay_reply, relay_request
from llmbridge.dialects.carried import CARRIED_PREFIX
from tests.dialects.anthropic.sse import aiter_sse, fixture
from tests.dialects.relay_cuts import cut, feed_until_stopped

THINKING = fixture("thinking_then_text")
TOOL_USE = fixture("tool_use")
PING = b"event: ping\ndata: {}\n\n"


def _relay(reads: list[bytes], client_model: str | None = None) -> list[StreamEvent]:
    return feed_until_stopped(MessageStreamRelay(client_model), reads)


async def _translated(data: bytes) -> ResponseEnd:
    """The end the translated path's decoder reads from the same stream."""
    async for event in decode_chat_stream(aiter_sse([data])):
        if isinstance(event, ResponseEnd):
            return event
    raise AssertionError("no end")


@given(st.lists(st.integers(min_value=0, max_value=len(THINKING)), max_size=12))
def test_any_cut_relays_the_same_bytes_and_reads_the_same(points: list[int]) -> None:
    events = _relay(cut(PING + THINKING, points))
    relayed = [e for e in events if isinstance(e, Relayed)]
    assert b"".join(e.data for e in relayed) == PING + THINKING  # the ping held, not lost
    assert all(e.data.endswith(b"\n\n") for e in relayed)  # whole frames only
    assert isinstance(events[0], ResponseStart)  # the start first, whatever came before
    said = "".join(e.text for e in relayed)
    assert said.startswith("Let me solve") and said.endswith("12,231")
    end = events[-1]
    assert isinstance(end, ResponseEnd) and end.stop_reason is StopReason.END_TURN


def test_a_stream_read_a_byte_at_a_time_relays_whole_frames() -> None:
    events = _relay([TOOL_USE[i : i + 1] for i in range(len(TOOL_USE))])
    relayed = [e for e in events if isinstance(e, Relayed)]
    assert b"".join(e.data for e in relayed) == TOOL_USE
    assert len(relayed) == TOOL_USE.count(b"\n\n")  # one event per frame as it ended
    assert isinstance(events[-1], ResponseEnd)


async def test_what_is_read_is_what_the_translated_path_reads() -> None:
    for stream in (THINKING, TOOL_USE, fixture("text_only"), fixture("ping_interleaved")):
        end = _relay([stream])[-1]
        assert isinstance(end, ResponseEnd)
        translated = await _translated(stream)
        # The counts with the cached tokens in (thinking_then_text reads 12 from cache).
        assert (end.usage, end.stop_reason) == (translated.usage, translated.stop_reason)
        assert end.usage.input_tokens is not None


def test_a_tool_call_is_read_for_its_input_and_its_stop() -> None:
    events = _relay([TOOL_USE])
    text = "".join(e.text for e in events if isinstance(e, Relayed))
    assert '"location"' in text  # the tool input streamed: a cut stream's bill
    end = events[-1]
    assert isinstance(end, ResponseEnd) and end.stop_reason is StopReason.TOOL_USE


@given(st.lists(st.integers(min_value=0, max_value=len(THINKING)), max_size=12))
def test_a_mapped_name_is_the_clients_however_cut(points: list[int]) -> None:
    events = _relay(cut(THINKING, points), client_model="public")
    data = b"".join(e.data for e in events if isinstance(e, Relayed))
    assert data == THINKING.replace(b'"model":"claude-sonnet-4-5"', b'"model":"public"')
    assert b'"model":"public"' in data


def test_a_name_spelled_otherwise_is_written_again() -> None:
    spaced = THINKING.replace(b'"model":"claude-sonnet-4-5"', b'"model": "claude-sonnet-4-5"')
    events = _relay([spaced], client_model="public")
    first = next(e for e in events if isinstance(e, Relayed)).data
    start = orjson.loads(first.split(b"\n\n")[0].split(b"data: ", 1)[1])
    assert start["message"]["model"] == "public"


def test_the_backends_in_band_error_is_relayed_and_ends_the_stream() -> None:
    stream = fixture("error_mid_stream")
    events = _relay(cut(stream, [40, 300]))
    relayed = [e for e in events if isinstance(e, Relayed)]
    assert b"".join(e.data for e in relayed) == stream
    error = relayed[-1].error
    assert isinstance(error, BackendError) and error.status_code == 503
    assert not any(isinstance(e, ResponseEnd) for e in events)


def test_an_error_before_message_start_is_raised() -> None:
    overloaded = b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error"}}\n\n'
    with pytest.raises(BackendError) as raised:
        _relay([PING + overloaded])
    assert raised.value.status_code == 503


def test_a_stream_cut_before_message_stop_is_a_protocol_error() -> None:
    relay = MessageStreamRelay(None)
    relay.feed(fixture("truncated"))
    with pytest.raises(BackendProtocolError, match="ended before message_stop"):
        relay.end()


def test_crlf_frames_are_relayed_as_they_came() -> None:
    crlf = THINKING.replace(b"\n", b"\r\n")
    events = _relay(cut(crlf, [7, 150, 151, 152]))
    assert b"".join(e.data for e in events if isinstance(e, Relayed)) == crlf
    assert isinstance(events[-1], ResponseEnd)


def test_frames_without_their_event_line_are_read_by_their_type() -> None:
    bare = b"\n".join(line for line in THINKING.split(b"\n") if not line.startswith(b"event:"))
    events = _relay([bare])
    assert b"".join(e.data for e in events if isinstance(e, Relayed)) == bare
    end = events[-1]
    assert isinstance(end, ResponseEnd) and end.usage.output_tokens == 60


def test_what_follows_message_stop_is_not_passed_on() -> None:
    events = _relay([THINKING + PING])
    assert b"".join(e.data for e in events if isinstance(e, Relayed)) == THINKING


REPLY = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-x",
    "content": [
        {"type": "thinking", "thinking": "hm", "signature": "sig"},
        {"type": "text", "text": "Hi"},
    ],
    "stop_reason": "max_tokens",
    "stop_sequence": None,
    "usage": {"input_tokens": 3, "output_tokens": 2, "cache_read_input_tokens": 10},
}


def test_a_reply_sent_whole_is_read_and_renamed_only_where_mapped() -> None:
    raw = orjson.dumps(REPLY)
    start, relayed, end = relay_reply(raw, None)
    assert isinstance(relayed, Relayed) and relayed.data is raw and relayed.text == "hmHi"
    assert isinstance(start, ResponseStart) and start.input_tokens == 13
    assert isinstance(end, ResponseEnd) and end.stop_reason is StopReason.MAX_TOKENS
    _, renamed, _ = relay_reply(raw, "public")
    assert isinstance(renamed, Relayed) and orjson.loads(renamed.data) == {
        **REPLY,
        "model": "public",
    }


def _relayable(body: dict[str, Any]) -> ChatRequest:
    raw = orjson.dumps(body)
    return replace(decode_chat_request(body), relay=RelayBody("anthropic", body, raw))


def test_the_body_goes_as_it_came_unless_the_route_maps_the_name() -> None:
    body = {"model": "claude-x", "max_tokens": 8, "messages": [{"role": "user", "content": "a"}]}
    chat = _relayable(body)
    assert relay_request(chat) == (chat.relay.raw, None)  # type: ignore[union-attr]
    sent, client_model = relay_request(replace(chat, model="claude-backend"))
    assert orjson.loads(sent) == {**body, "model": "claude-backend"}
    assert client_model == "claude-x"


USER = {"role": "user", "content": "hi"}
SIGNED = {"type": "thinking", "thinking": "t", "signature": "EqQBsigned"}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}


def _body(*messages: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 4096, "messages": list(messages or [USER]), **more}


@pytest.mark.parametrize(
    "body",
    [
        _body(),
        _body(system=[{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}]),
        _body(
            USER,
            {"role": "assistant", "content": [SIGNED, CALL]},
            {"role": "user", "content": [RESULT, {"type": "text", "text": "more"}]},
            thinking={"type": "enabled", "budget_tokens": 1024},
        ),
        _body(thinking={"type": "adaptive"}),
        _body(tools=[{"name": "t", "input_schema": {"type": "object"}, "defer_loading": True}]),
        _body(
            USER,
            {
                "role": "system",
                "content": [{"type": "text", "text": "env"}],
                "output_config": {"effort": "low"},
            },
        ),
    ],
    ids=["plain", "cached-system", "signed-tool-turn", "adaptive", "deferred-tool", "system-turn"],
)
def test_what_an_anthropic_backend_takes_as_written(body: dict[str, Any]) -> None:
    assert sent_as_written(body)


ASSISTANT_UNSIGNED = {"role": "assistant", "content": [{**SIGNED, "signature": ""}, CALL]}


@pytest.mark.parametrize(
    "body",
    [
        {k: v for k, v in _body().items() if k != "max_tokens"},
        _body(USER, {"role": "assistant", "content": [SIGNED]}, USER, mcp_servers=[]),
        _body(system=""),
        _body(USER, {"role": "system", "content": []}),  # settings alone relay: none here
        _body(USER, USER),
        _body({"role": "user", "content": ""}),
        _body({"role": "user", "content": [{"type": "text", "text": ""}]}),
        _body(USER, ASSISTANT_UNSIGNED, {"role": "user", "content": [RESULT]}),
        _body(
            USER,
            {"role": "assistant", "content": [{**SIGNED, "signature": CARRIED_PREFIX + "x"}]},
            USER,
        ),
        _body(
            USER,
            {"role": "assistant", "content": [{"type": "text", "text": "x"}, CALL]},
            {"role": "user", "content": [RESULT]},
            thinking={"type": "enabled", "budget_tokens": 2048},
        ),
        _body(thinking={"type": "enabled", "budget_tokens": 512}),
        _body(thinking={"type": "enabled", "budget_tokens": 4096}),
        _body(
            USER,
            {"role": "assistant", "content": [{**CALL, "id": "call.1"}]},
            {"role": "user", "content": [{**RESULT, "tool_use_id": "call.1"}]},
        ),
        _body(
            USER,
            {"role": "assistant", "content": [CALL]},
            {"role": "user", "content": [{"type": "text", "text": "x"}, RESULT]},
        ),
        _body(
            {
                "role": "user",
                "content": [{"type": "image", "source": {"type": "url", "url": "data:image/png,"}}],
            }
        ),
    ],
    ids=[
        "no-max-tokens",
        "mcp-servers",
        "empty-system",
        "empty-system-turn",
        "turns-merged",
        "empty-turn",
        "empty-text",
        "unsigned-thinking",
        "carried-signature",
        "tool-turn-without-thinking",
        "budget-too-small",
        "budget-not-under-max",
        "unsafe-tool-id",
        "tool-result-last",
        "data-url-image",
    ],
)
def test_what_the_translation_rewrites_is_translated(body: dict[str, Any]) -> None:
    assert not sent_as_written(body)


def test_claude_codes_newest_request_goes_as_written() -> None:
    """Claude Code 2.1.332's captured request (a system turn with its per-turn
    settings, deferred tools, context editing, cache breakpoints) relays, and so does
    2.1.330's, whose system turn carries settings alone (as ``--bare`` sends it still):
    Anthropic takes both as written."""
    requests = Path(__file__).parents[2] / "fixtures" / "requests"
    newest = orjson.loads((requests / "claude_code_2_1_332_messages.json").read_bytes())
    older = orjson.loads((requests / "claude_code_2_1_330_messages.json").read_bytes())
    assert sent_as_written(newest) and sent_as_written(older)


async def test_a_relayed_reply_accumulates_to_the_translated_one() -> None:
    """The events relayed from a stream make the same reply (its usage and stop) as
    the translated decoder's, so ``Exchange.collect`` records alike on both paths."""

    async def events(items: list[StreamEvent]) -> Any:
        for item in items:
            if not isinstance(item, Relayed):
                yield item

    relayed = await accumulate(events(_relay([THINKING])))
    translated = await accumulate(decode_chat_stream(aiter_sse([THINKING])))
    assert (relayed.usage, relayed.stop_reason) == (translated.usage, translated.stop_reason)

"""Compaction and carried items in the Responses dialect, both sides, as Codex sends them.

The bodies are Codex 0.171.0's own (``tests/fixtures/requests/codex_0_171_0_websocket
_frames.json``: a warm-up, a turn, the ``compaction_trigger`` of its remote compaction
and the turn after it, which carries the ``compaction`` item back)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.events import PartEnd, ResponseEnd, ResponseStart, StreamEvent
from llmbridge.core.messages import Message, TextPart, ThinkingPart
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.dialects.framing import aiter_sse
from llmbridge.dialects.responses.carried import (
    PROVIDER,
    carried_kind,
    carry,
    carry_item,
    is_compaction,
    recover_item,
)
from llmbridge.dialects.responses.compaction import (
    compacted_response,
    encode_compaction_response,
    encode_compaction_stream,
    kept_messages,
)
from llmbridge.dialects.responses.decode import decode_chat_response, decode_chat_stream
from llmbridge.dialects.responses.encode import encode_chat_request
from llmbridge.dialects.responses.reasoning import seal_reasoning
from llmbridge.dialects.responses.request import decode_chat_request
from llmbridge.dialects.responses.response import encode_chat_response
from llmbridge.dialects.responses.summary import SUMMARY_INTRO, open_summary, seal_summary

CAPTURED = json.loads(
    (
        Path(__file__).parents[2] / "fixtures" / "requests" / "codex_0_171_0_websocket_frames.json"
    ).read_text()
)
FRAMES: list[dict[str, Any]] = CAPTURED["frames"]
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def body(frame: dict[str, Any]) -> dict[str, Any]:
    """A frame as the ``POST /v1/responses`` body it stands for (a copy)."""
    copied: dict[str, Any] = copy.deepcopy(frame)
    return {k: v for k, v in copied.items() if k not in ("type", "previous_response_id")}


def test_codex_frames_are_what_this_module_says() -> None:
    """The capture: a warm-up, a chained turn, the trigger, and the item sent back."""
    prewarm, turn, trigger, after = FRAMES
    assert prewarm["generate"] is False
    assert turn["previous_response_id"] and trigger["previous_response_id"]
    assert [item["type"] for item in trigger["input"]][-1] == "compaction_trigger"
    assert after["input"][-1]["type"] == "compaction"
    assert "previous_response_id" not in after


def test_the_trigger_asks_for_compaction() -> None:
    chat = decode_chat_request(body(FRAMES[2]))
    assert chat.compaction
    # The trigger itself is no message: the conversation before it is what is compacted.
    assert chat.messages[-1].role == "tool"


def test_a_trigger_that_is_not_last_is_a_400_naming_it() -> None:
    request = body(FRAMES[2])
    request["input"] = [*request["input"], {"role": "user", "content": "and then"}]
    with pytest.raises(InvalidRequestError) as error:
        decode_chat_request(request)
    assert error.value.param == "input.1"


def test_llmbridge_summary_comes_back_as_a_user_message_where_the_item_was() -> None:
    after = body(FRAMES[3])
    after["input"][-1] = {"type": "compaction", "encrypted_content": seal_summary("It was.")}
    chat = decode_chat_request(after)
    assert not chat.compaction
    assert chat.messages[-1] == Message("user", (TextPart(SUMMARY_INTRO + "It was."),))


def test_another_servers_compaction_is_left_out_and_counted() -> None:
    chat = decode_chat_request(body(FRAMES[3]))  # the capture's own blob: no llmbridge item
    assert chat.messages[-1].role == "user"
    assert chat.provider_details is not None
    assert chat.provider_details["responses"]["dropped_compaction"] == 1


def test_a_backends_compaction_round_trips_byte_for_byte() -> None:
    """Decoded from the server, sealed for the client, opened from the client's next
    request and encoded for the same backend: the item the server gave, id left out."""
    item = {"id": "cmp_1", "type": "compaction", "encrypted_content": "gAAAA-summary=="}
    reply = decode_chat_response(
        {"id": "resp_1", "status": "completed", "output": [item], "usage": {}}, origin="up"
    )
    (part,) = reply.message.parts
    assert isinstance(part, ThinkingPart) and part.text == "" and part.provider == PROVIDER
    assert is_compaction(part.signature)
    chat = ChatRequest(model="m", messages=(Message("user", (TextPart("hi"),)),))
    sent_back = encode_chat_response(reply, chat)["output"][0]
    assert sent_back["type"] == "compaction"
    assert sent_back["encrypted_content"] == seal_reasoning(part)
    after = body(FRAMES[3])
    after["input"][-1] = sent_back
    request = decode_chat_request(after)
    assert encode_chat_request(request, origin="up")["input"][-1] == {
        "type": "compaction",
        "encrypted_content": "gAAAA-summary==",
    }
    # Any other backend is not sent it (serving leaves it out and says so).
    assert all(i["type"] != "compaction" for i in encode_chat_request(request, origin="x")["input"])


def test_reasoning_items_go_back_exactly_as_the_server_gave_them() -> None:
    item = {
        "id": "rs_9",
        "type": "reasoning",
        "status": "completed",
        "summary": [
            {"type": "summary_text", "text": "First."},
            {"type": "summary_text", "text": "Second."},
        ],
        "content": [{"type": "reasoning_text", "text": "raw"}],
        "encrypted_content": "gAAAA-blob",
    }
    signature = carry_item("up", item)
    exact = {key: value for key, value in item.items() if key not in ("id", "status")}
    assert recover_item(signature, "up") == exact
    assert recover_item(signature, "other") is None
    assert carried_kind(signature) == ("reasoning", "up")
    request = ChatRequest(
        model="m",
        messages=(
            Message("user", (TextPart("q"),)),
            Message("assistant", (ThinkingPart("First.\n\nSecond.", signature=signature),)),
        ),
    )
    assert encode_chat_request(request, origin="up")["input"][1] == exact


def test_signatures_of_the_first_form_are_still_read() -> None:
    signature = carry("up", "gAAAA-old")
    assert carried_kind(signature) == ("reasoning", "up")
    assert recover_item(signature, "up", "thought") == {
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "thought"}],
        "encrypted_content": "gAAAA-old",
    }


def test_a_compaction_request_ends_with_codex_trigger_for_a_native_backend() -> None:
    chat = decode_chat_request(body(FRAMES[2]))
    sent = encode_chat_request(chat, origin="up")
    assert sent["input"][-1] == {"type": "compaction_trigger"}
    assert sent["prompt_cache_key"] == FRAMES[2]["prompt_cache_key"]


def test_summary_tokens_are_opaque_and_checked() -> None:
    sealed = seal_summary("Ünïcode summary")
    assert open_summary(sealed) == "Ünïcode summary"
    assert open_summary("gAAAA-theirs") is None
    assert open_summary(sealed[:-3] + "!!!") is None


def _reply(parts: tuple[Any, ...]) -> ChatResponse:
    return ChatResponse(
        id="resp_x",
        model="m",
        message=Message("assistant", parts),
        stop_reason=StopReason.END_TURN,
        usage=Usage(input_tokens=50, output_tokens=7),
        created=1.0,
    )


def test_compact_answers_the_users_messages_then_one_item() -> None:
    frame = body(FRAMES[3])
    kept = kept_messages(frame["input"])
    assert [item["role"] for item in kept] == ["user", "user"]
    answer = compacted_response(_reply((TextPart("  The summary. "),)), kept)
    assert answer["object"] == "response.compaction"
    assert answer["output"][:-1] == kept
    item = answer["output"][-1]
    assert item["type"] == "compaction" and item["id"].startswith("cmp_")
    assert open_summary(item["encrypted_content"]) == "The summary."
    assert answer["usage"]["total_tokens"] == 57


async def test_the_trigger_stream_is_one_compaction_item_valid_for_the_sdk() -> None:
    chat = decode_chat_request({**body(FRAMES[2]), "stream": True})
    ended: list[dict[str, Any]] = []

    async def events() -> Any:
        yield ResponseStart("resp_1", "m", 1.0)
        yield PartEnd(0, TextPart("Summary."))
        yield ResponseEnd(StopReason.END_TURN, Usage(input_tokens=3, output_tokens=2))

    chunks = [c async for c in encode_compaction_stream(events(), chat, ended.append)]

    async def source() -> Any:
        yield b"".join(chunks)

    sent = [json.loads(event.data) async for event in aiter_sse(source())]
    for event in sent:
        EVENTS.validate_python(event)
    assert [e["type"] for e in sent] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    (item,) = sent[-1]["response"]["output"]
    assert open_summary(item["encrypted_content"]) == "Summary."
    assert ended == [sent[-1]["response"]]
    whole = encode_compaction_response(_reply((TextPart("Summary."),)), chat)
    assert open_summary(whole["output"][0]["encrypted_content"]) == "Summary."


async def test_a_compaction_item_from_a_server_decodes_whatever_the_chunking() -> None:
    item = {"id": "cmp_1", "type": "compaction_summary", "encrypted_content": "gAAAA-x"}
    sse = (
        b'event: response.created\ndata: {"type":"response.created","response":{"id":"r"}}\n\n'
        b'event: response.output_item.added\ndata: {"type":"response.output_item.added",'
        b'"output_index":0,"item":' + json.dumps(item).encode() + b"}\n\n"
        b'event: response.output_item.done\ndata: {"type":"response.output_item.done",'
        b'"output_index":0,"item":' + json.dumps(item).encode() + b"}\n\n"
        b'event: response.completed\ndata: {"type":"response.completed","response":'
        b'{"id":"r","usage":{"input_tokens":9,"output_tokens":1}}}\n\n'
    )

    async def chunks() -> Any:
        for start in range(0, len(sse), 5):
            yield sse[start : start + 5]

    events: list[StreamEvent] = [
        e async for e in decode_chat_stream(aiter_sse(chunks()), origin="up")
    ]
    ends = [e.part for e in events if isinstance(e, PartEnd)]
    assert len(ends) == 1 and isinstance(ends[0], ThinkingPart)
    assert recover_item(ends[0].signature, "up") == {
        "type": "compaction",
        "encrypted_content": "gAAAA-x",
    }

"""What Claude Code 2.1.330 sends, decoded field by field (the golden request is
``tests/fixtures/requests/claude_code_2_1_330_messages.json``, a copy of
shared/reference/captured/claude-code-2.1.330-messages-request.json): system turns
inside ``messages``, adaptive thinking with ``display: "omitted"``, ``output_config``
effort (per request and per turn), and tool search (``defer_loading``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from llmbridge.core.events import (
    PartDelta,
    PartEnd,
    PartStart,
    ResponseEnd,
    ResponseStart,
    SignatureDelta,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
)
from llmbridge.core.messages import Message, TextPart, ThinkingPart
from llmbridge.core.request import ThinkingConfig
from llmbridge.core.response import ChatResponse, StopReason
from llmbridge.dialects.anthropic import (
    decode_chat_request,
    decode_count_tokens_request,
    encode_chat_request,
    encode_chat_response,
    encode_chat_stream,
)
from tests.dialects.ollama.helpers import aiter_of, collect

CAPTURED = Path(__file__).parents[2] / "fixtures" / "requests" / "claude_code_2_1_330_messages.json"

SEARCH_TOOL = {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}
DEFERRED = {
    "name": "mcp__notes__search",
    "description": "Search the user's notes",
    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
    "defer_loading": True,
}


def captured() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(CAPTURED.read_text(encoding="utf-8"))
    return loaded


def with_tool_search(body: dict[str, Any]) -> dict[str, Any]:
    """The captured request as Claude Code sends it with tool search on: the search
    tool first, a deferred (MCP) tool between the loaded ones."""
    body = copy.deepcopy(body)
    body["tools"] = [SEARCH_TOOL, body["tools"][0], DEFERRED, *body["tools"][1:]]
    return body


# -- the captured request -----------------------------------------------------------


def test_the_captured_request_decodes_with_nothing_dropped_silently() -> None:
    body = captured()
    req = decode_chat_request(body)
    # The empty system turn (it only carried output_config) is no message; the
    # system blocks are one system message, the user's text follows.
    assert [m.role for m in req.messages] == ["system", "user"]
    assert req.messages[0].text.startswith("x-anthropic-billing-header:")
    assert req.messages[1].text == "say hi"
    # Adaptive thinking at the requested effort, for every backend.
    assert req.thinking == ThinkingConfig(enabled=True, effort="medium")
    assert [t.name for t in req.tools] == ["Bash", "Edit", "Read"]
    assert req.params.max_tokens == 128000 and req.stream is True
    # What only an Anthropic backend can use rides along, as sent.
    assert req.provider_details == {
        "anthropic": {
            "thinking": {"type": "adaptive", "display": "omitted"},
            "output_config": {"effort": "medium"},
            "context_management": body["context_management"],
            "metadata": body["metadata"],
        }
    }


def test_the_captured_request_reaches_an_anthropic_backend_as_sent() -> None:
    body = captured()
    encoded = encode_chat_request(decode_chat_request(body))
    for field in ("model", "tools", "max_tokens", "thinking", "output_config", "stream"):
        assert encoded[field] == body[field], field
    assert encoded["context_management"] == body["context_management"]
    assert encoded["metadata"] == body["metadata"]
    # The system blocks are joined (every other dialect has one system string) and the
    # settings-only system turn is not repeated: its effort is the request's.
    assert [m["role"] for m in encoded["messages"]] == ["user"]


# -- system turns and effort --------------------------------------------------------


def test_a_per_turn_effort_overrides_the_requests() -> None:
    body = captured()
    body["output_config"] = {"effort": "high"}
    body["messages"][1]["output_config"] = {"effort": "low"}
    req = decode_chat_request(body)
    assert req.thinking is not None and req.thinking.effort == "low"
    assert req.provider_details is not None
    assert req.provider_details["anthropic"]["output_config"] == {"effort": "low"}
    assert encode_chat_request(req)["output_config"] == {"effort": "low"}


def test_a_system_turn_with_text_stays_in_place() -> None:
    body = captured()
    body["messages"] = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "system", "content": [{"type": "text", "text": "Now be brief."}]},
        {"role": "user", "content": "second"},
    ]
    req = decode_chat_request(body)
    assert [(m.role, m.text) for m in req.messages[1:]] == [
        ("user", "first"),
        ("assistant", "ok"),
        ("system", "Now be brief."),
        ("user", "second"),
    ]


def test_effort_reaches_budgeted_thinking_too() -> None:
    body = captured()
    body["thinking"] = {"type": "enabled", "budget_tokens": 4096}
    body["output_config"] = {"effort": "xhigh"}
    del body["messages"][1]
    req = decode_chat_request(body)
    assert req.thinking == ThinkingConfig(enabled=True, budget_tokens=4096, effort="high")


# -- tool search --------------------------------------------------------------------


def test_deferred_tools_and_the_search_tool_are_withheld_from_other_backends() -> None:
    req = decode_chat_request(with_tool_search(captured()))
    assert [t.name for t in req.tools] == ["Bash", "Edit", "Read"]
    assert req.provider_details is not None
    withheld = req.provider_details["anthropic"]["withheld_tools"]
    assert withheld == [{"index": 0, "tool": SEARCH_TOOL}, {"index": 2, "tool": DEFERRED}]


def test_an_anthropic_backend_gets_the_tools_back_in_their_places() -> None:
    body = with_tool_search(captured())
    encoded = encode_chat_request(decode_chat_request(body))
    assert encoded["tools"] == body["tools"]
    assert "withheld_tools" not in encoded


def test_only_deferred_tools_means_no_tools_for_other_backends() -> None:
    body = captured()
    body["tools"] = [SEARCH_TOOL, DEFERRED]
    req = decode_chat_request(body)
    assert req.tools == ()
    assert encode_chat_request(req)["tools"] == [SEARCH_TOOL, DEFERRED]


SEARCHED = {"type": "tool_reference", "tool_name": DEFERRED["name"]}
OTHER_DEFERRED = {**DEFERRED, "name": "mcp__notes__delete"}


def after_a_search(body: dict[str, Any]) -> dict[str, Any]:
    """Claude Code's request after its ToolSearch loaded ``DEFERRED``: the call, then
    the result, a ``tool_reference`` to it (Claude Code 2.1.330 on a custom base URL)."""
    body = with_tool_search(body)
    body["tools"].append(OTHER_DEFERRED)
    call = {"type": "tool_use", "id": "toolu_1", "name": "ToolSearch", "input": {"query": "q"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [SEARCHED]}
    loaded = {"type": "text", "text": "Tool loaded.", "cache_control": {"type": "ephemeral"}}
    body["messages"] += [
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [result, loaded]},
    ]
    return body


def test_a_deferred_tool_the_search_loaded_reaches_every_backend() -> None:
    req = decode_chat_request(after_a_search(captured()))
    # In its place among the loaded tools; the other deferred one stays withheld.
    assert [t.name for t in req.tools] == ["Bash", DEFERRED["name"], "Edit", "Read"]
    assert req.tools[1].input_schema == DEFERRED["input_schema"]
    assert req.provider_details is not None
    withheld = req.provider_details["anthropic"]["withheld_tools"]
    assert [item["tool"]["name"] for item in withheld] == [
        SEARCH_TOOL["name"],
        "mcp__notes__delete",
    ]
    # The reference reads as text in the tool's result.
    tool_messages = [m for m in req.messages if m.role == "tool"]
    assert [m.parts[0].content for m in tool_messages] == [f"Tool loaded: {DEFERRED['name']}"]


def test_an_anthropic_backend_gets_the_search_result_as_sent() -> None:
    body = after_a_search(captured())
    encoded = encode_chat_request(decode_chat_request(body))
    assert encoded["tools"] == body["tools"]  # defer_loading kept, every tool in its place
    user_turn = encoded["messages"][-1]["content"]
    assert user_turn[0] == {"type": "tool_result", "tool_use_id": "toolu_1", "content": [SEARCHED]}


def test_a_reference_to_a_tool_not_deferred_changes_no_tool() -> None:
    body = after_a_search(captured())
    body["messages"][-1]["content"][0]["content"] = [
        {"type": "tool_reference", "tool_name": "Bash"}
    ]
    req = decode_chat_request(body)
    assert [t.name for t in req.tools] == ["Bash", "Edit", "Read"]


def test_count_tokens_leaves_deferred_tools_out_as_the_api_does() -> None:
    body = with_tool_search(captured())
    del body["max_tokens"], body["stream"], body["metadata"]
    req = decode_count_tokens_request(body)
    assert [t.name for t in req.tools] == ["Bash", "Edit", "Read"]


# -- thinking display ---------------------------------------------------------------

THINKING = ThinkingPart("a local model's reasoning")
ANSWER = TextPart("hi")


@pytest.mark.parametrize(("display", "shown"), [("omitted", ""), ("summarized", THINKING.text)])
def test_display_decides_whether_thinking_text_is_sent(display: str, shown: str) -> None:
    body = captured()
    body["thinking"] = {"type": "adaptive", "display": display}
    req = decode_chat_request(body)
    reply = ChatResponse(
        id="r",
        model="m",
        message=Message("assistant", (THINKING, ANSWER)),
        stop_reason=StopReason.END_TURN,
    )
    content = encode_chat_response(reply, req)["content"]
    assert content == [
        {"type": "thinking", "thinking": shown, "signature": ""},
        {"type": "text", "text": "hi"},
    ]


async def test_omitted_thinking_streams_as_a_block_without_its_text() -> None:
    req = decode_chat_request(captured())
    signed = ThinkingPart("secret", signature="sig")
    events: list[StreamEvent] = [
        ResponseStart(id="r", model="m", created=1.0),
        PartStart(0, ThinkingPart("")),
        PartDelta(0, ThinkingDelta("secret")),
        PartDelta(0, SignatureDelta("sig")),
        PartEnd(0, signed),
        PartStart(1, TextPart("")),
        PartDelta(1, TextDelta("hi")),
        PartEnd(1, ANSWER),
        ResponseEnd(stop_reason=StopReason.END_TURN),
    ]
    wire = b"".join(await collect(encode_chat_stream(aiter_of(events), req))).decode()
    data = [json.loads(line[6:]) for line in wire.splitlines() if line.startswith("data: ")]
    deltas = [d["delta"] for d in data if d["type"] == "content_block_delta"]
    assert deltas == [
        {"type": "signature_delta", "signature": "sig"},
        {"type": "text_delta", "text": "hi"},
    ]
    starts = [d["content_block"]["type"] for d in data if d["type"] == "content_block_start"]
    assert starts == ["thinking", "text"]
    assert "secret" not in wire

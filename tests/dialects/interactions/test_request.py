"""Interactions create bodies to ``ChatRequest`` (the front) and ``ChatRequest`` to
Google's create body (the ``gemini_interactions`` backend), as data: each field's
mapping, and each body llmbridge refuses with the field it names."""

from __future__ import annotations

from typing import Any

import pytest

from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.messages import (
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
)
from llmbridge.core.request import ChatRequest, ResponseFormat, ThinkingConfig
from llmbridge.core.request_limits import RequestLimits
from llmbridge.dialects.gemini.response import wire_signature
from llmbridge.dialects.interactions import decode_chat_request, encode_chat_request
from llmbridge.dialects.interactions.continuation import input_bytes
from llmbridge.dialects.interactions.steps import INTERACTIONS

PIXEL = "iVBORw0KGgo="
TOOL = {"type": "function", "name": "lookup", "parameters": {"type": "OBJECT"}}


def decode(**body: Any) -> ChatRequest:
    return decode_chat_request({"model": "m", **body})


def test_input_forms_are_one_conversation() -> None:
    assert decode(input="hi").messages == (Message("user", (TextPart("hi"),)),)
    one = decode(input={"type": "image", "data": PIXEL, "mime_type": "image/png"})
    assert one.messages == (Message("user", (ImagePart(data=PIXEL, media_type="image/png"),)),)
    contents = decode(
        input=[{"type": "text", "text": "look"}, {"type": "image", "uri": "https://x/y.png"}]
    )
    assert contents.messages == (
        Message("user", (TextPart("look"), ImagePart(url="https://x/y.png"))),
    )
    signature = wire_signature("llmbridge.interactions.v1.Zw.tok")  # another server's, wrapped
    steps = decode(
        system_instruction="sys",
        input=[
            {"type": "user_input", "content": [{"type": "text", "text": "q"}]},
            {"type": "thought", "signature": signature, "summary": [{"type": "text", "text": "t"}]},
            {"type": "model_output", "content": [{"type": "text", "text": "calling"}]},
            {"type": "function_call", "id": "c1", "name": "lookup", "arguments": {"a": 1}},
            {
                "type": "function_result",
                "call_id": "c1",
                "result": [{"type": "text", "text": "r"}, {"type": "image", "data": PIXEL}],
            },
            {"type": "user_input", "content": [{"type": "text", "text": "and?"}]},
        ],
    )
    assert steps.messages == (
        Message("system", (TextPart("sys"),)),
        Message("user", (TextPart("q"),)),
        Message(
            "assistant",
            (
                ThinkingPart("t", signature="llmbridge.interactions.v1.Zw.tok"),
                TextPart("calling"),
                ToolCallPart("c1", "lookup", {"a": 1}),
            ),
        ),
        Message("tool", (ToolResultPart("c1", "r", name="lookup"),)),
        # The image a function returned goes to the user turn after the results.
        Message("user", (ImagePart(data=PIXEL), TextPart("and?"))),
    )


def test_generation_config_tools_and_formats() -> None:
    request = decode(
        input="hi",
        stream=True,
        tools=[TOOL, {"type": "function", "name": "other"}],
        generation_config={
            "temperature": 1,
            "top_p": 0.5,
            "seed": 9,
            "stop_sequences": ["x"],
            "max_output_tokens": 10,
            "thinking_level": "xhigh",
            "tool_choice": {"allowed_tools": {"mode": "any", "tools": ["lookup"]}},
            "image_config": {"aspect_ratio": "1:1"},
        },
        response_format={"type": "text", "schema": {"type": "object"}},
    )
    assert request.stream
    params = request.params
    assert (params.temperature, params.top_p, params.seed) == (1, 0.5, 9)
    assert (params.stop, params.max_tokens) == (("x",), 10)
    assert request.thinking == ThinkingConfig(enabled=True, effort="max")
    assert request.tool_choice == ToolChoice("tool", name="lookup")
    assert [t.name for t in request.tools] == ["lookup", "other"]
    assert request.tools[0].input_schema == {"type": "object"}  # Google's upper case, lowered
    assert request.tools[1].input_schema == {"type": "object", "properties": {}}
    assert request.response_format == ResponseFormat(type="json_schema", schema={"type": "object"})
    # What the core does not model rides along for a Google backend.
    assert request.provider_details == {
        "interactions": {"generation_config": {"image_config": {"aspect_ratio": "1:1"}}}
    }
    assert decode(input="hi", response_mime_type="application/json").response_format == (
        ResponseFormat(type="json")
    )
    allowed = decode(
        input="hi",
        tools=[TOOL, {"type": "function", "name": "other"}],
        generation_config={"tool_choice": {"allowed_tools": {"mode": "auto", "tools": ["other"]}}},
    )
    assert [t.name for t in allowed.tools] == ["other"]
    assert allowed.tool_choice == ToolChoice("auto")


REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"input": "hi", "model": None}, "model"),
    ({"input": []}, "input"),
    (
        {"input": [{"type": "user_input", "content": [{"type": "video", "uri": "x"}]}]},
        "input.0.content.0",
    ),
    ({"input": [{"type": "image"}]}, "input.0"),
    ({"input": [{"type": "image", "data": "not base64!"}]}, "input.0.data"),
    ({"input": [{"type": "function_call", "id": "c", "name": "f"}]}, "input.0.arguments"),
    ({"input": "hi", "tools": [{"type": "code_execution"}]}, "tools.0.type"),
    ({"input": "hi", "tools": [{"type": "function"}]}, "tools.0.name"),
    ({"input": "hi", "agent_config": {"type": "dynamic"}}, "agent_config"),
    ({"input": "hi", "cached_content": "cachedContents/x"}, "cached_content"),
    ({"input": "hi", "response_modalities": ["text", "image"]}, "response_modalities.1"),
    ({"input": "hi", "response_format": {"type": "audio"}}, "response_format.type"),
    (
        {"input": "hi", "response_format": {"type": "text", "mime_type": "text/x.enum"}},
        "response_format.mime_type",
    ),
    (
        {"input": "hi", "generation_config": {"thinking_summaries": "all"}},
        "generation_config.thinking_summaries",
    ),
    (
        {"input": "hi", "generation_config": {"tool_choice": "sometimes"}},
        "generation_config.tool_choice",
    ),
    (
        {
            "input": "hi",
            "tools": [TOOL],
            "generation_config": {"tool_choice": {"allowed_tools": {"tools": ["nope"]}}},
        },
        "generation_config.tool_choice.allowed_tools.tools.0",
    ),
    ({"input": "hi", "generation_config": {"temperature": "hot"}}, "generation_config.temperature"),
]


@pytest.mark.parametrize(("body", "param"), REFUSED)
def test_what_llmbridge_cannot_do_is_a_400_naming_the_field(
    body: dict[str, Any], param: str
) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        decode_chat_request({"model": "m", **body})
    assert caught.value.status_code == 400
    assert caught.value.param == param, caught.value.message


def test_counts_over_the_limits_are_refused_before_validation() -> None:
    limits = RequestLimits(max_messages=2, max_tools=1, max_parts_per_message=1)
    texts = [{"type": "text", "text": "x"}] * 2
    for body, param in (
        ({"input": [{"type": "text", "text": "x"}] * 3}, "input"),
        ({"input": "hi", "tools": [TOOL, TOOL]}, "tools"),
        ({"input": [{"type": "user_input", "content": texts}]}, "input.0.content"),
    ):
        with pytest.raises(InvalidRequestError) as caught:
            decode_chat_request({"model": "m", **body}, limits)
        assert caught.value.param == param


def test_the_backend_body_is_streamed_unstored_and_carries_what_rode_along() -> None:
    front = decode(
        input="hi",
        safety_settings=[{"category": "HARM_CATEGORY_HATE_SPEECH", "threshold": "BLOCK_NONE"}],
        generation_config={"image_config": {"aspect_ratio": "1:1"}, "thinking_level": "low"},
        tools=[TOOL],
    )
    body = encode_chat_request(front, origin="next")
    assert body == {
        "model": "m",
        "input": [{"type": "user_input", "content": [{"type": "text", "text": "hi"}]}],
        "stream": True,
        "store": False,
        "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}],
        "generation_config": {
            "thinking_level": "low",
            "thinking_summaries": "auto",
            "image_config": {"aspect_ratio": "1:1"},
        },
        "safety_settings": [{"category": "HARM_CATEGORY_HATE_SPEECH", "threshold": "BLOCK_NONE"}],
    }
    # Thinking off is Google's least thinking; a named tool its allowed_tools.
    off = ChatRequest(
        model="m",
        messages=(Message("user", (TextPart("hi"),)),),
        thinking=ThinkingConfig(enabled=False),
        tool_choice=ToolChoice("tool", name="lookup"),
    )
    assert encode_chat_request(off)["generation_config"] == {
        "thinking_level": "minimal",
        "tool_choice": {"allowed_tools": {"mode": "any", "tools": ["lookup"]}},
    }


def test_only_this_backends_signatures_go_back_to_google() -> None:
    mine = ThinkingPart("mine", signature=INTERACTIONS.carry("next", "QUJD"))
    theirs = ThinkingPart("theirs", signature=INTERACTIONS.carry("elsewhere", "WFla"))
    anthropic = ThinkingPart("claude", signature="EqQBCkYIBxgCKkA")
    request = ChatRequest(
        model="m",
        messages=(
            Message("user", (TextPart("q"),)),
            Message("assistant", (anthropic, theirs, mine, TextPart("a"))),
            Message("user", (TextPart("again"),)),
        ),
    )
    steps = encode_chat_request(request, origin="next")["input"]
    assert steps[1:3] == [
        {"type": "thought", "signature": "QUJD", "summary": [{"type": "text", "text": "mine"}]},
        {"type": "model_output", "content": [{"type": "text", "text": "a"}]},
    ]


@pytest.mark.parametrize("kind", [{}, [], 3, None])
def test_an_input_whose_type_is_not_a_string_is_measured_and_refused(kind: object) -> None:
    # The fuzzer's body (a 500: an unhashable type looked up in the content types).
    step = {"call_id": "", "result": "", "type": kind}
    assert input_bytes(step) > 0
    with pytest.raises(InvalidRequestError):
        decode_chat_request({"model": "m", "input": step}, RequestLimits())

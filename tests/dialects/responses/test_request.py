"""Decoding Responses bodies: the mapping docs/RESPONSES.md describes, field by field."""

from __future__ import annotations

from typing import Any

import pytest

from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.messages import ImagePart, TextPart, ToolCallPart, ToolChoice
from llmbridge.core.request import ThinkingConfig
from llmbridge.core.request_limits import RequestLimits
from llmbridge.dialects.responses.request import decode_chat_request


def decode(**body: Any) -> Any:
    return decode_chat_request({"model": "m", **body})


def test_roles_instructions_and_assistant_turns() -> None:
    request = decode(
        instructions="Be brief.",
        input=[
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "d"}],
            },
            {"role": "system", "content": "s"},
            {
                "role": "user",
                "content": [{"type": "input_image", "image_url": "data:image/png;base64,aGk="}],
            },
            {"role": "assistant", "content": [{"type": "output_text", "text": "a"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"x": 1}'},
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": [{"type": "input_text", "text": "r"}],
            },
        ],
    )
    roles = [m.role for m in request.messages]
    assert roles == ["system", "system", "system", "user", "assistant", "tool"]
    assert request.messages[3].parts == (ImagePart(data="aGk=", media_type="image/png"),)
    assert request.messages[4].parts == (TextPart("a"), ToolCallPart("c1", "f", {"x": 1}))
    assert request.messages[5].parts[0].content == "r"


@pytest.mark.parametrize(
    ("wire", "core"),
    [
        ("required", ToolChoice("any")),
        ("none", ToolChoice("none")),
        ({"type": "function", "name": "inner"}, ToolChoice("tool", name="ns__inner")),
        ({"type": "allowed_tools", "mode": "required", "tools": []}, ToolChoice("any")),
        ({"type": "web_search"}, ToolChoice("auto")),
    ],
)
def test_tool_choice(wire: Any, core: ToolChoice) -> None:
    tools = [
        {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "inner"}]},
        {"type": "web_search"},
    ]
    assert decode(input="x", tools=tools, tool_choice=wire).tool_choice == core


def test_parallel_tool_calls_false() -> None:
    assert decode(input="x", parallel_tool_calls=False).tool_choice == ToolChoice(
        disable_parallel=True
    )


@pytest.mark.parametrize(
    ("effort", "thinking"),
    [
        ("none", ThinkingConfig(enabled=False)),
        ("minimal", ThinkingConfig(effort="low")),
        ("xhigh", ThinkingConfig(effort="max")),
    ],
)
def test_reasoning_effort(effort: str, thinking: ThinkingConfig) -> None:
    assert decode(input="x", reasoning={"effort": effort, "summary": "auto"}).thinking == thinking


def test_json_object_format() -> None:
    response_format = decode(input="x", text={"format": {"type": "json_object"}}).response_format
    assert response_format is not None and response_format.type == "json"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "input.0.content.0.image_url",
        ),
        ({"input": "x", "conversation": "conv_1"}, "conversation"),
        ({"input": "x", "background": True}, "background"),
        ({"input": [{"role": "bot", "content": "x"}]}, "input.0.role"),
        ({"input": [], "tools": [{"name": "f"}]}, "tools.0.type"),
        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": []}, "input"),
    ],
)
def test_refused_with_the_field_named(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        decode(**body)
    assert caught.value.param == param


def test_counts_are_limited() -> None:
    limits = RequestLimits(max_messages=2)
    with pytest.raises(InvalidRequestError) as caught:
        decode_chat_request({"model": "m", "input": ["a", "b", "c"]}, limits)
    assert caught.value.param == "input"

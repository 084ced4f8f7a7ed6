"""The Responses dialect's client side: core requests as ``/v1/responses`` bodies.

Each body is read back by llmbridge's own Responses front (``decode_chat_request``,
which validates it as a Responses server would): what the backend is asked is what
the caller asked, and reasoning goes back only to the backend that issued it."""

from __future__ import annotations

from typing import Any

from llmbridge.core.messages import (
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolChoice,
    ToolDefinition,
    ToolResultPart,
)
from llmbridge.core.request import ChatRequest, GenerationParams, ResponseFormat, ThinkingConfig
from llmbridge.dialects.responses.carried import carry
from llmbridge.dialects.responses.encode import encode_chat_request
from llmbridge.dialects.responses.reasoning import seal_reasoning
from llmbridge.dialects.responses.request import decode_chat_request

WEATHER = ToolDefinition(
    "get_weather",
    "Weather for a city",
    {"type": "object", "properties": {"city": {"type": "string"}}},
)


def test_a_plain_request_has_the_shape_codex_sends() -> None:
    request = ChatRequest(
        model="gpt-5-codex",
        messages=(
            Message("system", (TextPart("Be brief."),)),
            Message("user", (TextPart("hi"),)),
        ),
        stream=True,
        params=GenerationParams(max_tokens=200, temperature=0.2, top_p=0.9),
    )
    assert encode_chat_request(request) == {
        "model": "gpt-5-codex",
        "instructions": "Be brief.",
        "input": [{"type": "message", "role": "user", "content": [_text("hi")]}],
        "max_output_tokens": 200,
        "temperature": 0.2,
        "top_p": 0.9,
        "stream": True,
        "store": False,
    }


def test_a_tool_loop_reaches_a_responses_server_unchanged() -> None:
    sealed = seal_reasoning(ThinkingPart("", signature="sig-b", provider="scripted"))
    assert sealed is not None
    request = ChatRequest(
        model="m",
        messages=(
            Message("system", (TextPart("You are terse."),)),
            Message(
                "user",
                (TextPart("Weather?"), ImagePart(data="iVBORw0KGgo=", media_type="image/png")),
            ),
            Message(
                "assistant",
                (
                    ThinkingPart("look it up", signature=carry("up", sealed)),
                    TextPart("Checking."),
                    ToolCallPart("call_1", "get_weather", {"city": "Paris"}),
                ),
            ),
            Message("tool", (ToolResultPart("call_1", "sunny", name="get_weather"),)),
            Message("system", (TextPart("Answer in French."),)),
            Message("user", (TextPart("So?"),)),
        ),
        tools=(WEATHER,),
        tool_choice=ToolChoice("tool", name="get_weather", disable_parallel=True),
        thinking=ThinkingConfig(effort="high"),
        response_format=ResponseFormat("json_schema", schema={"type": "object"}, name="answer"),
        params=GenerationParams(max_tokens=5),
    )
    body = encode_chat_request(request, origin="up")
    assert body["max_output_tokens"] == 16  # OpenAI's minimum
    assert body["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": WEATHER.input_schema,
            "strict": False,
        }
    ]
    assert body["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert body["parallel_tool_calls"] is False
    assert body["reasoning"] == {"effort": "high", "summary": "auto"}
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["text"] == {
        "format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}}
    }
    reasoning = body["input"][1]
    assert reasoning == {
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "look it up"}],
        "encrypted_content": sealed,
    }

    seen = decode_chat_request(body)
    assert [m.role for m in seen.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "system",
        "user",
    ]
    assert seen.messages[1].parts == (
        TextPart("Weather?"),
        ImagePart(data="iVBORw0KGgo=", media_type="image/png"),
    )
    assert seen.messages[2].parts == (
        # The server that issued the reasoning reads it back (here: llmbridge's front).
        ThinkingPart("look it up", signature="sig-b", provider="scripted"),
        TextPart("Checking."),
        ToolCallPart("call_1", "get_weather", {"city": "Paris"}),
    )
    assert seen.messages[3].parts == (ToolResultPart("call_1", "sunny", name="get_weather"),)
    assert seen.messages[4].text == "Answer in French."
    assert seen.tools[0].name == "get_weather"
    assert seen.tool_choice == ToolChoice("tool", name="get_weather", disable_parallel=True)
    assert seen.thinking == ThinkingConfig(effort="high")
    assert seen.response_format is not None and seen.response_format.schema == {"type": "object"}


def test_only_this_backends_reasoning_goes_back() -> None:
    history = Message(
        "assistant",
        (
            ThinkingPart("mine", signature=carry("up", "gAAAA-mine")),
            ThinkingPart("another backend's", signature=carry("other", "gAAAA-theirs")),
            ThinkingPart("anthropic's", signature="EqQBCkYIARgC", provider="anthropic"),
            ThinkingPart("a local model's"),
            TextPart("Hello."),
        ),
    )
    request = ChatRequest(
        model="m", messages=(Message("user", (TextPart("hi"),)), history, _user("again"))
    )
    body = encode_chat_request(request, origin="up")
    reasoning = [item for item in body["input"] if item["type"] == "reasoning"]
    assert [r["encrypted_content"] for r in reasoning] == ["gAAAA-mine"]
    # Sending reasoning back needs its encrypted form in the reply again.
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["input"][-2] == {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Hello.", "annotations": []}],
    }


def test_without_thinking_nothing_about_reasoning_is_sent() -> None:
    body = encode_chat_request(ChatRequest(model="m", messages=(_user("hi"),)))
    assert "reasoning" not in body and "include" not in body
    off = encode_chat_request(
        ChatRequest(model="m", messages=(_user("hi"),), thinking=ThinkingConfig(enabled=False))
    )
    assert off["reasoning"] == {"effort": "none"} and "include" not in off


def test_budgets_and_max_effort_become_levels_every_model_takes() -> None:
    def effort(thinking: ThinkingConfig) -> Any:
        body = encode_chat_request(
            ChatRequest(model="m", messages=(_user("x"),), thinking=thinking)
        )
        return body["reasoning"].get("effort")

    assert effort(ThinkingConfig(budget_tokens=1024)) == "low"
    assert effort(ThinkingConfig(budget_tokens=31999)) == "high"
    assert effort(ThinkingConfig(effort="max")) == "high"
    assert effort(ThinkingConfig()) is None  # on, at the server's default effort


def test_strict_tools_and_json_mode() -> None:
    strict = ToolDefinition("f", "", {"type": "object"}, {"openai": {"strict": True}})
    body = encode_chat_request(
        ChatRequest(
            model="m",
            messages=(_user("x"),),
            tools=(strict,),
            tool_choice=ToolChoice("any"),
            response_format=ResponseFormat("json"),
        )
    )
    assert body["tools"] == [
        {"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}
    ]
    assert body["tool_choice"] == "required"
    assert body["text"] == {"format": {"type": "json_object"}}


def _user(text: str) -> Message:
    return Message("user", (TextPart(text),))


def _text(text: str) -> dict[str, Any]:
    return {"type": "input_text", "text": text}

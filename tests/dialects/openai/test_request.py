"""decode_chat_request / encode_chat_request and the embedding request codecs."""

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
    ToolDefinition,
    ToolResultPart,
)
from llmbridge.core.request import (
    ChatRequest,
    EmbedRequest,
    GenerationParams,
    ResponseFormat,
    ThinkingConfig,
)
from llmbridge.dialects.openai.request import (
    decode_chat_request,
    decode_embed_request,
    encode_chat_request,
    encode_embed_request,
)

USER = {"role": "user", "content": "hi"}


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [USER], **fields}


# -- decode -------------------------------------------------------------------------


def test_minimal_request() -> None:
    assert decode_chat_request(body()) == ChatRequest(
        model="gpt-4o", messages=(Message("user", (TextPart("hi"),)),)
    )


def test_system_and_developer_become_system() -> None:
    request = decode_chat_request(
        body(
            messages=[
                {"role": "system", "content": "be brief"},
                {"role": "developer", "content": [{"type": "text", "text": "be kind"}]},
                USER,
            ]
        )
    )
    assert request.messages[:2] == (
        Message("system", (TextPart("be brief"),)),
        Message("system", (TextPart("be kind"),)),
    )


def test_user_content_parts_with_images() -> None:
    request = decode_chat_request(
        body(
            messages=[
                {
                    "role": "user",
                    "name": "ann",
                    "content": [
                        {"type": "text", "text": "what is this?"},
                        {
                            "type": "image_url",
                            "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"},
                        },
                        {
                            "type": "image_url",
                            "image_url": {"url": "https://x.test/cat.png", "detail": "low"},
                        },
                    ],
                }
            ]
        )
    )
    assert request.messages == (
        Message(
            "user",
            (
                TextPart("what is this?"),
                ImagePart(data="/9j/4AAQ", media_type="image/jpeg"),
                ImagePart(url="https://x.test/cat.png"),
            ),
            name="ann",
        ),
    )


def test_assistant_history_with_tool_calls_and_results() -> None:
    request = decode_chat_request(
        body(
            messages=[
                USER,
                {
                    "role": "assistant",
                    "content": None,
                    "reasoning_content": "need weather",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                        },
                        {
                            "id": "call_2",
                            "type": "function",
                            "function": {"name": "broken", "arguments": '{"city": '},
                        },
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                {
                    "role": "tool",
                    "tool_call_id": "call_2",
                    "content": [{"type": "text", "text": "err"}],
                },
            ]
        )
    )
    assert request.messages[1:] == (
        Message(
            "assistant",
            (
                ThinkingPart("need weather"),
                ToolCallPart("call_1", "get_weather", {"city": "Paris"}),
                ToolCallPart("call_2", "broken", {}, raw_arguments='{"city": '),
            ),
        ),
        Message("tool", (ToolResultPart("call_1", "sunny", name="get_weather"),)),
        Message("tool", (ToolResultPart("call_2", "err", name="broken"),)),
    )


def test_assistant_reasoning_field_and_text() -> None:
    request = decode_chat_request(
        body(messages=[USER, {"role": "assistant", "content": "Hello", "reasoning": "greet"}])
    )
    assert request.messages[1] == Message("assistant", (ThinkingPart("greet"), TextPart("Hello")))


def test_generation_parameters() -> None:
    request = decode_chat_request(
        body(
            max_tokens=10,
            max_completion_tokens=20,
            temperature=0.2,
            top_p=0.9,
            stop="END",
            seed=7,
            frequency_penalty=0.5,
            presence_penalty=-0.5,
        )
    )
    assert request.params == GenerationParams(
        max_tokens=20,
        temperature=0.2,
        top_p=0.9,
        stop=("END",),
        seed=7,
        frequency_penalty=0.5,
        presence_penalty=-0.5,
    )
    assert decode_chat_request(body(max_tokens=10, stop=["a", "b"])).params == GenerationParams(
        max_tokens=10, stop=("a", "b")
    )


def test_stream_and_include_usage() -> None:
    request = decode_chat_request(body(stream=True, stream_options={"include_usage": True}))
    assert request.stream and request.include_usage
    assert not decode_chat_request(body(stream=True)).include_usage


def test_tools_and_tool_choice() -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            "strict": True,
        },
    }
    request = decode_chat_request(
        body(
            tools=[tool, {"type": "function", "function": {"name": "noop"}}],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            parallel_tool_calls=False,
        )
    )
    assert request.tools == (
        ToolDefinition(
            "get_weather",
            "Weather for a city",
            {"type": "object", "properties": {"city": {"type": "string"}}},
            provider_details={"openai": {"strict": True}},
        ),
        ToolDefinition("noop"),
    )
    assert request.tool_choice == ToolChoice("tool", name="get_weather", disable_parallel=True)


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        ("auto", ToolChoice("auto")),
        ("none", ToolChoice("none")),
        ("required", ToolChoice("any")),
        (None, None),
    ],
)
def test_tool_choice_modes(wire: str | None, expected: ToolChoice | None) -> None:
    assert decode_chat_request(body(tool_choice=wire)).tool_choice == expected


def test_parallel_tool_calls_false_alone() -> None:
    request = decode_chat_request(body(parallel_tool_calls=False))
    assert request.tool_choice == ToolChoice("auto", disable_parallel=True)


@pytest.mark.parametrize(
    ("effort", "thinking"),
    [
        ("none", ThinkingConfig(enabled=False)),
        ("minimal", ThinkingConfig(effort="low")),
        ("low", ThinkingConfig(effort="low")),
        ("medium", ThinkingConfig(effort="medium")),
        ("high", ThinkingConfig(effort="high")),
        ("xhigh", ThinkingConfig(effort="max")),
    ],
)
def test_reasoning_effort(effort: str, thinking: ThinkingConfig) -> None:
    request = decode_chat_request(body(reasoning_effort=effort))
    assert request.thinking == thinking
    # The folded spellings survive a trip to an OpenAI backend.
    assert encode_chat_request(request)["reasoning_effort"] == effort


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        ({"type": "text"}, ResponseFormat("text")),
        ({"type": "json_object"}, ResponseFormat("json")),
        (
            {
                "type": "json_schema",
                "json_schema": {"name": "person", "schema": {"type": "object"}, "strict": True},
            },
            ResponseFormat("json_schema", schema={"type": "object"}, name="person"),
        ),
    ],
)
def test_response_format(wire: dict[str, Any], expected: ResponseFormat) -> None:
    assert decode_chat_request(body(response_format=wire)).response_format == expected


def test_unmodelled_fields_ride_along() -> None:
    request = decode_chat_request(
        body(
            n=1,
            user="u-1",
            logit_bias={"50256": -100},
            logprobs=True,
            top_logprobs=2,
            metadata={"k": "v"},
            service_tier="flex",
            store=False,
            top_k=40,
            verbosity=None,
        )
    )
    assert request.provider_details == {
        "openai": {
            "n": 1,
            "user": "u-1",
            "logit_bias": {"50256": -100},
            "logprobs": True,
            "top_logprobs": 2,
            "metadata": {"k": "v"},
            "service_tier": "flex",
            "store": False,
            "top_k": 40,
        }
    }
    sent = encode_chat_request(request)
    assert sent["user"] == "u-1" and sent["top_k"] == 40 and sent["logit_bias"] == {"50256": -100}


def test_unmodelled_message_fields_ride_along() -> None:
    request = decode_chat_request(
        body(messages=[{"role": "user", "content": "hi", "cache_control": {"type": "ephemeral"}}])
    )
    assert request.messages[0].provider_details == {
        "openai": {"cache_control": {"type": "ephemeral"}}
    }
    assert encode_chat_request(request)["messages"][0]["cache_control"] == {"type": "ephemeral"}


# -- bad input ----------------------------------------------------------------------


@pytest.mark.parametrize("bad", [[], "hi", None, 3, True])
def test_body_must_be_an_object(bad: object) -> None:
    with pytest.raises(InvalidRequestError, match="must be a JSON object") as info:
        decode_chat_request(bad)
    assert info.value.param is None
    assert info.value.status_code == 400


@pytest.mark.parametrize(
    ("fields", "param", "match"),
    [
        ({"messages": None}, "messages", "valid list"),
        ({"model": None}, "model", "valid string"),
        ({"model": 5}, "model", "valid string"),
        ({"messages": "hi"}, "messages", "valid list"),
        ({"messages": []}, "messages", "minimum length 1"),
        ({"messages": ["hi"]}, "messages.0", "expected an object, got a string"),
        ({"messages": [{"role": "bogus", "content": "x"}]}, "messages.0.role", "'bogus'"),
        ({"messages": [{"role": 7, "content": "x"}]}, "messages.0.role", "Supported values"),
        ({"messages": [{"content": "x"}]}, "messages.0.role", "Missing"),
        ({"messages": [{"role": "user"}]}, "messages.0.content", "Missing"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content", "valid string"),
        (
            {"messages": [USER, {"role": "tool", "content": "x"}]},
            "messages.1.tool_call_id",
            "Missing",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "file", "file": {}}]}]},
            "messages.0.content.0.type",
            "'file'",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
            "messages.0.content.0.text",
            "Missing",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            "messages.0.content.0.image_url.url",
            "Missing",
        ),
        (
            {
                "messages": [
                    {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": 1}}]}
                ]
            },
            "messages.0.tool_calls.0.function.name",
            "valid string",
        ),
        ({"n": 2}, "n", "exactly one choice"),
        ({"temperature": "hot"}, "temperature", "valid number"),
        ({"max_tokens": 1.5}, "max_tokens", "integer"),
        ({"stop": 5}, "stop", "valid"),
        ({"stream": "maybe"}, "stream", "boolean"),
        ({"tools": [{"type": "custom", "custom": {}}]}, "tools.0.type", "'function'"),
        ({"tools": [{"type": "function"}]}, "tools.0.function", "Missing"),
        ({"tool_choice": "sometimes"}, "tool_choice", "'auto'"),
        ({"tool_choice": {"type": "function"}}, "tool_choice.function", "Missing"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort", "'minimal'"),
        ({"response_format": {"type": "xml"}}, "response_format.type", "'xml'"),
        (
            {"stream_options": {"include_usage": "yes please"}},
            "stream_options.include_usage",
            "boolean",
        ),
    ],
)
def test_bad_fields_name_their_path(fields: dict[str, Any], param: str, match: str) -> None:
    with pytest.raises(InvalidRequestError, match=match) as info:
        decode_chat_request(body(**fields))
    assert info.value.param == param
    assert f"'{param}'" in info.value.message


def test_missing_model_and_messages() -> None:
    with pytest.raises(InvalidRequestError) as info:
        decode_chat_request({"messages": [USER]})
    assert info.value.param == "model"
    assert info.value.message == "Missing required parameter: 'model'."
    with pytest.raises(InvalidRequestError) as info:
        decode_chat_request({"model": "m"})
    assert info.value.param == "messages"


# -- encode -------------------------------------------------------------------------


def test_encode_full_request() -> None:
    request = ChatRequest(
        model="gpt-4o",
        messages=(
            Message("system", (TextPart("be brief"),)),
            Message("user", (TextPart("weather?"), ImagePart(data="iVBORw0KGgoAAA"))),
            Message(
                "assistant",
                (
                    ThinkingPart("I should call the tool", signature="sig"),
                    TextPart("Let me check."),
                    ToolCallPart("call_1", "get_weather", {"city": "Paris"}),
                    ToolCallPart("call_2", "get_weather", {}, raw_arguments="{bad"),
                ),
            ),
            Message("tool", (ToolResultPart("call_1", "sunny"),)),
            Message("tool", (ToolResultPart("call_2", "error", is_error=True),)),
        ),
        stream=True,
        params=GenerationParams(max_tokens=100, temperature=0.5, stop=("x",), seed=1, top_k=40),
        tools=(ToolDefinition("get_weather", "Weather", {"type": "object"}),),
        tool_choice=ToolChoice("any", disable_parallel=True),
        thinking=ThinkingConfig(effort="medium"),
        response_format=ResponseFormat("json"),
    )
    assert encode_chat_request(request) == {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "weather?"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64,iVBORw0KGgoAAA"},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": "Let me check.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": "{bad"},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "call_2", "content": "error"},
        ],
        "max_tokens": 100,
        "temperature": 0.5,
        "seed": 1,
        "stop": ["x"],
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Weather",
                    "parameters": {"type": "object"},
                },
            }
        ],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "reasoning_effort": "medium",
        "response_format": {"type": "json_object"},
    }


def test_anthropic_style_results_become_tool_messages_after_the_calls() -> None:
    request = ChatRequest(
        model="m",
        messages=(
            Message("user", (TextPart("go"),)),
            Message("assistant", (ToolCallPart("t1", "a"), ToolCallPart("t2", "b"))),
            Message("user", (TextPart("note: both are slow"),)),
            Message(
                "user",
                (
                    ToolResultPart("t2", "B"),
                    ToolResultPart("t1", "A"),
                    TextPart("and now?"),
                ),
            ),
        ),
    )
    messages = encode_chat_request(request)["messages"]
    assert [(m["role"], m.get("tool_call_id") or m.get("content")) for m in messages] == [
        ("user", "go"),
        ("assistant", None),
        ("tool", "t2"),
        ("tool", "t1"),
        ("user", "note: both are slow"),
        ("user", "and now?"),
    ]


def test_results_without_ids_answer_the_call_of_their_tool() -> None:
    request = ChatRequest(
        model="m",
        messages=(
            Message("assistant", (ToolCallPart("c1", "weather"), ToolCallPart("c2", "time"))),
            Message("tool", (ToolResultPart("", "12:00", name="time"),)),
            Message("tool", (ToolResultPart("", "sunny", name="weather"),)),
        ),
    )
    tool_messages = encode_chat_request(request)["messages"][1:]
    assert [m["tool_call_id"] for m in tool_messages] == ["c2", "c1"]


def test_thinking_only_assistant_message_keeps_its_turn() -> None:
    request = ChatRequest(
        model="m",
        messages=(Message("user", (TextPart("q"),)), Message("assistant", (ThinkingPart("hm"),))),
    )
    assert encode_chat_request(request)["messages"][1] == {"role": "assistant", "content": ""}


@pytest.mark.parametrize(
    ("thinking", "effort"),
    [
        (ThinkingConfig(enabled=False), "none"),
        (ThinkingConfig(effort="low"), "low"),
        (ThinkingConfig(effort="max"), "high"),
        (ThinkingConfig(budget_tokens=512), "low"),
        (ThinkingConfig(budget_tokens=1024), "low"),
        (ThinkingConfig(budget_tokens=1025), "medium"),
        (ThinkingConfig(budget_tokens=8192), "medium"),
        (ThinkingConfig(budget_tokens=8193), "high"),
        (ThinkingConfig(budget_tokens=32000), "high"),
        (ThinkingConfig(), None),
    ],
)
def test_thinking_to_reasoning_effort(thinking: ThinkingConfig, effort: str | None) -> None:
    request = ChatRequest(model="m", messages=(), thinking=thinking)
    assert encode_chat_request(request).get("reasoning_effort") == effort


def test_tool_choice_needs_tools() -> None:
    request = ChatRequest(model="m", messages=(), tool_choice=ToolChoice("none"))
    assert "tool_choice" not in encode_chat_request(request)
    named = ChatRequest(
        model="m",
        messages=(),
        tools=(ToolDefinition("f"),),
        tool_choice=ToolChoice("tool", name="f"),
    )
    assert encode_chat_request(named)["tool_choice"] == {
        "type": "function",
        "function": {"name": "f"},
    }


def test_non_streaming_request_has_no_stream_options() -> None:
    sent = encode_chat_request(ChatRequest(model="m", messages=(), include_usage=True))
    assert sent["stream"] is False
    assert "stream_options" not in sent


def test_other_dialects_details_stay_home() -> None:
    request = ChatRequest(model="m", messages=(), provider_details={"ollama": {"keep_alive": "5m"}})
    assert encode_chat_request(request) == {"model": "m", "messages": [], "stream": False}


def test_json_schema_response_format() -> None:
    request = ChatRequest(
        model="m",
        messages=(),
        response_format=ResponseFormat("json_schema", schema={"type": "object"}),
    )
    assert encode_chat_request(request)["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": {"type": "object"}},
    }


# -- embeddings ---------------------------------------------------------------------


def test_embed_request_round_trip() -> None:
    request = decode_embed_request({"model": "e", "input": "hello", "dimensions": 64})
    assert request == EmbedRequest(model="e", inputs=("hello",), dimensions=64)
    assert encode_embed_request(request) == {
        "model": "e",
        "input": ["hello"],
        "dimensions": 64,
        "encoding_format": "float",
    }
    assert decode_embed_request({"model": "e", "input": ["a", "b"]}).inputs == ("a", "b")


@pytest.mark.parametrize(
    ("bad", "param", "match"),
    [
        ({"model": "e", "input": [1, 2, 3]}, "input", "token arrays"),
        ({"model": "e", "input": [[1, 2], [3]]}, "input", "token arrays"),
        ({"model": "e", "input": []}, "input", "empty"),
        ({"model": "e"}, "input", "Missing"),
        ({"input": "x"}, "model", "Missing"),
        ({"model": "e", "input": "x", "dimensions": "many"}, "dimensions", "integer"),
    ],
)
def test_bad_embed_requests(bad: dict[str, Any], param: str, match: str) -> None:
    with pytest.raises(InvalidRequestError, match=match) as info:
        decode_embed_request(bad)
    assert info.value.param == param


def test_embed_body_must_be_an_object() -> None:
    with pytest.raises(InvalidRequestError, match="JSON object"):
        decode_embed_request(["x"])

"""Ollama request bodies: decoding what clients send, encoding what llmbridge sends."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from llmbridge.core.errors import InvalidRequestError, UnsupportedFeatureError
from llmbridge.core.messages import (
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolDefinition,
    ToolResultPart,
)
from llmbridge.core.request import (
    ChatRequest,
    Completion,
    EmbedRequest,
    GenerationParams,
    ResponseFormat,
    ThinkingConfig,
)
from llmbridge.dialects.ollama import (
    decode_chat_request,
    decode_embed_request,
    decode_generate_request,
    encode_chat_request,
    encode_embed_request,
    encode_generate_request,
)

PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4"
    "2mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "llama3.2", **fields}


# -- decode /api/chat -----------------------------------------------------------------


def test_minimal_chat_streams_by_default() -> None:
    req = decode_chat_request(chat(messages=[{"role": "user", "content": "hi"}]))
    assert req == ChatRequest(
        model="llama3.2",
        messages=(Message(role="user", parts=(TextPart("hi"),)),),
        stream=True,
    )


def test_stream_false_and_no_messages() -> None:
    req = decode_chat_request(chat(stream=False))
    assert req.stream is False
    assert req.messages == ()


def test_options_map_to_params_and_extra() -> None:
    req = decode_chat_request(
        chat(
            options={
                "num_predict": 128.0,
                "temperature": 0.2,
                "top_p": 0.9,
                "top_k": 40,
                "min_p": 0.05,
                "stop": "</s>",
                "seed": 42,
                "repeat_penalty": 1.1,
                "frequency_penalty": 0.5,
                "presence_penalty": -0.5,
                "num_ctx": 8192,
                "mirostat": 2,
                "my_option": "x",
            }
        )
    )
    assert req.params == GenerationParams(
        max_tokens=128,
        temperature=0.2,
        top_p=0.9,
        top_k=40,
        min_p=0.05,
        stop=("</s>",),
        seed=42,
        repeat_penalty=1.1,
        frequency_penalty=0.5,
        presence_penalty=-0.5,
        num_ctx=8192,
        extra={"mirostat": 2, "my_option": "x"},
    )


def test_negative_num_predict_stays_ollama_specific() -> None:
    req = decode_chat_request(chat(options={"num_predict": -1, "stop": ["a", "b"]}))
    assert req.params.max_tokens is None
    assert req.params.extra == {"num_predict": -1}
    assert req.params.stop == ("a", "b")
    assert encode_chat_request(req)["options"] == {"stop": ["a", "b"], "num_predict": -1}


@pytest.mark.parametrize(
    ("think", "expected"),
    [
        (True, ThinkingConfig()),
        ("low", ThinkingConfig(effort="low")),
        ("high", ThinkingConfig(effort="high")),
        ("max", ThinkingConfig(effort="max")),
        (False, None),
        (None, None),
    ],
)
def test_think(think: bool | str | None, expected: ThinkingConfig | None) -> None:
    assert decode_chat_request(chat(think=think)).thinking == expected


def test_think_false_survives_a_round_trip() -> None:
    req = decode_chat_request(chat(think=False))
    assert req.provider_details == {"ollama": {"think": False}}
    assert encode_chat_request(req)["think"] is False


def test_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert decode_chat_request(chat(format="json")).response_format == ResponseFormat(type="json")
    assert decode_chat_request(chat(format=schema)).response_format == ResponseFormat(
        type="json_schema", schema=schema
    )
    assert decode_chat_request(chat(format="")).response_format is None


@pytest.mark.parametrize(("value", "expected"), [("10m", "10m"), (0, 0), (30.0, 30), (1.5, "1.5s")])
def test_keep_alive(value: object, expected: object) -> None:
    assert decode_chat_request(chat(keep_alive=value)).keep_alive == expected


def test_unmodelled_fields_ride_in_provider_details() -> None:
    req = decode_chat_request(
        chat(truncate=False, shift=True, logprobs=True, top_logprobs=3, future_field={"a": 1})
    )
    assert req.provider_details == {
        "ollama": {
            "truncate": False,
            "shift": True,
            "logprobs": True,
            "top_logprobs": 3,
            "future_field": {"a": 1},
        }
    }
    body = encode_chat_request(req)
    assert body["truncate"] is False and body["future_field"] == {"a": 1}


def test_tools() -> None:
    params = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    req = decode_chat_request(
        chat(
            tools=[
                {
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "description": "Weather",
                        "parameters": params,
                    },
                },
                {"type": "function", "function": {"name": "noop"}},
            ]
        )
    )
    assert req.tools == (
        ToolDefinition(name="get_weather", description="Weather", input_schema=params),
        ToolDefinition(name="noop"),
    )


def test_messages_with_every_field() -> None:
    req = decode_chat_request(
        chat(
            messages=[
                {"role": "SYSTEM", "content": "be brief"},
                {"role": "user", "content": "what is this?", "images": [PNG]},
                {
                    "role": "assistant",
                    "content": "Checking.",
                    "thinking": "Let me look.",
                    "tool_calls": [
                        {"id": "call_9", "function": {"name": "look", "arguments": {"x": 1}}},
                        {"function": {"index": 1, "name": "peek", "arguments": '{"y": [2]}'}},
                    ],
                },
                {"role": "tool", "content": "a cat", "tool_name": "look", "tool_call_id": "call_9"},
            ]
        )
    )
    system, user, assistant, tool = req.messages
    assert system == Message(role="system", parts=(TextPart("be brief"),))
    assert user == Message(
        role="user",
        parts=(TextPart("what is this?"), ImagePart(data=PNG, media_type="image/png")),
    )
    assert assistant.parts[:3] == (
        ThinkingPart("Let me look."),
        TextPart("Checking."),
        ToolCallPart(id="call_9", name="look", arguments={"x": 1}),
    )
    peek = assistant.parts[3]
    assert isinstance(peek, ToolCallPart) and peek.id.startswith("call_")
    assert (peek.name, peek.arguments) == ("peek", {"y": [2]})
    assert tool == Message(
        role="tool", parts=(ToolResultPart(tool_call_id="call_9", content="a cat", name="look"),)
    )


def test_tool_results_without_ids_pair_with_calls() -> None:
    req = decode_chat_request(
        chat(
            messages=[
                {"role": "user", "content": "weather in Paris and London, and the time?"},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"function": {"name": "weather", "arguments": {"city": "Paris"}}},
                        {"function": {"name": "time", "arguments": {}}},
                        {"function": {"name": "weather", "arguments": {"city": "London"}}},
                    ],
                },
                {"role": "tool", "content": "12C", "tool_name": "weather"},
                {"role": "tool", "content": "noon", "tool_name": "time"},
                {"role": "tool", "content": "9C", "tool_name": "weather"},
                {"role": "tool", "content": "extra"},
            ]
        )
    )
    calls = req.messages[1].tool_calls
    results = [m.parts[0] for m in req.messages[2:]]
    assert all(isinstance(r, ToolResultPart) for r in results)
    ids = [r.tool_call_id for r in results if isinstance(r, ToolResultPart)]
    assert ids[:3] == [calls[0].id, calls[1].id, calls[2].id]
    assert ids[3].startswith("call_") and ids[3] not in ids[:3]  # nothing left to answer


def test_tool_result_without_any_call_gets_an_id() -> None:
    req = decode_chat_request(chat(messages=[{"role": "tool", "content": "x", "tool_name": "f"}]))
    (result,) = req.messages[0].parts
    assert isinstance(result, ToolResultPart) and result.tool_call_id.startswith("call_")
    assert result.name == "f"


def test_unknown_message_fields_are_kept() -> None:
    req = decode_chat_request(chat(messages=[{"role": "user", "content": "x", "custom": 1}]))
    assert req.messages[0].provider_details == {"ollama": {"custom": 1}}
    assert encode_chat_request(req)["messages"] == [{"role": "user", "content": "x", "custom": 1}]


# -- bad input ------------------------------------------------------------------------


@pytest.mark.parametrize("body", [None, [], "model", 42])
def test_non_object_body(body: object) -> None:
    with pytest.raises(InvalidRequestError, match="JSON object"):
        decode_chat_request(body)


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        ({}, "model", "model: Field required"),
        ({"model": ""}, "model", "at least 1 character"),
        ({"model": 3}, "model", "valid string"),
        (chat(messages="hi"), "messages", "valid list"),
        (chat(messages=[{"content": "x"}]), "messages.0.role", "Field required"),
        (chat(messages=[{"role": "bot", "content": "x"}]), "messages.0.role", "'user'"),
        (chat(messages=[{"role": "user", "content": ["x"]}]), "messages.0.content", "string"),
        (chat(messages=[{"role": "user", "images": "abc"}]), "messages.0.images", "list"),
        (
            chat(messages=[{"role": "assistant", "tool_calls": [{"function": {"name": 1}}]}]),
            "messages.0.tool_calls.0.function.name",
            "string",
        ),
        (
            chat(
                messages=[
                    {
                        "role": "assistant",
                        "tool_calls": [{"function": {"name": "f", "arguments": 1}}],
                    }
                ]
            ),
            "messages.0.tool_calls.0.function.arguments",
            "JSON object",
        ),
        (chat(options={"temperature": "hot"}), "options.temperature", "valid number"),
        (chat(options={"num_predict": 1.5}), "options.num_predict", "valid integer"),
        (chat(options={"seed": "1"}), "options.seed", "valid integer"),
        (chat(options={"stop": [1]}), "options.stop", "list of strings"),
        (chat(options="fast"), "options", "Input should be"),
        (chat(stream="yes"), "stream", "valid boolean"),
        (chat(think="extreme"), "think", "'low'"),
        (chat(format=["json"]), "format", "JSON Schema"),
        (chat(keep_alive=True), "keep_alive", "duration"),
        (chat(tools=[{"type": "function"}]), "tools.0.function", "Field required"),
    ],
)
def test_invalid_chat_bodies(body: dict[str, Any], param: str, message: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        decode_chat_request(body)
    assert caught.value.param == param
    assert caught.value.message.startswith(f"{param}: ")
    assert message in caught.value.message
    assert caught.value.status_code == 400


# -- decode /api/generate -------------------------------------------------------------


def test_generate_prompt_system_and_images() -> None:
    req = decode_generate_request(
        {
            "model": "llava",
            "prompt": "describe",
            "system": "be terse",
            "images": [PNG],
            "suffix": "END",
            "template": "{{ .Prompt }}",
            "raw": True,
            "context": [1, 2, 3],
            "stream": False,
            "options": {"num_predict": 5},
            "think": "low",
            "format": "json",
        }
    )
    assert req.messages == (
        Message(role="system", parts=(TextPart("be terse"),)),
        Message(
            role="user", parts=(TextPart("describe"), ImagePart(data=PNG, media_type="image/png"))
        ),
    )
    assert req.stream is False
    assert req.params.max_tokens == 5
    assert req.thinking == ThinkingConfig(effort="low")
    assert req.response_format == ResponseFormat(type="json")
    assert req.completion == Completion(prompt="describe", suffix="END", raw=True)
    assert req.provider_details == {"ollama": {"template": "{{ .Prompt }}", "context": [1, 2, 3]}}


def test_generate_empty_prompt_loads_the_model() -> None:
    req = decode_generate_request({"model": "llama3.2", "prompt": ""})
    assert req.messages == ()
    assert req.completion is None
    assert req.stream is True


def test_generate_is_a_templated_completion_unless_raw() -> None:
    req = decode_generate_request({"model": "m", "prompt": "hi", "suffix": ""})
    assert req.completion == Completion(prompt="hi", raw=False)  # an empty suffix: none


def test_generate_empty_prompt_with_suffix_fills_the_gap() -> None:
    req = decode_generate_request({"model": "m", "prompt": "", "suffix": "}"})
    assert req.completion == Completion(prompt="", suffix="}", raw=False)
    assert [m.text for m in req.messages] == [""]  # generated, not a model load


def test_encode_generate_request() -> None:
    req = ChatRequest(
        model="qwen2.5-coder",
        messages=(
            Message(role="system", parts=(TextPart("code only"),)),
            Message(role="user", parts=(TextPart("def f("), ImagePart(data=PNG))),
        ),
        params=GenerationParams(max_tokens=8, stop=("\n",)),
        keep_alive="5m",
        provider_details={"ollama": {"template": "{{ .Prompt }}", "think": False}},
        completion=Completion(prompt="def f(", suffix="):"),
    )
    assert encode_generate_request(req) == {
        "model": "qwen2.5-coder",
        "prompt": "def f(",
        "suffix": "):",
        "stream": False,
        "system": "code only",
        "images": [PNG],
        "options": {"num_predict": 8, "stop": ["\n"]},
        "think": False,
        "keep_alive": "5m",
        "template": "{{ .Prompt }}",
    }
    plain = replace(req, completion=Completion(prompt="def f("), provider_details=None)
    encoded = encode_generate_request(plain)
    assert encoded["raw"] is True and "suffix" not in encoded
    templated = replace(req, completion=Completion(prompt="hi", raw=False))
    assert "raw" not in encode_generate_request(templated)


def test_generate_invalid() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        decode_generate_request({"model": "m", "context": ["a"]})
    assert caught.value.param == "context.0"


# -- encode /api/chat -----------------------------------------------------------------


def test_encode_full_request() -> None:
    schema = {"type": "object"}
    req = ChatRequest(
        model="qwen3",
        messages=(
            Message(role="system", parts=(TextPart("sys"),)),
            Message(
                role="user", parts=(TextPart("look"), ImagePart(data=PNG, media_type="image/png"))
            ),
            Message(
                role="assistant",
                parts=(
                    ThinkingPart("hmm", signature="sig"),
                    TextPart("ok"),
                    ToolCallPart(id="call_1", name="f", arguments={"a": 1}),
                    ToolCallPart(id="call_2", name="g"),
                ),
            ),
            Message(role="tool", parts=(ToolResultPart(tool_call_id="call_1", content="r1"),)),
            Message(
                role="user",
                parts=(
                    ToolResultPart(tool_call_id="call_2", content="r2", name="g"),
                    TextPart("thanks"),
                ),
            ),
        ),
        stream=False,
        params=GenerationParams(max_tokens=10, temperature=0.0, stop=("x",)),
        tools=(ToolDefinition(name="f", description="does f", input_schema=schema),),
        thinking=ThinkingConfig(effort="high"),
        response_format=ResponseFormat(type="json_schema", schema=schema),
        keep_alive="1m",
    )
    assert encode_chat_request(req) == {
        "model": "qwen3",
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "look", "images": [PNG]},
            {
                "role": "assistant",
                "content": "ok",
                "thinking": "hmm",
                "tool_calls": [
                    {"id": "call_1", "function": {"index": 0, "name": "f", "arguments": {"a": 1}}},
                    {"id": "call_2", "function": {"index": 1, "name": "g", "arguments": {}}},
                ],
            },
            {"role": "tool", "content": "r1", "tool_name": "f", "tool_call_id": "call_1"},
            {"role": "tool", "content": "r2", "tool_name": "g", "tool_call_id": "call_2"},
            {"role": "user", "content": "thanks"},
        ],
        "stream": False,
        "tools": [
            {
                "type": "function",
                "function": {"name": "f", "description": "does f", "parameters": schema},
            }
        ],
        "options": {"num_predict": 10, "temperature": 0.0, "stop": ["x"]},
        "think": "high",
        "format": schema,
        "keep_alive": "1m",
    }


def test_encode_minimal_request_and_thinking_without_effort() -> None:
    req = ChatRequest(model="m", messages=(), stream=True, thinking=ThinkingConfig(budget_tokens=9))
    assert encode_chat_request(req) == {"model": "m", "messages": [], "stream": True, "think": True}
    off = ChatRequest(model="m", messages=(), thinking=ThinkingConfig(enabled=False))
    assert encode_chat_request(off)["think"] is False
    plain = ChatRequest(model="m", messages=(), response_format=ResponseFormat(type="json"))
    assert encode_chat_request(plain)["format"] == "json"


def test_encode_image_urls() -> None:
    data_url = Message(role="user", parts=(ImagePart(url=f"data:image/png;base64,{PNG}"),))
    body = encode_chat_request(ChatRequest(model="m", messages=(data_url,)))
    assert body["messages"][0]["images"] == [PNG]
    remote = Message(role="user", parts=(ImagePart(url="https://example.com/cat.png"),))
    with pytest.raises(UnsupportedFeatureError) as caught:
        encode_chat_request(ChatRequest(model="m", messages=(remote,)))
    assert caught.value.param == "messages.0"


def test_tool_choice_is_not_sent() -> None:
    from llmbridge.core.messages import ToolChoice

    req = ChatRequest(model="m", messages=(), tool_choice=ToolChoice(mode="any"))
    assert "tool_choice" not in encode_chat_request(req)


def test_generate_only_details_are_not_sent_to_chat() -> None:
    req = decode_generate_request({"model": "m", "prompt": "p", "suffix": "s", "truncate": True})
    body = encode_chat_request(req)
    assert "suffix" not in body and body["truncate"] is True


# -- /api/embed -----------------------------------------------------------------------


def test_embed_request() -> None:
    assert decode_embed_request({"model": "e", "input": "one"}) == EmbedRequest(
        model="e", inputs=("one",)
    )
    req = decode_embed_request(
        {"model": "e", "input": ["a", "b"], "dimensions": 8, "truncate": False}
    )
    assert req == EmbedRequest(model="e", inputs=("a", "b"), dimensions=8, truncate=False)
    assert encode_embed_request(req) == {
        "model": "e",
        "input": ["a", "b"],
        "truncate": False,
        "dimensions": 8,
    }
    assert encode_embed_request(EmbedRequest(model="e", inputs=("x",))) == {
        "model": "e",
        "input": ["x"],
    }


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "e"}, "input"),
        ({"model": "e", "input": [1]}, "input"),
        ({"model": "e", "input": "x", "dimensions": "8"}, "dimensions"),
        ({"input": "x"}, "model"),
    ],
)
def test_invalid_embed_bodies(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        decode_embed_request(body)
    assert caught.value.param == param

"""Anthropic request codec: decoding what Claude Code sends, encoding for a real API."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from llmbridge.core.errors import InvalidRequestError, UnsupportedFeatureError
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
from llmbridge.dialects.anthropic import (
    decode_chat_request,
    decode_count_tokens_request,
    encode_chat_request,
)
from llmbridge.dialects.gemini.thoughts import GEMINI
from llmbridge.dialects.responses.carried import carry as responses_carry


def body(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "Hello"}],
    }
    base.update(fields)
    return base


# -- decoding -----------------------------------------------------------------------


def test_minimal_body() -> None:
    req = decode_chat_request(body())
    assert req.model == "claude-sonnet-4-5"
    assert req.messages == (Message(role="user", parts=(TextPart("Hello"),)),)
    assert req.params.max_tokens == 1024
    assert req.stream is False
    assert req.provider_details is None


def test_sampling_parameters() -> None:
    req = decode_chat_request(
        body(temperature=0.2, top_p=0.9, top_k=40, stop_sequences=["END"], stream=True)
    )
    assert req.params == GenerationParams(
        max_tokens=1024, temperature=0.2, top_p=0.9, top_k=40, stop=("END",)
    )
    assert req.stream is True


def test_system_string_becomes_leading_system_message() -> None:
    req = decode_chat_request(body(system="Be brief."))
    assert req.messages[0] == Message(role="system", parts=(TextPart("Be brief."),))


def test_system_blocks_are_joined_and_keep_cache_control() -> None:
    system = [
        {"type": "text", "text": "You are Claude Code."},
        {"type": "text", "text": "Tools follow.", "cache_control": {"type": "ephemeral"}},
    ]
    req = decode_chat_request(body(system=system))
    first = req.messages[0]
    assert first.role == "system"
    assert first.text == "You are Claude Code.\n\nTools follow."
    # The blocks ride along as sent, each cache breakpoint on its own block, for an
    # Anthropic backend (tests/gateway/test_claude_code_betas.py).
    assert first.provider_details == {"anthropic": {"system_blocks": system}}


def test_an_anthropic_backend_gets_system_blocks_as_sent_unless_a_feature_rewrote_them() -> None:
    system = [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.330.440;"},
        {
            "type": "text",
            "text": "Agent.",
            "cache_control": {"type": "ephemeral", "scope": "global"},
        },
        {"type": "text", "text": "CWD: /w", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
    ]
    req = decode_chat_request(body(system=system))
    assert encode_chat_request(req)["system"] == system
    first = req.messages[0]
    rewritten = dataclasses.replace(first, parts=(TextPart("Agent.\n\nCWD: /w"),))
    again = dataclasses.replace(req, messages=(rewritten, *req.messages[1:]))
    # The blocks no longer say the text: one block, with the last breakpoint set.
    assert encode_chat_request(again)["system"] == [
        {
            "type": "text",
            "text": "Agent.\n\nCWD: /w",
            "cache_control": {"type": "ephemeral", "ttl": "1h"},
        }
    ]


@pytest.mark.parametrize(
    "signature",
    [
        GEMINI.carry("gem", "c2lnLWdlbWluaQ=="),
        responses_carry("resp", "gAAAAB-encrypted"),
        "",
    ],
)
def test_thinking_anthropic_did_not_sign_is_not_sent_back_to_it(signature: str) -> None:
    messages = [
        {"role": "user", "content": "a"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "elsewhere", "signature": signature},
                {"type": "text", "text": "b"},
            ],
        },
        {"role": "user", "content": "c"},
    ]
    sent = encode_chat_request(decode_chat_request(body(messages=messages)))
    assert sent["messages"][1]["content"] == [{"type": "text", "text": "b"}]


def test_tool_results_come_before_user_text_of_the_same_turn() -> None:
    messages = [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_A", "name": "weather", "input": {"c": "Paris"}},
                {"type": "tool_use", "id": "toolu_B", "name": "weather", "input": {"c": "Rome"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_A", "content": "sunny"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_B",
                    "content": [{"type": "text", "text": "rain"}],
                    "is_error": True,
                },
                {"type": "text", "text": "And tomorrow?"},
            ],
        },
    ]
    req = decode_chat_request(body(messages=messages))
    assert [m.role for m in req.messages] == ["user", "assistant", "tool", "tool", "user"]
    assistant = req.messages[1]
    assert assistant.parts == (
        TextPart("Checking."),
        ToolCallPart(id="toolu_A", name="weather", arguments={"c": "Paris"}),
        ToolCallPart(id="toolu_B", name="weather", arguments={"c": "Rome"}),
    )
    assert req.messages[2].parts == (ToolResultPart(tool_call_id="toolu_A", content="sunny"),)
    assert req.messages[3].parts == (
        ToolResultPart(tool_call_id="toolu_B", content="rain", is_error=True),
    )
    assert req.messages[4].parts == (TextPart("And tomorrow?"),)


def test_images_returned_by_a_tool_follow_the_tool_messages() -> None:
    source = {"type": "base64", "media_type": "image/png", "data": "AA=="}
    image = {"type": "image", "source": source}
    messages = [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "a picture"}, image],
                }
            ],
        },
    ]
    req = decode_chat_request(body(messages=messages))
    assert [m.role for m in req.messages] == ["assistant", "tool", "user"]
    assert req.messages[1].parts == (ToolResultPart(tool_call_id="t1", content="a picture"),)
    assert req.messages[2].parts == (ImagePart(data="AA==", media_type="image/png"),)


def test_thinking_blocks() -> None:
    messages = [
        {"role": "user", "content": "Think."},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Hmm.", "signature": "EqQB+/="},
                {"type": "redacted_thinking", "data": "EmwKAhgB"},
                {"type": "thinking", "thinking": "local model", "signature": ""},
                {"type": "text", "text": "Answer."},
            ],
        },
    ]
    parts = decode_chat_request(body(messages=messages)).messages[1].parts
    assert parts == (
        ThinkingPart("Hmm.", signature="EqQB+/=", provider="anthropic"),
        ThinkingPart("", redacted="EmwKAhgB", provider="anthropic"),
        ThinkingPart("local model"),
        TextPart("Answer."),
    )


def test_images_by_base64_and_url() -> None:
    content = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        {"type": "text", "text": "What are these?"},
    ]
    parts = (
        decode_chat_request(body(messages=[{"role": "user", "content": content}])).messages[0].parts
    )
    assert parts == (
        ImagePart(data="/9j/", media_type="image/jpeg"),
        ImagePart(url="https://example.com/a.png"),
        TextPart("What are these?"),
    )


def test_text_documents_become_text() -> None:
    content = [
        {
            "type": "document",
            "title": "Notes",
            "source": {"type": "text", "media_type": "text/plain", "data": "abc"},
        },
        {
            "type": "document",
            "source": {"type": "content", "content": [{"type": "text", "text": "def"}]},
        },
    ]
    parts = (
        decode_chat_request(body(messages=[{"role": "user", "content": content}])).messages[0].parts
    )
    assert parts == (TextPart("Notes\n\nabc"), TextPart("def"))


def test_pdf_documents_are_unsupported() -> None:
    content = [
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBER"},
        }
    ]
    with pytest.raises(UnsupportedFeatureError) as info:
        decode_chat_request(body(messages=[{"role": "user", "content": content}]))
    assert info.value.param == "messages.0.content.0.source"


def test_thinking_config() -> None:
    enabled = decode_chat_request(body(thinking={"type": "enabled", "budget_tokens": 31999}))
    assert enabled.thinking == ThinkingConfig(enabled=True, budget_tokens=31999)
    assert decode_chat_request(body(thinking={"type": "disabled"})).thinking is None
    adaptive = decode_chat_request(
        body(thinking={"type": "adaptive"}, output_config={"effort": "xhigh"})
    )
    assert adaptive.thinking == ThinkingConfig(enabled=True, effort="high")
    assert adaptive.provider_details == {
        "anthropic": {"thinking": {"type": "adaptive"}, "output_config": {"effort": "xhigh"}}
    }


def test_tools_keep_their_extra_fields() -> None:
    tools = [
        {
            "name": "Bash",
            "description": "Run a command",
            "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
            "cache_control": {"type": "ephemeral"},
            "strict": True,
        },
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
    ]
    req = decode_chat_request(body(tools=tools))
    assert req.tools[0] == ToolDefinition(
        name="Bash",
        description="Run a command",
        input_schema={"type": "object", "properties": {"command": {"type": "string"}}},
        provider_details={"anthropic": {"cache_control": {"type": "ephemeral"}, "strict": True}},
    )
    assert req.tools[1].provider_details == {
        "anthropic": {"type": "web_search_20250305", "max_uses": 5}
    }


@pytest.mark.parametrize(
    ("wire", "choice"),
    [
        ({"type": "auto"}, ToolChoice(mode="auto")),
        (
            {"type": "any", "disable_parallel_tool_use": True},
            ToolChoice(mode="any", disable_parallel=True),
        ),
        ({"type": "tool", "name": "Bash"}, ToolChoice(mode="tool", name="Bash")),
        ({"type": "none"}, ToolChoice(mode="none")),
    ],
)
def test_tool_choice(wire: dict[str, Any], choice: ToolChoice) -> None:
    assert decode_chat_request(body(tool_choice=wire)).tool_choice == choice


def test_unmodelled_fields_ride_in_provider_details() -> None:
    req = decode_chat_request(
        body(
            metadata={"user_id": "u-1"},
            cache_control={"type": "ephemeral"},
            service_tier="auto",
            context_management={"edits": []},
        )
    )
    assert req.provider_details == {
        "anthropic": {
            "metadata": {"user_id": "u-1"},
            "cache_control": {"type": "ephemeral"},
            "service_tier": "auto",
            "context_management": {"edits": []},
        }
    }


def test_structured_output() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    req = decode_chat_request(
        body(output_config={"format": {"type": "json_schema", "schema": schema}})
    )
    assert req.response_format == ResponseFormat(type="json_schema", schema=schema)


def test_count_tokens_needs_no_max_tokens() -> None:
    req = decode_count_tokens_request(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "system": "s"}
    )
    assert req.params.max_tokens is None
    assert [m.role for m in req.messages] == ["system", "user"]


# -- bad input ------------------------------------------------------------------------


@pytest.mark.parametrize("payload", [[], "text", 3, None])
def test_body_must_be_an_object(payload: object) -> None:
    with pytest.raises(InvalidRequestError, match="JSON object"):
        decode_chat_request(payload)


@pytest.mark.parametrize(
    ("payload", "param", "fragment"),
    [
        ({"model": "m", "messages": []}, "max_tokens", "required"),
        (body(model=None), "model", "string"),
        (body(messages={"role": "user"}), "messages", "list"),
        (body(messages=[{"role": "bot", "content": "x"}]), "messages.0.role", "'user'"),
        (body(messages=[{"role": "user", "content": 5}]), "messages.0.content", "string"),
        (
            body(
                messages=[
                    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "video"}]}
                ]
            ),
            "messages.0.content.1",
            "unknown type 'video'",
        ),
        (
            body(
                messages=[
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "name": "x", "input": {}}],
                    }
                ]
            ),
            "messages.0.content.0.id",
            "required",
        ),
        (body(max_tokens="100"), "max_tokens", "integer"),
        (body(max_tokens=-1), "max_tokens", "greater than"),
        (body(system=[{"type": "text"}]), "system.0.text", "required"),
        (body(tool_choice={"type": "sometimes"}), "tool_choice", "unknown type"),
        (
            body(
                messages=[
                    {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "a"}]}
                ]
            ),
            "messages.0.content.0",
            "user messages",
        ),
    ],
)
def test_invalid_fields_are_named(payload: dict[str, Any], param: str, fragment: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        decode_chat_request(payload)
    assert info.value.param == param
    assert info.value.message.startswith(f"{param}: ")
    assert fragment in info.value.message
    assert info.value.status_code == 400


# -- encoding -----------------------------------------------------------------------


def request(*messages: Message, **fields: Any) -> ChatRequest:
    return ChatRequest(model="claude-sonnet-4-5", messages=messages, **fields)


def test_encode_minimal() -> None:
    encoded = encode_chat_request(request(Message("user", (TextPart("hi"),))))
    assert encoded == {
        "model": "claude-sonnet-4-5",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "max_tokens": 4096,
    }


def test_encode_lifts_system_and_folds_tool_results() -> None:
    encoded = encode_chat_request(
        request(
            Message("system", (TextPart("Be brief."),)),
            Message("user", (TextPart("Weather?"),)),
            Message("assistant", (ToolCallPart("call_1", "weather", {"c": "Paris"}),)),
            Message("tool", (ToolResultPart("call_1", "sunny"),)),
            Message("tool", (ToolResultPart("call_2", "", is_error=True),)),
            Message("user", (TextPart("Thanks"),)),
            params=GenerationParams(max_tokens=100, temperature=0.5, stop=("X",)),
        )
    )
    assert encoded["system"] == "Be brief."
    assert encoded["max_tokens"] == 100
    assert encoded["temperature"] == 0.5
    assert encoded["stop_sequences"] == ["X"]
    assert encoded["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "call_1", "name": "weather", "input": {"c": "Paris"}}
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"},
                {"type": "tool_result", "tool_use_id": "call_2", "is_error": True},
                {"type": "text", "text": "Thanks"},
            ],
        },
    ]


def test_encode_merges_same_role_and_puts_tool_results_first() -> None:
    encoded = encode_chat_request(
        request(
            Message("assistant", (ToolCallPart("a", "f"),)),
            Message("user", (TextPart("extra"),)),
            Message("tool", (ToolResultPart("a", "ok"),)),
            Message("assistant", (TextPart("one"),)),
            Message("assistant", (TextPart("two"),)),
        )
    )
    assert encoded["messages"][1]["content"] == [
        {"type": "tool_result", "tool_use_id": "a", "content": "ok"},
        {"type": "text", "text": "extra"},
    ]
    assert encoded["messages"][2] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
    }


def test_encode_sends_only_anthropic_signed_thinking() -> None:
    assistant = Message(
        "assistant",
        (
            ThinkingPart("mine", signature="sig", provider="anthropic"),
            ThinkingPart("", redacted="enc", provider="anthropic"),
            ThinkingPart("unsigned local reasoning"),
            ThinkingPart("other", signature="gemini-sig", provider="gemini"),
            ThinkingPart("anthropic but unsigned", provider="anthropic"),
            TextPart("answer"),
        ),
    )
    encoded = encode_chat_request(request(Message("user", (TextPart("q"),)), assistant))
    assert encoded["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "mine", "signature": "sig"},
        {"type": "redacted_thinking", "data": "enc"},
        {"type": "text", "text": "answer"},
    ]


def test_encode_drops_turns_left_empty() -> None:
    encoded = encode_chat_request(
        request(
            Message("user", (TextPart("a"),)),
            Message("assistant", (ThinkingPart("local only"), TextPart(""))),
            Message("user", (TextPart("b"),)),
        )
    )
    assert encoded["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    ]


def test_encode_thinking_config() -> None:
    user = Message("user", (TextPart("q"),))
    default = encode_chat_request(request(user, thinking=ThinkingConfig()))
    assert default["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert default["max_tokens"] == 1024 + 4096
    big = encode_chat_request(
        request(
            user,
            thinking=ThinkingConfig(budget_tokens=8000),
            params=GenerationParams(max_tokens=4000),
        )
    )
    assert big["thinking"]["budget_tokens"] < big["max_tokens"]
    small = encode_chat_request(
        request(user, thinking=ThinkingConfig(), params=GenerationParams(max_tokens=500))
    )
    assert (small["thinking"]["budget_tokens"], small["max_tokens"]) == (1024, 1025)
    by_effort = encode_chat_request(request(user, thinking=ThinkingConfig(effort="medium")))
    assert by_effort["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    assert by_effort["max_tokens"] == 4096 + 4096
    assert encode_chat_request(request(user, thinking=ThinkingConfig(enabled=False)))[
        "thinking"
    ] == {"type": "disabled"}
    adaptive = decode_chat_request(body(thinking={"type": "adaptive", "display": "omitted"}))
    assert encode_chat_request(adaptive)["thinking"] == {"type": "adaptive", "display": "omitted"}


def test_encode_skips_thinking_when_the_tool_turn_has_no_signed_thinking() -> None:
    req = request(
        Message("user", (TextPart("q"),)),
        Message("assistant", (ThinkingPart("local"), ToolCallPart("c1", "f"))),
        Message("tool", (ToolResultPart("c1", "r"),)),
        thinking=ThinkingConfig(budget_tokens=2048),
    )
    assert "thinking" not in encode_chat_request(req)


def test_encode_tools_choice_and_passthrough_fields() -> None:
    req = decode_chat_request(
        body(
            tools=[
                {
                    "name": "Bash",
                    "input_schema": {"type": "object"},
                    "cache_control": {"type": "ephemeral"},
                },
                {"type": "web_search_20250305", "name": "web_search"},
            ],
            tool_choice={"type": "tool", "name": "Bash", "disable_parallel_tool_use": True},
            metadata={"user_id": "u"},
            output_config={
                "effort": "low",
                "format": {"type": "json_schema", "schema": {"type": "object"}},
            },
        )
    )
    encoded = encode_chat_request(req)
    assert encoded["tools"] == [
        {
            "name": "Bash",
            "input_schema": {"type": "object"},
            "cache_control": {"type": "ephemeral"},
        },
        {"name": "web_search", "type": "web_search_20250305"},
    ]
    assert encoded["tool_choice"] == {
        "type": "tool",
        "name": "Bash",
        "disable_parallel_tool_use": True,
    }
    assert encoded["metadata"] == {"user_id": "u"}
    assert encoded["output_config"] == {
        "effort": "low",
        "format": {"type": "json_schema", "schema": {"type": "object"}},
    }


def test_encode_images_and_tool_ids() -> None:
    encoded = encode_chat_request(
        request(
            Message(
                "user",
                (
                    ImagePart(data="AA", media_type="image/gif"),
                    ImagePart(url="data:image/webp;base64,BB"),
                    ImagePart(url="https://example.com/c.png"),
                ),
            ),
            Message("assistant", (ToolCallPart("ollama:call/1", "f", {"x": 1}),)),
            Message("tool", (ToolResultPart("ollama:call/1", "done"),)),
        )
    )
    assert [block["source"] for block in encoded["messages"][0]["content"]] == [
        {"type": "base64", "media_type": "image/gif", "data": "AA"},
        {"type": "base64", "media_type": "image/webp", "data": "BB"},
        {"type": "url", "url": "https://example.com/c.png"},
    ]
    assert encoded["messages"][1]["content"][0]["id"] == "ollama_call_1"
    assert encoded["messages"][2]["content"][0]["tool_use_id"] == "ollama_call_1"


def test_encode_keeps_cache_control_on_the_last_block() -> None:
    req = decode_chat_request(
        body(
            system=[{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "a"},
                        {
                            "type": "text",
                            "text": "b",
                            "cache_control": {"type": "ephemeral", "ttl": "1h"},
                        },
                    ],
                }
            ],
        )
    )
    encoded = encode_chat_request(req)
    assert encoded["system"] == [
        {"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}
    ]
    assert encoded["messages"][0]["content"][-1]["cache_control"] == {
        "type": "ephemeral",
        "ttl": "1h",
    }

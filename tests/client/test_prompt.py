"""Prompt translation and R1 merging: as neutral messages, and as the body on the wire."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from llmbridge.client import AdapterError, ErrorCode, OllamaAdapter, translate_prompt
from llmbridge.client.prompt import merge_consecutive_roles, needs_role_merging
from llmbridge.core.messages import Message, TextPart, ToolCallPart, ToolResultPart
from tests.client.conftest import DONE, chunk, collect, kinds
from tests.conftest import RunningServer
from tests.upstream import Canned, FakeUpstream

Upstream = tuple[FakeUpstream, RunningServer]

TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "user", "content": "And be quick."},
    {"role": "assistant", "content": "Checking.", "tool_calls": []},
    {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
    {"role": "tool_result", "tool_call_id": "call_1", "content": {"temp_c": 21}},
    {"role": "user", "content": "Thanks"},
]


@pytest.fixture
async def adapter(upstream: Upstream) -> AsyncIterator[OllamaAdapter]:
    _, server = upstream
    async with OllamaAdapter(server.url, default_model="llama3", max_retries=0) as adapter:
        yield adapter


def reply() -> Canned:
    return Canned(
        media_type="text/event-stream", chunks=[chunk({"content": "ok"}, finish="stop"), DONE]
    )


# -- translation ----------------------------------------------------------------------


def test_roles_translate_to_neutral_messages() -> None:
    messages = translate_prompt(CONVERSATION)
    assert [m.role for m in messages] == [
        "system",
        "user",
        "user",
        "assistant",
        "assistant",
        "tool",
        "user",
    ]
    assert messages[4] == Message(
        "assistant", (ToolCallPart("call_1", "get_weather", {"city": "Paris"}),)
    )
    assert messages[5] == Message("tool", (ToolResultPart("call_1", '{"temp_c":21}'),))


def test_a_string_is_one_user_message() -> None:
    assert translate_prompt("Hi") == (Message("user", (TextPart("Hi"),)),)


def test_non_string_user_and_system_content_is_stringified_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="llmbridge.client"):
        messages = translate_prompt(
            [
                {"role": "system", "content": ["be", "brief"]},
                {"role": "user", "content": {"question": "capital of France?"}},
                {"role": "user", "content": 42},
            ]
        )
    assert [m.text for m in messages] == [
        '["be","brief"]',
        '{"question":"capital of France?"}',
        "42",
    ]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3
    assert "non-string content" in warnings[0].getMessage()
    assert "(system)" in warnings[0].getMessage() and "(user)" in warnings[1].getMessage()


def test_tool_use_items_fed_back_as_assistant_content() -> None:
    (message,) = translate_prompt(
        [
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me check."},
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "get_weather",
                        "input": {"city": "Rome"},
                    },
                ],
            }
        ]
    )
    assert message.parts == (
        TextPart("Let me check."),
        ToolCallPart("t1", "get_weather", {"city": "Rome"}),
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"role": "tool_result", "content": "x"},
        {"role": "tool_request", "content": "x"},
        {"role": "wizard", "content": "x"},
        {"role": "assistant", "tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]},
        {"role": "assistant", "tool_calls": [{"nonsense": True}]},
        "not a message",
    ],
)
def test_untranslatable_messages(bad: object) -> None:
    with pytest.raises(AdapterError) as caught:
        translate_prompt([bad])  # type: ignore[list-item]
    assert caught.value.code is ErrorCode.PROMPT_TRANSLATION_FAILED


async def test_translation_error_is_an_error_event_before_any_request(
    adapter: OllamaAdapter, upstream: Upstream
) -> None:
    fake, _ = upstream
    sent_before = len(fake.bodies)
    events = await collect(adapter.call([{"role": "tool_result", "content": "orphan"}]))
    assert kinds(events) == ["ERROR", "END"]
    assert events[0].error is not None
    assert events[0].error.code is ErrorCode.PROMPT_TRANSLATION_FAILED
    assert len(fake.bodies) == sent_before


# -- R1 merging -----------------------------------------------------------------------


def test_r1_merging_matches_model_names_case_insensitively() -> None:
    assert needs_role_merging("deepseek-r1:14b", ("deepseek-r1",))
    assert needs_role_merging("DeepSeek-R1-Distill-Qwen-7B", ("deepseek-r1",))
    assert not needs_role_merging("deepseek-v3", ("deepseek-r1",))
    assert not needs_role_merging("llama3", ())


def test_merging_joins_texts_and_tool_calls_but_not_tool_results() -> None:
    merged = merge_consecutive_roles(translate_prompt(CONVERSATION))
    assert [m.role for m in merged] == ["system", "user", "assistant", "tool", "user"]
    assert merged[1].text == "Weather in Paris?\nAnd be quick."
    assert merged[2].parts == (
        TextPart("Checking."),
        ToolCallPart("call_1", "get_weather", {"city": "Paris"}),
    )
    two_results = [
        Message("tool", (ToolResultPart("a", "1"),)),
        Message("tool", (ToolResultPart("b", "2"),)),
    ]
    assert merge_consecutive_roles(two_results) == tuple(two_results)


async def test_wire_body_for_a_merging_model(adapter: OllamaAdapter, upstream: Upstream) -> None:
    fake, _ = upstream
    fake.queue.append(reply())
    events = await collect(adapter.call(CONVERSATION, model="DeepSeek-R1:8b"))
    assert kinds(events) == ["TOKEN", "METADATA", "END"]
    sent = orjson.loads(fake.bodies[-1])
    assert sent["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris?\nAnd be quick."},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c":21}'},
        {"role": "user", "content": "Thanks"},
    ]


async def test_wire_body_for_other_models_is_not_merged(
    adapter: OllamaAdapter, upstream: Upstream
) -> None:
    fake, _ = upstream
    fake.queue.append(reply())
    await collect(adapter.call(CONVERSATION))  # default_model="llama3"
    sent = orjson.loads(fake.bodies[-1])
    assert [m["role"] for m in sent["messages"]] == [
        "system",
        "user",
        "user",
        "assistant",
        "assistant",
        "tool",
        "user",
    ]
    # Assistant content is null beside tool calls.
    assert sent["messages"][4] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            }
        ],
    }
    assert sent["messages"][5] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": '{"temp_c":21}',
    }


async def test_merge_roles_models_is_configurable(upstream: Upstream) -> None:
    fake, server = upstream
    fake.queue.append(reply())
    async with OllamaAdapter(
        server.url, default_model="QwQ-32b", merge_roles_models=("qwq",), max_retries=0
    ) as adapter:
        await collect(
            adapter.call([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
        )
    sent = orjson.loads(fake.bodies[-1])
    assert sent["messages"] == [{"role": "user", "content": "a\nb"}]

"""Emulated tool calling ends an agent loop, and seed 000's fallback
hierarchy runs in full (features/tool_emulation.py, tool_turn.py, rule_selection.py,
apology.py). Exact decisions come from the scripted backend."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.accumulate import accumulate_sync
from llmbridge.core.events import StreamEvent
from llmbridge.core.messages import Message, TextPart, ToolCallPart, ToolDefinition, ToolResultPart
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.features.apology import APOLOGIES, apology, detect_language
from llmbridge.features.rule_selection import select_tool
from llmbridge.features.tool_emulation import (
    ANSWER_FROM_RESULTS,
    decision_prompt,
    emulate_tool_calls,
    parse_decision,
)
from llmbridge.features.tool_turn import current_turn

WEATHER = ToolDefinition(
    "get_weather",
    "The current weather in a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
CLOCK = ToolDefinition(
    "get_time",
    "The time of day on the server clock",
    {"type": "object", "properties": {}, "additionalProperties": False},
)
TOOLS = (WEATHER, CLOCK)
PARIS = {"city": "Paris"}
FIXED = datetime(2026, 3, 5, 14, 30, 0, tzinfo=UTC)


def user(text: str) -> Message:
    return Message("user", (TextPart(text),))


def called(name: str, arguments: dict[str, Any], call_id: str = "c1") -> Message:
    return Message("assistant", (ToolCallPart(call_id, name, arguments),))


def result(content: str, call_id: str = "c1", name: str | None = None) -> Message:
    return Message("tool", (ToolResultPart(call_id, content, name=name),))


def request(*messages: Message, tools: tuple[ToolDefinition, ...] = TOOLS) -> ChatRequest:
    return ChatRequest(model="m", messages=messages, tools=tools)


AFTER_RESULT = request(
    user("What is the weather in Paris?"), called("get_weather", PARIS), result("Sunny, 21 °C")
)


def tool_call(name: str, arguments: dict[str, Any]) -> str:
    return json.dumps({"action": "tool_call", "tool_name": name, "arguments": arguments})


async def run(backend: ScriptedBackend, chat: ChatRequest) -> ChatResponse:
    events: list[StreamEvent] = [
        e async for e in emulate_tool_calls(backend.chat, chat, clock=lambda: FIXED)
    ]
    return accumulate_sync(events)


def toolless(*scripts: Script) -> ScriptedBackend:
    backend = ScriptedBackend(capabilities=frozenset({"completion"}))
    backend.enqueue(*scripts)
    return backend


# -- the loop ends ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [PARIS, json.dumps(PARIS)],
    ids=["object", "as-a-string"],
)
async def test_a_call_whose_result_is_in_becomes_an_answer_from_that_result(
    arguments: Any,
) -> None:
    backend = toolless(
        Script(text=[tool_call("get_weather", arguments)], usage=Usage(300, 20)),
        Script(text=["It is sunny and 21 °C in Paris."], usage=Usage(120, 9)),
    )
    reply = await run(backend, AFTER_RESULT)
    assert reply.usage == Usage(420, 29)  # both model calls were spent on it
    assert reply.message.text == "It is sunny and 21 °C in Paris."
    assert not reply.message.tool_calls and reply.stop_reason is StopReason.END_TURN
    answer = backend.requests[1]
    assert answer.tools == () and answer.messages[-2].text == ANSWER_FROM_RESULTS
    assert any(isinstance(p, ToolResultPart) for m in answer.messages for p in m.parts)
    assert len(backend.requests) == 2


async def test_a_different_call_after_a_result_still_goes_out() -> None:
    backend = toolless(Script(text=[tool_call("get_weather", {"city": "Lyon"})]))
    reply = await run(backend, AFTER_RESULT)
    assert [(c.name, c.arguments) for c in reply.message.tool_calls] == [
        ("get_weather", {"city": "Lyon"})
    ]
    assert len(backend.requests) == 1


async def test_a_request_the_user_repeats_is_carried_out_again() -> None:
    # Seed 000: "開燈" again five minutes later is executed again, not assumed done.
    again = request(
        *AFTER_RESULT.messages, Message("assistant", (TextPart("Sunny."),)), user("And now?")
    )
    backend = toolless(Script(text=[tool_call("get_weather", PARIS)]))
    reply = await run(backend, again)
    assert [c.name for c in reply.message.tool_calls] == ["get_weather"]


async def test_an_invented_tool_after_results_is_answered_from_them() -> None:
    backend = toolless(
        Script(text=[tool_call("LaunchRockets", {})]), Script(text=["Sunny, 21 °C."])
    )
    reply = await run(backend, AFTER_RESULT)
    assert reply.message.text == "Sunny, 21 °C." and not reply.message.tool_calls
    # before any result it is still the seed's "unknown"
    backend = toolless(Script(text=[tool_call("LaunchRockets", {})]))
    reply = await run(backend, request(user("Launch them")))
    assert [c.name for c in reply.message.tool_calls] == ["unknown"]


async def test_anthropic_results_in_a_user_message_with_text_continue_the_turn() -> None:
    results = Message(
        "user",
        (ToolResultPart("c1", "Sunny, 21 °C"), TextPart("<system-reminder>x</system-reminder>")),
    )
    chat = request(user("What is the weather in Paris?"), called("get_weather", PARIS), results)
    turn = current_turn(chat.messages)
    assert turn.request == "What is the weather in Paris?"
    assert turn.answered_call("get_weather", PARIS) is not None
    backend = toolless(Script(text=[tool_call("get_weather", PARIS)]), Script(text=["Sunny."]))
    assert (await run(backend, chat)).message.text == "Sunny."


def test_results_without_ids_are_matched_by_name_then_in_order() -> None:
    turn = current_turn(
        [
            user("weather and time"),
            Message(
                "assistant",
                (ToolCallPart("", "get_weather", PARIS), ToolCallPart("", "get_time", {})),
            ),
            result("14:30", call_id="", name="get_time"),
            result("Sunny", call_id=""),
        ]
    )
    assert [(c.name, c.arguments, c.result) for c in turn.answered] == [
        ("get_time", {}, "14:30"),
        ("get_weather", PARIS, "Sunny"),
    ]


@pytest.mark.parametrize(
    "decision",
    [
        tool_call("get_weather", PARIS),  # the repeat
        tool_call("Nope", {}),  # an invented tool
        "not json",  # no decision at all
        json.dumps({"action": "answer", "content": " "}),  # a blank answer
    ],
)
@pytest.mark.parametrize("fallback", [["Sunny."], ["  "], []])
async def test_after_a_result_the_reply_is_text_within_two_model_calls(
    decision: str, fallback: list[str]
) -> None:
    """Whatever the model writes, the loop ends here: text, and at most two calls."""
    backend = toolless(Script(text=[decision]), Script(text=fallback))
    reply = await run(backend, AFTER_RESULT)
    assert reply.message.text.strip() and not reply.message.tool_calls
    assert len(backend.requests) <= 2
    if not "".join(fallback).strip():
        assert reply.message.text == APOLOGIES["en"]


# -- the prompts -----------------------------------------------------------------------


def test_the_decision_sees_the_results_as_results() -> None:
    anthropic_style = request(
        user("What is the weather in Paris?"),
        called("get_weather", PARIS),
        Message("user", (ToolResultPart("c1", "Sunny, 21 °C"),)),
    )
    prompt = decision_prompt(anthropic_style, now=FIXED)
    assert "Current user request:\nWhat is the weather in Paris?" in prompt
    assert "tool: [get_weather result: Sunny, 21 °C]" in prompt  # not "user: ..."
    assert "Tool results for the current request" in prompt
    assert '- get_weather {"city":"Paris"} returned: Sunny, 21 °C' in prompt
    assert "never call them again with the same arguments" in prompt
    plain = decision_prompt(request(user("hello")), now=FIXED)
    assert "Tool results for the current request" not in plain


def test_the_decision_prompt_keeps_the_seed_rules_and_examples() -> None:
    prompt = decision_prompt(request(user("hello")), now=FIXED)
    assert "When in doubt between action and conversation: prefer CHAT" in prompt
    assert "EXECUTE IT AGAIN" in prompt and "Never assume the state" in prompt
    assert "query tool (Get*, Query*, Fetch*, *Status, *Context)" in prompt
    # the seed's examples, its non-English ones included
    for example in ("開客廳的燈", "客廳的燈是開著的嗎", "是的，客廳的燈現在是開著的", '"開燈"'):
        assert example in prompt
    assert prompt.endswith("Current date/time: Thursday, 2026-03-05T14:30:00+00:00")


async def test_the_conversation_prompt_carries_the_date_and_time_last() -> None:
    """Seed 000 ends the system prompt with the date and time; it comes after the
    conversation instead, so that the prompt's head stays the same."""
    backend = toolless(Script(text=["not json"]), Script(text=["Hello!"]))
    system = Message("system", (TextPart("You are a voice assistant."),))
    await run(backend, request(system, user("hello")))
    fallback = backend.requests[1]
    assert fallback.messages[0] == system
    assert fallback.messages[-1].role == "system"
    assert fallback.messages[-1].text == "Current date/time: Thursday, 2026-03-05T14:30:00+00:00"
    backend = toolless(Script(text=["not json"]), Script(text=["Hello!"]))
    await run(backend, request(user("hello")))
    assert re.fullmatch(r"Current date/time: \w+, \S+", backend.requests[1].messages[-1].text)


@pytest.mark.parametrize("written", ["GetTime", "get-time", "GET_TIME", "getTime"])
def test_a_tool_name_spelt_differently_means_the_offered_tool(written: str) -> None:
    decision = parse_decision(tool_call(written, {}), TOOLS)
    assert decision is not None and decision.tool_name == "get_time"
    alike = (ToolDefinition("get_time"), ToolDefinition("GetTime"))
    decision = parse_decision(tool_call("gettime", {}), alike)  # two alike: neither
    assert decision is not None and decision.tool_name == "unknown"


def test_keys_the_tool_does_not_declare_are_dropped() -> None:
    # seen on the embedded model: get_time called with the seed example's arguments
    copied = {"domain": "light", "service": "turn_on", "entity_id": "light.living_room"}
    decision = parse_decision(tool_call("get_time", copied), TOOLS)
    assert decision is not None and decision.arguments == {}
    decision = parse_decision(tool_call("get_weather", {"city": "Paris", "unit": "C"}), TOOLS)
    assert decision is not None and decision.arguments == {"city": "Paris"}
    # a schema that allows other keys, or declares none, keeps them all
    open_schema = ToolDefinition(
        "search", "", {"type": "object", "properties": {"q": {}}, "additionalProperties": True}
    )
    free = ToolDefinition("run", "", {"type": "object"})
    for tool in (open_schema, free):
        decision = parse_decision(tool_call(tool.name, {"q": 1, "x": 2}), (tool,))
        assert decision is not None and decision.arguments == {"q": 1, "x": 2}


# -- rule-based selection ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("words", "selected"),
    [
        ("What time is it?", "get_time"),  # only get_time's words match, no parameters
        ("Show me the server clock", "get_time"),
        ("What is the weather in Paris?", None),  # get_weather needs a city: never guessed
        ("What is the weather and the time?", None),  # two tools match: ambiguous
        ("Hello there!", None),  # nothing matches
        ("現在幾點", None),  # other words than the tools'
        ("", None),
    ],
)
def test_rule_based_selection_is_deterministic_and_timid(words: str, selected: str | None) -> None:
    tool = select_tool(words, TOOLS)
    assert (tool.name if tool else None) == selected


def test_tool_names_are_split_into_words() -> None:
    live = ToolDefinition("GetLiveContext", "Provides real-time information about devices")
    turn_on = ToolDefinition(
        "HassTurnOn", "Turns on a device", {"type": "object", "required": ["name"]}
    )
    assert select_tool("the live context please", (live, turn_on)) is live
    assert select_tool("list my devices", (live, turn_on)) is None  # both mention devices


async def test_an_unreadable_decision_falls_back_to_the_rule_based_call() -> None:
    backend = toolless(Script(text=["I would check the clock"]))
    reply = await run(backend, request(user("What time is it?")))
    assert [(c.name, c.arguments) for c in reply.message.tool_calls] == [("get_time", {})]
    assert reply.stop_reason is StopReason.TOOL_USE
    assert len(backend.requests) == 1  # no model call for it


async def test_no_rule_based_call_once_the_results_are_in() -> None:
    chat = request(user("What time is it?"), called("get_time", {}), result("14:30"))
    backend = toolless(Script(text=["garbage"]), Script(text=["It is 14:30."]))
    reply = await run(backend, chat)
    assert reply.message.text == "It is 14:30." and not reply.message.tool_calls


# -- the apology -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("words", "language"),
    [
        ("What is the weather like?", "en"),
        ("開客廳的燈", "zh-Hant"),
        ("客廳的燈是開著的嗎", "zh-Hant"),
        ("开客厅的灯", "zh-Hans"),
        ("電気をつけて", "ja"),
        ("불 켜줘", "ko"),
        ("Bonjour, quel temps fait-il ?", "fr"),
        ("Wie ist das Wetter heute?", "de"),
        ("¿Qué tiempo hace hoy?", "es"),
        ("", "en"),
        ("12345", "en"),
    ],
)
def test_the_language_is_read_from_the_words(words: str, language: str) -> None:
    assert detect_language(words) == language
    assert apology(words) == APOLOGIES[language]

"""features/tool_emulation.py: the decision prompt and reading the model's decision."""

from __future__ import annotations

import pytest

from llmbridge.core.messages import Message, TextPart, ToolCallPart, ToolDefinition, ToolResultPart
from llmbridge.core.request import ChatRequest
from llmbridge.features.tool_emulation import HISTORY_MESSAGES, decision_prompt, parse_decision

LIGHT = ToolDefinition(
    "CallService",
    "Call a Home Assistant service",
    {
        "type": "object",
        "properties": {
            "domain": {"type": "string", "description": "e.g. light"},
            "service": {"type": "string", "enum": ["turn_on", "turn_off"]},
            "brightness": {"type": "integer"},
        },
        "required": ["domain", "service"],
    },
)
TOOLS = (LIGHT, ToolDefinition("GetLiveContext", "Current device states"))


@pytest.mark.parametrize(
    "reply",
    [
        '{"action": "tool_call", "tool_name": "CallService", '
        '"arguments": {"domain": "light", "service": "turn_on"}}',
        '```json\n{"action": "tool_call", "tool_name": "CallService", '
        '"arguments": {"domain": "light", "service": "turn_on"}}\n```',
        'Sure! Here is my decision: {"action": "tool_call", "tool_name": "CallService", '
        '"arguments": {"domain": "light", "service": "turn_on"}} Hope that helps.',
        "{'action': 'tool_call', 'tool_name': 'CallService', "
        "'arguments': {'domain': 'light', 'service': 'turn_on'}",  # quotes, missing brace
        '{"action": "tool_call", "tool_name": "CallService", '
        '"arguments": "{\\"domain\\": \\"light\\", \\"service\\": \\"turn_on\\"}"}',
    ],
    ids=["plain", "fenced", "prose-around", "damaged", "arguments-as-string"],
)
def test_tool_calls_are_read_however_they_are_wrapped(reply: str) -> None:
    decision = parse_decision(reply, TOOLS)
    assert decision is not None
    assert (decision.action, decision.tool_name) == ("tool_call", "CallService")
    assert decision.arguments == {"domain": "light", "service": "turn_on"}


def test_a_tool_never_offered_becomes_unknown() -> None:
    decision = parse_decision('{"action": "tool_call", "tool_name": "LaunchRockets"}', TOOLS)
    assert decision is not None and decision.tool_name == "unknown"


@pytest.mark.parametrize(
    ("reply", "action", "content"),
    [
        ('{"action": "chat", "content": "Hallo! Wie kann ich helfen?"}', "chat", "Hallo!"),
        ('{"action": "answer", "content": "客廳的燈是開著的"}', "answer", "客廳的燈"),
    ],
)
def test_answers_and_chat(reply: str, action: str, content: str) -> None:
    decision = parse_decision(reply, TOOLS)
    assert decision is not None and decision.action == action
    assert decision.content.startswith(content)


@pytest.mark.parametrize(
    "reply",
    ["no json here", '{"action": "dance"}', '{"action": "chat", "content": ""}', "[1, 2]"],
)
def test_no_decision(reply: str) -> None:
    assert parse_decision(reply, TOOLS) is None


def test_prompt_has_context_history_tools_rules_and_a_grounded_example() -> None:
    history = [Message("user", (TextPart(f"message {i}"),)) for i in range(15)]
    request = ChatRequest(
        model="m",
        messages=(
            Message("system", (TextPart("You control a smart home."),)),
            *history,
            Message("assistant", (ToolCallPart("c1", "GetLiveContext", {}),)),
            Message("tool", (ToolResultPart("c1", "kitchen light: on"),)),
        ),
        tools=TOOLS,
    )
    prompt = decision_prompt(request)
    assert "You control a smart home." in prompt
    assert "message 14" in prompt and "message 5" not in prompt  # the last 10 messages
    assert HISTORY_MESSAGES == 10
    assert "[GetLiveContext result: kitchen light: on]" in prompt
    assert "1. CallService" in prompt and "service (string, required)" in prompt
    assert "(one of turn_on, turn_off)" in prompt
    assert "EXECUTE IT AGAIN" in prompt and "Never assume the state" in prompt
    assert "language of the user's last message" in prompt
    assert '"tool_name":"CallService"' in prompt  # the example names a real tool

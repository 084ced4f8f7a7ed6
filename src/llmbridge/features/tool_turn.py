"""The current turn of a conversation: the user's last request and the tool calls made
for it whose results are already in.

Tool-call emulation (features/tool_emulation.py) needs both to end an agent loop:
the decision must see the results as results (seed 000: "if the tool result answers
the question, answer"), and a call whose result is already in the conversation is
never emitted again (without this a small model asked for the same
``get_weather(city=Paris)`` after every result, forever).

The turn begins after the user's last message that carries no tool result. Anthropic
sends tool results inside ``user`` messages, sometimes with text beside them (Claude
Code adds reminders there); such a message continues the tool loop, it is not a new
request. A new user request ends the turn, so a request the user repeats is carried
out again (seed 000's rule: never assume a device's state from the history).

Results are matched to their calls by id, then, for clients that send no ids, by the
tool's name, then in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llmbridge.core.messages import Message, ToolCallPart, ToolResultPart

__all__ = ["AnsweredCall", "Turn", "current_turn", "is_tool_results"]


@dataclass(frozen=True, slots=True)
class AnsweredCall:
    """A tool call of the current turn and its result."""

    name: str
    arguments: dict[str, Any] | None
    """``None`` when the result came without its call (nothing to compare with)."""
    result: str
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class Turn:
    request: str
    """The text of the user's last request ("" when there is none)."""
    answered: tuple[AnsweredCall, ...] = ()
    """The calls made for it whose results are in, oldest first."""

    def answered_call(self, name: str, arguments: dict[str, Any] | None) -> AnsweredCall | None:
        """The earlier call with this name and these arguments, if its result is in."""
        for call in self.answered:
            if call.name == name and call.arguments == (arguments or {}):
                return call
        return None


def is_tool_results(message: Message) -> bool:
    """Whether ``message`` carries tool results (a ``tool`` message, or an Anthropic
    ``user`` message with ``tool_result`` blocks)."""
    return any(isinstance(part, ToolResultPart) for part in message.parts)


def current_turn(messages: Sequence[Message]) -> Turn:
    """The user's last request and the answered calls made since (module docstring)."""
    start = 0
    request = ""
    for index, message in enumerate(messages):
        if message.role == "user" and not is_tool_results(message):
            start, request = index + 1, message.text
    calls: list[ToolCallPart] = []
    answered: list[tuple[ToolCallPart | None, ToolResultPart]] = []
    for message in messages[start:]:
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                calls.append(part)
            elif isinstance(part, ToolResultPart):
                call = _take_call(calls, part)
                answered.append((call, part))
    return Turn(
        request=request,
        answered=tuple(
            AnsweredCall(
                name=call.name if call is not None else part.name or "tool",
                arguments=dict(call.arguments) if call is not None else None,
                result=part.content,
                is_error=part.is_error,
            )
            for call, part in answered
        ),
    )


def _take_call(calls: list[ToolCallPart], result: ToolResultPart) -> ToolCallPart | None:
    """Remove and return the call ``result`` answers (by id, then name, then order)."""
    for match in (
        lambda c: bool(result.tool_call_id) and c.id == result.tool_call_id,
        lambda c: result.name is not None and c.name == result.name,
        lambda c: True,
    ):
        for index, call in enumerate(calls):
            if match(call):
                return calls.pop(index)
    return None

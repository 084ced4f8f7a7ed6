"""``tool_choice`` for backends that cannot enforce it themselves.

OpenAI-compatible servers take ``tool_choice`` natively. Ollama's API has no such
field (its OpenAI layer ignores it) and the embedded model has no tool calling of its
own, so for those the choice becomes what the backend can do: ``none`` removes the
tools from the request; ``any`` and ``tool`` add an instruction to the system prompt,
and ``tool`` also narrows the tools offered to the one named.
"""

from __future__ import annotations

from dataclasses import replace

from llmbridge.core.messages import Message, TextPart
from llmbridge.core.request import ChatRequest

__all__ = ["ANY_TOOL_INSTRUCTION", "apply_tool_choice", "named_tool_instruction"]

ANY_TOOL_INSTRUCTION = "You must answer by calling one of the available tools."


def named_tool_instruction(name: str) -> str:
    return f"You must answer by calling the tool `{name}`."


def apply_tool_choice(request: ChatRequest, *, native: bool, emulated: bool = False) -> ChatRequest:
    """The request with its tool choice expressed in a form the backend honours.

    ``emulated``: the tool emulation (features/tool_emulation.py) will decide the tool
    calls, and it keeps the forcing choice: with a backend that holds a reply to a
    schema its decision can then only be a call (the instruction alone is one a small
    model may not follow); it never passes the choice on to the backend."""
    choice = request.tool_choice
    if native or choice is None or choice.mode == "auto" or not request.tools:
        return request
    if choice.mode == "none":
        return replace(request, tools=(), tool_choice=None)
    tools = request.tools
    if choice.mode == "tool" and choice.name:
        tools = tuple(t for t in request.tools if t.name == choice.name) or request.tools
        instruction = named_tool_instruction(choice.name)
    else:
        instruction = ANY_TOOL_INSTRUCTION
    return replace(
        request,
        tools=tools,
        tool_choice=choice if emulated else None,
        messages=_with_system_instruction(request.messages, instruction),
    )


def _with_system_instruction(
    messages: tuple[Message, ...], instruction: str
) -> tuple[Message, ...]:
    if messages and messages[0].role == "system":
        first = messages[0]
        return (replace(first, parts=(*first.parts, TextPart("\n\n" + instruction))), *messages[1:])
    return (Message(role="system", parts=(TextPart(instruction),)), *messages)

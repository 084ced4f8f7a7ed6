"""Prompt translation: ART-style prompt messages to neutral ``Message`` values, and R1 merging.

A prompt is a string (one user message), a neutral ``Message``, or a sequence of
either neutral messages or mappings shaped like ART's ``ArtStandardMessage``::

    {"role": "system" | "user" | "assistant" | "tool_result",
     "content": str | None | anything,
     "tool_calls": [...],          # assistant only
     "tool_call_id": "...",        # tool_result only
     "name": "..."}

Roles follow seed 003: ``tool_result`` (or its alias ``tool``) becomes a neutral
``tool`` message holding one ``ToolResultPart`` with the ``tool_call_id``; non-string
content of ``system`` and ``user`` messages is stringified (JSON where possible) with
a logged warning; assistant content may be ``None`` beside tool calls. Assistant
tool calls are accepted in OpenAI's shape (``{"id", "type": "function", "function":
{"name", "arguments"}}``) or as the adapter's own ``tool_use`` items, so a framework
can feed a reply straight back. The dialect codecs then encode these messages for
whichever API the adapter talks to.

R1-style merging (for models such as ``deepseek-r1`` that reject two messages of the
same role in a row) joins consecutive ``user`` or ``assistant`` messages: texts are
joined with a newline, and an assistant's tool calls follow the merged text.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias, TypeGuard

import orjson

from llmbridge.client.events import AdapterError, ErrorCode
from llmbridge.core.messages import (
    ImagePart,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)
from llmbridge.core.tool_arguments import parse_tool_arguments

__all__ = [
    "Prompt",
    "PromptMessage",
    "merge_consecutive_roles",
    "needs_role_merging",
    "translate_prompt",
]

log = logging.getLogger("llmbridge.client")

PromptMessage: TypeAlias = Mapping[str, Any] | Message
Prompt: TypeAlias = str | Message | Sequence[PromptMessage]


def translate_prompt(prompt: Prompt) -> tuple[Message, ...]:
    """Neutral messages for ``prompt``.

    Raises:
        AdapterError: ``PROMPT_TRANSLATION_FAILED`` for an unknown role, a tool result
            without ``tool_call_id``, a malformed tool call or a prompt of another type.
    """
    if isinstance(prompt, str):
        return (Message("user", (TextPart(prompt),)),)
    if isinstance(prompt, Message):
        return (prompt,)
    if isinstance(prompt, Mapping) or not isinstance(prompt, Sequence):
        raise _failed(
            f"a prompt is a string or a sequence of messages, not {type(prompt).__name__}"
        )
    return tuple(_translate_message(item, index) for index, item in enumerate(prompt))


def _translate_message(item: object, index: int) -> Message:
    if isinstance(item, Message):
        return item
    if not isinstance(item, Mapping):
        raise _failed(f"prompt message {index} is a {type(item).__name__}, not a mapping")
    role = item.get("role")
    name = item.get("name") if isinstance(item.get("name"), str) else None
    content = item.get("content")
    if role in ("system", "user"):
        return Message(role, (TextPart(_stringified(content, role, index)),), name=name)
    if role == "assistant":
        return _assistant(item, content, index, name)
    if role in ("tool_result", "tool"):
        call_id = item.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise _failed(f"prompt message {index}: a 'tool_result' needs a 'tool_call_id'")
        result = ToolResultPart(
            tool_call_id=call_id,
            content=_as_text(content),
            is_error=bool(item.get("is_error", False)),
            name=name,
        )
        return Message("tool", (result,))
    if role == "tool_request":
        raise _failed(
            f"prompt message {index}: 'tool_request' is not sent as a message; put the "
            "calls in the assistant message's 'tool_calls'"
        )
    raise _failed(f"prompt message {index} has an unknown role {role!r}")


def _assistant(item: Mapping[str, Any], content: object, index: int, name: str | None) -> Message:
    parts: list[Part] = []
    calls: list[ToolCallPart] = []
    if isinstance(content, str):
        if content:
            parts.append(TextPart(content))
    elif _is_item_list(content):
        # The adapter's own list-shaped TOKEN data, fed back as history.
        for entry in content:
            if entry["type"] == "text":
                parts.append(TextPart(str(entry.get("text", ""))))
            else:
                calls.append(_tool_call(entry, index))
    elif content is not None:
        parts.append(TextPart(_stringified(content, "assistant", index)))
    raw_calls = item.get("tool_calls") or ()
    if not isinstance(raw_calls, Sequence) or isinstance(raw_calls, str | bytes):
        raise _failed(f"prompt message {index}: 'tool_calls' must be a list")
    calls.extend(_tool_call(call, index) for call in raw_calls)
    return Message("assistant", (*parts, *calls), name=name)


def _is_item_list(content: object) -> TypeGuard[list[Mapping[str, Any]]]:
    return (
        isinstance(content, list)
        and bool(content)
        and all(
            isinstance(entry, Mapping) and entry.get("type") in ("text", "tool_use")
            for entry in content
        )
    )


def _tool_call(call: object, index: int) -> ToolCallPart:
    """An OpenAI-shaped tool call or a ``tool_use`` item."""
    if isinstance(call, Mapping) and call.get("type") == "tool_use":
        call_id, name, arguments = call.get("id"), call.get("name"), call.get("input")
    elif isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
        function = call["function"]
        call_id, name, arguments = call.get("id"), function.get("name"), function.get("arguments")
    else:
        raise _failed(f"prompt message {index} has a malformed tool call: {call!r}")
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
        raise _failed(f"prompt message {index} has a tool call without an id or a name")
    parsed, raw = parse_tool_arguments(arguments)
    return ToolCallPart(id=call_id, name=name, arguments=parsed, raw_arguments=raw)


def _stringified(content: object, role: str, index: int) -> str:
    if isinstance(content, str):
        return content
    log.warning(
        "prompt message %d (%s) has non-string content of type %s; sending it as text",
        index,
        role,
        type(content).__name__,
    )
    return _as_text(content)


def _as_text(content: object) -> str:
    """Strings as they are; ``None`` as ""; other values as JSON when they can be."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    try:
        return orjson.dumps(content).decode()
    except TypeError:
        return str(content)


def _failed(message: str) -> AdapterError:
    return AdapterError(message, ErrorCode.PROMPT_TRANSLATION_FAILED)


# -- R1-style merging -----------------------------------------------------------------


def needs_role_merging(model: str, merge_roles_models: Iterable[str]) -> bool:
    """Whether ``model``'s name contains one of ``merge_roles_models`` (case-insensitive)."""
    lowered = model.lower()
    return any(pattern and pattern.lower() in lowered for pattern in merge_roles_models)


def merge_consecutive_roles(messages: Sequence[Message]) -> tuple[Message, ...]:
    """Join consecutive ``user`` messages and consecutive ``assistant`` messages.

    System and tool messages are never merged (tool results answer different calls).
    """
    merged: list[Message] = []
    for message in messages:
        previous = merged[-1] if merged else None
        if (
            previous is not None
            and previous.role == message.role
            and message.role in ("user", "assistant")
        ):
            merged[-1] = _merge_pair(previous, message)
        else:
            merged.append(message)
    return tuple(merged)


def _merge_pair(first: Message, second: Message) -> Message:
    texts = [text for text in (first.text, second.text) if text]
    text = "\n".join(texts).strip()
    both = (*first.parts, *second.parts)
    parts: list[Part] = [p for p in both if isinstance(p, ThinkingPart)]
    if text:
        parts.append(TextPart(text))
    parts.extend(p for p in both if isinstance(p, ImagePart))
    parts.extend(p for p in both if isinstance(p, ToolCallPart))
    parts.extend(p for p in both if isinstance(p, ToolResultPart))
    return Message(first.role, tuple(parts), name=first.name or second.name)

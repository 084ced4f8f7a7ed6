"""Rule-based tool selection: seed 000's second step when the model's decision fails.

When the model's tool decision cannot be read (features/tool_emulation.py), seed 000
tries ``fallbackToolSelection(userMessage)`` before falling back to chat: a
deterministic match of the user's words against the tools. This module owns that
match, and it is deliberately timid, because a wrong tool call does something while
a chat reply only says something:

- the user's words (lower-cased, a plural ``s`` dropped) are compared with the words
  of each tool's name (``HassTurnOn`` -> hass, turn, on; ``get_weather`` -> get,
  weather) and description; common function words and generic tool verbs (get, set,
  call...) never count;
- a tool is selected only when it is the **only** tool any of the user's words
  match (unambiguous), and only when it takes no required parameters: a call is
  emitted complete, and no value is ever guessed from the words.

Languages whose words differ from the tools' (a Chinese request, English tool
names) match nothing, and the emulation goes on to its next fallback.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from llmbridge.core.messages import ToolDefinition

__all__ = ["select_tool"]

_WORD = re.compile(r"[^\W_]+")
_NAME_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_MIN_LENGTH = 3
"""Shorter words (on, in, a, is...) say too little to pick a tool."""


def _normal(word: str) -> str:
    word = word.lower()
    return word[:-1] if len(word) > _MIN_LENGTH and word.endswith("s") else word


_IGNORED = frozenset(
    _normal(word)
    for word in _WORD.findall(
        """
    the and for are was were has have had not but you your yours our this that these those
    with from into onto about what which who whom whose when where why how can could would
    should will shall may might must does did doing done please thanks thank there here
    then than them they their its just any all some each every tell give show want
    need like make let get set call fetch query list use using run tool tools function
    current currently now value values data info information return returns provide
    provides given via also only one
    """
    )
)
"""Function words and generic tool vocabulary: matching them singles out no tool."""


def _content_words(words: Sequence[str]) -> set[str]:
    normal = {_normal(w) for w in words}
    return {w for w in normal if len(w) >= _MIN_LENGTH and w not in _IGNORED}


def _tool_words(tool: ToolDefinition) -> set[str]:
    """The words of a tool's name and description that can match a request."""
    name_parts = [
        p for chunk in _WORD.findall(tool.name) for p in _NAME_PART.findall(chunk) or [chunk]
    ]
    return _content_words([*name_parts, *_WORD.findall(tool.description)])


def _required(tool: ToolDefinition) -> list[str]:
    required = tool.input_schema.get("required")
    return list(required) if isinstance(required, list) else []


def select_tool(user_text: str, tools: Sequence[ToolDefinition]) -> ToolDefinition | None:
    """The one tool ``user_text`` unambiguously asks for, or ``None`` (module docstring)."""
    words = _content_words(_WORD.findall(user_text))
    if not words:
        return None
    matching = [tool for tool in tools if words & _tool_words(tool)]
    if len(matching) != 1 or _required(matching[0]):
        return None
    return matching[0]

"""Conversation values: message parts, messages and tool definitions.

These are plain immutable values. Identity (database ids, parent links) is a storage
concern and lives elsewhere; wire spellings live in ``dialects``. Anything a dialect
carries that this module does not model rides along in ``provider_details`` so that a
round trip through the core loses nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from llmbridge.core.frozen import faster_frozen_init

__all__ = [
    "ImagePart",
    "Message",
    "Part",
    "Role",
    "TextPart",
    "ThinkingPart",
    "ToolCallPart",
    "ToolChoice",
    "ToolDefinition",
    "ToolResultPart",
    "message_text",
]

Role = Literal["system", "user", "assistant", "tool"]


@faster_frozen_init
@dataclass(frozen=True, slots=True)
class TextPart:
    """Plain text."""

    text: str
    kind: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image, inline (base64 ``data``) or by ``url``."""

    data: str | None = None
    """Base64-encoded bytes, without a ``data:`` prefix."""
    media_type: str | None = None
    """MIME type such as ``image/png``, when known."""
    url: str | None = None
    """A remote or data URL, when the image was given by reference."""
    kind: Literal["image"] = "image"


@faster_frozen_init
@dataclass(frozen=True, slots=True)
class ThinkingPart:
    """Model reasoning shown before the answer.

    ``signature`` is opaque and must be passed back byte for byte; ``redacted`` holds
    Anthropic's encrypted ``redacted_thinking`` data when the text is hidden.
    """

    text: str
    signature: str | None = None
    redacted: str | None = None
    provider: str | None = None
    """Which kind of backend produced the signature (e.g. ``anthropic``)."""
    kind: Literal["thinking"] = "thinking"


@faster_frozen_init
@dataclass(frozen=True, slots=True)
class ToolCallPart:
    """A request by the model to call a tool.

    ``arguments`` is the parsed JSON object. ``raw_arguments`` keeps the text the
    backend sent when it could not be parsed into an object, so nothing is lost.
    """

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    raw_arguments: str | None = None
    kind: Literal["tool_call"] = "tool_call"


@faster_frozen_init
@dataclass(frozen=True, slots=True)
class ToolResultPart:
    """The result of a tool call, sent back to the model."""

    tool_call_id: str
    content: str
    is_error: bool = False
    name: str | None = None
    """The tool's name, where the dialect carries it (Ollama's ``tool_name``)."""
    kind: Literal["tool_result"] = "tool_result"


Part = TextPart | ImagePart | ThinkingPart | ToolCallPart | ToolResultPart


@faster_frozen_init
@dataclass(frozen=True, slots=True)
class Message:
    """One turn of the conversation: a role and an ordered list of parts."""

    role: Role
    parts: tuple[Part, ...] = ()
    name: str | None = None
    provider_details: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        """The concatenated text parts (thinking and tool parts excluded)."""
        return message_text(self.parts)

    @property
    def tool_calls(self) -> list[ToolCallPart]:
        return [p for p in self.parts if isinstance(p, ToolCallPart)]

    @property
    def thinking(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, ThinkingPart))


def message_text(parts: tuple[Part, ...] | list[Part]) -> str:
    """Join the text parts of a message, in order."""
    return "".join(p.text for p in parts if isinstance(p, TextPart))


@faster_frozen_init
@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """A tool the model may call: a name, a description and a JSON Schema for its input."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    provider_details: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """How the model may use tools.

    ``auto``: it decides; ``any``: it must call some tool; ``tool``: it must call
    ``name``; ``none``: it must not call tools.
    """

    mode: Literal["auto", "any", "tool", "none"] = "auto"
    name: str | None = None
    disable_parallel: bool = False

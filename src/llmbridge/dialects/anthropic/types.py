"""Anthropic Messages wire shapes for the inbound ``/v1/messages`` and ``count_tokens`` bodies.

The models mirror the API (and the official SDK's ``anthropic.types`` names) field for
field, so a validation error names the field the client got wrong. Every model keeps
unknown fields (``extra="allow"``): Claude Code sends ``cache_control``,
``defer_loading``, ``context_management`` and newer fields this module does not
model, and those ride along in ``provider_details`` instead of being dropped.

Validation is strict (no ``"1"`` for a number, no ``"yes"`` for a boolean), as the API
is. Outbound bodies (responses, stream events, requests to a real Anthropic API) are
built as plain dicts by the codecs: pydantic stays off the streaming hot path.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

from llmbridge.dialects.images import is_base64

__all__ = [
    "PROVIDER",
    "Base64ImageSource",
    "Base64PDFSource",
    "ContentBlock",
    "ContentBlockSource",
    "ConversationBody",
    "CountTokensRequestBody",
    "DocumentBlock",
    "ImageBlock",
    "JSONOutputFormat",
    "MessageParam",
    "MessagesRequestBody",
    "Metadata",
    "OutputConfig",
    "PlainTextSource",
    "RedactedThinkingBlock",
    "TextBlock",
    "ThinkingBlock",
    "ThinkingConfig",
    "ThinkingConfigAdaptive",
    "ThinkingConfigBetweenTools",
    "ThinkingConfigDisabled",
    "ThinkingConfigEnabled",
    "Tool",
    "ToolChoice",
    "ToolChoiceAny",
    "ToolChoiceAuto",
    "ToolChoiceNone",
    "ToolChoiceTool",
    "ToolReferenceBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "URLImageSource",
    "URLPDFSource",
]


PROVIDER = "anthropic"
"""This dialect's key in ``provider_details`` and its ``ThinkingPart.provider``."""


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, use_attribute_docstrings=True)


# -- content blocks -----------------------------------------------------------------


class TextBlock(_Wire):
    """``{"type": "text", "text": ...}``."""

    type: Literal["text"]
    """Always ``text``."""
    text: str
    """The text."""
    cache_control: dict[str, Any] | None = None
    """A prompt-cache breakpoint (``{"type": "ephemeral", "ttl": "5m"}``)."""
    citations: list[dict[str, Any]] | None = None
    """Citations supporting the text (kept, not interpreted)."""


def _check_image_data(data: str) -> str:
    # Anthropic's own 400s, in its words (bad base64 used to be forwarded).
    if not data:
        raise PydanticCustomError("base64", "image cannot be empty")
    if not is_base64(data):
        raise PydanticCustomError("base64", "invalid base64 data")
    return data


class Base64ImageSource(_Wire):
    """An inline image."""

    type: Literal["base64"]
    """Always ``base64``."""
    media_type: str
    """``image/jpeg``, ``image/png``, ``image/gif`` or ``image/webp``."""
    data: Annotated[str, AfterValidator(_check_image_data)]
    """The base64-encoded bytes."""


class URLImageSource(_Wire):
    """An image by reference."""

    type: Literal["url"]
    """Always ``url``."""
    url: str
    """Where the image is."""


class ImageBlock(_Wire):
    """``{"type": "image", "source": ...}``."""

    type: Literal["image"]
    """Always ``image``."""
    source: Annotated[Base64ImageSource | URLImageSource, Field(discriminator="type")]
    """The image data or its URL."""
    cache_control: dict[str, Any] | None = None
    """A prompt-cache breakpoint."""


class ToolUseBlock(_Wire):
    """A tool call the model made (in an assistant turn)."""

    type: Literal["tool_use"]
    """Always ``tool_use``."""
    id: str
    """The call's id (``toolu_...``), echoed by the matching ``tool_result``."""
    name: str
    """The tool's name."""
    input: dict[str, Any]
    """The arguments, a JSON object."""
    cache_control: dict[str, Any] | None = None
    """A prompt-cache breakpoint."""


class ToolReferenceBlock(_Wire):
    """A deferred tool a client-side tool search loaded (in a ``tool_result``):
    ``{"type": "tool_reference", "tool_name": ...}``; the API then offers that tool's
    definition (Claude Code's ``ToolSearch`` answers with these)."""

    type: Literal["tool_reference"]
    """Always ``tool_reference``."""
    tool_name: str
    """The name of a tool in the request's ``tools`` (one with ``defer_loading``)."""


DocumentContentBlock = Annotated[TextBlock | ImageBlock, Field(discriminator="type")]
ToolResultContentBlock = Annotated[
    TextBlock | ImageBlock | ToolReferenceBlock, Field(discriminator="type")
]


class ToolResultBlock(_Wire):
    """The result of a tool call (in a user turn)."""

    type: Literal["tool_result"]
    """Always ``tool_result``."""
    tool_use_id: str
    """The ``id`` of the ``tool_use`` block this answers."""
    content: str | list[ToolResultContentBlock] | None = None
    """The result: a string, or text, image and tool reference blocks."""
    is_error: bool | None = None
    """Whether the tool failed."""
    cache_control: dict[str, Any] | None = None
    """A prompt-cache breakpoint."""


class ThinkingBlock(_Wire):
    """The model's reasoning, with the signature that proves Anthropic produced it."""

    type: Literal["thinking"]
    """Always ``thinking``."""
    thinking: str
    """The reasoning text."""
    signature: str | None = None
    """Opaque; must be passed back byte for byte (the API requires it; we are lenient)."""


class RedactedThinkingBlock(_Wire):
    """Reasoning hidden by Anthropic: encrypted, passed back unchanged."""

    type: Literal["redacted_thinking"]
    """Always ``redacted_thinking``."""
    data: str
    """The encrypted reasoning."""


class PlainTextSource(_Wire):
    """A document given as plain text."""

    type: Literal["text"]
    """Always ``text``."""
    media_type: str = "text/plain"
    """Always ``text/plain``."""
    data: str
    """The document's text."""


class ContentBlockSource(_Wire):
    """A document given as content blocks."""

    type: Literal["content"]
    """Always ``content``."""
    content: str | list[DocumentContentBlock]
    """The document: a string, or text and image blocks."""


class Base64PDFSource(_Wire):
    """An inline PDF."""

    type: Literal["base64"]
    """Always ``base64``."""
    media_type: str = "application/pdf"
    """Always ``application/pdf``."""
    data: str
    """The base64-encoded PDF."""


class URLPDFSource(_Wire):
    """A PDF by reference."""

    type: Literal["url"]
    """Always ``url``."""
    url: str
    """Where the PDF is."""


class DocumentBlock(_Wire):
    """A document the model should read."""

    type: Literal["document"]
    """Always ``document``."""
    source: Annotated[
        PlainTextSource | ContentBlockSource | Base64PDFSource | URLPDFSource,
        Field(discriminator="type"),
    ]
    """The document's content."""
    title: str | None = None
    """The document's title."""
    context: str | None = None
    """Context about the document, not cited from."""
    citations: dict[str, Any] | None = None
    """Citation settings (kept, not interpreted)."""
    cache_control: dict[str, Any] | None = None
    """A prompt-cache breakpoint."""


ContentBlock = Annotated[
    TextBlock
    | ImageBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | DocumentBlock,
    Field(discriminator="type"),
]


class MessageParam(_Wire):
    """One turn of the conversation."""

    role: Literal["user", "assistant", "system"]
    """Who speaks. ``system`` turns inside ``messages`` are accepted too."""
    content: str | list[ContentBlock]
    """A string (shorthand for one text block) or a list of content blocks."""
    output_config: OutputConfig | None = None
    """On a ``system`` turn: settings from this turn on (per-turn control, beta
    ``per-turn-control-2026-07-01``; Claude Code 2.1.330 sends the effort here)."""


# -- tools --------------------------------------------------------------------------


class Tool(_Wire):
    """A tool the model may call. Server tools (``type: "web_search_20250305"``...) too."""

    name: str
    """How the model names the tool in ``tool_use`` blocks."""
    description: str | None = None
    """What the tool does."""
    input_schema: dict[str, Any] | None = None
    """JSON Schema of the tool's input (absent on server tools)."""
    type: str | None = None
    """``custom`` (or absent) for client tools; a versioned name for server tools."""
    cache_control: dict[str, Any] | None = None
    """A prompt-cache breakpoint."""


class ToolChoiceAuto(_Wire):
    """The model decides whether to call tools."""

    type: Literal["auto"]
    """Always ``auto``."""
    disable_parallel_tool_use: bool | None = None
    """At most one tool call."""


class ToolChoiceAny(_Wire):
    """The model must call some tool."""

    type: Literal["any"]
    """Always ``any``."""
    disable_parallel_tool_use: bool | None = None
    """Exactly one tool call."""


class ToolChoiceTool(_Wire):
    """The model must call the named tool."""

    type: Literal["tool"]
    """Always ``tool``."""
    name: str
    """The tool to call."""
    disable_parallel_tool_use: bool | None = None
    """Exactly one tool call."""


class ToolChoiceNone(_Wire):
    """The model must not call tools."""

    type: Literal["none"]
    """Always ``none``."""


ToolChoice = Annotated[
    ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone,
    Field(discriminator="type"),
]

# -- thinking and output ------------------------------------------------------------


class ThinkingConfigEnabled(_Wire):
    """Manual extended thinking with a token budget."""

    type: Literal["enabled"]
    """Always ``enabled``."""
    budget_tokens: int | None = None
    """Tokens the model may spend thinking (the API wants >= 1024 and < ``max_tokens``)."""
    display: str | None = None
    """``summarized`` or ``omitted``."""


class ThinkingConfigAdaptive(_Wire):
    """The model decides when and how much to think."""

    type: Literal["adaptive"]
    """Always ``adaptive``."""
    display: str | None = None
    """``summarized`` or ``omitted``."""


class ThinkingConfigBetweenTools(_Wire):
    """Thinking only between tool calls."""

    type: Literal["between_tools"]
    """Always ``between_tools``."""


class ThinkingConfigDisabled(_Wire):
    """No thinking."""

    type: Literal["disabled"]
    """Always ``disabled``."""


ThinkingConfig = Annotated[
    ThinkingConfigEnabled
    | ThinkingConfigAdaptive
    | ThinkingConfigBetweenTools
    | ThinkingConfigDisabled,
    Field(discriminator="type"),
]


class JSONOutputFormat(_Wire):
    """Structured output: the reply is JSON matching ``schema``."""

    type: Literal["json_schema"]
    """Always ``json_schema``."""
    schema_: dict[str, Any] = Field(alias="schema")
    """The JSON Schema of the reply."""


class OutputConfig(_Wire):
    """Output settings: effort and format."""

    effort: str | None = None
    """``low``, ``medium``, ``high``, ``xhigh`` or ``max``."""
    format: JSONOutputFormat | None = None
    """A JSON Schema the reply must match."""


class Metadata(_Wire):
    """Request metadata."""

    user_id: str | None = None
    """An opaque id of the end user (uuid or hash)."""


# -- request bodies -----------------------------------------------------------------


class ConversationBody(_Wire):
    """The fields ``/v1/messages`` and ``count_tokens`` share."""

    model: str
    """The model to use."""
    messages: list[MessageParam]
    """The conversation, oldest first."""
    system: str | list[TextBlock] | None = None
    """The system prompt: a string or a list of text blocks."""
    tools: list[Tool] | None = None
    """Tools the model may call."""
    tool_choice: ToolChoice | None = None
    """How the model may use the tools."""
    thinking: ThinkingConfig | None = None
    """Whether and how much the model thinks before answering."""
    output_config: OutputConfig | None = None
    """Effort and structured-output settings."""


class MessagesRequestBody(ConversationBody):
    """The body of ``POST /v1/messages``."""

    max_tokens: int = Field(ge=1)
    """The most tokens to generate (required, at least 1)."""
    stop_sequences: list[str] | None = None
    """Strings that end generation when produced."""
    temperature: float | None = Field(None, ge=0, le=1)
    """Sampling temperature, 0.0 to 1.0."""
    top_p: float | None = Field(None, ge=0, le=1)
    """Nucleus sampling, 0.0 to 1.0."""
    top_k: int | None = None
    """Sample only from the top K tokens."""
    stream: bool | None = None
    """Stream the reply as server-sent events."""
    metadata: Metadata | None = None
    """Request metadata (``user_id``)."""
    service_tier: str | None = None
    """``auto`` or ``standard_only``."""
    cache_control: dict[str, Any] | None = None
    """A top-level prompt-cache breakpoint (applies to the last cacheable block)."""


class CountTokensRequestBody(ConversationBody):
    """The body of ``POST /v1/messages/count_tokens`` (no ``max_tokens``)."""

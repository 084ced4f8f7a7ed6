"""Interactions API wire shapes for the inbound create body (``POST /{v1beta|v1}/interactions``).

Field names exactly as the API spells them (snake_case, as google-genai 3.3.0's
``CreateModelInteraction`` and @google/genai 3.3.0's ``CreateModelInteraction`` send
them). Unknown fields are kept (``extra="allow"``): the decoder carries what it does not
model in ``provider_details`` and answers 400 for what it cannot honour (agents, hosted
tools, background runs, non-text output). Validation is strict (no ``"1"`` for a
number) like the other dialects. Replies and requests to Google are built as plain
dicts by the codecs.

``input`` is a string, one content, a list of contents, or a list of steps; contents
(``text``, ``image``...) and steps (``user_input``, ``function_result``...) are told
apart by ``type``, and their tags do not overlap, so one tagged union reads both
(``InputItem``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Tag

from llmbridge.dialects.validation import tag_discriminator

__all__ = [
    "PROVIDER",
    "AllowedTools",
    "Content",
    "CreateInteractionRequest",
    "FunctionCallStep",
    "FunctionResultStep",
    "FunctionTool",
    "GenerationConfig",
    "ImageContent",
    "InputItem",
    "MediaContent",
    "ModelOutputStep",
    "ResponseFormat",
    "TextContent",
    "ThoughtStep",
    "Tool",
    "ToolChoiceConfig",
    "UserInputStep",
]

PROVIDER = "interactions"
"""This dialect's key in ``provider_details``."""


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, use_attribute_docstrings=True)


# -- contents -----------------------------------------------------------------------


class TextContent(_Wire):
    """``{"type": "text", "text": ...}``."""

    type: Literal["text"]
    """Always ``text``."""
    text: str
    """The text."""
    annotations: list[Any] | None = None
    """Citations on a model's text (output only; ignored on input)."""


class ImageContent(_Wire):
    """An image: inline base64 ``data`` or a ``uri``, with its ``mime_type``."""

    type: Literal["image"]
    """Always ``image``."""
    data: str | None = None
    """The bytes, base64-encoded."""
    uri: str | None = None
    """Where the image is (a Files API URI or a URL)."""
    mime_type: str | None = None
    """``image/png``, ``image/jpeg``..."""
    resolution: str | None = None
    """``low`` ... ``ultra_high`` (Google's media resolution; not modelled)."""


class MediaContent(_Wire):
    """Audio, video or a document: read, and refused by the decoder (the core carries
    text and images only)."""

    type: Literal["audio", "video", "document"]
    """The kind of media."""


Content = Annotated[
    Annotated[TextContent, Tag("TextContent")]
    | Annotated[ImageContent, Tag("ImageContent")]
    | Annotated[MediaContent, Tag("MediaContent")],
    tag_discriminator(
        "type",
        {
            "text": "TextContent",
            "image": "ImageContent",
            "audio": "MediaContent",
            "video": "MediaContent",
            "document": "MediaContent",
        },
    ),
]
"""One content block."""

# -- steps --------------------------------------------------------------------------


class UserInputStep(_Wire):
    """What the user said: ``{"type": "user_input", "content": [...]}``."""

    type: Literal["user_input"]
    """Always ``user_input``."""
    content: list[Content] | None = None
    """Its contents."""


class ModelOutputStep(_Wire):
    """What the model answered (a client sending a conversation back)."""

    type: Literal["model_output"]
    """Always ``model_output``."""
    content: list[Content] | None = None
    """Its contents."""
    error: dict[str, Any] | None = None
    """A ``google.rpc.Status`` when the output failed (ignored on input)."""


class ThoughtStep(_Wire):
    """The model's reasoning: a summary and an opaque ``signature`` to send back."""

    type: Literal["thought"]
    """Always ``thought``."""
    signature: str | None = None
    """Base64 bytes the model wants back with the conversation."""
    summary: list[Content] | None = None
    """A summary of the thought."""


class FunctionCallStep(_Wire):
    """A call the model made: ``{"type": "function_call", "id", "name", "arguments"}``."""

    type: Literal["function_call"]
    """Always ``function_call``."""
    id: str
    """The call's id, which its ``function_result`` names in ``call_id``."""
    name: str
    """The function called."""
    arguments: dict[str, Any]
    """Its arguments, an object."""


class FunctionResultStep(_Wire):
    """The client's answer to a call: ``{"type": "function_result", "call_id", "result"}``."""

    type: Literal["function_result"]
    """Always ``function_result``."""
    call_id: str
    """The ``id`` of the ``function_call`` step it answers."""
    result: str | list[Content] | dict[str, Any]
    """The result: text, contents, or any JSON object."""
    is_error: bool | None = None
    """Whether the call failed."""
    name: str | None = None
    """The function's name."""


_TAGS = {
    "text": "TextContent",
    "image": "ImageContent",
    "audio": "MediaContent",
    "video": "MediaContent",
    "document": "MediaContent",
    "user_input": "UserInputStep",
    "model_output": "ModelOutputStep",
    "thought": "ThoughtStep",
    "function_call": "FunctionCallStep",
    "function_result": "FunctionResultStep",
}

InputItem = Annotated[
    Annotated[TextContent, Tag("TextContent")]
    | Annotated[ImageContent, Tag("ImageContent")]
    | Annotated[MediaContent, Tag("MediaContent")]
    | Annotated[UserInputStep, Tag("UserInputStep")]
    | Annotated[ModelOutputStep, Tag("ModelOutputStep")]
    | Annotated[ThoughtStep, Tag("ThoughtStep")]
    | Annotated[FunctionCallStep, Tag("FunctionCallStep")]
    | Annotated[FunctionResultStep, Tag("FunctionResultStep")],
    tag_discriminator("type", _TAGS),
]
"""One item of a list ``input``: a content (part of the user's turn) or a step."""

# -- tools --------------------------------------------------------------------------


class FunctionTool(_Wire):
    """A function the model may call: ``{"type": "function", "name", "description",
    "parameters"}``, ``parameters`` a JSON Schema."""

    type: Literal["function"]
    """Always ``function``."""
    name: str | None = None
    """The function's name."""
    description: str | None = None
    """What it does, for the model."""
    parameters: dict[str, Any] | None = None
    """Its arguments, as a JSON Schema object."""


class HostedTool(_Wire):
    """One of Google's own tools (``google_search``, ``code_execution``, ``url_context``,
    ``mcp_server``...): read, and refused by the decoder (llmbridge cannot run them)."""

    type: str
    """The tool's kind."""


Tool = Annotated[
    Annotated[FunctionTool, Tag("FunctionTool")] | Annotated[HostedTool, Tag("HostedTool")],
    tag_discriminator("type", {"function": "FunctionTool"}, other="HostedTool"),
]
"""A tool declaration."""

# -- configuration --------------------------------------------------------------------


class AllowedTools(_Wire):
    """``{"mode": "any", "tools": ["name"]}``: the tools the model may call."""

    mode: str | None = None
    """``auto``, ``any``, ``none`` or ``validated``."""
    tools: list[str] | None = None
    """The names of the allowed tools."""


class ToolChoiceConfig(_Wire):
    """``{"allowed_tools": {...}}``."""

    allowed_tools: AllowedTools | None = None
    """The allowed tools and the mode."""


class GenerationConfig(_Wire):
    """How to sample the reply."""

    temperature: float | int | None = None
    """Randomness of the output."""
    top_p: float | int | None = None
    """Nucleus sampling."""
    seed: int | None = None
    """Seed for reproducible decoding."""
    stop_sequences: list[str] | None = None
    """Sequences that end the output."""
    max_output_tokens: int | None = None
    """The most tokens the reply may have."""
    thinking_level: str | None = None
    """``minimal``, ``low``, ``medium``, ``high`` or ``xhigh``."""
    thinking_summaries: str | None = None
    """``auto`` (thought summaries in the reply) or ``none``."""
    tool_choice: str | ToolChoiceConfig | None = None
    """``auto``, ``any``, ``none``, ``validated``, or ``{"allowed_tools": ...}``."""


class ResponseFormat(_Wire):
    """``{"type": "text", "mime_type": "application/json", "schema": {...}}``."""

    type: str
    """``text`` (other output kinds are refused)."""
    mime_type: str | None = None
    """``text/plain`` or ``application/json``."""
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    """The JSON Schema the output follows (``application/json`` only)."""

    model_config = ConfigDict(
        extra="allow",
        strict=True,
        use_attribute_docstrings=True,
        validate_by_name=True,
        validate_by_alias=True,
    )


class CreateInteractionRequest(_Wire):
    """The create body of a model interaction."""

    model: str | None = None
    """The model (required: agent interactions are refused)."""
    input: str | list[InputItem] | InputItem | None = None
    """A string, one content, a list of contents, or a list of steps."""
    system_instruction: str | None = None
    """The system instruction."""
    tools: list[Tool] | None = None
    """Function declarations."""
    generation_config: GenerationConfig | None = None
    """How to sample the reply."""
    response_format: ResponseFormat | list[ResponseFormat] | None = None
    """The output's format (a JSON Schema for JSON output)."""
    response_mime_type: str | None = None
    """Deprecated: ``application/json`` asks for JSON."""
    response_modalities: list[str] | None = None
    """Deprecated: the output's kinds (``text`` only here)."""
    stream: bool | None = None
    """Stream server-sent events."""
    store: bool | None = None
    """Keep the interaction for ``GET`` and ``previous_interaction_id`` (default true)."""
    previous_interaction_id: str | None = None
    """The stored interaction this one continues."""
    background: bool | None = None
    """Run in the background (refused: llmbridge answers while connected)."""
    agent: Any = None
    """An agent to run (refused: llmbridge serves models)."""
    agent_config: Any = None
    """An agent's configuration (refused with ``agent``)."""
    cached_content: str | None = None
    """Explicit cached content (refused: llmbridge keeps no caches)."""
    safety_settings: list[Any] | None = None
    """Google's safety settings (passed to a Google backend only)."""

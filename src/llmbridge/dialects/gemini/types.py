"""Gemini API wire shapes for the inbound request bodies: ``generateContent`` and
``streamGenerateContent``, ``countTokens``, ``embedContent`` and ``batchEmbedContents``.

Field names are Python's snake_case with the API's camelCase as the alias
(ai.google.dev/api/generate-content), and both spellings are accepted, as proto3 JSON
parsers (Google's) accept both: the REST examples in Google's own documentation send
``system_instruction`` and ``generation_config``, the SDKs and Gemini CLI send camelCase.
Unknown fields are kept (``extra="allow"``): the decoder carries unknown top-level and
``generationConfig`` fields in ``provider_details`` and answers 400 for the ones it
cannot honour (hosted tools, ``cachedContent``).

Validation is strict (no ``"1"`` for a number) like the other dialects. Outbound bodies
(replies, requests to Google) are built as plain dicts by the codecs.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = [
    "PROVIDER",
    "BatchEmbedContentsRequest",
    "Blob",
    "Content",
    "CountTokensRequest",
    "EmbedContentRequest",
    "FileData",
    "FunctionCall",
    "FunctionCallingConfig",
    "FunctionDeclaration",
    "FunctionResponse",
    "GenerateContentRequest",
    "GenerationConfig",
    "Part",
    "ThinkingConfig",
    "Tool",
    "ToolConfig",
]

PROVIDER = "gemini"
"""This dialect's key in ``provider_details`` and its ``ThinkingPart.provider``."""


class _Wire(BaseModel):
    model_config = ConfigDict(
        extra="allow",
        strict=True,
        use_attribute_docstrings=True,
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )


# -- parts and contents -------------------------------------------------------------


class Blob(_Wire):
    """Inline bytes: ``{"mimeType": "image/png", "data": "<base64>"}``."""

    mime_type: str
    """The IANA media type of the bytes (``image/png``, ``text/plain``)."""
    data: str
    """The bytes, base64-encoded."""


class FileData(_Wire):
    """Bytes by reference: ``{"mimeType", "fileUri"}``."""

    mime_type: str | None = None
    """The IANA media type of the file."""
    file_uri: str
    """Where the file is (a Files API URI or a URL)."""


class FunctionCall(_Wire):
    """A call the model made (in a ``model`` turn)."""

    id: str | None = None
    """The call's id, echoed by its ``functionResponse``; Google's API leaves it out."""
    name: str
    """The function's name."""
    args: dict[str, Any] | None = None
    """The arguments, a JSON object."""


class FunctionResponse(_Wire):
    """The result of a function call (in a ``user`` turn)."""

    id: str | None = None
    """The ``id`` of the ``functionCall`` this answers, when the call had one."""
    name: str
    """The function's name."""
    response: dict[str, Any] | None = None
    """The result, a JSON object: ``{"output": ...}`` or ``{"error": ...}`` by convention."""
    parts: list[Part] | None = None
    """Media the function returned (``inlineData`` parts)."""


class Part(_Wire):
    """One part of a turn: exactly one of ``text``, ``inlineData``, ``fileData``,
    ``functionCall``, ``functionResponse`` (plus ``thought``/``thoughtSignature``)."""

    text: str | None = None
    """Text."""
    thought: bool | None = None
    """The part is the model's reasoning (a thought summary)."""
    thought_signature: str | None = None
    """Opaque (base64); the model's reasoning state, sent back on the same part."""
    inline_data: Blob | None = None
    """Inline media."""
    file_data: FileData | None = None
    """Media by reference."""
    function_call: FunctionCall | None = None
    """A call the model made."""
    function_response: FunctionResponse | None = None
    """A function's result."""
    executable_code: dict[str, Any] | None = None
    """Code the hosted code execution tool ran (not supported)."""
    code_execution_result: dict[str, Any] | None = None
    """The hosted code execution tool's result (not supported)."""
    video_metadata: dict[str, Any] | None = None
    """Clip offsets of a video part (ignored)."""
    part_metadata: dict[str, Any] | None = None
    """Metadata for the caller's own use (ignored)."""


class Content(_Wire):
    """One turn: a role and its parts."""

    role: str | None = None
    """``user`` or ``model`` (``function``/``tool`` from older clients, for results)."""
    parts: list[Part]
    """The turn's parts, in order."""


# -- tools --------------------------------------------------------------------------


class FunctionDeclaration(_Wire):
    """A function the model may call."""

    name: str
    """The function's name."""
    description: str | None = None
    """What it does."""
    parameters: dict[str, Any] | None = None
    """Its arguments, as Gemini's OpenAPI schema subset (upper-case types)."""
    parameters_json_schema: dict[str, Any] | None = None
    """Its arguments, as JSON Schema (Gemini CLI sends this)."""
    response: dict[str, Any] | None = None
    """What it returns, OpenAPI subset (carried, not used)."""
    response_json_schema: dict[str, Any] | None = None
    """What it returns, JSON Schema (carried, not used)."""
    behavior: str | None = None
    """``BLOCKING`` or ``NON_BLOCKING`` (Live API; carried)."""


class Tool(_Wire):
    """A tool entry: ``functionDeclarations``, or one of Google's hosted tools
    (``googleSearch``, ``codeExecution``, ``urlContext``...; refused)."""

    function_declarations: list[FunctionDeclaration] | None = None
    """The functions the model may call."""


class FunctionCallingConfig(_Wire):
    """How the model may call functions."""

    mode: str | None = None
    """``AUTO``, ``ANY``, ``NONE`` or ``VALIDATED``."""
    allowed_function_names: list[str] | None = None
    """With ``ANY``: the functions it may call."""


class ToolConfig(_Wire):
    """Tool settings."""

    function_calling_config: FunctionCallingConfig | None = None
    """How the model may call functions."""


# -- generation settings -------------------------------------------------------------


class ThinkingConfig(_Wire):
    """Thinking settings."""

    include_thoughts: bool | None = None
    """Return thought summaries (``thought: true`` parts)."""
    thinking_budget: int | None = None
    """Thinking tokens: ``0`` off, ``-1`` the model decides, else at most this many."""
    thinking_level: str | None = None
    """``MINIMAL``, ``LOW``, ``MEDIUM`` or ``HIGH`` (Gemini 3 models)."""


class GenerationConfig(_Wire):
    """Sampling, length, output format and thinking."""

    temperature: float | None = None
    """Sampling temperature."""
    top_p: float | None = None
    """Nucleus sampling."""
    top_k: int | float | None = None
    """Top-k sampling (a float in Google's schema; must be a whole number here)."""
    candidate_count: int | None = None
    """Replies to generate; only 1 is served."""
    max_output_tokens: int | None = None
    """Largest reply, in tokens."""
    stop_sequences: list[str] | None = None
    """Stop generating at any of these."""
    seed: int | None = None
    """Sampling seed."""
    presence_penalty: float | None = None
    """Penalty for tokens already present."""
    frequency_penalty: float | None = None
    """Penalty by how often a token appeared."""
    response_mime_type: str | None = None
    """``text/plain`` or ``application/json`` (``text/x.enum`` is refused)."""
    response_schema: dict[str, Any] | None = None
    """The reply's schema, OpenAPI subset."""
    response_json_schema: dict[str, Any] | None = None
    """The reply's schema, JSON Schema."""
    response_modalities: list[str] | None = None
    """Only ``TEXT`` is served."""
    thinking_config: ThinkingConfig | None = None
    """Thinking settings."""


# -- request bodies ------------------------------------------------------------------


class GenerateContentRequest(_Wire):
    """The body of ``models/{model}:generateContent`` and ``:streamGenerateContent``."""

    model: str | None = None
    """The model (the URL's is used; ``countTokens``' inner request names it here)."""
    contents: list[Content]
    """The conversation."""
    system_instruction: Content | None = None
    """The system prompt (its parts' text)."""
    tools: list[Tool] | None = None
    """Functions the model may call."""
    tool_config: ToolConfig | None = None
    """How it may call them."""
    generation_config: GenerationConfig | None = None
    """Sampling, length, output format and thinking."""
    safety_settings: list[dict[str, Any]] | None = None
    """Google's content filters (accepted; only a Gemini backend applies them)."""
    cached_content: str | None = None
    """A Google cached-content resource (refused: llmbridge has none)."""


class CountTokensRequest(_Wire):
    """The body of ``models/{model}:countTokens``: ``contents`` or a whole request."""

    contents: list[Content] | None = None
    """The conversation to count."""
    generate_content_request: GenerateContentRequest | None = None
    """A whole request to count (system prompt and tools included)."""


class EmbedContentRequest(_Wire):
    """The body of ``models/{model}:embedContent`` (and one of a batch's ``requests``)."""

    model: str | None = None
    """``models/<name>``; in a batch, must be the URL's model."""
    content: Content
    """The text to embed (its parts' text)."""
    task_type: str | None = None
    """What the embedding is for (``RETRIEVAL_QUERY``...; ignored)."""
    title: str | None = None
    """A document title (ignored)."""
    output_dimensionality: int | None = Field(default=None, gt=0)
    """Truncate the embedding to this many dimensions (at least 1: a 400 naming the
    field below, as Google answers; 0 or less reached the backend)."""


class BatchEmbedContentsRequest(_Wire):
    """The body of ``models/{model}:batchEmbedContents``."""

    requests: list[EmbedContentRequest]
    """One request per text."""


FunctionResponse.model_rebuild()

"""Wire types of the OpenAI API bodies clients send: chat completions and embeddings.

Field names are exactly the API's (platform.openai.com/docs/api-reference/chat/create),
each with a one-line docstring. Every model allows extra fields, so nothing a client
sends is silently dropped: ``request.py`` moves what the core does not model into
``provider_details``. Validation is strict (no ``"1"`` or ``true`` for a number, no
``0`` for a boolean), as the API is. Only inbound bodies are modelled here; replies
from servers and the bodies llmbridge sends are plain dicts built and read by the codecs.

``validate_body`` turns pydantic's errors into ``InvalidRequestError`` naming the field
path (``messages.0.content.1.image_url.url``). That relies on a convention kept in
this module: tagged unions (message ``role``, content part ``type``,
``response_format.type``) use callable discriminators whose tags are the member class
names, so every union label in an error location is capitalised or bracketed and only
field names and indexes are lowercase.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    WithJsonSchema,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from llmbridge.core.errors import InvalidRequestError
from llmbridge.dialects.images import is_base64, split_base64_data_url
from llmbridge.dialects.validation import BodyErrors, validate_in_slices

__all__ = [
    "AssistantMessage",
    "ChatCompletionRequestBody",
    "ChatMessage",
    "ContentPart",
    "DeveloperMessage",
    "EmbeddingRequestBody",
    "FunctionDefinition",
    "FunctionTool",
    "ImageContentPart",
    "ImageURL",
    "JSONSchema",
    "NamedToolChoice",
    "NamedToolChoiceFunction",
    "ReasoningEffort",
    "ResponseFormat",
    "ResponseFormatJSONObject",
    "ResponseFormatJSONSchema",
    "ResponseFormatText",
    "StreamOptions",
    "SystemMessage",
    "TextContentPart",
    "ToolCall",
    "ToolCallFunction",
    "ToolMessage",
    "UserMessage",
    "validate_body",
]

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]

_INVALID_TAG = "invalid_tag"
"""The pydantic error type raised when a tagged union's tag is missing or unknown."""
_M = TypeVar("_M", bound=BaseModel)


class _OpenAIModel(BaseModel):
    # Strict, as OpenAI's API is: lax pydantic read ``"max_tokens": true`` as 1 and
    # ``"parallel_tool_calls": 0.0`` as false (found by tests/fuzz).
    model_config = ConfigDict(extra="allow", strict=True)


class _ErrorContext(dict[str, int | str | float]):
    """An error context that can sit in a ``X | None`` annotation (unions hash members)."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items())))


def _discriminator(field: str, tags: dict[str, str]) -> Discriminator:
    """Pick a union member by ``field``; the error names the field and its values."""

    def pick(value: Any) -> str | None:
        raw = value.get(field) if isinstance(value, dict) else getattr(value, field, None)
        return tags.get(raw) if isinstance(raw, str) else None

    return Discriminator(
        pick,
        custom_error_type=_INVALID_TAG,
        custom_error_message=f"'{field}' is missing or not one of the supported values",
        custom_error_context=_ErrorContext(field=field, expected=", ".join(map(repr, tags))),
    )


# -- content parts ------------------------------------------------------------------


class TextContentPart(_OpenAIModel):
    type: Literal["text"]
    "Always ``text``."
    text: str
    "The text."


def _check_data_url(url: str) -> str:
    """A ``data:...;base64,`` URL must hold valid, non-empty base64 (OpenAI's 400s)."""
    parsed = split_base64_data_url(url)
    if parsed is not None:
        payload = parsed[1]
        if not payload:
            raise PydanticCustomError(
                "invalid_base64",
                "Expected a base64-encoded data URL with an image MIME type "
                "(e.g. 'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU='), but got empty "
                "base64-encoded bytes",
            )
        if not is_base64(payload):
            raise PydanticCustomError("invalid_base64", "Invalid base64 image_url")
    return url


class ImageURL(_OpenAIModel):
    url: Annotated[str, AfterValidator(_check_data_url)]
    "An ``http(s)`` URL or a ``data:<media type>;base64,<data>`` URL."
    detail: str | None = None
    "Requested image detail: ``auto``, ``low`` or ``high``."


class ImageContentPart(_OpenAIModel):
    type: Literal["image_url"]
    "Always ``image_url``."
    image_url: ImageURL
    "The image."


ContentPart = Annotated[
    Annotated[TextContentPart, Tag("TextContentPart")]
    | Annotated[ImageContentPart, Tag("ImageContentPart")],
    _discriminator("type", {"text": "TextContentPart", "image_url": "ImageContentPart"}),
]

# -- messages -----------------------------------------------------------------------


class ToolCallFunction(_OpenAIModel):
    name: str
    "The function's name."
    arguments: str | dict[str, Any] = ""
    "The arguments as a JSON string (some clients send an object, which is accepted)."


class ToolCall(_OpenAIModel):
    id: str
    "The call's id, echoed by the ``tool`` message that answers it."
    type: Literal["function"] = "function"
    "Always ``function``."
    function: ToolCallFunction
    "What to call."


class SystemMessage(_OpenAIModel):
    role: Literal["system"]
    "Always ``system``."
    content: str | list[TextContentPart]
    "The instructions."
    name: str | None = None
    "An optional name for the participant."


class DeveloperMessage(_OpenAIModel):
    role: Literal["developer"]
    "Always ``developer`` (the newer name of ``system`` for reasoning models)."
    content: str | list[TextContentPart]
    "The instructions."
    name: str | None = None
    "An optional name for the participant."


class UserMessage(_OpenAIModel):
    role: Literal["user"]
    "Always ``user``."
    content: str | list[ContentPart]
    "Text, or a list of text and image parts."
    name: str | None = None
    "An optional name for the participant."


class AssistantMessage(_OpenAIModel):
    role: Literal["assistant"]
    "Always ``assistant``."
    content: str | list[TextContentPart] | None = None
    "The reply text; ``null`` when the message only calls tools."
    name: str | None = None
    "An optional name for the participant."
    tool_calls: list[ToolCall] | None = None
    "The tool calls the model made."
    refusal: str | None = None
    "The model's refusal message, if it refused."
    reasoning_content: str | None = None
    "Reasoning text (DeepSeek, LiteLLM); not part of OpenAI's own API."
    reasoning: str | None = None
    "Reasoning text (vLLM >= 0.11, Ollama); not part of OpenAI's own API."


class ToolMessage(_OpenAIModel):
    role: Literal["tool"]
    "Always ``tool``."
    content: str | list[TextContentPart]
    "The tool's result."
    tool_call_id: str
    "The id of the assistant tool call this answers."


ChatMessage = Annotated[
    Annotated[SystemMessage, Tag("SystemMessage")]
    | Annotated[DeveloperMessage, Tag("DeveloperMessage")]
    | Annotated[UserMessage, Tag("UserMessage")]
    | Annotated[AssistantMessage, Tag("AssistantMessage")]
    | Annotated[ToolMessage, Tag("ToolMessage")],
    _discriminator(
        "role",
        {
            "system": "SystemMessage",
            "developer": "DeveloperMessage",
            "user": "UserMessage",
            "assistant": "AssistantMessage",
            "tool": "ToolMessage",
        },
    ),
]

# -- tools --------------------------------------------------------------------------


class FunctionDefinition(_OpenAIModel):
    name: str
    "The function's name."
    description: str | None = None
    "What the function does, for the model."
    parameters: dict[str, Any] | None = None
    "A JSON Schema object for the arguments."
    strict: bool | None = None
    "Whether the model must follow the schema exactly (Structured Outputs)."


class FunctionTool(_OpenAIModel):
    type: Literal["function"]
    "Always ``function``."
    function: FunctionDefinition
    "The function."


class NamedToolChoiceFunction(_OpenAIModel):
    name: str
    "The function the model must call."


class NamedToolChoice(_OpenAIModel):
    type: Literal["function"]
    "Always ``function``."
    function: NamedToolChoiceFunction
    "The function the model must call."


# -- options ------------------------------------------------------------------------


class StreamOptions(_OpenAIModel):
    include_usage: bool | None = None
    "Send one extra chunk with ``choices: []`` and the usage before ``data: [DONE]``."
    include_obfuscation: bool | None = None
    "Pad chunks with an ``obfuscation`` field (ignored by llmbridge)."


class JSONSchema(_OpenAIModel):
    name: str
    "The schema's name."
    description: str | None = None
    "What the format is for."
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    "The JSON Schema the output must match (``schema`` on the wire)."
    strict: bool | None = None
    "Whether the output must follow the schema exactly."


class ResponseFormatText(_OpenAIModel):
    type: Literal["text"]
    "Plain text output."


class ResponseFormatJSONObject(_OpenAIModel):
    type: Literal["json_object"]
    "Any JSON object (the older JSON mode)."


class ResponseFormatJSONSchema(_OpenAIModel):
    type: Literal["json_schema"]
    "Output matching ``json_schema`` (Structured Outputs)."
    json_schema: JSONSchema
    "The schema."


ResponseFormat = Annotated[
    Annotated[ResponseFormatText, Tag("ResponseFormatText")]
    | Annotated[ResponseFormatJSONObject, Tag("ResponseFormatJSONObject")]
    | Annotated[ResponseFormatJSONSchema, Tag("ResponseFormatJSONSchema")],
    _discriminator(
        "type",
        {
            "text": "ResponseFormatText",
            "json_object": "ResponseFormatJSONObject",
            "json_schema": "ResponseFormatJSONSchema",
        },
    ),
]

# -- bodies -------------------------------------------------------------------------


class ChatCompletionRequestBody(_OpenAIModel):
    """``POST /v1/chat/completions``."""

    model: str
    "The model to use."
    messages: list[ChatMessage] = Field(min_length=1)
    "The conversation so far (at least one message)."
    max_tokens: int | None = None
    "Maximum tokens to generate (deprecated by OpenAI in favour of the next field)."
    max_completion_tokens: int | None = None
    "Maximum tokens to generate, reasoning included."
    temperature: float | None = None
    "Sampling temperature, 0 to 2."
    top_p: float | None = None
    "Nucleus sampling probability mass."
    stop: str | list[str] | None = None
    "Up to 4 sequences where generation stops."
    seed: int | None = None
    "Seed for best-effort deterministic sampling."
    frequency_penalty: float | None = None
    "Penalty for tokens by how often they appeared, -2.0 to 2.0."
    presence_penalty: float | None = None
    "Penalty for tokens that appeared at all, -2.0 to 2.0."
    n: Annotated[int | None, WithJsonSchema({"enum": [1, None]})] = None
    "How many choices to generate; llmbridge only generates one (``decode_chat_request``)."
    stream: bool | None = None
    "Stream the reply as server-sent events."
    stream_options: StreamOptions | None = None
    "Streaming options; only meaningful with ``stream: true``."
    tools: list[FunctionTool] | None = None
    "Functions the model may call."
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    "Whether and which tool the model must call."
    parallel_tool_calls: bool | None = None
    "Whether the model may call several tools in one turn."
    reasoning_effort: ReasoningEffort | None = None
    "How much reasoning models should think; ``none`` turns reasoning off."
    response_format: ResponseFormat | None = None
    "Constrain the output to JSON, optionally to a schema."
    user: str | None = None
    "An end-user identifier (passed through)."
    logit_bias: dict[str, float] | None = None
    "Token id to bias, -100 to 100 (passed through)."
    logprobs: bool | None = None
    "Return log probabilities (passed through)."
    top_logprobs: int | None = None
    "How many most likely tokens to return per position (passed through)."
    metadata: dict[str, str] | None = None
    "Key-value pairs stored with the completion (passed through)."
    service_tier: str | None = None
    "Processing tier (passed through)."
    store: bool | None = None
    "Whether OpenAI stores the completion (passed through)."


class EmbeddingRequestBody(_OpenAIModel):
    """``POST /v1/embeddings``."""

    model: str
    "The model to use."
    input: Annotated[
        str | list[str] | list[int] | list[list[int]],
        # What ``decode_embed_request`` takes: parsed as the API does, refused after.
        WithJsonSchema(
            {
                "anyOf": [
                    {"type": "string"},
                    {"type": "array", "items": {"type": "string"}, "minItems": 1},
                ]
            }
        ),
    ]
    "Text or texts to embed (token arrays are accepted by the API but not by llmbridge)."
    dimensions: int | None = None
    "Number of dimensions of the output vectors, for models that support it."
    encoding_format: Literal["float", "base64"] | None = None
    "Vector encoding; llmbridge always answers with floats."
    user: str | None = None
    "An end-user identifier."


# -- validation ---------------------------------------------------------------------


def validate_body(
    model: type[_M], body: object, slice_field: str | None = None
) -> tuple[_M, dict[str, Any]]:
    """Validate a decoded JSON body against ``model`` (the list ``slice_field``, when
    given, a slice at a time: dialects/validation.py).

    Returns:
        The model and the body as a dict (for the fields ``extra="allow"`` kept).

    Raises:
        InvalidRequestError: ``body`` is not an object, or a field is missing or wrong;
            ``param`` is the field's dotted path.
    """
    if not isinstance(body, dict):
        raise InvalidRequestError(
            f"The request body must be a JSON object, not {_json_type(body)}."
        )
    try:
        if slice_field is None:
            return model.model_validate(body), body
        return validate_in_slices(model, body, slice_field, ("content", "tool_calls")), body
    except ValidationError as exc:
        raise _invalid_request(exc.errors(include_url=False), body) from exc
    except BodyErrors as exc:
        raise _invalid_request(exc.errors, body) from exc


_FIELD_NAME = re.compile(r"[a-z_][a-z0-9_]*")
_TYPE_LABELS = frozenset({"str", "int", "float", "bool", "none"})


def _invalid_request(errors: list[ErrorDetails], data: dict[str, Any]) -> InvalidRequestError:
    """The most specific of pydantic's errors, as an InvalidRequestError naming the path.

    When a union fails, pydantic reports one error per member; the deepest location
    is the member the client most likely meant.
    """
    paths = [_clean_path(error["loc"]) for error in errors]
    deepest = max(paths, key=len)
    param = ".".join(map(str, deepest)) or None
    chosen = [error for error, path in zip(errors, paths, strict=True) if path == deepest]
    first = chosen[0]
    if first["type"] == _INVALID_TAG:
        return _invalid_tag(deepest, first["ctx"], data)
    if first["type"] == "missing":
        return InvalidRequestError(f"Missing required parameter: '{param}'.", param=param)
    reasons = "; ".join(dict.fromkeys(error["msg"] for error in chosen))
    return InvalidRequestError(f"Invalid '{param}': {reasons}.", param=param)


def _invalid_tag(
    path: tuple[str | int, ...], ctx: dict[str, Any], data: dict[str, Any]
) -> InvalidRequestError:
    where = ".".join(map(str, path))
    value: Any = data
    try:
        for key in path:
            value = value[key]
    except (KeyError, IndexError, TypeError):
        value = None
    if not isinstance(value, dict):
        return InvalidRequestError(
            f"Invalid '{where}': expected an object, got {_json_type(value)}.", param=where
        )
    field = ctx["field"]
    param = f"{where}.{field}"
    if field not in value:
        return InvalidRequestError(f"Missing required parameter: '{param}'.", param=param)
    return InvalidRequestError(
        f"Invalid value for '{param}': {value[field]!r}. Supported values are: {ctx['expected']}.",
        param=param,
    )


def _clean_path(loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """Drop pydantic's union labels (``str``, ``list[...]``, class names) from ``loc``."""
    return tuple(
        item
        for item in loc
        if isinstance(item, int) or (_FIELD_NAME.fullmatch(item) and item not in _TYPE_LABELS)
    )


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, dict) else type(value).__name__

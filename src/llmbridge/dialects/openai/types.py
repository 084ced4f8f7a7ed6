"""Wire types of the OpenAI API bodies clients send: chat completions, legacy
completions and embeddings.

Field names are exactly the API's (platform.openai.com/docs/api-reference/chat/create),
each with a one-line docstring. Every model allows extra fields, so nothing a client
sends is silently dropped: ``request.py`` moves what the core does not model into
``provider_details``. Validation is strict (no ``"1"`` or ``true`` for a number, no
``0`` for a boolean), as the API is. Only inbound bodies are modelled here; replies
from servers and the bodies llmbridge sends are plain dicts built and read by the codecs.

Tagged unions (message ``role``, content part ``type``, ``response_format.type``) use
``validation.tag_discriminator``, so a missing or unknown tag is one error naming the
tag field and its values (``Invalid value for 'messages.0.role': 'bot'. Supported
values are: ...``), in the words ``errors.VALIDATION_WORDING`` gives it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Tag, WithJsonSchema
from pydantic_core import PydanticCustomError

from llmbridge.dialects.images import is_base64, split_base64_data_url
from llmbridge.dialects.validation import tag_discriminator

__all__ = [
    "AssistantMessage",
    "ChatCompletionRequestBody",
    "ChatMessage",
    "CompletionRequestBody",
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
    "OpenAIWireModel",
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
]

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


class OpenAIWireModel(BaseModel):
    """The base of every OpenAI request body type (chat, completions, Responses)."""

    # Strict, as OpenAI's API is: lax pydantic read ``"max_tokens": true`` as 1 and
    # ``"parallel_tool_calls": 0.0`` as false (found by tests/fuzz).
    model_config = ConfigDict(extra="allow", strict=True)


# -- content parts ------------------------------------------------------------------


class TextContentPart(OpenAIWireModel):
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


class ImageURL(OpenAIWireModel):
    url: Annotated[str, AfterValidator(_check_data_url)]
    "An ``http(s)`` URL or a ``data:<media type>;base64,<data>`` URL."
    detail: str | None = None
    "Requested image detail: ``auto``, ``low`` or ``high``."


class ImageContentPart(OpenAIWireModel):
    type: Literal["image_url"]
    "Always ``image_url``."
    image_url: ImageURL
    "The image."


ContentPart = Annotated[
    Annotated[TextContentPart, Tag("TextContentPart")]
    | Annotated[ImageContentPart, Tag("ImageContentPart")],
    tag_discriminator("type", {"text": "TextContentPart", "image_url": "ImageContentPart"}),
]

# -- messages -----------------------------------------------------------------------


class ToolCallFunction(OpenAIWireModel):
    name: str
    "The function's name."
    arguments: str | dict[str, Any] = ""
    "The arguments as a JSON string (some clients send an object, which is accepted)."


class ToolCall(OpenAIWireModel):
    id: str
    "The call's id, echoed by the ``tool`` message that answers it."
    type: Literal["function"] = "function"
    "Always ``function``."
    function: ToolCallFunction
    "What to call."


class SystemMessage(OpenAIWireModel):
    role: Literal["system"]
    "Always ``system``."
    content: str | list[TextContentPart]
    "The instructions."
    name: str | None = None
    "An optional name for the participant."


class DeveloperMessage(OpenAIWireModel):
    role: Literal["developer"]
    "Always ``developer`` (the newer name of ``system`` for reasoning models)."
    content: str | list[TextContentPart]
    "The instructions."
    name: str | None = None
    "An optional name for the participant."


class UserMessage(OpenAIWireModel):
    role: Literal["user"]
    "Always ``user``."
    content: str | list[ContentPart]
    "Text, or a list of text and image parts."
    name: str | None = None
    "An optional name for the participant."


class AssistantMessage(OpenAIWireModel):
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


class ToolMessage(OpenAIWireModel):
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
    tag_discriminator(
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


class FunctionDefinition(OpenAIWireModel):
    name: str
    "The function's name."
    description: str | None = None
    "What the function does, for the model."
    parameters: dict[str, Any] | None = None
    "A JSON Schema object for the arguments."
    strict: bool | None = None
    "Whether the model must follow the schema exactly (Structured Outputs)."


class FunctionTool(OpenAIWireModel):
    type: Literal["function"]
    "Always ``function``."
    function: FunctionDefinition
    "The function."


class NamedToolChoiceFunction(OpenAIWireModel):
    name: str
    "The function the model must call."


class NamedToolChoice(OpenAIWireModel):
    type: Literal["function"]
    "Always ``function``."
    function: NamedToolChoiceFunction
    "The function the model must call."


# -- options ------------------------------------------------------------------------


class StreamOptions(OpenAIWireModel):
    include_usage: bool | None = None
    "Send one extra chunk with ``choices: []`` and the usage before ``data: [DONE]``."
    include_obfuscation: bool | None = None
    "Pad chunks with an ``obfuscation`` field (ignored by llmbridge)."


class JSONSchema(OpenAIWireModel):
    name: str
    "The schema's name."
    description: str | None = None
    "What the format is for."
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    "The JSON Schema the output must match (``schema`` on the wire)."
    strict: bool | None = None
    "Whether the output must follow the schema exactly."


class ResponseFormatText(OpenAIWireModel):
    type: Literal["text"]
    "Plain text output."


class ResponseFormatJSONObject(OpenAIWireModel):
    type: Literal["json_object"]
    "Any JSON object (the older JSON mode)."


class ResponseFormatJSONSchema(OpenAIWireModel):
    type: Literal["json_schema"]
    "Output matching ``json_schema`` (Structured Outputs)."
    json_schema: JSONSchema
    "The schema."


ResponseFormat = Annotated[
    Annotated[ResponseFormatText, Tag("ResponseFormatText")]
    | Annotated[ResponseFormatJSONObject, Tag("ResponseFormatJSONObject")]
    | Annotated[ResponseFormatJSONSchema, Tag("ResponseFormatJSONSchema")],
    tag_discriminator(
        "type",
        {
            "text": "ResponseFormatText",
            "json_object": "ResponseFormatJSONObject",
            "json_schema": "ResponseFormatJSONSchema",
        },
    ),
]

# -- bodies -------------------------------------------------------------------------


class _Sampling(OpenAIWireModel):
    """The sampling fields chat completions and legacy completions share."""

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


class ChatCompletionRequestBody(_Sampling):
    """``POST /v1/chat/completions``."""

    model: str
    "The model to use."
    messages: list[ChatMessage] = Field(min_length=1)
    "The conversation so far (at least one message)."
    max_tokens: int | None = None
    "Maximum tokens to generate (deprecated by OpenAI in favour of the next field)."
    max_completion_tokens: int | None = None
    "Maximum tokens to generate, reasoning included."
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


class CompletionRequestBody(_Sampling):
    """``POST /v1/completions`` (the legacy completions API; docs/COMPLETIONS.md)."""

    model: str
    "The model to use."
    prompt: Annotated[
        str | list[str] | list[int] | list[list[int]],
        # What ``decode_completion_request`` takes: parsed as the API does, refused after.
        WithJsonSchema(
            {
                "anyOf": [
                    {"type": "string"},
                    {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 1},
                ]
            }
        ),
    ]
    "The text to complete (one string; a list of one string is the same)."
    suffix: str | None = None
    "Text after the completion: fill-in-the-middle."
    max_tokens: int | None = None
    "Maximum tokens to generate (the API's default is 16)."
    n: Annotated[int | None, WithJsonSchema({"enum": [1, None]})] = None
    "How many completions to generate; llmbridge generates one."
    best_of: Annotated[int | None, WithJsonSchema({"enum": [1, None]})] = None
    "Candidates to generate server-side; llmbridge generates one."
    echo: bool | None = None
    "Repeat the prompt before the completion."
    logprobs: Annotated[int | None, WithJsonSchema({"type": "null"})] = None
    "Log probabilities of the most likely tokens; llmbridge returns none (a 400)."
    stream: bool | None = None
    "Stream the reply as server-sent events."
    stream_options: StreamOptions | None = None
    "Streaming options; only meaningful with ``stream: true``."
    logit_bias: dict[str, float] | None = None
    "Token id to bias, -100 to 100 (passed through)."
    user: str | None = None
    "An end-user identifier (passed through)."


class EmbeddingRequestBody(OpenAIWireModel):
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

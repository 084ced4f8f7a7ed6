"""Ollama's native wire shapes (``api/types.go``, ``docs/api.md``) and their small spellings.

The inbound request bodies are pydantic models that mirror the REST API field for
field, so validation errors name the field the client got wrong. They keep unknown
fields (``extra="allow"``) so a field this module does not know yet is carried in
``provider_details`` rather than dropped. Outbound bodies are built as plain dicts by
the codecs (pydantic stays off the streaming hot path); the helpers at the bottom
hold the spellings those codecs share: timestamps, ``done_reason`` and metrics.

Validation is strict (no ``"yes"`` for a boolean, no ``"1"`` for a number), as Go's
JSON decoder is, except that whole-valued floats are accepted for integer options
because every JSON number is a float64 to Ollama.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
)
from pydantic_core import PydanticCustomError

from llmbridge.core.response import StopReason, Timings, Usage
from llmbridge.dialects.images import first_bad_base64_byte, is_base64, split_base64_data_url

__all__ = [
    "THINK_LEVELS",
    "ChatMessage",
    "ChatRequestBody",
    "CopyRequestBody",
    "CreateRequestBody",
    "DeleteRequestBody",
    "EmbedRequestBody",
    "EmbeddingsRequestBody",
    "GenerateRequestBody",
    "Options",
    "PullRequestBody",
    "PushRequestBody",
    "ShowRequestBody",
    "Tool",
    "ToolCall",
    "ToolCallFunction",
    "ToolFunction",
    "done_reason",
    "keep_alive_seconds",
    "metrics",
    "parse_rfc3339",
    "rfc3339",
]

THINK_LEVELS = ("low", "medium", "high", "max")
"""The string values ``think`` accepts besides a boolean."""

ThinkLevel = Literal["low", "medium", "high", "max"]


def _whole_number(value: Any) -> Any:
    # Go decodes every JSON number as float64, so Ollama takes 100.0 for an int option.
    if isinstance(value, float) and value.is_integer():
        if not _INT64[0] <= value < _INT64[1]:
            # 1e19 would become an integer the JSON encoder cannot write (it was a 500).
            raise PydanticCustomError(
                "int_range", "number {value} overflows a 64-bit integer", {"value": value}
            )
        return int(value)
    return value


_INT64 = (-(2.0**63), 2.0**63)

WholeNumber = Annotated[int, BeforeValidator(_whole_number)]


def _check_image(value: str) -> str:
    # Ollama's Go decoder reads ``images`` as []byte, so bad base64 is a 400 there, in
    # these words; data URLs are accepted from lenient clients (``request._image_part``).
    # The same reading as the decoder's: a "data:" string that is not a base64 data
    # URL is checked whole (and fails), never let through as an empty payload.
    parsed = split_base64_data_url(value)
    data = value if parsed is None else parsed[1]
    if not is_base64(data, line_breaks=True):
        raise PydanticCustomError(
            "base64",
            "illegal base64 data at input byte {byte}",
            {"byte": first_bad_base64_byte(data)},
        )
    return value


Base64Image = Annotated[str, AfterValidator(_check_image)]


def _described(*alternatives: dict[str, Any]) -> WithJsonSchema:
    """The JSON Schema (gateway/openapi.py) of a field whose before-validator takes
    other values than its type says."""
    return WithJsonSchema({"anyOf": list(alternatives)})


_NULL = {"type": "null"}


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class Options(_Body):
    """Model options (``options``). Every option is optional; unknown ones are kept."""

    # load-time options
    numa: bool | None = None
    """Use NUMA optimisation."""
    num_ctx: WholeNumber | None = None
    """Size of the context window in tokens."""
    num_batch: WholeNumber | None = None
    """Prompt processing batch size."""
    num_gpu: WholeNumber | None = None
    """Number of layers to offload to the GPU."""
    main_gpu: WholeNumber | None = None
    """The GPU for small tensors."""
    low_vram: bool | None = None
    """Reduce VRAM use."""
    f16_kv: bool | None = None
    """Use 16-bit floats for the KV cache."""
    vocab_only: bool | None = None
    """Load only the vocabulary."""
    use_mmap: bool | None = None
    """Memory-map the model file."""
    use_mlock: bool | None = None
    """Lock the model in memory."""
    num_thread: WholeNumber | None = None
    """Number of CPU threads."""

    # runtime options
    num_keep: WholeNumber | None = None
    """Tokens of the prompt kept when the context shifts."""
    seed: WholeNumber | None = None
    """Random seed, for reproducible output."""
    num_predict: WholeNumber | None = None
    """Maximum tokens to generate (-1: unlimited, -2: fill the context)."""
    top_k: WholeNumber | None = None
    """Sample from the k most likely tokens."""
    top_p: float | None = None
    """Nucleus sampling threshold."""
    min_p: float | None = None
    """Minimum probability relative to the most likely token."""
    typical_p: float | None = None
    """Locally typical sampling threshold."""
    repeat_last_n: WholeNumber | None = None
    """How far back to look for repetitions."""
    temperature: float | None = None
    """Sampling temperature."""
    repeat_penalty: float | None = None
    """Multiplicative repetition penalty (1.0 is neutral)."""
    presence_penalty: float | None = None
    """Additive penalty for tokens already present."""
    frequency_penalty: float | None = None
    """Additive penalty proportional to a token's frequency."""
    mirostat: WholeNumber | None = None
    """Mirostat sampling version (0 disables it)."""
    mirostat_tau: float | None = None
    """Mirostat target entropy."""
    mirostat_eta: float | None = None
    """Mirostat learning rate."""
    penalize_newline: bool | None = None
    """Apply the repetition penalty to newlines."""
    stop: Annotated[
        list[str] | None,
        _described({"type": "string"}, {"type": "array", "items": {"type": "string"}}, _NULL),
    ] = None
    """Stop sequences (a single string is accepted too)."""

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [value]
        if value is None or (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            return value
        raise ValueError("must be a string or a list of strings")


class ToolCallFunction(_Body):
    """The function part of a tool call."""

    index: WholeNumber | None = None
    """Position of the call in its batch (Ollama often gives every call 0)."""
    name: str
    """Name of the function to call."""
    arguments: Annotated[
        dict[str, Any] | str, _described({"type": "object"}, {"type": "string"}, _NULL)
    ] = Field(default_factory=dict)
    """Arguments: a JSON object (Ollama) or a JSON string (what OpenAI clients send)."""

    @field_validator("arguments", mode="before")
    @classmethod
    def _object_or_string(cls, value: Any) -> Any:
        if value is None:
            return {}
        if isinstance(value, dict | str):
            return value
        raise ValueError("must be a JSON object or a string holding one")


class ToolCall(_Body):
    """A tool call made by the assistant."""

    id: str | None = None
    """Identifier of the call (newer Ollama versions send one)."""
    type: str | None = None
    """Always ``function`` when given."""
    function: ToolCallFunction
    """The function to call."""


class ChatMessage(_Body):
    """One message of ``messages``."""

    role: Literal["system", "user", "assistant", "tool"]
    """Who wrote it; Ollama lower-cases the role."""
    content: str | None = None
    """Text of the message."""
    thinking: str | None = None
    """The model's reasoning (assistant messages)."""
    images: list[Base64Image] | None = None
    """Base64-encoded images."""
    tool_calls: list[ToolCall] | None = None
    """Tool calls made by the assistant."""
    tool_name: str | None = None
    """Name of the tool whose result this is (tool messages)."""
    tool_call_id: str | None = None
    """Identifier of the call this result answers (tool messages)."""

    @field_validator("role", mode="before")
    @classmethod
    def _lower_role(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


class ToolFunction(_Body):
    """A function the model may call."""

    name: str
    """Name of the function."""
    description: str | None = None
    """What it does, for the model."""
    parameters: dict[str, Any] | None = None
    """JSON Schema of its arguments."""


class Tool(_Body):
    """One entry of ``tools``."""

    type: str = "function"
    """Always ``function``."""
    function: ToolFunction
    """The function definition."""


def _check_format(value: Any) -> Any:
    if value is None or value in ("", "json") or isinstance(value, dict):
        return value
    raise ValueError('must be "json" or a JSON Schema object')


def _check_think(value: Any) -> Any:
    if value is None or isinstance(value, bool) or value in THINK_LEVELS:
        return value
    raise ValueError("must be true, false, or one of 'low', 'medium', 'high', 'max'")


def _check_keep_alive(value: Any) -> Any:
    if value is None or isinstance(value, str) or type(value) in (int, float):
        return value
    raise ValueError("must be a duration string (such as '5m') or a number of seconds")


Format = Annotated[
    str | dict[str, Any] | None,
    BeforeValidator(_check_format),
    _described({"enum": ["", "json"]}, {"type": "object"}, _NULL),
]
Think = Annotated[bool | ThinkLevel | None, BeforeValidator(_check_think)]
KeepAlive = Annotated[str | int | float | None, BeforeValidator(_check_keep_alive)]


class _GenerationBody(_Body):
    model: str = Field(min_length=1)
    """Name of the model."""
    stream: bool | None = None
    """Stream the reply as NDJSON (Ollama's default is true)."""
    format: Format = None
    """``json`` or a JSON Schema the reply must follow."""
    keep_alive: KeepAlive = None
    """How long the model stays loaded after the request (duration or seconds)."""
    options: Options | None = None
    """Model options."""
    think: Think = None
    """Reason before answering: a boolean or an effort level."""
    truncate: bool | None = None
    """Truncate the prompt to fit the context instead of failing."""
    shift: bool | None = None
    """Shift the context window when it fills up."""
    logprobs: bool | None = None
    """Return log probabilities of the generated tokens."""
    top_logprobs: WholeNumber | None = None
    """Alternatives per position to return with ``logprobs``."""


class ChatRequestBody(_GenerationBody):
    """The body of ``POST /api/chat``."""

    messages: list[ChatMessage] | None = None
    """The conversation (may be empty, which just loads the model)."""
    tools: list[Tool] | None = None
    """Tools the model may call."""


class GenerateRequestBody(_GenerationBody):
    """The body of ``POST /api/generate``."""

    prompt: str | None = None
    """The prompt (empty just loads the model)."""
    suffix: str | None = None
    """Text after the insertion point (fill-in-the-middle)."""
    system: str | None = None
    """System prompt, overriding the model's."""
    template: str | None = None
    """Prompt template, overriding the model's."""
    context: list[WholeNumber] | None = None
    """Tokens returned by a previous reply (deprecated conversational memory)."""
    raw: bool | None = None
    """Send the prompt without applying the template."""
    images: list[Base64Image] | None = None
    """Base64-encoded images."""


class EmbedRequestBody(_Body):
    """The body of ``POST /api/embed``."""

    model: str = Field(min_length=1)
    """Name of the model."""
    input: str | list[str]
    """Text, or a list of texts, to embed."""
    truncate: bool | None = None
    """Truncate inputs to the context length instead of failing (default true)."""
    dimensions: WholeNumber | None = None
    """Truncate the output vectors to this many dimensions."""
    keep_alive: KeepAlive = None
    """How long the model stays loaded after the request."""
    options: Options | None = None
    """Model options."""

    @field_validator("input", mode="before")
    @classmethod
    def _string_or_strings(cls, value: Any) -> Any:
        if isinstance(value, str) or (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        ):
            return value
        raise ValueError("must be a string or a list of strings")


class EmbeddingsRequestBody(_Body):
    """The body of ``POST /api/embeddings``: one prompt, one vector (the route Ollama
    keeps beside ``/api/embed``, which ollama-js's ``embeddings()`` still calls)."""

    model: str = Field(min_length=1)
    """Name of the model."""
    prompt: str = ""
    """The text to embed; empty just loads the model (the reply's vector is empty)."""
    keep_alive: KeepAlive = None
    """How long the model stays loaded after the request."""
    options: Options | None = None
    """Model options."""


class _NamedModelBody(_Body):
    """A body that names one model, as ``model`` or by its deprecated name ``name``:
    ``/api/show`` and the model-management routes."""

    # One of the two names is required (``decode_show_request``,
    # ``manage.decode_model_request``).
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"required": [key], "properties": {key: {"type": "string", "minLength": 1}}}
                for key in ("model", "name")
            ]
        }
    )

    model: str | None = None
    """Name of the model."""
    name: str | None = None
    """Deprecated spelling of ``model`` (ollama-js still sends it)."""

    @property
    def model_name(self) -> str:
        """The model named, whichever field named it (empty when neither did)."""
        return self.model or self.name or ""


class ShowRequestBody(_NamedModelBody):
    """The body of ``POST /api/show``."""

    verbose: bool | None = None
    """Include large fields (full tokenizer data) in ``model_info``."""
    system: str | None = None
    """Deprecated: a system prompt to show the modelfile with."""


# -- model management (``/api/pull``, ``/api/push``, ``/api/delete``, ``/api/copy``,
# ``/api/create``): validated here, then forwarded as the client sent them, so only
# the fields the gateway reads are declared (``extra="allow"`` keeps the rest).


class PullRequestBody(_NamedModelBody):
    """The body of ``POST /api/pull``."""

    insecure: bool | None = None
    """Deprecated, ignored by Ollama."""
    stream: bool | None = None
    """Stream progress lines (Ollama's default is true); false: one final line."""


class PushRequestBody(PullRequestBody):
    """The body of ``POST /api/push``."""


class DeleteRequestBody(_NamedModelBody):
    """The body of ``DELETE /api/delete``."""


class CopyRequestBody(_Body):
    """The body of ``POST /api/copy``."""

    source: str = Field(min_length=1)
    """The model to copy."""
    destination: str = Field(min_length=1)
    """The new name."""


class CreateRequestBody(_NamedModelBody):
    """The body of ``POST /api/create`` (``files``, ``adapters``, ``template``,
    ``system``, ``parameters``, ``messages``... go through as sent)."""

    model_config = ConfigDict(populate_by_name=True)

    from_: str | None = Field(None, alias="from")
    """The model (or file) the new one is made from."""
    stream: bool | None = None
    """Stream progress lines (Ollama's default is true)."""
    quantize: str | None = None
    """Quantization format for the new model."""


# -- spellings shared by the codecs ---------------------------------------------------

_FRACTION = re.compile(r"(\.\d{6})\d+")


def rfc3339(timestamp: float) -> str:
    """Unix time as Ollama's ``created_at``: RFC 3339 in UTC with a ``Z``."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(value: object) -> float | None:
    """Ollama's RFC 3339 timestamp (nanosecond fraction, any offset) as Unix time."""
    if not isinstance(value, str) or not value:
        return None
    text = _FRACTION.sub(r"\1", value)  # Go writes 9 fraction digits; Python reads 6
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


_DURATION = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
_DURATION_UNITS = {
    "ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
    "h": 3600.0,
}  # fmt: skip


def keep_alive_seconds(value: str | int | float | None) -> float | None:
    """``keep_alive`` in seconds as Ollama reads it: a number is seconds, a string a Go
    duration (``"5m"``, ``"1h30m"``, ``"0"``); ``None`` when absent or not a duration.
    A negative value means "for ever" to Ollama and stays negative here."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    text = value.strip()
    sign = -1.0 if text.startswith("-") else 1.0
    text = text.lstrip("+-")
    if text == "0":
        return 0.0
    total, position = 0.0, 0
    for match in _DURATION.finditer(text):
        if match.start() != position:
            return None
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        position = match.end()
    return sign * total if text and position == len(text) else None


def done_reason(stop_reason: StopReason) -> str:
    """Ollama's ``done_reason``: only ``length`` is distinct; a tool call is ``stop``."""
    return "length" if stop_reason is StopReason.MAX_TOKENS else "stop"


def metrics(usage: Usage, timings: Timings) -> dict[str, int]:
    """The metric fields of a final reply, in Ollama's order, omitting unknown ones."""
    fields = (
        ("total_duration", timings.total_ns),
        ("load_duration", timings.load_ns),
        ("prompt_eval_count", usage.input_tokens),
        # prompt_eval_count is the whole prompt (ollama/ollama#5371), this the part of
        # it read from the cache (ollama/ollama#17943).
        ("prompt_eval_cached_count", usage.cache_read_input_tokens),
        ("prompt_eval_duration", timings.prompt_eval_ns),
        ("eval_count", usage.output_tokens),
        ("eval_duration", timings.eval_ns),
    )
    return {key: value for key, value in fields if value is not None}

"""OpenAI chat-completion and embedding requests, both directions.

``decode_*`` validates what a client sent to the gateway's OpenAI front and turns it
into the core request; ``encode_*`` builds the body llmbridge sends to an
OpenAI-compatible server (OpenAI, vLLM, llama.cpp, Ollama's ``/v1``). Fields the core
does not model ride along in ``provider_details["openai"]`` and are sent back out
when the backend speaks OpenAI too, so an OpenAI-to-OpenAI trip loses nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, cast

from pydantic import BaseModel

from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.messages import (
    ImagePart,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolChoice,
    ToolDefinition,
    ToolResultPart,
    message_text,
)
from llmbridge.core.request import (
    ChatRequest,
    EmbedRequest,
    GenerationParams,
    ResponseFormat,
    ThinkingConfig,
    effort_for_budget,
)
from llmbridge.core.request_limits import (
    DEFAULT_LIMITS,
    RequestLimits,
    check_conversation_counts,
    check_message_parts,
)
from llmbridge.core.tool_arguments import parse_request_tool_arguments
from llmbridge.dialects.images import split_base64_data_url
from llmbridge.dialects.openai.errors import VALIDATION_WORDING
from llmbridge.dialects.openai.response import encode_tool_call
from llmbridge.dialects.openai.types import (
    AssistantMessage,
    ChatCompletionRequestBody,
    ChatMessage,
    DeveloperMessage,
    EmbeddingRequestBody,
    FunctionTool,
    ImageContentPart,
    NamedToolChoice,
    ReasoningEffort,
    ResponseFormatJSONObject,
    ResponseFormatJSONSchema,
    SystemMessage,
    TextContentPart,
    UserMessage,
)
from llmbridge.dialects.openai.types import (
    ResponseFormat as WireResponseFormat,
)
from llmbridge.dialects.validation import validate_body

__all__ = [
    "Ranges",
    "check_ranges",
    "decode_chat_request",
    "decode_embed_request",
    "encode_chat_request",
    "encode_embed_request",
]

_Effort = Literal["low", "medium", "high", "max"]

# The core has four effort levels; OpenAI's extra spellings fold onto the nearest one
# and the original spelling is kept in provider_details so OpenAI backends get it back.
_EFFORT_FROM_WIRE: dict[str, _Effort] = {
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "max",
    "max": "max",
}
# "max" has no spelling every OpenAI-compatible server accepts (vLLM and Ollama take
# only low/medium/high), so it goes out as "high" unless the client wrote otherwise.
_EFFORT_TO_WIRE: dict[_Effort, str] = {
    "low": "low",
    "medium": "medium",
    "high": "high",
    "max": "high",
}

_TOOL_CHOICE_FROM_WIRE: dict[str, Literal["auto", "any", "none"]] = {
    "auto": "auto",
    "none": "none",
    "required": "any",
}
_TOOL_CHOICE_TO_WIRE = {"auto": "auto", "none": "none", "any": "required"}

# Top-level fields decode_chat_request turns into core fields; every other field
# (n, user, logit_bias, metadata, store, ...) rides along in provider_details.
_MODELLED = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "frequency_penalty",
        "presence_penalty",
        "stream",
        "stream_options",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "reasoning_effort",
        "response_format",
    }
)

# Base64 prefixes of the image formats OpenAI accepts, for images that arrive
# without a media type (Ollama sends bare base64).
_IMAGE_MAGIC = (
    ("iVBORw0KGgo", "image/png"),
    ("/9j/", "image/jpeg"),
    ("R0lGOD", "image/gif"),
    ("UklGR", "image/webp"),
)

# -- decode: client body -> core ----------------------------------------------------


def decode_chat_request(body: object, limits: RequestLimits = DEFAULT_LIMITS) -> ChatRequest:
    """Validate an OpenAI chat-completion body and translate it to the core request.

    ``body`` is parsed JSON that has passed ``web.bodies.parse_json`` (its depth
    and size); ``limits`` bounds the messages, tools and parts here.

    Raises:
        InvalidRequestError: the body is not an object, a field is missing or has the
            wrong type (``param`` names its path, e.g. ``messages.0.role``), a value is
            out of the range OpenAI accepts, a count is over ``limits``, or ``n``
            asks for more than one choice.
    """
    _check_counts(body, limits)
    wire = validate_body(
        ChatCompletionRequestBody,
        body,
        VALIDATION_WORDING,
        slice_field="messages",
        part_keys=_PART_KEYS,
    )
    data = cast("dict[str, Any]", body)  # an object: validate_body accepted it
    check_ranges(wire, _RANGES)
    if wire.n is not None and wire.n != 1:
        raise InvalidRequestError(
            f"Invalid 'n': {wire.n}. llmbridge generates exactly one choice; 'n' must be 1.",
            param="n",
        )
    details = {
        key: value for key, value in data.items() if key not in _MODELLED and value is not None
    }
    effort = wire.reasoning_effort
    if effort is not None and effort not in ("none", "low", "medium", "high", "max"):
        details["reasoning_effort"] = effort  # a spelling the core folds (minimal, xhigh)
    stop = wire.stop
    return ChatRequest(
        model=wire.model,
        messages=_decode_messages(wire.messages, limits),
        stream=bool(wire.stream),
        params=GenerationParams(
            max_tokens=(
                wire.max_completion_tokens
                if wire.max_completion_tokens is not None
                else wire.max_tokens
            ),
            temperature=wire.temperature,
            top_p=wire.top_p,
            stop=(stop,) if isinstance(stop, str) else tuple(stop or ()),
            seed=wire.seed,
            frequency_penalty=wire.frequency_penalty,
            presence_penalty=wire.presence_penalty,
        ),
        tools=tuple(_decode_tool(tool) for tool in wire.tools or ()),
        tool_choice=_decode_tool_choice(wire.tool_choice, wire.parallel_tool_calls),
        thinking=_decode_thinking(effort),
        response_format=_decode_response_format(wire.response_format),
        include_usage=bool(wire.stream_options and wire.stream_options.include_usage),
        provider_details={"openai": details} if details else None,
        cache_key=_cache_key(details.get("prompt_cache_key")),
    )


def _cache_key(value: object) -> str | None:
    """The client's ``prompt_cache_key``, for backends of other dialects that take one
    (an OpenAI backend gets it back with the other fields kept, as the client sent it)."""
    return value if isinstance(value, str) and value else None


def decode_embed_request(body: object) -> EmbedRequest:
    """Validate an OpenAI embeddings body.

    Raises:
        InvalidRequestError: not an object, a bad field, an empty input, or token
            arrays as input (llmbridge embeds text only).
    """
    wire = validate_body(EmbeddingRequestBody, body, VALIDATION_WORDING)
    inputs = [wire.input] if isinstance(wire.input, str) else wire.input
    if not inputs:
        raise InvalidRequestError("Invalid 'input': must not be empty.", param="input")
    texts = tuple(item for item in inputs if isinstance(item, str))
    if len(texts) != len(inputs):
        raise InvalidRequestError(
            "Invalid 'input': token arrays are not supported; send text.", param="input"
        )
    return EmbedRequest(model=wire.model, inputs=texts, dimensions=wire.dimensions)


_PART_KEYS = ("content", "tool_calls")
"""The lists of a message that count as its parts (``max_parts_per_message``)."""

# (field, lowest, highest, OpenAI's kind of number): the ranges OpenAI's API enforces.
_RANGES: Ranges = (
    ("max_tokens", 1, None, "integer"),
    ("max_completion_tokens", 1, None, "integer"),
    ("temperature", 0, 2, "decimal"),
    ("top_p", 0, 1, "decimal"),
    ("frequency_penalty", -2, 2, "decimal"),
    ("presence_penalty", -2, 2, "decimal"),
)


def _check_counts(body: object, limits: RequestLimits) -> None:
    """Count limits, checked before validation so an oversized body costs little."""
    if not isinstance(body, dict):
        return
    messages = body.get("messages")
    if messages == []:
        raise InvalidRequestError(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead.",
            param="messages",
            code="empty_array",
        )
    messages = check_conversation_counts(body, limits)
    check_message_parts(messages, limits, _PART_KEYS, "content parts and tool calls")


Ranges = tuple[tuple[str, float, float | None, str], ...]
"""``(field, minimum, maximum or None, "integer" | "decimal")`` of a request body."""


def check_ranges(wire: BaseModel, ranges: Ranges) -> None:
    """What OpenAI's APIs reject that the types let through, in their words: no model,
    or a number outside its range (chat completions, completions and Responses alike)."""
    if not getattr(wire, "model", None):
        raise InvalidRequestError("you must provide a model parameter", param="model")
    for name, low, high, kind in ranges:
        value = getattr(wire, name)
        if value is None:
            continue
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # "got -5", as OpenAI writes the number the client sent
        if value < low:
            raise InvalidRequestError(
                f"Invalid '{name}': {kind} below minimum value. "
                f"Expected a value >= {low}, but got {value} instead.",
                param=name,
                code=f"{kind}_below_min_value",
            )
        if high is not None and value > high:
            raise InvalidRequestError(
                f"Invalid '{name}': {kind} above maximum value. "
                f"Expected a value <= {high}, but got {value} instead.",
                param=name,
                code=f"{kind}_above_max_value",
            )


def _decode_messages(
    wire_messages: Sequence[ChatMessage], limits: RequestLimits = DEFAULT_LIMITS
) -> tuple[Message, ...]:
    tool_names: dict[str, str] = {}  # tool call id -> function name, for tool results
    messages: list[Message] = []
    for index, wire in enumerate(wire_messages):
        details = _extras(wire)
        if isinstance(wire, SystemMessage | DeveloperMessage):
            message = Message("system", _text_parts(wire.content), name=wire.name)
        elif isinstance(wire, UserMessage):
            parts: tuple[Part, ...] = (
                (TextPart(wire.content),)
                if isinstance(wire.content, str)
                else tuple(_decode_user_part(part) for part in wire.content)
            )
            message = Message("user", parts, name=wire.name)
        elif isinstance(wire, AssistantMessage):
            message = _decode_assistant(wire, tool_names, f"messages.{index}", limits)
            if wire.refusal is not None:
                details["refusal"] = wire.refusal
        else:
            result = ToolResultPart(
                tool_call_id=wire.tool_call_id,
                content=message_text(_text_parts(wire.content)),
                name=tool_names.get(wire.tool_call_id),
            )
            message = Message("tool", (result,))
        if details:
            message = Message(
                message.role, message.parts, message.name, provider_details={"openai": details}
            )
        messages.append(message)
    return tuple(messages)


def _decode_assistant(
    wire: AssistantMessage, tool_names: dict[str, str], path: str, limits: RequestLimits
) -> Message:
    parts: list[Part] = []
    # Servers name reasoning differently (reasoning_content: DeepSeek, LiteLLM;
    # reasoning: vLLM >= 0.11, Ollama); some send both with the same text.
    reasoning = wire.reasoning_content or wire.reasoning
    if reasoning:
        parts.append(ThinkingPart(reasoning))
    if isinstance(wire.content, str):
        if wire.content:
            parts.append(TextPart(wire.content))
    elif wire.content:
        parts.extend(TextPart(part.text) for part in wire.content if part.text)
    for position, call in enumerate(wire.tool_calls or ()):
        where = f"{path}.tool_calls.{position}.function.arguments"
        arguments, raw = parse_request_tool_arguments(
            call.function.arguments, where, limits.max_json_depth
        )
        parts.append(ToolCallPart(call.id, call.function.name, arguments, raw))
        tool_names[call.id] = call.function.name
    return Message("assistant", tuple(parts), name=wire.name)


def _decode_user_part(part: TextContentPart | ImageContentPart) -> Part:
    if isinstance(part, TextContentPart):
        return TextPart(part.text)
    url = part.image_url.url
    parsed = split_base64_data_url(url)
    if parsed is not None:
        media_type, payload = parsed
        return ImagePart(data=payload, media_type=media_type)
    return ImagePart(url=url)


def _text_parts(content: str | list[TextContentPart]) -> tuple[TextPart, ...]:
    if isinstance(content, str):
        return (TextPart(content),)
    return tuple(TextPart(part.text) for part in content)


def _extras(wire: BaseModel) -> dict[str, Any]:
    return {key: value for key, value in (wire.model_extra or {}).items() if value is not None}


def _decode_tool(tool: FunctionTool) -> ToolDefinition:
    function = tool.function
    return ToolDefinition(
        name=function.name,
        description=function.description or "",
        input_schema=function.parameters if function.parameters is not None else {"type": "object"},
        provider_details=(
            {"openai": {"strict": function.strict}} if function.strict is not None else None
        ),
    )


def _decode_tool_choice(
    choice: str | NamedToolChoice | None, parallel_tool_calls: bool | None
) -> ToolChoice | None:
    disable_parallel = parallel_tool_calls is False
    if choice is None:
        return ToolChoice(disable_parallel=True) if disable_parallel else None
    if isinstance(choice, NamedToolChoice):
        return ToolChoice("tool", name=choice.function.name, disable_parallel=disable_parallel)
    return ToolChoice(_TOOL_CHOICE_FROM_WIRE[choice], disable_parallel=disable_parallel)


def _decode_thinking(effort: ReasoningEffort | None) -> ThinkingConfig | None:
    if effort is None:
        return None
    if effort == "none":
        return ThinkingConfig(enabled=False)
    return ThinkingConfig(effort=_EFFORT_FROM_WIRE[effort])


def _decode_response_format(wire: WireResponseFormat | None) -> ResponseFormat | None:
    if wire is None:
        return None
    if isinstance(wire, ResponseFormatJSONSchema):
        return ResponseFormat(
            "json_schema", schema=wire.json_schema.schema_, name=wire.json_schema.name
        )
    if isinstance(wire, ResponseFormatJSONObject):
        return ResponseFormat("json")
    return ResponseFormat("text")


# -- encode: core -> server body ----------------------------------------------------


def encode_chat_request(req: ChatRequest) -> dict[str, Any]:
    """The chat-completion body for an OpenAI-compatible server.

    Thinking parts in the history are dropped: OpenAI's API has no input field for
    them. Tool results become ``tool`` messages right after the assistant message
    that made the calls.
    """
    body: dict[str, Any] = {"model": req.model, "messages": _encode_messages(req.messages)}
    params = req.params
    for key, value in (
        ("max_tokens", params.max_tokens),
        ("temperature", params.temperature),
        ("top_p", params.top_p),
        ("seed", params.seed),
        ("frequency_penalty", params.frequency_penalty),
        ("presence_penalty", params.presence_penalty),
    ):
        if value is not None:
            body[key] = value
    if params.stop:
        body["stop"] = list(params.stop)
    body["stream"] = req.stream
    if req.stream:
        # Always ask for usage: the stream decoder reports it whatever the client asked.
        body["stream_options"] = {"include_usage": True}
    if req.tools:
        body["tools"] = [_encode_tool(tool) for tool in req.tools]
        choice = req.tool_choice
        if choice is not None:
            body["tool_choice"] = (
                {"type": "function", "function": {"name": choice.name or ""}}
                if choice.mode == "tool"
                else _TOOL_CHOICE_TO_WIRE[choice.mode]
            )
            if choice.disable_parallel:
                body["parallel_tool_calls"] = False
    passthrough = (req.provider_details or {}).get("openai") or {}
    if req.thinking is not None:
        effort = _encode_reasoning_effort(req.thinking, passthrough.get("reasoning_effort"))
        if effort is not None:
            body["reasoning_effort"] = effort
    if req.response_format is not None:
        body["response_format"] = _encode_response_format(req.response_format)
    for key, value in passthrough.items():
        body.setdefault(key, value)
    if req.cache_key:
        # The client's prompt cache key (Codex's conversation id, from a Responses
        # client): OpenAI routes a request to the machine holding its cached prefix.
        body.setdefault("prompt_cache_key", req.cache_key)
    return body


def encode_embed_request(req: EmbedRequest) -> dict[str, Any]:
    """The embeddings body for an OpenAI-compatible server (always float vectors)."""
    body: dict[str, Any] = {"model": req.model, "input": list(req.inputs)}
    if req.dimensions is not None:
        body["dimensions"] = req.dimensions
    body["encoding_format"] = "float"
    return body


def _encode_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    # Where tool results for the latest assistant's calls go: right after it, even
    # when the history has something in between (OpenAI rejects anything else).
    anchor: int | None = None
    pending: dict[str, str] = {}  # unanswered call id -> tool name
    for message in messages:
        rest: list[Part] = []
        for part in message.parts:
            if not isinstance(part, ToolResultPart):
                rest.append(part)
                continue
            call_id = part.tool_call_id or _guess_call_id(pending, part.name)
            encoded_result = {"role": "tool", "tool_call_id": call_id, "content": part.content}
            if anchor is not None and call_id in pending:
                out.insert(anchor, encoded_result)
                anchor += 1
                del pending[call_id]
            else:
                out.append(encoded_result)
        if message.role == "assistant":
            out.append(_with_details(message, _encode_assistant(message, rest)))
            calls = message.tool_calls
            anchor = len(out) if calls else None
            pending = {call.id: call.name for call in calls}
        elif rest:
            role = "system" if message.role == "system" else "user"
            encoded = {"role": role, "content": _encode_content(rest)}
            out.append(_with_details(message, encoded))
    return out


def _guess_call_id(pending: dict[str, str], name: str | None) -> str:
    """A result without an id (Ollama's history) answers the first call of its tool."""
    for call_id, call_name in pending.items():
        if name is None or call_name == name:
            return call_id
    return ""


def _encode_assistant(message: Message, parts: list[Part]) -> dict[str, Any]:
    calls = [part for part in parts if isinstance(part, ToolCallPart)]
    text = message_text(parts)
    encoded: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if calls:
        encoded["tool_calls"] = [encode_tool_call(call) for call in calls]
    return encoded


def _encode_content(parts: list[Part]) -> str | list[dict[str, Any]]:
    """A single text part is a string; anything else is a list of content parts."""
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return parts[0].text
    items: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, TextPart):
            items.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            items.append({"type": "image_url", "image_url": {"url": _image_url(part)}})
    return items


def _with_details(message: Message, encoded: dict[str, Any]) -> dict[str, Any]:
    if message.name is not None:
        encoded["name"] = message.name
    for key, value in ((message.provider_details or {}).get("openai") or {}).items():
        encoded.setdefault(key, value)
    return encoded


def _image_url(part: ImagePart) -> str:
    if part.data is None:
        return part.url or ""
    media_type = part.media_type or _sniff_media_type(part.data)
    return f"data:{media_type};base64,{part.data}"


def _sniff_media_type(data: str) -> str:
    for prefix, media_type in _IMAGE_MAGIC:
        if data.startswith(prefix):
            return media_type
    return "image/png"  # a guess; servers sniff the bytes anyway


def _encode_tool(tool: ToolDefinition) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    function["parameters"] = tool.input_schema
    strict = ((tool.provider_details or {}).get("openai") or {}).get("strict")
    if strict is not None:
        function["strict"] = strict
    return {"type": "function", "function": function}


def _encode_reasoning_effort(thinking: ThinkingConfig, original: object) -> str | None:
    """``reasoning_effort`` for a thinking config.

    An explicit effort maps directly (keeping the client's own spelling, such as
    ``minimal``, when it folds onto the same level). A token budget maps by size
    (``core.request.effort_for_budget``). Thinking enabled with neither leaves the
    server's default.
    """
    if not thinking.enabled:
        return "none"
    if thinking.effort is not None:
        if isinstance(original, str) and _EFFORT_FROM_WIRE.get(original) == thinking.effort:
            return original
        return _EFFORT_TO_WIRE[thinking.effort]
    if thinking.budget_tokens is None:
        return None
    return effort_for_budget(thinking.budget_tokens)


def _encode_response_format(response_format: ResponseFormat) -> dict[str, Any]:
    if response_format.type == "json_schema":
        json_schema: dict[str, Any] = {"name": response_format.name or "response"}
        if response_format.schema is not None:
            json_schema["schema"] = response_format.schema
        return {"type": "json_schema", "json_schema": json_schema}
    if response_format.type == "json":
        return {"type": "json_object"}
    return {"type": "text"}

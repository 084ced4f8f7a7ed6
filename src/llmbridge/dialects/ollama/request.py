"""Ollama request bodies <-> neutral requests: ``/api/chat``, ``/api/generate``,
``/api/embed`` and ``/api/embeddings``.

A backend sends a completion request (``ChatRequest.completion``) as ``/api/generate``
(``encode_generate_request``), where Ollama fills the gap before a ``suffix`` with the
model's own template.

Decoding validates a client's body against ``types`` and translates it to a
``ChatRequest`` / ``EmbedRequest`` (for ``/api/show``, the model name); encoding builds
the body llmbridge sends to a real Ollama server. Fields the core does not model
(``truncate``, ``shift``, ``logprobs``, ``template``, unknown fields, ...) ride along
in ``provider_details["ollama"]``. Ollama has no ``tool_choice``, so it is not sent.
"""

from __future__ import annotations

from typing import Any, Literal

from llmbridge.core.errors import InvalidRequestError, UnsupportedFeatureError
from llmbridge.core.ids import new_id
from llmbridge.core.messages import (
    ImagePart,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolDefinition,
    ToolResultPart,
)
from llmbridge.core.request import (
    ChatRequest,
    Completion,
    EmbedRequest,
    GenerationParams,
    ResponseFormat,
    ThinkingConfig,
)
from llmbridge.core.request_limits import (
    DEFAULT_LIMITS,
    RequestLimits,
    check_conversation_counts,
    check_count,
    check_message_parts,
)
from llmbridge.core.tool_arguments import parse_request_tool_arguments
from llmbridge.dialects.images import split_base64_data_url
from llmbridge.dialects.ollama.errors import VALIDATION_WORDING
from llmbridge.dialects.ollama.types import (
    ChatMessage,
    ChatRequestBody,
    EmbeddingsRequestBody,
    EmbedRequestBody,
    GenerateRequestBody,
    Options,
    ShowRequestBody,
    Tool,
    ToolCall,
)
from llmbridge.dialects.validation import validate_body

__all__ = [
    "decode_chat_request",
    "decode_embed_request",
    "decode_embeddings_request",
    "decode_generate_request",
    "decode_show_request",
    "encode_chat_request",
    "encode_embed_request",
    "encode_generate_request",
]

# Options with a canonical field in GenerationParams; every other option goes to ``extra``.
_CORE_OPTIONS = frozenset(
    {
        "num_predict",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "stop",
        "seed",
        "repeat_penalty",
        "frequency_penalty",
        "presence_penalty",
        "num_ctx",
    }
)
# Top-level fields of a generation body that the core models itself.
_MODELLED = frozenset(
    {"model", "messages", "stream", "format", "keep_alive", "options", "think", "tools"}
)
# Generate-only fields kept in provider_details that /api/chat has no use for.
_GENERATE_ONLY = frozenset({"prompt", "suffix", "system", "template", "context", "raw", "images"})
_EFFORTS: dict[str, Literal["low", "medium", "high", "max"]] = {
    "low": "low",
    "medium": "medium",
    "high": "high",
    "max": "max",
}
# The first bytes of base64-encoded images, to name a media type Ollama never sends.
_IMAGE_SIGNATURES = (
    ("iVBORw0KGgo", "image/png"),
    ("/9j/", "image/jpeg"),
    ("R0lGOD", "image/gif"),
    ("UklGR", "image/webp"),
)


# -- decoding -------------------------------------------------------------------------


def decode_chat_request(body: object, limits: RequestLimits = DEFAULT_LIMITS) -> ChatRequest:
    """Validate and translate an ``/api/chat`` body.

    ``body`` is parsed JSON that has passed ``web.bodies.parse_json`` (its depth
    and size); ``limits`` bounds the messages, tools and parts here.

    Raises:
        InvalidRequestError: the body is not an object, a field is missing or has
            the wrong type, or a count is over ``limits``; ``param`` is the field's
            dotted path (``messages.0.role``).
    """
    _check_counts(body, limits)
    parsed = validate_body(
        ChatRequestBody, body, VALIDATION_WORDING, slice_field="messages", part_keys=_PART_KEYS
    )
    return ChatRequest(
        model=parsed.model,
        messages=_decode_messages(parsed.messages or [], limits),
        stream=parsed.stream is not False,
        params=_decode_options(parsed.options),
        tools=tuple(_decode_tool(tool) for tool in parsed.tools or []),
        thinking=_decode_think(parsed.think),
        response_format=_decode_format(parsed.format),
        keep_alive=_decode_keep_alive(parsed.keep_alive),
        provider_details=_provider_details(parsed),
    )


def decode_generate_request(body: object, limits: RequestLimits = DEFAULT_LIMITS) -> ChatRequest:
    """Validate and translate an ``/api/generate`` body into a chat request.

    ``system`` becomes a system message and ``prompt`` (with ``images``) a user
    message; ``prompt``, ``suffix`` and ``raw`` also make the request's ``Completion``,
    which backends that complete text read (fill-in-the-middle with a ``suffix``).
    An empty prompt without a suffix is valid (Ollama just loads the model) and
    decodes to a request with no messages; the caller decides what to do with it.
    """
    if isinstance(body, dict):
        images = body.get("images")
        where = "images"
        check_count(images, limits.max_parts_per_message, path=where, setting=_PARTS, noun=where)
    parsed = validate_body(GenerateRequestBody, body, VALIDATION_WORDING)
    messages: list[Message] = []
    if parsed.system:
        messages.append(Message(role="system", parts=(TextPart(parsed.system),)))
    suffix = parsed.suffix or None  # Ollama ignores an empty suffix too
    prompt = parsed.prompt or ""
    user_parts: list[Part] = [TextPart(prompt)] if prompt or suffix is not None else []
    user_parts.extend(_image_part(image) for image in parsed.images or [])
    completion = None
    if user_parts:
        messages.append(Message(role="user", parts=tuple(user_parts)))
        completion = Completion(prompt=prompt, suffix=suffix, raw=parsed.raw is True)
    return ChatRequest(
        model=parsed.model,
        messages=tuple(messages),
        stream=parsed.stream is not False,
        params=_decode_options(parsed.options),
        thinking=_decode_think(parsed.think),
        response_format=_decode_format(parsed.format),
        keep_alive=_decode_keep_alive(parsed.keep_alive),
        provider_details=_provider_details(
            parsed, exclude=frozenset({"prompt", "suffix", "raw", "system", "images"})
        ),
        completion=completion,
    )


def decode_embed_request(body: object) -> EmbedRequest:
    """Validate and translate an ``/api/embed`` body."""
    parsed = validate_body(EmbedRequestBody, body, VALIDATION_WORDING)
    inputs = (parsed.input,) if isinstance(parsed.input, str) else tuple(parsed.input)
    return EmbedRequest(
        model=parsed.model,
        inputs=inputs,
        dimensions=parsed.dimensions,
        truncate=parsed.truncate is not False,
        keep_alive=_decode_keep_alive(parsed.keep_alive),
        provider_details=_embed_details(parsed.options),
    )


def decode_embeddings_request(body: object) -> EmbedRequest:
    """Validate and translate an ``/api/embeddings`` body (one ``prompt``, one vector).

    An empty prompt is valid: Ollama loads the model and answers an empty vector, so
    it decodes to a request with no inputs.
    """
    parsed = validate_body(EmbeddingsRequestBody, body, VALIDATION_WORDING)
    return EmbedRequest(
        model=parsed.model,
        inputs=(parsed.prompt,) if parsed.prompt else (),
        keep_alive=_decode_keep_alive(parsed.keep_alive),
        provider_details=_embed_details(parsed.options),
    )


def _embed_details(options: Options | None) -> dict[str, Any] | None:
    """The embedding's ``options`` as an Ollama backend takes them back (the load-time
    ones, ``num_ctx`` and ``num_thread`` say, matter to an embedding model too)."""
    values = options.model_dump(exclude_none=True) if options is not None else {}
    return {"ollama": {"options": values}} if values else None


def decode_show_request(body: object) -> str:
    """Validate an ``/api/show`` body; the model it names (``model``, else ``name``).

    Raises:
        InvalidRequestError: not an object, a field of the wrong type (Ollama's Go
            decoder rejects ``"verbose": "yes"`` too), or no model named.
    """
    name = validate_body(ShowRequestBody, body, VALIDATION_WORDING).model_name
    if not name:
        raise InvalidRequestError("'model' is required", param="model")
    return name


_PART_KEYS = ("images", "tool_calls")
"""The lists of a message that count as its parts (``max_parts_per_message``)."""
_PARTS = "max_parts_per_message"


def _check_counts(body: object, limits: RequestLimits) -> None:
    """Count limits, checked before validation so an oversized body costs little."""
    if isinstance(body, dict):
        messages = check_conversation_counts(body, limits)
        check_message_parts(messages, limits, _PART_KEYS, "images and tool calls")


def _decode_messages(
    raw: list[ChatMessage], limits: RequestLimits = DEFAULT_LIMITS
) -> tuple[Message, ...]:
    messages: list[Message] = []
    # Calls of the latest assistant turn, in order, and which of them have a result.
    calls: list[ToolCallPart] = []
    answered: set[str] = set()
    for index, message in enumerate(raw):
        if message.role == "tool":
            call_id = message.tool_call_id or _match_call(message.tool_name, calls, answered)
            answered.add(call_id)
            part = ToolResultPart(
                tool_call_id=call_id, content=message.content or "", name=message.tool_name
            )
            messages.append(_message("tool", [part], message, extra_images=True))
            continue
        parts: list[Part] = []
        if message.thinking:
            parts.append(ThinkingPart(message.thinking))
        if message.content:
            parts.append(TextPart(message.content))
        parts.extend(_image_part(image) for image in message.images or [])
        if message.tool_calls:
            calls = [
                _decode_tool_call(call, f"messages.{index}.tool_calls.{position}", limits)
                for position, call in enumerate(message.tool_calls)
            ]
            answered = set()
            parts.extend(calls)
        messages.append(_message(message.role, parts, message))
    return tuple(messages)


def _match_call(name: str | None, calls: list[ToolCallPart], answered: set[str]) -> str:
    """The id of the call a tool result without ``tool_call_id`` answers.

    Ollama clients often name only the tool: pair the result with the first
    unanswered call of that name in the latest assistant turn, else the first
    unanswered call, else the latest call of that name; with no call, make up an id.
    """
    unanswered = [call for call in calls if call.id not in answered]
    for call in unanswered:
        if call.name == name:
            return call.id
    if unanswered:
        return unanswered[0].id
    for call in reversed(calls):
        if call.name == name:
            return call.id
    return new_id("call_")


def _message(
    role: Literal["system", "user", "assistant", "tool"],
    parts: list[Part],
    message: ChatMessage,
    *,
    extra_images: bool = False,
) -> Message:
    details = dict(message.model_extra or {})
    if extra_images and message.images:
        # ToolResultPart holds text only; keep a tool message's images beside it.
        details["images"] = message.images
    return Message(
        role=role, parts=tuple(parts), provider_details={"ollama": details} if details else None
    )


def _decode_tool_call(call: ToolCall, path: str, limits: RequestLimits) -> ToolCallPart:
    arguments, raw = parse_request_tool_arguments(
        call.function.arguments, f"{path}.function.arguments", limits.max_json_depth
    )
    return ToolCallPart(
        id=call.id or new_id("call_"),
        name=call.function.name,
        arguments=arguments,
        raw_arguments=raw,
    )


def _image_part(image: str) -> ImagePart:
    media_type: str | None = None
    # Ollama itself wants bare base64; accept a data URL from lenient clients.
    if (parsed := split_base64_data_url(image)) is not None:
        media_type, image = parsed
    if media_type is None:
        media_type = next((mt for sig, mt in _IMAGE_SIGNATURES if image.startswith(sig)), None)
    return ImagePart(data=image, media_type=media_type)


def _decode_tool(tool: Tool) -> ToolDefinition:
    function = tool.function
    details = dict(tool.model_extra or {})
    if function.model_extra:
        details["function"] = dict(function.model_extra)
    if tool.type != "function":
        details["type"] = tool.type
    return ToolDefinition(
        name=function.name,
        description=function.description or "",
        input_schema=function.parameters if function.parameters is not None else {"type": "object"},
        provider_details={"ollama": details} if details else None,
    )


def _decode_options(options: Options | None) -> GenerationParams:
    if options is None:
        return GenerationParams()
    values = options.model_dump(exclude_none=True)
    extra = {key: value for key, value in values.items() if key not in _CORE_OPTIONS}
    num_predict = options.num_predict
    if num_predict is not None and num_predict < 0:
        # -1 (unlimited) and -2 (fill the context) have no neutral spelling.
        extra["num_predict"] = num_predict
        num_predict = None
    return GenerationParams(
        max_tokens=num_predict,
        temperature=options.temperature,
        top_p=options.top_p,
        top_k=options.top_k,
        min_p=options.min_p,
        stop=tuple(options.stop or ()),
        seed=options.seed,
        frequency_penalty=options.frequency_penalty,
        presence_penalty=options.presence_penalty,
        repeat_penalty=options.repeat_penalty,
        num_ctx=options.num_ctx,
        extra=extra,
    )


def _decode_think(think: bool | str | None) -> ThinkingConfig | None:
    if think is None or think is False:
        return None
    if isinstance(think, str):
        return ThinkingConfig(enabled=True, effort=_EFFORTS.get(think))
    return ThinkingConfig(enabled=True)


def _encode_think(effort: str | None) -> bool | str:
    """``think`` for thinking on: the effort level, where it has one Ollama takes
    (``low``, ``medium``, ``high``: the core's ``max``, an OpenAI client's ``xhigh``,
    goes as ``high``), else ``true``."""
    if effort is None:
        return True
    return "high" if effort == "max" else effort


def _decode_format(value: str | dict[str, Any] | None) -> ResponseFormat | None:
    if isinstance(value, dict):
        return ResponseFormat(type="json_schema", schema=value, param="format")
    if value == "json":
        return ResponseFormat(type="json", param="format")
    return None


def _decode_keep_alive(value: str | int | float | None) -> str | int | None:
    if isinstance(value, float):
        # Whole seconds stay a number; a fraction becomes a Go duration string.
        return int(value) if value.is_integer() else f"{value}s"
    return value


def _provider_details(
    parsed: ChatRequestBody | GenerateRequestBody, exclude: frozenset[str] = frozenset()
) -> dict[str, Any] | None:
    details: dict[str, Any] = {}
    for key in type(parsed).model_fields:
        if key in _MODELLED or key in exclude or key not in parsed.model_fields_set:
            continue
        value = getattr(parsed, key)
        if value is not None:
            details[key] = value
    details.update(parsed.model_extra or {})
    if parsed.think is False:
        # ``think: false`` switches thinking off on models that think by default;
        # ThinkingConfig None means "the default", so remember the explicit false.
        details["think"] = False
    return {"ollama": details} if details else None


# -- encoding -------------------------------------------------------------------------


def encode_chat_request(req: ChatRequest) -> dict[str, Any]:
    """The ``/api/chat`` body llmbridge sends to a real Ollama server.

    Raises:
        UnsupportedFeatureError: an image is given by remote URL (Ollama takes base64 only).
    """
    body: dict[str, Any] = {
        "model": req.model,
        "messages": _encode_messages(req.messages),
        "stream": req.stream,
    }
    if req.tools:
        body["tools"] = [_encode_tool(tool) for tool in req.tools]
    details = _encode_shared(req, body)
    for key, value in details.items():
        if key not in body and key not in _GENERATE_ONLY and key != "think":
            body[key] = value
    return body


def _encode_shared(req: ChatRequest, body: dict[str, Any]) -> dict[str, Any]:
    """What ``/api/chat`` and ``/api/generate`` bodies share, set on ``body``: options,
    ``think``, ``format`` and ``keep_alive``. Returns the caller's other Ollama fields
    (``provider_details``) for the endpoint to pass on as it allows."""
    options = _encode_options(req.params)
    if options:
        body["options"] = options
    details: dict[str, Any] = dict((req.provider_details or {}).get("ollama") or {})
    if req.thinking is not None:
        body["think"] = _encode_think(req.thinking.effort) if req.thinking.enabled else False
    elif details.get("think") is False:
        body["think"] = False
    fmt = req.response_format
    if fmt is not None and fmt.type == "json_schema" and fmt.schema is not None:
        body["format"] = fmt.schema
    elif fmt is not None and fmt.type != "text":
        body["format"] = "json"
    if req.keep_alive is not None:
        body["keep_alive"] = req.keep_alive
    return details


def encode_generate_request(req: ChatRequest) -> dict[str, Any]:
    """The ``/api/generate`` body llmbridge sends to a real Ollama server for a
    completion request (``req.completion``).

    ``raw`` is sent only for a plain completion: Ollama fills in the middle through
    the model's template (its ``.Suffix``), which raw mode skips. System messages
    become ``system``; the user message's images become ``images``; ``template`` and
    ``context`` from an Ollama caller go back as sent.

    Raises:
        InvalidRequestError: ``req`` carries no ``Completion`` (a caller's bug).
        UnsupportedFeatureError: an image is given by remote URL.
    """
    completion = req.completion
    if completion is None:
        raise InvalidRequestError("a completion request needs a prompt", param="prompt")
    body: dict[str, Any] = {"model": req.model, "prompt": completion.prompt, "stream": req.stream}
    if completion.suffix is not None:
        body["suffix"] = completion.suffix
    elif completion.raw:
        body["raw"] = True
    system = "\n\n".join(m.text for m in req.messages if m.role == "system" and m.text)
    if system:
        body["system"] = system
    images = [
        _encode_image(part, position)
        for position, message in enumerate(req.messages)
        if message.role == "user"
        for part in message.parts
        if isinstance(part, ImagePart)
    ]
    if images:
        body["images"] = images
    details = _encode_shared(req, body)
    for key, value in details.items():
        body.setdefault(key, value)
    return body


def encode_embed_request(req: EmbedRequest) -> dict[str, Any]:
    """The ``/api/embed`` body llmbridge sends to a real Ollama server (an
    ``/api/embeddings`` caller's too: one input, and its ``options`` and
    ``keep_alive``)."""
    body: dict[str, Any] = {"model": req.model, "input": list(req.inputs)}
    if not req.truncate:
        body["truncate"] = False
    if req.dimensions is not None:
        body["dimensions"] = req.dimensions
    if req.keep_alive is not None:
        body["keep_alive"] = req.keep_alive
    options = ((req.provider_details or {}).get("ollama") or {}).get("options")
    if options:
        body["options"] = options
    return body


def _encode_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # tool call id -> tool name, for results that lack it
    for position, message in enumerate(messages):
        details = (message.provider_details or {}).get("ollama") or {}
        wire: dict[str, Any] = {"role": message.role, "content": message.text}
        thinking = message.thinking
        if thinking:
            wire["thinking"] = thinking
        images = [
            _encode_image(part, position) for part in message.parts if isinstance(part, ImagePart)
        ]
        calls = message.tool_calls
        if calls:
            names.update((call.id, call.name) for call in calls)
            wire["tool_calls"] = [
                {
                    "id": call.id,
                    "function": {"index": i, "name": call.name, "arguments": call.arguments},
                }
                for i, call in enumerate(calls)
            ]
        results = [part for part in message.parts if isinstance(part, ToolResultPart)]
        for result in results:
            # Ollama carries one result per ``tool`` message, whatever role held it.
            tool: dict[str, Any] = {"role": "tool", "content": result.content}
            name = result.name or names.get(result.tool_call_id)
            if name:
                tool["tool_name"] = name
            tool["tool_call_id"] = result.tool_call_id
            out.append(tool)
        if results and message.role == "tool":
            if details.get("images"):
                out[-1]["images"] = details["images"]
            continue
        if results and not (wire["content"] or images or thinking or calls):
            continue
        if images:
            wire["images"] = images
        for key, value in details.items():
            wire.setdefault(key, value)
        out.append(wire)
    return out


def _encode_image(part: ImagePart, position: int) -> str:
    if part.data is not None:
        return part.data
    if part.url and part.url.startswith("data:") and ";base64," in part.url:
        return part.url.split(";base64,", 1)[1]
    raise UnsupportedFeatureError(
        "Ollama accepts only base64 images, not image URLs", param=f"messages.{position}"
    )


def _encode_tool(tool: ToolDefinition) -> dict[str, Any]:
    details = dict((tool.provider_details or {}).get("ollama") or {})
    function: dict[str, Any] = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    function["parameters"] = tool.input_schema
    extra_function = details.pop("function", None)
    if isinstance(extra_function, dict):
        for key, value in extra_function.items():
            function.setdefault(key, value)
    return {"type": details.pop("type", "function"), "function": function, **details}


def _encode_options(params: GenerationParams) -> dict[str, Any]:
    fields = (
        ("num_predict", params.max_tokens),
        ("temperature", params.temperature),
        ("top_p", params.top_p),
        ("top_k", params.top_k),
        ("min_p", params.min_p),
        ("stop", list(params.stop) if params.stop else None),
        ("seed", params.seed),
        ("repeat_penalty", params.repeat_penalty),
        ("frequency_penalty", params.frequency_penalty),
        ("presence_penalty", params.presence_penalty),
        ("num_ctx", params.num_ctx),
    )
    options = {key: value for key, value in fields if value is not None}
    for key, value in params.extra.items():
        options.setdefault(key, value)
    return options

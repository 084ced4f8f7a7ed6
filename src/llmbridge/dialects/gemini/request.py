"""Gemini requests: ``generateContent`` bodies to ``ChatRequest`` and back, and the
embedding bodies to ``EmbedRequest`` and back.

``decode_chat_request`` is the gateway's front door for Gemini CLI and the google-genai
SDKs; ``encode_chat_request`` builds the body the ``gemini`` backend sends to Google.
The model is in the URL (``models/{model}:generateContent``), so the route passes it in
and the encoder leaves it out. docs/GEMINI.md tells the mapping; in short:

- Turns and parts (``functionResponse`` placement, function call ids, thought
  signatures, media) are ``contents.py``'s.
- Google's hosted tools (``googleSearch``, ``codeExecution``...), ``cachedContent``,
  ``candidateCount`` above 1 and non-text output are 400s naming the field: llmbridge
  cannot do them, and a silently different reply would be worse.
- ``alt``, the query's encoding of the reply (``decode_alt``), is ``sse`` or ``json``:
  another value, or ``alt`` given twice, is a 400 naming it, on every method.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from llmbridge.core.errors import InvalidRequestError, UnsupportedFeatureError
from llmbridge.core.messages import ToolChoice, ToolDefinition
from llmbridge.core.request import (
    ChatRequest,
    EmbedRequest,
    GenerationParams,
    ResponseFormat,
    ThinkingConfig,
)
from llmbridge.core.request_limits import DEFAULT_LIMITS, RequestLimits, check_count, count_error
from llmbridge.dialects.gemini.contents import ContentDecoder, encode_contents
from llmbridge.dialects.gemini.errors import VALIDATION_WORDING
from llmbridge.dialects.gemini.schema import lower_case_types, openapi_to_json_schema
from llmbridge.dialects.gemini.types import (
    PROVIDER,
    BatchEmbedContentsRequest,
    CountTokensRequest,
    EmbedContentRequest,
    GenerateContentRequest,
    GenerationConfig,
    Tool,
    ToolConfig,
)
from llmbridge.dialects.validation import validate_body

__all__ = [
    "ALT_VALUES",
    "decode_alt",
    "decode_batch_embed_request",
    "decode_chat_request",
    "decode_count_tokens_request",
    "decode_embed_request",
    "encode_chat_request",
    "encode_embed_request",
    "encode_thinking_config",
]

INCLUDE_THOUGHTS = "include_thoughts"
"""``provider_details["gemini"]`` key: the client asked for thought parts
(``thinkingConfig.includeThoughts``); set whenever it sent a ``thinkingConfig``."""
CALL_IDS = "call_ids"
"""``provider_details["gemini"]`` key, ``True`` when the client sent ids on its
``functionCall``/``functionResponse`` parts (so the reply's calls carry ids)."""
GENERATION_CONFIG = "generationConfig"
"""``provider_details["gemini"]`` key of the ``generationConfig`` fields the core does
not model (``responseLogprobs``, ``mediaResolution``...), for a Gemini backend."""
THINKING_LEVEL = "thinking_level"
"""``provider_details["gemini"]`` key of the client's own ``thinkingLevel``, sent as
given to a Gemini model that takes levels (``MINIMAL`` has no core effort of its own)."""
_INTERNAL = frozenset({INCLUDE_THOUGHTS, CALL_IDS, GENERATION_CONFIG, THINKING_LEVEL})

_EFFORTS: dict[str, Literal["low", "medium", "high", "max"]] = {
    "MINIMAL": "low",
    "LOW": "low",
    "MEDIUM": "medium",
    "HIGH": "high",
    "XHIGH": "high",  # the core has no level between high and max
}
_EFFORT_BUDGETS = {"low": 1024, "medium": 8192, "high": 24576, "max": 32768}
"""``thinkingBudget`` for a request that only gave an effort (an OpenAI client's
``reasoning_effort``) to a model without levels: Gemini 2.5 Pro's budgets go from 128
to 32768."""
_LEVELS = {"low": "LOW", "medium": "MEDIUM", "high": "HIGH", "max": "HIGH"}
"""``thinkingLevel`` for an effort, for the models that take levels (Gemini 3 on)."""
_BUDGET_ONLY = ("gemini-1", "gemini-2")
"""Model generations without ``thinkingLevel`` (Google refuses it there)."""

_MODES = {"AUTO": "auto", "ANY": "any", "NONE": "none", "VALIDATED": "auto"}
_MODES_BACK = {"auto": "AUTO", "any": "ANY", "tool": "ANY", "none": "NONE"}
_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
_PARTS_KEYS = ("parts",)
"""The list of a content that weighs its slice of validation (``dialects/validation``)."""
_PARTS_SETTING = "max_parts_per_message"

# -- decoding -----------------------------------------------------------------------


ALT_VALUES = ("json", "sse")
"""The ``alt`` values served: one JSON body (for ``streamGenerateContent``, a JSON
array written as it is generated) and server-sent events. Google's others (``proto``,
``media``) and any unknown one are refused."""


def decode_alt(values: list[str]) -> Literal["json", "sse"] | None:
    """The query's ``alt`` values (each occurrence, in order) as the one reply encoding
    asked for, ``None`` when not given.

    Raises:
        InvalidRequestError: ``alt`` given more than once (even twice alike: which one
            holds would be a guess), or a value other than ``sse`` or ``json``.
    """
    if not values:
        return None
    if len(values) > 1:
        raise InvalidRequestError(
            f"alt: given {len(values)} times; give it once, alt=sse or alt=json", param="alt"
        )
    value = values[0]
    if value == "json":
        return "json"
    if value == "sse":
        return "sse"
    shown = value if len(value) <= 64 else value[:64] + "…"
    raise InvalidRequestError(
        f"alt: {shown!r} is not supported: use alt=sse or alt=json", param="alt"
    )


def decode_chat_request(
    body: object, limits: RequestLimits = DEFAULT_LIMITS, *, model: str, stream: bool
) -> ChatRequest:
    """Translate a ``generateContent``/``streamGenerateContent`` body into a
    ``ChatRequest`` for ``model`` (from the URL).

    ``body`` is parsed JSON that has passed ``web.bodies.parse_json`` (its depth and
    size); ``limits`` bounds the contents, function declarations and parts here.

    Raises:
        InvalidRequestError: the body is not an object, a field is missing or wrong, a
            count is over ``limits``, or it asks for what llmbridge cannot do
            (``cachedContent``, ``candidateCount`` > 1, hosted tools); the message and
            ``param`` name the field (``contents.0.parts.1``).
    """
    _check_counts(body, limits, "")
    parsed = validate_body(
        GenerateContentRequest,
        body,
        VALIDATION_WORDING,
        slice_field="contents",
        part_keys=_PARTS_KEYS,
    )
    return _Decoder("").chat_request(parsed, model=model, stream=stream)


def decode_count_tokens_request(
    body: object, limits: RequestLimits = DEFAULT_LIMITS, *, model: str
) -> ChatRequest:
    """Translate a ``countTokens`` body: ``{"contents": [...]}`` or
    ``{"generateContentRequest": {...}}`` (the whole request: system prompt and tools
    are counted too). Raises as ``decode_chat_request`` does."""
    if isinstance(body, dict) and isinstance(body.get("generateContentRequest"), dict):
        _check_counts(body["generateContentRequest"], limits, "generateContentRequest.")
    else:
        _check_counts(body, limits, "")
    parsed = validate_body(
        CountTokensRequest, body, VALIDATION_WORDING, slice_field="contents", part_keys=_PARTS_KEYS
    )
    if parsed.generate_content_request is not None:
        decoder = _Decoder("generateContentRequest.")
        return decoder.chat_request(parsed.generate_content_request, model=model, stream=False)
    contents = GenerateContentRequest(contents=parsed.contents or [])
    return _Decoder("").chat_request(contents, model=model, stream=False)


def decode_embed_request(body: object, *, model: str) -> EmbedRequest:
    """Translate an ``embedContent`` body (``{"content": {"parts": [{"text"}]}}``): one
    text, its parts' text joined by newlines (Google embeds a content as one text)."""
    parsed = validate_body(EmbedContentRequest, body, VALIDATION_WORDING)
    return EmbedRequest(
        model=model,
        inputs=(_embed_text(parsed, "content"),),
        dimensions=parsed.output_dimensionality,
    )


def decode_batch_embed_request(body: object, *, model: str) -> EmbedRequest:
    """Translate a ``batchEmbedContents`` body (``{"requests": [{"model", "content"}]}``):
    one text per request, in order. Each request's ``model`` must be the URL's (as
    Google checks), and their ``outputDimensionality`` must agree (one embedding call)."""
    parsed = validate_body(BatchEmbedContentsRequest, body, VALIDATION_WORDING)
    if not parsed.requests:
        raise InvalidRequestError("requests: at least one request is required", param="requests")
    dimensions = parsed.requests[0].output_dimensionality
    inputs: list[str] = []
    for index, request in enumerate(parsed.requests):
        path = f"requests.{index}"
        if request.model is not None and _model_name(request.model) != _model_name(model):
            raise InvalidRequestError(
                f"{path}.model: {request.model!r} does not match the model in the URL "
                f"('models/{_model_name(model)}')",
                param=f"{path}.model",
            )
        if request.output_dimensionality != dimensions:
            raise InvalidRequestError(
                f"{path}.outputDimensionality: every request of a batch must ask for the "
                "same outputDimensionality",
                param=f"{path}.outputDimensionality",
            )
        inputs.append(_embed_text(request, f"{path}.content"))
    return EmbedRequest(model=model, inputs=tuple(inputs), dimensions=dimensions)


def _embed_text(request: EmbedContentRequest, path: str) -> str:
    texts: list[str] = []
    for index, part in enumerate(request.content.parts):
        if part.text is None:
            where = f"{path}.parts.{index}"
            raise UnsupportedFeatureError(f"{where}: only text parts can be embedded", param=where)
        texts.append(part.text)
    return "\n".join(texts)


def _model_name(name: str) -> str:
    for prefix in ("models/", "tunedModels/"):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def _check_counts(body: object, limits: RequestLimits, prefix: str) -> None:
    """The count limits, checked before validation so an oversized body costs little."""
    if not isinstance(body, dict):
        return
    contents = body.get("contents")
    check_count(
        contents,
        limits.max_messages,
        path=f"{prefix}contents",
        setting="max_messages",
        noun="contents",
    )
    tools = body.get("tools")
    check_count(tools, limits.max_tools, path=f"{prefix}tools", setting="max_tools", noun="tools")
    # The functions are what a backend gets as tools, wherever the client listed them.
    # Still the raw body: ``tools`` may be anything (a number is the validator's 400).
    listed = tools if isinstance(tools, list) else ()
    lists = [t.get("functionDeclarations") for t in listed if isinstance(t, dict)]
    functions = sum(len(item) for item in lists if isinstance(item, list))
    if functions > limits.max_tools:
        where = f"{prefix}tools"
        raise count_error(where, functions, limits.max_tools, "max_tools", "function declarations")
    most = limits.max_parts_per_message
    system = body.get("systemInstruction")
    if isinstance(system, dict):
        check_count(
            system.get("parts"),
            most,
            path=f"{prefix}systemInstruction.parts",
            setting=_PARTS_SETTING,
            noun="parts",
        )
    for index, content in enumerate(contents if isinstance(contents, list) else ()):
        if isinstance(content, dict):
            check_count(
                content.get("parts"),
                most,
                path=f"{prefix}contents.{index}.parts",
                setting=_PARTS_SETTING,
                noun="parts",
            )


@dataclass
class _Decoder:
    """One request's decoding: the path prefix its errors name (``generateContentRequest.``
    inside a ``countTokens`` body), and its contents' decoder."""

    prefix: str
    contents: ContentDecoder = field(init=False)

    def __post_init__(self) -> None:
        self.contents = ContentDecoder(self.prefix)

    def error(self, path: str, message: str) -> InvalidRequestError:
        return self.contents.error(path, message)

    def unsupported(self, path: str, message: str) -> UnsupportedFeatureError:
        return self.contents.unsupported(path, message)

    # -- the request --------------------------------------------------------------

    def chat_request(
        self, body: GenerateContentRequest, *, model: str, stream: bool
    ) -> ChatRequest:
        if body.cached_content is not None:
            raise self.unsupported(
                "cachedContent", "cached content is not supported (llmbridge keeps no caches)"
            )
        if not body.contents:
            raise self.error("contents", "at least one content is required")
        details: dict[str, Any] = dict(body.model_extra or {})
        if body.safety_settings is not None:
            # Only Google applies them; carried so a Gemini backend gets them (GEMINI.md).
            details["safetySettings"] = body.safety_settings
        config = body.generation_config or GenerationConfig()
        extra_config = dict(config.model_extra or {})
        if extra_config:
            details[GENERATION_CONFIG] = extra_config
        thinking = self.thinking(config, details)
        tools = self.tools(body.tools)
        tools, tool_choice = self.tool_choice(body.tool_config, tools)
        messages = self.contents.messages(body.system_instruction, body.contents)
        if self.contents.explicit_ids:
            details[CALL_IDS] = True
        return ChatRequest(
            model=model,
            messages=messages,
            stream=stream,
            params=self.params(config),
            tools=tools,
            tool_choice=tool_choice,
            thinking=thinking,
            response_format=self.response_format(config),
            provider_details={PROVIDER: details} if details else None,
        )

    def params(self, config: GenerationConfig) -> GenerationParams:
        if config.candidate_count is not None and config.candidate_count > 1:
            raise self.unsupported(
                "generationConfig.candidateCount",
                f"{config.candidate_count} candidates asked; llmbridge generates one",
            )
        top_k = config.top_k
        if isinstance(top_k, float):
            if not top_k.is_integer():
                raise self.error("generationConfig.topK", "must be a whole number")
            top_k = int(top_k)
        modalities = [m.upper() for m in config.response_modalities or ()]
        if any(m != "TEXT" for m in modalities):
            raise self.unsupported(
                "generationConfig.responseModalities", "only TEXT output is supported"
            )
        return GenerationParams(
            max_tokens=config.max_output_tokens,
            temperature=config.temperature,
            top_p=config.top_p,
            top_k=top_k,
            stop=tuple(config.stop_sequences or ()),
            seed=config.seed,
            presence_penalty=config.presence_penalty,
            frequency_penalty=config.frequency_penalty,
        )

    def response_format(self, config: GenerationConfig) -> ResponseFormat | None:
        mime = (config.response_mime_type or "").lower()
        if mime == "text/x.enum":
            raise self.unsupported(
                "generationConfig.responseMimeType",
                "text/x.enum is not supported; use application/json with an enum schema",
            )
        if mime not in ("", "text/plain", "application/json"):
            raise self.unsupported(
                "generationConfig.responseMimeType",
                f"{config.response_mime_type!r} is not supported (text/plain or application/json)",
            )
        if config.response_json_schema is not None:
            return ResponseFormat(
                type="json_schema",
                schema=lower_case_types(config.response_json_schema),
                param=self.prefix + "generationConfig.responseJsonSchema",
            )
        if config.response_schema is not None:
            return ResponseFormat(
                type="json_schema",
                schema=openapi_to_json_schema(config.response_schema),
                param=self.prefix + "generationConfig.responseSchema",
            )
        if mime == "application/json":
            return ResponseFormat(
                type="json", param=self.prefix + "generationConfig.responseMimeType"
            )
        return None

    def thinking(self, config: GenerationConfig, details: dict[str, Any]) -> ThinkingConfig | None:
        wire = config.thinking_config
        if wire is None:
            return None
        details[INCLUDE_THOUGHTS] = bool(wire.include_thoughts)
        effort = None
        if wire.thinking_level is not None:
            effort = _EFFORTS.get(wire.thinking_level.upper())
            if effort is None and wire.thinking_level.upper() != "THINKING_LEVEL_UNSPECIFIED":
                raise self.error(
                    "generationConfig.thinkingConfig.thinkingLevel",
                    f"{wire.thinking_level!r} is not one of MINIMAL, LOW, MEDIUM, HIGH",
                )
            if effort is not None and _LEVELS[effort] != wire.thinking_level.upper():
                # MINIMAL: no core effort says it (low does), so it rides along.
                details[THINKING_LEVEL] = wire.thinking_level.upper()
        budget = wire.thinking_budget
        if budget == 0:
            return ThinkingConfig(enabled=False)
        if budget is not None and budget < -1:
            raise self.error(
                "generationConfig.thinkingConfig.thinkingBudget",
                "must be -1 (automatic), 0 (off) or a positive number of tokens",
            )
        if budget is not None and budget > 0:
            return ThinkingConfig(enabled=True, budget_tokens=budget, effort=effort)
        if budget == -1 or effort is not None or wire.include_thoughts:
            return ThinkingConfig(enabled=True, effort=effort)
        return None  # an empty thinkingConfig (or includeThoughts: false) asks nothing

    # -- tools --------------------------------------------------------------------

    def tools(self, tools: list[Tool] | None) -> tuple[ToolDefinition, ...]:
        decoded: list[ToolDefinition] = []
        for index, tool in enumerate(tools or ()):
            hosted = sorted(tool.model_extra or {})
            if hosted:
                raise self.unsupported(
                    f"tools.{index}.{hosted[0]}",
                    "Google's hosted tools are not supported (llmbridge cannot run them); "
                    "declare functions in functionDeclarations",
                )
            for position, declaration in enumerate(tool.function_declarations or ()):
                path = f"tools.{index}.functionDeclarations.{position}"
                if not declaration.name:
                    raise self.error(f"{path}.name", "a function needs a name")
                if declaration.parameters_json_schema is not None:
                    schema = lower_case_types(declaration.parameters_json_schema)
                elif declaration.parameters is not None:
                    schema = openapi_to_json_schema(declaration.parameters)
                else:
                    schema = dict(_EMPTY_SCHEMA)
                carried = declaration.model_dump(
                    exclude={"name", "description", "parameters", "parameters_json_schema"},
                    exclude_none=True,
                )
                decoded.append(
                    ToolDefinition(
                        name=declaration.name,
                        description=declaration.description or "",
                        input_schema=schema,
                        provider_details={PROVIDER: carried} if carried else None,
                    )
                )
        return tuple(decoded)

    def tool_choice(
        self, config: ToolConfig | None, tools: tuple[ToolDefinition, ...]
    ) -> tuple[tuple[ToolDefinition, ...], ToolChoice | None]:
        calling = config.function_calling_config if config is not None else None
        if calling is None:
            return tools, None
        base = "toolConfig.functionCallingConfig"
        raw_mode = (calling.mode or "MODE_UNSPECIFIED").upper()
        if raw_mode == "MODE_UNSPECIFIED":
            raw_mode = "AUTO"
        mode = _MODES.get(raw_mode)
        if mode is None:
            raise self.error(
                f"{base}.mode", f"{calling.mode!r} is not one of AUTO, ANY, NONE, VALIDATED"
            )
        names = calling.allowed_function_names
        if not names or mode == "none":
            return tools, ToolChoice(mode=mode)  # type: ignore[arg-type]
        declared = {tool.name for tool in tools}
        for index, name in enumerate(names):
            if name not in declared:
                raise self.error(
                    f"{base}.allowedFunctionNames.{index}",
                    f"{name!r} is not a declared function",
                )
        if mode == "any" and len(set(names)) == 1:
            return tools, ToolChoice(mode="tool", name=names[0])
        # The core has no "only these": the others are not offered at all.
        allowed = set(names)
        return tuple(t for t in tools if t.name in allowed), ToolChoice(mode=mode)  # type: ignore[arg-type]


# -- encoding -----------------------------------------------------------------------


def encode_chat_request(req: ChatRequest, *, origin: str | None = None) -> dict[str, Any]:
    """The ``generateContent`` body that asks Google for ``req`` (the model goes in the
    URL). ``origin`` is the backend's name: only thought signatures it issued are sent
    back (``thoughts.py``); thought text never is (Google does not want it)."""
    extras = dict((req.provider_details or {}).get(PROVIDER) or {})
    extra_config = extras.pop(GENERATION_CONFIG, None) or {}
    system, contents = encode_contents(req.messages, origin)
    body: dict[str, Any] = {"contents": contents}
    if system:
        body["systemInstruction"] = {"parts": [{"text": system}]}
    if req.tools:
        body["tools"] = [{"functionDeclarations": [_encode_tool(tool) for tool in req.tools]}]
    if req.tool_choice is not None:
        body["toolConfig"] = {"functionCallingConfig": _encode_tool_choice(req.tool_choice)}
    config = _encode_params(req.params)
    if req.response_format is not None and req.response_format.type != "text":
        config["responseMimeType"] = "application/json"
        if req.response_format.type == "json_schema" and req.response_format.schema is not None:
            config["responseJsonSchema"] = req.response_format.schema
    if req.thinking is not None:
        level = extras.get(THINKING_LEVEL)
        config["thinkingConfig"] = _encode_thinking(
            req.thinking, req.model, level if isinstance(level, str) else None
        )
    for key, value in extra_config.items():
        config.setdefault(key, value)
    if config:
        body["generationConfig"] = config
    for key, value in extras.items():
        if key not in _INTERNAL:
            body.setdefault(key, value)  # safetySettings, labels... from a Gemini client
    return body


def encode_thinking_config(req: ChatRequest) -> dict[str, Any] | None:
    """The ``thinkingConfig`` ``encode_chat_request`` sends for ``req`` (``None``:
    none), fitted to ``req.model`` (a level or a budget, as the model takes)."""
    if req.thinking is None:
        return None
    level = ((req.provider_details or {}).get(PROVIDER) or {}).get(THINKING_LEVEL)
    return _encode_thinking(req.thinking, req.model, level if isinstance(level, str) else None)


def encode_embed_request(req: EmbedRequest) -> dict[str, Any]:
    """The ``batchEmbedContents`` body for ``req``: one request per input."""
    model = f"models/{_model_name(req.model)}"
    requests: list[dict[str, Any]] = []
    for text in req.inputs:
        request: dict[str, Any] = {"model": model, "content": {"parts": [{"text": text}]}}
        if req.dimensions is not None:
            request["outputDimensionality"] = req.dimensions
        requests.append(request)
    return {"requests": requests}


def _encode_params(params: GenerationParams) -> dict[str, Any]:
    # min_p, repeat_penalty and num_ctx have no Gemini field; serving/prepare/sampling.py
    # reports them dropped for a backend that does not take them.
    config: dict[str, Any] = {}
    fields = (
        ("temperature", params.temperature),
        ("topP", params.top_p),
        ("topK", params.top_k),
        ("maxOutputTokens", params.max_tokens),
        ("seed", params.seed),
        ("presencePenalty", params.presence_penalty),
        ("frequencyPenalty", params.frequency_penalty),
    )
    for name, value in fields:
        if value is not None:
            config[name] = value
    if params.stop:
        config["stopSequences"] = list(params.stop)
    return config


def takes_thinking_level(model: str) -> bool:
    """Whether ``model`` takes ``thinkingLevel``: the Gemini models from 3 on (2.5 and
    older take only ``thinkingBudget``; a name that is not a Gemini model's, another
    llmbridge's ``qwen3:8b`` behind a Gemini front, gets a budget, which every
    generation reads)."""
    name = model.removeprefix("models/")
    return name.startswith("gemini-") and not name.startswith(_BUDGET_ONLY)


def _encode_thinking(thinking: ThinkingConfig, model: str, level: str | None) -> dict[str, Any]:
    """``thinkingConfig``: a budget when the request gave one; an effort alone is
    ``thinkingLevel`` for a model that takes levels (the client's own level when it
    still says the same effort), else the budget of ``_EFFORT_BUDGETS``. Google refuses
    both fields together."""
    if not thinking.enabled:
        return {"thinkingBudget": 0}
    # includeThoughts: the thought summaries are what the core's thinking parts hold.
    if thinking.budget_tokens is None and thinking.effort and takes_thinking_level(model):
        if level is None or _EFFORTS.get(level) != thinking.effort:
            level = _LEVELS[thinking.effort]
        return {"includeThoughts": True, "thinkingLevel": level}
    budget = thinking.budget_tokens or _EFFORT_BUDGETS.get(thinking.effort or "", -1)
    return {"includeThoughts": True, "thinkingBudget": budget}


def _encode_tool(tool: ToolDefinition) -> dict[str, Any]:
    extra = dict((tool.provider_details or {}).get(PROVIDER) or {})
    declaration: dict[str, Any] = {"name": tool.name}
    if tool.description:
        declaration["description"] = tool.description
    declaration["parametersJsonSchema"] = tool.input_schema
    for key, value in extra.items():
        declaration.setdefault(_camel(key), value)
    return declaration


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def _encode_tool_choice(choice: ToolChoice) -> dict[str, Any]:
    config: dict[str, Any] = {"mode": _MODES_BACK[choice.mode]}
    if choice.mode == "tool" and choice.name:
        config["allowedFunctionNames"] = [choice.name]
    return config

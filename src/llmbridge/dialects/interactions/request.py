"""Interactions requests: create bodies to ``ChatRequest`` and back.

``decode_chat_request`` is the gateway's front door for ``client.interactions.create``
of the google-genai SDKs; ``encode_chat_request`` builds the body the
``gemini_interactions`` backend sends to Google. docs/INTERACTIONS.md tells the
mapping; in short:

- ``input`` and ``system_instruction`` are the conversation (``steps.py``).
- ``generation_config``: ``temperature``, ``top_p``, ``seed``, ``stop_sequences`` and
  ``max_output_tokens`` are the core's parameters; ``thinking_level`` an effort;
  ``thinking_summaries: "none"`` leaves thought summaries out of the reply;
  ``tool_choice`` the core's tool choice. Other fields (``image_config``...) ride
  along for a Google backend.
- ``response_format`` (or the older ``response_mime_type``) asks for JSON, with a
  schema or without.
- What llmbridge cannot do is a 400 naming the field: agents (``agent``,
  ``agent_config``), ``background``, ``cached_content``, Google's hosted tools
  (``google_search``, ``code_execution``...), output other than text, audio, video and
  documents in the input.
- ``stream`` streams; ``store`` and ``previous_interaction_id`` are the route's
  (``continuation.py``), which marks the request so the reply echoes them.
"""

from __future__ import annotations

from typing import Any, Literal

from llmbridge.core.errors import InvalidRequestError, UnsupportedFeatureError
from llmbridge.core.messages import Message, TextPart, ToolChoice, ToolDefinition
from llmbridge.core.request import (
    ChatRequest,
    GenerationParams,
    ResponseFormat,
    ThinkingConfig,
    effort_for_budget,
)
from llmbridge.core.request_limits import DEFAULT_LIMITS, RequestLimits, check_count
from llmbridge.dialects.gemini.schema import lower_case_types
from llmbridge.dialects.interactions.errors import VALIDATION_WORDING
from llmbridge.dialects.interactions.steps import InputDecoder, encode_conversation
from llmbridge.dialects.interactions.types import (
    PROVIDER,
    CreateInteractionRequest,
    FunctionTool,
    GenerationConfig,
    ToolChoiceConfig,
)
from llmbridge.dialects.interactions.types import ResponseFormat as WireResponseFormat
from llmbridge.dialects.validation import validate_body

__all__ = [
    "GENERATION_CONFIG",
    "SUMMARIES",
    "decode_chat_request",
    "encode_chat_request",
]

SUMMARIES = "thinking_summaries"
"""``provider_details["interactions"]`` key: ``False`` when the client asked for no
thought summaries (``thinking_summaries: "none"``)."""
GENERATION_CONFIG = "generation_config"
"""``provider_details["interactions"]`` key of the ``generation_config`` fields the core
does not model (``image_config``, ``speech_config``...), for a Google backend."""
SAFETY_SETTINGS = "safety_settings"
"""``provider_details["interactions"]`` key of the client's ``safety_settings``."""

_EFFORTS: dict[str, Literal["low", "medium", "high", "max"]] = {
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "max",
}
_LEVELS = {"low": "low", "medium": "medium", "high": "high", "max": "xhigh"}
_MODES: dict[str, Literal["auto", "any", "none"]] = {
    "auto": "auto",
    "any": "any",
    "none": "none",
    "validated": "auto",
}
_INPUT_PARTS = ("content",)
"""The list of a step that weighs its slice of validation (``dialects/validation``)."""

# -- decoding -----------------------------------------------------------------------


def decode_chat_request(body: object, limits: RequestLimits = DEFAULT_LIMITS) -> ChatRequest:
    """Translate a create body into a ``ChatRequest``.

    ``body`` is parsed JSON that has passed ``web.bodies.parse_json`` (its depth and
    size); ``limits`` bounds the input steps, tools and contents here.

    Raises:
        InvalidRequestError: the body is not an object, a field is missing or wrong, a
            count is over ``limits``, or it asks for what llmbridge cannot do (agents,
            ``background``, hosted tools...); the message and ``param`` name the field
            (``input.2.content.0.data``).
    """
    _check_counts(body, limits)
    parsed = validate_body(
        CreateInteractionRequest,
        body,
        VALIDATION_WORDING,
        slice_field="input",
        part_keys=_INPUT_PARTS,
    )
    _refuse_unsupported(parsed)
    if parsed.previous_interaction_id is not None:
        # The route takes it out when it continues a stored interaction.
        raise InvalidRequestError(
            "previous_interaction_id: llmbridge stores no interactions here "
            "(agent.store_responses: off, agent.enabled: false); send the whole "
            "conversation in 'input'",
            param="previous_interaction_id",
        )
    if not parsed.model:
        raise InvalidRequestError("model: Field required", param="model")
    details: dict[str, Any] = {}
    if parsed.safety_settings is not None:
        details[SAFETY_SETTINGS] = parsed.safety_settings
    config = parsed.generation_config or GenerationConfig()
    extra_config = dict(config.model_extra or {})
    if extra_config:
        details[GENERATION_CONFIG] = extra_config
    thinking = _thinking(config, details)
    tools = _tools(parsed)
    tools, tool_choice = _tool_choice(config.tool_choice, tools)
    messages: list[Message] = []
    if parsed.system_instruction:
        messages.append(Message("system", (TextPart(parsed.system_instruction),)))
    conversation = InputDecoder().messages(parsed.input)
    if not conversation:
        raise InvalidRequestError("input: the interaction has no input", param="input")
    messages.extend(conversation)
    return ChatRequest(
        model=parsed.model,
        messages=tuple(messages),
        stream=parsed.stream is True,
        params=GenerationParams(
            max_tokens=config.max_output_tokens,
            temperature=config.temperature,
            top_p=config.top_p,
            stop=tuple(config.stop_sequences or ()),
            seed=config.seed,
        ),
        tools=tools,
        tool_choice=tool_choice,
        thinking=thinking,
        response_format=_response_format(parsed),
        provider_details={PROVIDER: details} if details else None,
    )


def _check_counts(body: object, limits: RequestLimits) -> None:
    """The count limits, checked before validation so an oversized body costs little."""
    if not isinstance(body, dict):
        return
    items = body.get("input")
    check_count(items, limits.max_messages, path="input", setting="max_messages", noun="steps")
    tools = body.get("tools")
    check_count(tools, limits.max_tools, path="tools", setting="max_tools", noun="tools")
    for index, item in enumerate(items if isinstance(items, list) else ()):
        if isinstance(item, dict):
            check_count(
                item.get("content"),
                limits.max_parts_per_message,
                path=f"input.{index}.content",
                setting="max_parts_per_message",
                noun="contents",
            )


def _unsupported(path: str, message: str) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(f"{path}: {message}", param=path)


def _refuse_unsupported(parsed: CreateInteractionRequest) -> None:
    if parsed.agent is not None or parsed.agent_config is not None:
        field = "agent" if parsed.agent is not None else "agent_config"
        raise _unsupported(field, "agents are not supported; name a model in 'model'")
    if parsed.background:
        raise _unsupported(
            "background", "background interactions are not supported (llmbridge answers at once)"
        )
    if parsed.cached_content is not None:
        raise _unsupported(
            "cached_content", "cached content is not supported (llmbridge keeps no caches)"
        )
    for index, modality in enumerate(parsed.response_modalities or ()):
        if modality.lower() != "text":
            raise _unsupported(f"response_modalities.{index}", "only text output is supported")


def _thinking(config: GenerationConfig, details: dict[str, Any]) -> ThinkingConfig | None:
    summaries = config.thinking_summaries
    if summaries is not None:
        if summaries not in ("auto", "none"):
            raise InvalidRequestError(
                f"generation_config.thinking_summaries: {summaries!r} is not one of 'auto', 'none'",
                param="generation_config.thinking_summaries",
            )
        details[SUMMARIES] = summaries == "auto"
    level = config.thinking_level
    if level is None:
        return None
    effort = _EFFORTS.get(level)
    if effort is None:
        raise InvalidRequestError(
            f"generation_config.thinking_level: {level!r} is not one of 'minimal', 'low', "
            "'medium', 'high', 'xhigh'",
            param="generation_config.thinking_level",
        )
    return ThinkingConfig(enabled=True, effort=effort)


def _tools(parsed: CreateInteractionRequest) -> tuple[ToolDefinition, ...]:
    decoded: list[ToolDefinition] = []
    for index, tool in enumerate(parsed.tools or ()):
        path = f"tools.{index}"
        if not isinstance(tool, FunctionTool):
            raise _unsupported(
                f"{path}.type",
                f"Google's hosted tool {tool.type!r} is not supported (llmbridge cannot run "
                "it); declare functions (type 'function')",
            )
        if not tool.name:
            raise InvalidRequestError(f"{path}.name: a function needs a name", param=f"{path}.name")
        schema = lower_case_types(tool.parameters) if tool.parameters else None
        decoded.append(
            ToolDefinition(
                name=tool.name,
                description=tool.description or "",
                input_schema=schema or {"type": "object", "properties": {}},
            )
        )
    return tuple(decoded)


def _tool_choice(
    choice: str | ToolChoiceConfig | None, tools: tuple[ToolDefinition, ...]
) -> tuple[tuple[ToolDefinition, ...], ToolChoice | None]:
    path = "generation_config.tool_choice"
    if choice is None:
        return tools, None
    if isinstance(choice, str):
        return tools, ToolChoice(mode=_mode(choice, path))
    allowed = choice.allowed_tools
    if allowed is None:
        return tools, None
    mode = _mode(allowed.mode or "auto", f"{path}.allowed_tools.mode")
    names = allowed.tools
    if not names or mode == "none":
        return tools, ToolChoice(mode=mode)
    declared = {tool.name for tool in tools}
    for index, name in enumerate(names):
        if name not in declared:
            where = f"{path}.allowed_tools.tools.{index}"
            raise InvalidRequestError(f"{where}: {name!r} is not a declared function", param=where)
    if mode == "any" and len(set(names)) == 1:
        return tools, ToolChoice(mode="tool", name=names[0])
    # The core has no "only these": the others are not offered at all.
    kept = set(names)
    return tuple(t for t in tools if t.name in kept), ToolChoice(mode=mode)


def _mode(value: str, path: str) -> Literal["auto", "any", "none"]:
    mode = _MODES.get(value)
    if mode is None:
        raise InvalidRequestError(
            f"{path}: {value!r} is not one of 'auto', 'any', 'none', 'validated'", param=path
        )
    return mode


def _response_format(parsed: CreateInteractionRequest) -> ResponseFormat | None:
    formats = parsed.response_format
    listed = formats if isinstance(formats, list) else [formats] if formats else []
    chosen: WireResponseFormat | None = None
    for index, item in enumerate(listed):
        path = f"response_format.{index}" if isinstance(formats, list) else "response_format"
        if item.type != "text":
            raise _unsupported(f"{path}.type", "only text output is supported")
        chosen, where = item, path
    if chosen is not None:
        mime = chosen.mime_type or ("application/json" if chosen.schema_ else "text/plain")
        if mime not in ("text/plain", "application/json"):
            raise _unsupported(
                f"{where}.mime_type", f"{mime!r} is not supported (text/plain or application/json)"
            )
        if mime == "text/plain":
            return None
        if chosen.schema_ is not None:
            return ResponseFormat(
                type="json_schema", schema=lower_case_types(chosen.schema_), param=where
            )
        return ResponseFormat(type="json", param=where)
    if (parsed.response_mime_type or "").lower() == "application/json":
        return ResponseFormat(type="json", param="response_mime_type")
    return None


# -- encoding -----------------------------------------------------------------------


def encode_chat_request(req: ChatRequest, *, origin: str | None = None) -> dict[str, Any]:
    """The create body that asks Google for ``req``, streamed and not stored (the
    gateway keeps its own conversations and sends each whole). ``origin`` is the
    backend's name: only thought signatures it issued go back (``steps.py``)."""
    details = (req.provider_details or {}).get(PROVIDER) or {}
    system, steps = encode_conversation(req.messages, origin=origin)
    body: dict[str, Any] = {"model": req.model, "input": steps, "stream": True, "store": False}
    if system:
        body["system_instruction"] = system
    if req.tools:
        body["tools"] = [_encode_tool(tool) for tool in req.tools]
    config = _encode_config(req)
    for key, value in (details.get(GENERATION_CONFIG) or {}).items():
        config.setdefault(key, value)
    if config:
        body["generation_config"] = config
    if req.response_format is not None and req.response_format.type != "text":
        response_format: dict[str, Any] = {"type": "text", "mime_type": "application/json"}
        if req.response_format.type == "json_schema" and req.response_format.schema is not None:
            response_format["schema"] = req.response_format.schema
        body["response_format"] = response_format
    if details.get(SAFETY_SETTINGS) is not None:
        body["safety_settings"] = details[SAFETY_SETTINGS]
    return body


def _encode_config(req: ChatRequest) -> dict[str, Any]:
    # top_k, min_p, the penalties and num_ctx have no field here; serving/prepare/
    # sampling.py reports them dropped for a backend whose capabilities leave them out.
    params = req.params
    config: dict[str, Any] = {}
    fields = (
        ("temperature", params.temperature),
        ("top_p", params.top_p),
        ("max_output_tokens", params.max_tokens),
        ("seed", params.seed),
    )
    for name, value in fields:
        if value is not None:
            config[name] = value
    if params.stop:
        config["stop_sequences"] = list(params.stop)
    thinking = req.thinking
    if thinking is not None:
        if not thinking.enabled:
            config["thinking_level"] = "minimal"  # the least Google's levels allow
        else:
            effort = thinking.effort
            if effort is None and thinking.budget_tokens is not None:
                effort = effort_for_budget(thinking.budget_tokens)
            if effort is not None:
                config["thinking_level"] = _LEVELS[effort]
            # The core's thinking parts are the summaries: ask for them.
            config["thinking_summaries"] = "auto"
    if req.tool_choice is not None:
        config["tool_choice"] = _encode_tool_choice(req.tool_choice)
    return config


def _encode_tool(tool: ToolDefinition) -> dict[str, Any]:
    declared: dict[str, Any] = {"type": "function", "name": tool.name}
    if tool.description:
        declared["description"] = tool.description
    declared["parameters"] = tool.input_schema
    return declared


def _encode_tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    if choice.mode == "tool" and choice.name:
        return {"allowed_tools": {"mode": "any", "tools": [choice.name]}}
    return "any" if choice.mode == "tool" else choice.mode

"""From a call's arguments to a neutral ``ChatRequest``: model, tools, parameters.

The three things seed 003 resolves per call live here:

- **The model**: the call's ``model``, then the runtime config's ``model_id``, then the
  adapter's ``default_model``; none is ``INVALID_CONFIG``.
- **Tools**: the neutral tool schema (``name``, ``description``, ``input_schema``; ART's
  ``inputSchema`` is accepted too) or ``core.messages.ToolDefinition`` values.
- **Parameters**: ``**params`` of the call over the runtime config's
  ``adapter_options``. Known names map onto ``core.request.GenerationParams``; unknown
  ones ride along: in Ollama's ``options`` (native API) and as top-level body fields
  (OpenAI-compatible and Anthropic APIs).

"Runtime config" is ART's ``RuntimeProviderConfig`` (``CallOptions.providerConfig``):
per-call provider settings that a framework holds apart from the prompt.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from llmbridge.client.events import AdapterError, ErrorCode
from llmbridge.core.messages import Message, ToolChoice, ToolDefinition
from llmbridge.core.request import ChatRequest, GenerationParams, ThinkingConfig

__all__ = [
    "RuntimeProviderConfig",
    "ToolSchema",
    "build_chat_request",
    "resolve_model",
    "translate_tools",
]

ToolSchema: TypeAlias = Mapping[str, Any] | ToolDefinition

_FLOATS = (
    "temperature",
    "top_p",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repeat_penalty",
)
_INTS = ("max_tokens", "top_k", "seed", "num_ctx")
_ALIASES = {
    "max_output_tokens": "max_tokens",
    "num_predict": "max_tokens",
    "stop_sequences": "stop",
}
_Effort = Literal["low", "medium", "high", "max"]
_EFFORTS: tuple[_Effort, ...] = ("low", "medium", "high", "max")
_CHOICE_MODES: dict[str, Literal["auto", "none", "any"]] = {
    "auto": "auto",
    "none": "none",
    "any": "any",
    "required": "any",
}


@dataclass(frozen=True, slots=True)
class RuntimeProviderConfig:
    """Per-call provider settings (ART's ``RuntimeProviderConfig``).

    ``model_id`` is the second choice of model (after the call's ``model``);
    ``adapter_options`` are parameter defaults the call's ``**params`` override.
    """

    model_id: str | None = None
    adapter_options: Mapping[str, Any] = field(default_factory=dict)
    provider_name: str | None = None

    @classmethod
    def coerce(
        cls, value: RuntimeProviderConfig | Mapping[str, Any] | None
    ) -> RuntimeProviderConfig:
        """Accept the dataclass, or a mapping in snake_case or ART's camelCase."""
        if value is None:
            return cls()
        if isinstance(value, RuntimeProviderConfig):
            return value
        if not isinstance(value, Mapping):
            raise _invalid(f"provider_config must be a mapping, not {type(value).__name__}")
        model_id = value.get("model_id", value.get("modelId"))
        options = value.get("adapter_options", value.get("adapterOptions")) or {}
        name = value.get("provider_name", value.get("providerName"))
        if model_id is not None and not isinstance(model_id, str):
            raise _invalid("provider_config.model_id must be a string")
        if not isinstance(options, Mapping):
            raise _invalid("provider_config.adapter_options must be a mapping")
        return cls(model_id=model_id, adapter_options=dict(options), provider_name=name)


def resolve_model(call: str | None, runtime: str | None, default: str | None) -> str:
    """The first non-empty of the call's model, the runtime config's, the default."""
    for candidate in (call, runtime, default):
        if candidate:
            return candidate
    raise _invalid(
        "no model: pass model=..., set provider_config.model_id, or give the adapter a "
        "default_model"
    )


def translate_tools(tools: Iterable[ToolSchema] | None) -> tuple[ToolDefinition, ...]:
    """Neutral tool definitions. A schema without a name or an input schema is INVALID_CONFIG."""
    if tools is None:
        return ()
    out: list[ToolDefinition] = []
    for tool in tools:
        if isinstance(tool, ToolDefinition):
            out.append(tool)
            continue
        if not isinstance(tool, Mapping):
            raise _invalid(f"a tool schema must be a mapping, not {type(tool).__name__}")
        name = tool.get("name")
        schema = tool.get("input_schema", tool.get("inputSchema"))
        description = tool.get("description") or ""
        if not isinstance(name, str) or not name or not isinstance(schema, Mapping):
            raise _invalid(
                f"invalid tool schema for {name or 'an unnamed tool'!r}: it needs a 'name' "
                "and an 'input_schema' object"
            )
        if not isinstance(description, str):
            raise _invalid(f"tool {name!r}: 'description' must be a string")
        out.append(ToolDefinition(name=name, description=description, input_schema=dict(schema)))
    return tuple(out)


def build_chat_request(
    model: str,
    messages: tuple[Message, ...],
    tools: tuple[ToolDefinition, ...],
    params: Mapping[str, Any],
) -> ChatRequest:
    """The streaming ``ChatRequest`` for one call (backends always stream)."""
    values = dict(params)
    tool_choice = _tool_choice(values.pop("tool_choice", None))
    thinking = _thinking(values.pop("thinking", None))
    keep_alive = values.pop("keep_alive", None)
    generation, extra = _generation_params(values)
    return ChatRequest(
        model=model,
        messages=messages,
        stream=True,
        params=generation,
        tools=tools,
        tool_choice=tool_choice,
        thinking=thinking,
        include_usage=True,
        keep_alive=keep_alive,
        # The OpenAI and Anthropic encoders send these as top-level body fields; the
        # Ollama encoder sends GenerationParams.extra inside "options".
        provider_details={"openai": dict(extra), "anthropic": dict(extra)} if extra else None,
    )


def _generation_params(values: dict[str, Any]) -> tuple[GenerationParams, dict[str, Any]]:
    known: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for raw_name, value in values.items():
        name = _ALIASES.get(raw_name, raw_name)
        if value is None:
            continue
        if name in _FLOATS:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise _invalid(f"parameter {raw_name!r} must be a number")
            known[name] = float(value)
        elif name in _INTS:
            if isinstance(value, bool) or not isinstance(value, int):
                raise _invalid(f"parameter {raw_name!r} must be an integer")
            known[name] = value
        elif name == "stop":
            known[name] = _stop(value, raw_name)
        else:
            extra[raw_name] = value
    return GenerationParams(**known, extra=extra), extra


def _stop(value: object, raw_name: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple) and all(isinstance(s, str) for s in value):
        return tuple(value)
    raise _invalid(f"parameter {raw_name!r} must be a string or a list of strings")


def _tool_choice(value: object) -> ToolChoice | None:
    """``"auto"``, ``"none"``, ``"any"``/``"required"``, a tool's name, or a ``ToolChoice``."""
    if value is None or isinstance(value, ToolChoice):
        return value
    if isinstance(value, str) and value:
        mode = _CHOICE_MODES.get(value)
        return ToolChoice(mode) if mode is not None else ToolChoice("tool", name=value)
    if isinstance(value, Mapping):  # OpenAI's {"type": "function", "function": {"name"}}
        function = value.get("function")
        name = function.get("name") if isinstance(function, Mapping) else value.get("name")
        if isinstance(name, str) and name:
            return ToolChoice("tool", name=name)
    raise _invalid(f"tool_choice {value!r} is not understood")


def _thinking(value: object) -> ThinkingConfig | None:
    """``True``/``False``, an effort (``"low"`` .. ``"max"``), a token budget, or a config."""
    if value is None or isinstance(value, ThinkingConfig):
        return value
    if isinstance(value, bool):
        return ThinkingConfig(enabled=value)
    if isinstance(value, int) and value > 0:
        return ThinkingConfig(budget_tokens=value)
    for effort in _EFFORTS:
        if value == effort:
            return ThinkingConfig(effort=effort)
    raise _invalid(f"thinking {value!r} is not understood")


def _invalid(message: str) -> AdapterError:
    return AdapterError(message, ErrorCode.INVALID_CONFIG)

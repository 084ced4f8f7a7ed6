"""Core requests as ``POST /v1/responses`` bodies: llmbridge as a Responses client.

The client side of the dialect (the ``openai_responses`` backend sends these). The
shapes follow what Codex CLI 0.169.0 sends (shared/reference/captured/), the one client
every Responses server is made to accept:

- leading system messages are ``instructions``; a system message later in the
  conversation stays where it is, as a ``developer`` message;
- user text and images are ``input_text`` / ``input_image`` parts of a ``user``
  message; assistant text is an ``output_text`` part of an ``assistant`` message;
- tool calls are ``function_call`` items and their results ``function_call_output``
  items; tools are flat ``function`` tools, ``strict`` sent explicitly (false unless
  the client asked: the Responses API's default is strict, which refuses most
  hand-written schemas);
- thinking goes back only when it carries this backend's own item (``carried.py``): the
  ``reasoning`` (or ``compaction``) item exactly as the server gave it, without its
  ``id``, as Codex sends it (``codex-rs/protocol/src/models.rs``: the id is never
  serialized; with ``store: false`` the server kept no item to refer to). Other
  thinking (another backend's, or a local model's) is dropped: no Responses server can
  read it (serving/prepare/carried_state.py says so in ``x-llmbridge-dropped-items``);
- a request for compaction (``ChatRequest.compaction``: Codex's remote compaction, for
  a backend configured to compact natively) ends with Codex's own ``{"type":
  "compaction_trigger"}`` item, which OpenAI answers with one ``compaction`` item;
- ``prompt_cache_key`` is the client's cache key (``ChatRequest.cache_key``);
- ``store: false`` always: llmbridge sends the whole conversation every turn.

Parameters: ``max_output_tokens`` (at least 16, OpenAI's minimum), ``temperature``,
``top_p``; no stop sequences, seed or penalties (the API has none, so the backend's
capabilities leave them to serving/prepare/sampling.py). Thinking is
``reasoning.effort`` with ``summary: "auto"`` (the summary is the only reasoning text
the API streams) and ``include: ["reasoning.encrypted_content"]``, asked for also when
the history holds this backend's reasoning or the client asked for it;
``response_format`` is ``text.format``.

A request that came in through the Responses front keeps what the core folds: the
client's own effort spelling (``minimal``, ``xhigh``) when the level it folded onto is
still the one asked, its ``reasoning.summary`` and ``text.verbosity``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

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
)
from llmbridge.core.request import ChatRequest, ResponseFormat, ThinkingConfig, effort_for_budget
from llmbridge.dialects.responses.carried import recover_item
from llmbridge.dialects.responses.request import (
    DETAILS_KEY,
    EFFORT_FROM_WIRE,
    ENCRYPTED_REASONING,
)
from llmbridge.dialects.responses.response import call_arguments

__all__ = ["MIN_OUTPUT_TOKENS", "encode_chat_request"]

MIN_OUTPUT_TOKENS = 16
"""OpenAI refuses a smaller ``max_output_tokens`` ("integer below minimum value")."""

_Effort = Literal["low", "medium", "high", "max"]
# "max" is "high": "xhigh" exists only for some of OpenAI's models, and others refuse it
# (the chat-completions encoder folds it the same way).
_EFFORT_TO_WIRE: dict[_Effort, str] = {
    "low": "low",
    "medium": "medium",
    "high": "high",
    "max": "high",
}
_TOOL_CHOICE_TO_WIRE = {"auto": "auto", "none": "none", "any": "required"}
COMPACTION_TRIGGER: dict[str, Any] = {"type": "compaction_trigger"}
"""The input item that asks a Responses server to compact what comes before it."""


def encode_chat_request(req: ChatRequest, *, origin: str | None = None) -> dict[str, Any]:
    """The ``/v1/responses`` body for ``req``. ``origin`` is the backend's name: only
    reasoning it issued is sent back (``carried.py``)."""
    instructions, items, carried = _encode_input(req.messages, origin)
    if req.compaction:
        items.append(dict(COMPACTION_TRIGGER))
    front = _front_details(req)
    asked_echo = front.get("echo")
    echo: dict[str, Any] = asked_echo if isinstance(asked_echo, dict) else {}
    body: dict[str, Any] = {"model": req.model}
    if instructions:
        body["instructions"] = instructions
    body["input"] = items
    params = req.params
    if params.max_tokens is not None:
        body["max_output_tokens"] = max(params.max_tokens, MIN_OUTPUT_TOKENS)
    if params.temperature is not None:
        body["temperature"] = params.temperature
    if params.top_p is not None:
        body["top_p"] = params.top_p
    if req.tools:
        body["tools"] = [_encode_tool(tool) for tool in req.tools]
        if req.tool_choice is not None:
            body["tool_choice"] = _encode_tool_choice(req.tool_choice)
    if req.tool_choice is not None and req.tool_choice.disable_parallel:
        body["parallel_tool_calls"] = False
    reasoning = _encode_reasoning(req.thinking, echo.get("reasoning"))
    if reasoning is not None:
        body["reasoning"] = reasoning
    asked = bool(front.get("encrypted_reasoning"))
    if carried or asked or (reasoning is not None and reasoning.get("effort") != "none"):
        body["include"] = [ENCRYPTED_REASONING]
    text = _encode_text(req.response_format, echo.get("text"))
    if text:
        body["text"] = text
    if req.cache_key:
        body["prompt_cache_key"] = req.cache_key
    body["stream"] = req.stream
    body["store"] = False
    return body


def _front_details(req: ChatRequest) -> dict[str, Any]:
    """What the Responses front kept of a request that came in through it."""
    details = (req.provider_details or {}).get(DETAILS_KEY)
    return details if isinstance(details, dict) else {}


# -- input --------------------------------------------------------------------------


def _encode_input(
    messages: Sequence[Message], origin: str | None
) -> tuple[str, list[dict[str, Any]], bool]:
    """``instructions``, the ``input`` items, and whether any reasoning was carried."""
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    carried = False
    for message in messages:
        if message.role == "system":
            text = message.text
            if not items:
                if text:
                    instructions.append(text)
            elif text:
                items.append(_message("developer", [_input_text(text)]))
            continue
        if message.role == "assistant":
            carried |= _encode_assistant(message.parts, origin, items)
            continue
        content: list[dict[str, Any]] = []
        for part in message.parts:
            if isinstance(part, ToolResultPart):
                if content:  # keep the order: text before the result stays before it
                    items.append(_message("user", content))
                    content = []
                items.append(
                    {
                        "type": "function_call_output",
                        "call_id": part.tool_call_id,
                        "output": part.content,
                    }
                )
            elif isinstance(part, TextPart):
                content.append(_input_text(part.text))
            elif isinstance(part, ImagePart):
                content.append(_input_image(part))
        if content:
            items.append(_message("user", content))
    return "\n\n".join(instructions), items, carried


def _encode_assistant(
    parts: Sequence[Part], origin: str | None, items: list[dict[str, Any]]
) -> bool:
    """Append an assistant turn's items (adjacent texts in one message); whether it
    carried reasoning back."""
    carried = False
    texts: list[dict[str, Any]] = []

    def flush() -> None:
        if texts:
            items.append(_message("assistant", list(texts)))
            texts.clear()

    for part in parts:
        if isinstance(part, TextPart):
            if part.text:
                texts.append({"type": "output_text", "text": part.text, "annotations": []})
            continue
        if isinstance(part, ThinkingPart):
            reasoning = _reasoning_item(part, origin)
            if reasoning is None:
                continue
            carried = True
            flush()
            items.append(reasoning)
        elif isinstance(part, ToolCallPart):
            flush()
            items.append(
                {
                    "type": "function_call",
                    "call_id": part.id,
                    "name": part.name,
                    "arguments": call_arguments(part),
                }
            )
    flush()
    return carried


def _reasoning_item(part: ThinkingPart, origin: str | None) -> dict[str, Any] | None:
    """The item this backend gave, as it gave it (``carried.py``); ``None`` for any
    other thinking."""
    return recover_item(part.signature, origin, part.text)


def _message(role: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": content}


def _input_text(text: str) -> dict[str, Any]:
    return {"type": "input_text", "text": text}


def _input_image(part: ImagePart) -> dict[str, Any]:
    if part.data is not None:
        url = f"data:{part.media_type or 'image/png'};base64,{part.data}"
    else:
        url = part.url or ""
    # ``detail`` is required by the SDK's types; "auto" is the API's default.
    return {"type": "input_image", "image_url": url, "detail": "auto"}


# -- options ------------------------------------------------------------------------


def _encode_tool(tool: ToolDefinition) -> dict[str, Any]:
    strict = ((tool.provider_details or {}).get("openai") or {}).get("strict")
    encoded: dict[str, Any] = {"type": "function", "name": tool.name}
    if tool.description:
        encoded["description"] = tool.description
    encoded["parameters"] = tool.input_schema
    encoded["strict"] = bool(strict)
    return encoded


def _encode_tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    if choice.mode == "tool":
        return {"type": "function", "name": choice.name or ""}
    return _TOOL_CHOICE_TO_WIRE[choice.mode]


def _encode_reasoning(thinking: ThinkingConfig | None, asked: object) -> dict[str, Any] | None:
    """``reasoning`` for the core's thinking; ``asked`` is the ``reasoning`` a Responses
    client sent, whose effort spelling and summary are kept where they still apply."""
    original = asked if isinstance(asked, dict) else {}
    summary = original.get("summary") or original.get("generate_summary")
    if thinking is None:
        # No effort asked (Codex sends only a summary to some models): the summary
        # setting alone, as the client sent it, leaves the server's default effort. An
        # effort the thinking policy dropped takes its summary with it.
        alone = isinstance(summary, str) and original.get("effort") is None
        return {"summary": summary} if alone else None
    if not thinking.enabled:
        return {"effort": "none"}
    reasoning: dict[str, Any] = {}
    if thinking.effort is not None:
        spelled = original.get("effort")
        folds = isinstance(spelled, str) and EFFORT_FROM_WIRE.get(spelled) == thinking.effort
        reasoning["effort"] = spelled if folds else _EFFORT_TO_WIRE[thinking.effort]
    elif thinking.budget_tokens is not None:
        reasoning["effort"] = effort_for_budget(thinking.budget_tokens)
    reasoning["summary"] = summary if isinstance(summary, str) else "auto"
    return reasoning


def _encode_text(response_format: ResponseFormat | None, asked: object) -> dict[str, Any]:
    """``text``: the output's format, and the ``verbosity`` a Responses client asked."""
    text: dict[str, Any] = {}
    if response_format is not None:
        text["format"] = _encode_format(response_format)
    verbosity = asked.get("verbosity") if isinstance(asked, dict) else None
    if isinstance(verbosity, str):
        text["verbosity"] = verbosity
    return text


def _encode_format(response_format: ResponseFormat) -> dict[str, Any]:
    if response_format.type == "json_schema":
        return {
            "type": "json_schema",
            "name": response_format.name or "response",
            "schema": response_format.schema or {"type": "object"},
        }
    if response_format.type == "json":
        return {"type": "json_object"}
    return {"type": "text"}

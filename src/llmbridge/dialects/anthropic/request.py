"""Anthropic Messages requests: ``/v1/messages`` bodies to ``ChatRequest`` and back.

``decode_chat_request`` is the gateway's front door for Anthropic clients (Claude Code,
the official SDKs); ``encode_chat_request`` builds the body llmbridge sends when its
backend is a real Anthropic API. Responses and streams live in ``response`` and
``stream``.

The two directions differ where Anthropic's rules do:

- ``tool_result`` blocks arrive inside user turns; the core wants one
  ``Message(role="tool")`` per result, directly after the assistant turn that made the
  calls and before the user's own text of that turn (OpenAI-style backends reject
  anything else; y-router gets this wrong). Encoding folds them back into a user turn,
  tool results first, as Anthropic requires.
- Anthropic requires alternating user/assistant turns, so encoding merges neighbours.
- Thinking blocks are sent back only when Anthropic signed them (see ``_encode_part``):
  never unsigned ones, nor ones carrying another backend's token (``dialects/carried``).
- A system prompt given as blocks is one text for every other dialect (joined by a
  blank line); an Anthropic backend gets the blocks as sent, each with its own
  ``cache_control`` (``scope: "global"``, beta ``prompt-caching-scope-2026-01-05``,
  ``ttl``), as long as nothing changed the text.

What Claude Code 2.1.330 sends (shared/reference/captured/), field by field:

- ``role: "system"`` turns inside ``messages`` stay system messages where they are;
  one without text (Claude Code sends ``content: []``) is no message at all, and the
  ``output_config.effort`` it carries (per-turn control) is the effort from then on.
- ``thinking: {type: "adaptive", display: ...}`` is thinking at the effort
  ``output_config.effort`` names (the last per-turn one first); the original rides
  along for an Anthropic backend, and ``display: "omitted"`` is honoured by the
  response encoders for every backend (thinking blocks without their text).
- ``output_config.effort`` sets the thinking effort of every backend when thinking is
  on; without thinking it reaches only an Anthropic backend (others have no effort
  setting apart from reasoning).
- ``context_management.edits`` (context editing) ride along as sent for an Anthropic
  backend; those the gateway can apply for the others are decoded too
  (``context_management.py``, ``core/context_edits.py``).
- Tools with ``defer_loading: true`` (tool search) and the tool search tool itself are
  withheld from ``ChatRequest.tools``: a backend without tool search never sees them
  (it would load every deferred schema into the prompt, or call a search tool nobody
  runs). They ride along in ``provider_details`` and ``encode_chat_request`` puts them
  back, in their places, for an Anthropic backend.
- A deferred tool the conversation loaded is not withheld: Claude Code's own search
  tool (``ToolSearch``, a client tool every backend gets) answers with
  ``tool_reference`` blocks in its ``tool_result``, and the API then offers the tools
  they name. So does the gateway: such a tool is in ``ChatRequest.tools`` from then on
  (its ``defer_loading`` rides along for an Anthropic backend), and the reference
  reads ``Tool loaded: <name>`` in the result's text. An Anthropic backend gets the
  result's blocks as the client sent them.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Literal

from pydantic import BaseModel

from llmbridge.core.context_edits import CONTEXT_EDITS
from llmbridge.core.errors import InvalidRequestError, UnsupportedFeatureError
from llmbridge.core.hosted_mcp import HOSTED_MCP
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
from llmbridge.core.request import ChatRequest, GenerationParams, ResponseFormat, ThinkingConfig
from llmbridge.core.request_limits import (
    DEFAULT_LIMITS,
    RequestLimits,
    check_conversation_counts,
    check_count,
    count_error,
)
from llmbridge.dialects.anthropic.context_management import decode_edits
from llmbridge.dialects.anthropic.errors import VALIDATION_WORDING
from llmbridge.dialects.anthropic.mcp_request import split_mcp
from llmbridge.dialects.anthropic.types import (
    PROVIDER,
    ContentBlockSource,
    ConversationBody,
    CountTokensRequestBody,
    DocumentBlock,
    ImageBlock,
    MessageParam,
    MessagesRequestBody,
    PlainTextSource,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ThinkingConfigDisabled,
    ThinkingConfigEnabled,
    Tool,
    ToolChoiceNone,
    ToolChoiceTool,
    ToolReferenceBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from llmbridge.dialects.carried import is_carried
from llmbridge.dialects.validation import validate_body

__all__ = [
    "decode_chat_request",
    "decode_count_tokens_request",
    "encode_chat_request",
    "tool_turn_lacks_thinking",
]

DEFAULT_MAX_TOKENS = 4096
"""Anthropic requires ``max_tokens``; sent when the request did not say."""

MIN_THINKING_BUDGET = 1024
"""The smallest ``budget_tokens`` Anthropic accepts."""

_EFFORT_BUDGETS = {"low": 1024, "medium": 4096, "high": 16384, "max": 32000}
"""``budget_tokens`` for a request that only gave an effort (an OpenAI client's
``reasoning_effort``)."""

_EFFORTS: dict[str, Literal["low", "medium", "high", "max"]] = {
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "high",  # the core has no level between high and max
    "max": "max",
}

# Top-level fields mapped onto ChatRequest; every other field goes to provider_details.
_MODELED = frozenset(
    {"model", "messages", "max_tokens", "system", "stop_sequences", "temperature"}
    | {"top_p", "top_k", "stream", "tools", "tool_choice", "thinking"}
)
_TOOL_FIELDS = frozenset({"name", "description", "input_schema"})
_TOOL_SEARCH_PREFIX = "tool_search_tool_"
"""Anthropic's tool search server tools: ``tool_search_tool_regex_20251119``, ``..._bm25_...``."""
_LOADED_TEXT = "Tool loaded: {}"
"""How a ``tool_reference`` block reads in a tool result's text."""
_RESULT_BLOCKS = "tool_result_content"
"""``provider_details`` key of a tool message whose ``tool_result`` had blocks the
core's text cannot carry (``tool_reference``): those blocks, for an Anthropic backend."""
_WITHHELD = "withheld_tools"
"""``provider_details`` key of the tools only an Anthropic backend gets:
``[{"index": <position in the request's tools>, "tool": <the wire tool>}]``."""
_SYSTEM_BLOCKS = "system_blocks"
"""``provider_details`` key of a system message given as blocks: the blocks as sent,
for an Anthropic backend (each block's own ``cache_control``, its scope and ttl)."""
UNSAFE_ID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
"""What Anthropic refuses in a tool id (``_wire_tool_id`` rewrites it)."""

# -- decoding -----------------------------------------------------------------------


def decode_chat_request(body: object, limits: RequestLimits = DEFAULT_LIMITS) -> ChatRequest:
    """Translate a ``/v1/messages`` body into a ``ChatRequest``.

    ``body`` is parsed JSON that has passed ``web.bodies.parse_json`` (its depth
    and size); ``limits`` bounds the messages, tools and blocks here.

    Raises:
        InvalidRequestError: the body is not an object, a field is missing or
            wrong, or a count is over ``limits``; the message and ``param`` name the
            field (``messages.2.content.0``).
        UnsupportedFeatureError: a block the core cannot carry (a PDF document).
    """
    _check_counts(body, limits)
    body, hosted = split_mcp(body)  # the MCP connector: run by the gateway's loop
    parsed = validate_body(
        MessagesRequestBody, body, VALIDATION_WORDING, slice_field="messages", part_keys=_BLOCKS
    )
    _require_messages(parsed)
    params = GenerationParams(
        max_tokens=parsed.max_tokens,
        temperature=parsed.temperature,
        top_p=parsed.top_p,
        top_k=parsed.top_k,
        stop=tuple(parsed.stop_sequences or ()),
    )
    chat = _chat_request(parsed, params, stream=bool(parsed.stream))
    if hosted is None:
        return chat
    return replace(chat, provider_details={**(chat.provider_details or {}), HOSTED_MCP: hosted})


def decode_count_tokens_request(
    body: object, limits: RequestLimits = DEFAULT_LIMITS
) -> ChatRequest:
    """Translate a ``/v1/messages/count_tokens`` body (no ``max_tokens``)."""
    _check_counts(body, limits)
    body, _ = split_mcp(body)  # counted without the connector's servers
    parsed = validate_body(
        CountTokensRequestBody, body, VALIDATION_WORDING, slice_field="messages", part_keys=_BLOCKS
    )
    _require_messages(parsed)
    return _chat_request(parsed, GenerationParams(), stream=False)


def _require_messages(body: ConversationBody) -> None:
    if not body.messages:  # Anthropic's own 400, in its words
        raise InvalidRequestError("messages: at least one message is required", param="messages")


def _check_counts(body: object, limits: RequestLimits) -> None:
    """The count limits, checked before validation so an oversized body costs little."""
    if not isinstance(body, dict):
        return
    messages = check_conversation_counts(body, limits)
    most = limits.max_parts_per_message
    check_count(body.get("system"), most, path="system", setting=_PARTS, noun="blocks")
    for index, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        # A tool_result's own blocks count toward the message that carries it.
        nested = [b.get("content") for b in content if isinstance(b, dict)]
        blocks = len(content) + sum(len(c) for c in nested if isinstance(c, list))
        if blocks > most:
            raise count_error(f"messages.{index}.content", blocks, most, _PARTS, "blocks")


_PARTS = "max_parts_per_message"
_BLOCKS = ("content",)
"""The list of a message that weighs its slice of validation (``dialects/validation``)."""


def _chat_request(body: ConversationBody, params: GenerationParams, *, stream: bool) -> ChatRequest:
    details = body.model_dump(
        exclude=set(_MODELED), exclude_unset=True, exclude_none=True, by_alias=True
    )
    thinking = _decode_thinking(body, details)
    tools, withheld = _split_tools(body)
    if withheld:
        details[_WITHHELD] = withheld
    response_format = None
    if body.output_config is not None and body.output_config.format is not None:
        response_format = ResponseFormat(
            type="json_schema",
            schema=body.output_config.format.schema_,
            param="output_config.format",
        )
    provider_details: dict[str, Any] = {PROVIDER: details} if details else {}
    edits = decode_edits(details.get("context_management"))
    if edits:  # applied by the gateway for other backends (features/context_editing.py)
        provider_details[CONTEXT_EDITS] = edits
    return ChatRequest(
        model=body.model,
        messages=_decode_messages(body),
        stream=stream,
        params=params,
        tools=tools,
        tool_choice=_decode_tool_choice(body),
        thinking=thinking,
        response_format=response_format,
        provider_details=provider_details or None,
    )


def _decode_thinking(body: ConversationBody, details: dict[str, Any]) -> ThinkingConfig | None:
    effort = _effort(body, details)
    config = body.thinking
    if config is None or isinstance(config, ThinkingConfigDisabled):
        return None
    if isinstance(config, ThinkingConfigEnabled) and config.display is None:
        return ThinkingConfig(
            enabled=True, budget_tokens=config.budget_tokens, effort=_EFFORTS.get(effort or "")
        )
    # adaptive, between_tools or a display setting: the core cannot say it, so the
    # original rides along for an Anthropic backend (see ``_encode_thinking``).
    details["thinking"] = config.model_dump(exclude_none=True)
    return ThinkingConfig(
        enabled=True,
        budget_tokens=getattr(config, "budget_tokens", None),
        effort=_EFFORTS.get(effort or ""),
    )


def _effort(body: ConversationBody, details: dict[str, Any]) -> str | None:
    """The effort this reply is generated at: the last system turn's per-turn
    ``output_config.effort`` (Claude Code 2.1.330 sends one, beta
    ``per-turn-control-2026-07-01``), else the request's own.

    A per-turn effort is also written into the ``output_config`` that rides along,
    since the turn that carried it is not passed on as a message (``_decode_messages``).
    """
    requested = body.output_config.effort if body.output_config else None
    effort = requested
    for message in body.messages:
        if message.role == "system" and message.output_config is not None:
            effort = message.output_config.effort or effort
    if effort != requested:
        details["output_config"] = {**details.get("output_config", {}), "effort": effort}
    return effort


def _decode_messages(body: ConversationBody) -> tuple[Message, ...]:
    messages: list[Message] = []
    if body.system is not None:
        messages.append(_system_message(body.system))
    for index, message in enumerate(body.messages):
        if message.role == "system":
            system = _system_message(message.content, f"messages.{index}.content")
            if system.text:  # an empty one only carried per-turn settings (``_effort``)
                messages.append(system)
        elif message.role == "assistant":
            messages.append(_assistant_message(message, index))
        else:
            messages.extend(_user_messages(message, index))
    return tuple(messages)


def _system_message(content: object, path: str = "system") -> Message:
    if isinstance(content, str):
        return Message(role="system", parts=(TextPart(content),))
    blocks = content if isinstance(content, list) else []
    texts: list[str] = []
    for position, block in enumerate(blocks):
        if not isinstance(block, TextBlock):
            raise InvalidRequestError(
                f"{path}.{position}: system content must be text blocks",
                param=f"{path}.{position}",
            )
        texts.append(block.text)
    # Joined into one part: every other dialect renders a system prompt as one string.
    # The blocks ride along as sent, with their own cache breakpoints, for Anthropic.
    sent = [block.model_dump(exclude_unset=True, exclude_none=True) for block in blocks]
    return Message(
        role="system",
        parts=(TextPart(_SYSTEM_SEPARATOR.join(texts)),),
        provider_details={PROVIDER: {_SYSTEM_BLOCKS: sent}} if sent else None,
    )


_SYSTEM_SEPARATOR = "\n\n"


def _assistant_message(message: MessageParam, index: int) -> Message:
    if isinstance(message.content, str):
        return Message(role="assistant", parts=(TextPart(message.content),))
    parts: list[Part] = []
    cache_control = None
    for position, block in enumerate(message.content):
        path = f"messages.{index}.content.{position}"
        if isinstance(block, ToolResultBlock):
            raise InvalidRequestError(
                f"{path}: tool_result blocks belong in user messages", param=path
            )
        if isinstance(block, ToolUseBlock):
            parts.append(ToolCallPart(id=block.id, name=block.name, arguments=block.input))
        else:
            parts.extend(_content_parts(block, path))
        cache_control = getattr(block, "cache_control", None) or cache_control
    return Message(
        role="assistant", parts=tuple(parts), provider_details=_cache_details(cache_control)
    )


def _user_messages(message: MessageParam, index: int) -> list[Message]:
    """A user turn: one tool message per ``tool_result``, then the user's own parts."""
    if isinstance(message.content, str):
        return [Message(role="user", parts=(TextPart(message.content),))]
    results: list[Message] = []
    parts: list[Part] = []
    cache_control = None
    for position, block in enumerate(message.content):
        path = f"messages.{index}.content.{position}"
        if isinstance(block, ToolResultBlock):
            text, images = _tool_result_content(block)
            part = ToolResultPart(
                tool_call_id=block.tool_use_id, content=text, is_error=bool(block.is_error)
            )
            results.append(
                Message(role="tool", parts=(part,), provider_details=_result_details(block))
            )
            # The core's tool results are text; images a tool returned (Claude Code's
            # Read on a picture) go to the user turn that follows, which every vision
            # backend can see.
            parts.extend(images)
        elif isinstance(block, ToolUseBlock):
            parts.append(ToolCallPart(id=block.id, name=block.name, arguments=block.input))
        else:
            parts.extend(_content_parts(block, path))
            cache_control = getattr(block, "cache_control", None) or cache_control
    if parts:
        results.append(
            Message(role="user", parts=tuple(parts), provider_details=_cache_details(cache_control))
        )
    return results


def _content_parts(block: BaseModel, path: str) -> list[Part]:
    if isinstance(block, TextBlock):
        return [TextPart(block.text)]
    if isinstance(block, ImageBlock):
        return [_image_part(block)]
    if isinstance(block, ThinkingBlock):
        signature = block.signature or None
        # Only a signed block can have come from Anthropic; an unsigned one (a local
        # model's reasoning the gateway relayed) must not claim to.
        provider = PROVIDER if signature else None
        return [ThinkingPart(block.thinking, signature=signature, provider=provider)]
    if isinstance(block, RedactedThinkingBlock):
        return [ThinkingPart("", redacted=block.data, provider=PROVIDER)]
    if isinstance(block, DocumentBlock):
        return _document_parts(block, path)
    raise InvalidRequestError(f"{path}: unsupported content block", param=path)


def _image_part(block: ImageBlock) -> ImagePart:
    source = block.source
    if source.type == "base64":
        return ImagePart(data=source.data, media_type=source.media_type)
    return ImagePart(url=source.url)


def _document_parts(block: DocumentBlock, path: str) -> list[Part]:
    source = block.source
    if isinstance(source, PlainTextSource):
        text = source.data
    elif isinstance(source, ContentBlockSource):
        if not isinstance(source.content, str):
            return [
                TextPart(item.text) if isinstance(item, TextBlock) else _image_part(item)
                for item in source.content
            ]
        text = source.content
    else:
        raise UnsupportedFeatureError(
            f"{path}.source: PDF documents are not supported", param=f"{path}.source"
        )
    return [TextPart(f"{block.title}\n\n{text}" if block.title else text)]


def _tool_result_content(block: ToolResultBlock) -> tuple[str, list[Part]]:
    if block.content is None:
        return "", []
    if isinstance(block.content, str):
        return block.content, []
    texts = [
        item.text if isinstance(item, TextBlock) else _LOADED_TEXT.format(item.tool_name)
        for item in block.content
        if isinstance(item, TextBlock | ToolReferenceBlock)
    ]
    images: list[Part] = [
        _image_part(item) for item in block.content if isinstance(item, ImageBlock)
    ]
    return "\n".join(texts), images


def _cache_details(cache_control: dict[str, Any] | None) -> dict[str, Any] | None:
    return {PROVIDER: {"cache_control": cache_control}} if cache_control else None


def _result_details(block: ToolResultBlock) -> dict[str, Any] | None:
    """A tool message's details: its cache breakpoint, and its blocks as sent when a
    ``tool_reference`` is among them (the core's text cannot carry one)."""
    details: dict[str, Any] = {}
    if block.cache_control:
        details["cache_control"] = block.cache_control
    content = block.content if isinstance(block.content, list) else []
    if any(isinstance(item, ToolReferenceBlock) for item in content):
        details[_RESULT_BLOCKS] = [
            item.model_dump(exclude_unset=True, exclude_none=True) for item in content
        ]
    return {PROVIDER: details} if details else None


def _loaded_tools(body: ConversationBody) -> frozenset[str]:
    """The deferred tools the conversation loaded: those its tool results reference
    (``tool_reference`` blocks, a client-side tool search's answer)."""
    return frozenset(
        item.tool_name
        for message in body.messages
        if message.role == "user" and not isinstance(message.content, str)
        for block in message.content
        if isinstance(block, ToolResultBlock) and isinstance(block.content, list)
        for item in block.content
        if isinstance(item, ToolReferenceBlock)
    )


def _split_tools(body: ConversationBody) -> tuple[tuple[ToolDefinition, ...], list[Any]]:
    """The tools every backend gets, and those withheld for tool search (with their
    positions, so an Anthropic backend gets the list back as the client sent it). A
    deferred tool the conversation loaded (``_loaded_tools``) is not withheld: it was
    searched for. The history is read for those only when a tool is deferred."""
    tools: list[ToolDefinition] = []
    withheld: list[dict[str, Any]] = []
    loaded: frozenset[str] | None = None
    for index, tool in enumerate(body.tools or ()):
        extra = tool.model_extra or {}
        searched = (tool.type or "").startswith(_TOOL_SEARCH_PREFIX)
        deferred = extra.get("defer_loading") is True
        if deferred:
            if loaded is None:
                loaded = _loaded_tools(body)
            deferred = tool.name not in loaded
        if deferred or searched:
            wire = tool.model_dump(exclude_unset=True, exclude_none=True, by_alias=True)
            withheld.append({"index": index, "tool": wire})
        else:
            tools.append(_decode_tool(tool))
    return tuple(tools), withheld


def _decode_tool(tool: Tool) -> ToolDefinition:
    extra = {
        key: value
        for key, value in tool.model_dump(exclude_unset=True, exclude_none=True).items()
        if key not in _TOOL_FIELDS
    }
    return ToolDefinition(
        name=tool.name,
        description=tool.description or "",
        input_schema=tool.input_schema if tool.input_schema is not None else {"type": "object"},
        provider_details={PROVIDER: extra} if extra else None,
    )


def _decode_tool_choice(body: ConversationBody) -> ToolChoice | None:
    choice = body.tool_choice
    if choice is None:
        return None
    if isinstance(choice, ToolChoiceNone):
        return ToolChoice(mode="none")
    return ToolChoice(
        mode=choice.type,
        name=choice.name if isinstance(choice, ToolChoiceTool) else None,
        disable_parallel=bool(choice.disable_parallel_tool_use),
    )


# -- the pass-through path ------------------------------------------------------------


# -- encoding -----------------------------------------------------------------------


def encode_chat_request(req: ChatRequest) -> dict[str, Any]:
    """The ``/v1/messages`` body that asks a real Anthropic API for ``req``."""
    extras = dict((req.provider_details or {}).get(PROVIDER) or {})
    raw_thinking = extras.pop("thinking", None)
    withheld = extras.pop(_WITHHELD, None) or []
    system, messages = _encode_messages(req.messages)
    body: dict[str, Any] = {"model": req.model, "messages": messages}
    if system:
        body["system"] = system
    max_tokens = req.params.max_tokens
    body["max_tokens"] = max_tokens if max_tokens is not None else DEFAULT_MAX_TOKENS
    _encode_params(req.params, body)
    if req.stream:
        body["stream"] = True
    if req.tools or withheld:
        tools = [_encode_tool(tool) for tool in req.tools]
        for item in withheld:  # in ascending positions, so each lands where it was
            tools.insert(min(item["index"], len(tools)), item["tool"])
        body["tools"] = tools
    if req.tool_choice is not None:
        body["tool_choice"] = _encode_tool_choice(req.tool_choice)
    if req.thinking is not None:
        _encode_thinking(req.thinking, raw_thinking, body, max_tokens is None)
    output_config = dict(extras.pop("output_config", None) or {})
    output_config.pop("format", None)  # response_format is authoritative
    if req.response_format is not None and req.response_format.type == "json_schema":
        schema = req.response_format.schema or {"type": "object"}
        output_config["format"] = {"type": "json_schema", "schema": schema}
    if output_config:
        body["output_config"] = output_config
    for key, value in extras.items():
        body.setdefault(key, value)
    return body


def _encode_params(params: GenerationParams, body: dict[str, Any]) -> None:
    if params.temperature is not None:
        body["temperature"] = params.temperature
    if params.top_p is not None:
        body["top_p"] = params.top_p
    if params.top_k is not None:
        body["top_k"] = params.top_k
    if params.stop:
        body["stop_sequences"] = list(params.stop)


def _encode_thinking(
    thinking: ThinkingConfig, raw: dict[str, Any] | None, body: dict[str, Any], default_max: bool
) -> None:
    if not thinking.enabled:
        body["thinking"] = {"type": "disabled"}
        return
    if _last_tool_turn_lacks_thinking(body["messages"]):
        # "a final assistant message must start with a thinking block" once tool_use
        # is in play; the turn's thinking came from another backend (dropped, see
        # ``_encode_part``), so this request goes without thinking rather than fail.
        return
    if raw is not None and thinking.budget_tokens is None:
        body["thinking"] = raw
        return
    budget = thinking.budget_tokens or _EFFORT_BUDGETS.get(thinking.effort or "", 0)
    budget = max(budget, MIN_THINKING_BUDGET)
    if default_max:
        # Thinking counts toward max_tokens: leave the default room for the answer.
        body["max_tokens"] = budget + DEFAULT_MAX_TOKENS
    # The API wants budget_tokens < max_tokens.
    if budget >= body["max_tokens"]:
        budget = max(MIN_THINKING_BUDGET, body["max_tokens"] - 1)
        body["max_tokens"] = max(body["max_tokens"], budget + 1)
    body["thinking"] = {"type": "enabled", "budget_tokens": budget}


def _last_tool_turn_lacks_thinking(messages: list[dict[str, Any]]) -> bool:
    for message in reversed(messages):
        if message["role"] == "assistant":
            return tool_turn_lacks_thinking(message["content"])
    return False


def tool_turn_lacks_thinking(content: object) -> bool:
    """Whether an assistant turn's content calls a tool without opening with thinking
    (Anthropic refuses it with thinking on): encoded blocks, or a client's as written."""
    if not isinstance(content, list):
        return False
    has_tool_use = any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content)
    first = content[0] if content else None
    starts = isinstance(first, dict) and first.get("type") in ("thinking", "redacted_thinking")
    return has_tool_use and not starts


def _encode_messages(messages: tuple[Message, ...]) -> tuple[Any, list[dict[str, Any]]]:
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system" and not turns:
            system.extend(_blocks(message))
            continue
        blocks = _blocks(message)
        if not blocks:
            continue  # Anthropic rejects empty turns (e.g. only foreign thinking)
        if message.role == "system":
            turns.append({"role": "system", "content": blocks})
            continue
        role = "assistant" if message.role == "assistant" else "user"
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:
        if turn["role"] == "user":
            # Anthropic wants a turn's tool_result blocks before anything else in it.
            content = turn["content"]
            content.sort(key=lambda block: block["type"] != "tool_result")
    if len(system) == 1 and "cache_control" not in system[0]:
        return system[0]["text"], turns
    return system, turns


def _blocks(message: Message) -> list[dict[str, Any]]:
    details = (message.provider_details or {}).get(PROVIDER) or {}
    system = details.get(_SYSTEM_BLOCKS)
    if message.role == "system" and system:
        if _system_text(system) == message.text:
            # The client's blocks, untouched by any feature: as sent, cache breakpoints
            # (and their scope) on the blocks they were on.
            return [dict(block) for block in system]
        # Rewritten: one block, with the last breakpoint the client set.
        marks = [block["cache_control"] for block in system if "cache_control" in block]
        details = {"cache_control": marks[-1]} if marks else {}
    blocks = [
        block
        for block in (_encode_part(part, message.role) for part in message.parts)
        if block is not None
    ]
    sent = details.get(_RESULT_BLOCKS)
    if sent is not None:  # a tool_result with tool_reference blocks, as the client sent it
        for block in blocks:
            if block["type"] == "tool_result":
                block["content"] = sent
    if blocks and details.get("cache_control"):
        blocks[-1]["cache_control"] = details["cache_control"]
    return blocks


def _system_text(blocks: list[dict[str, Any]]) -> str:
    return _SYSTEM_SEPARATOR.join(str(block.get("text", "")) for block in blocks)


def _encode_part(part: Part, role: str) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        # Anthropic rejects empty text blocks.
        return {"type": "text", "text": part.text} if part.text else None
    if isinstance(part, ImagePart):
        return _encode_image(part)
    if isinstance(part, ThinkingPart):
        # Anthropic verifies thinking signatures and answers 400 "Invalid signature in
        # thinking block" for anything it did not sign itself: unsigned reasoning from
        # a local model, or a signature from another provider. Such blocks are
        # dropped; only Anthropic's own are passed back, byte for byte. The Anthropic
        # front marks every signed block it takes back as Anthropic's, so a block that
        # carries another backend's token (a Gemini signature, a Responses server's
        # encrypted reasoning, relayed to a Claude client) is told by its signature.
        if part.provider != PROVIDER or role != "assistant" or is_carried(part.signature):
            return None
        if part.redacted:
            return {"type": "redacted_thinking", "data": part.redacted}
        if part.signature:
            return {"type": "thinking", "thinking": part.text, "signature": part.signature}
        return None
    if isinstance(part, ToolCallPart):
        # ``input`` must be an object; arguments that never parsed (raw_arguments) go
        # as the empty object the core already holds for them.
        return {
            "type": "tool_use",
            "id": _wire_tool_id(part.id),
            "name": part.name,
            "input": part.arguments,
        }
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": _wire_tool_id(part.tool_call_id)}
    if part.content:
        block["content"] = part.content
    if part.is_error:
        block["is_error"] = True
    return block


def _encode_image(part: ImagePart) -> dict[str, Any]:
    data, media_type = part.data, part.media_type
    if data is None and part.url and part.url.startswith("data:"):
        # Anthropic's url source takes http(s) only; a data URL goes inline.
        header, _, data = part.url.partition(",")
        media_type = media_type or header[5:].split(";")[0] or None
    if data is not None:
        source = {"type": "base64", "media_type": media_type or "image/png", "data": data}
    else:
        source = {"type": "url", "url": part.url or ""}
    return {"type": "image", "source": source}


def _wire_tool_id(call_id: str) -> str:
    # Anthropic checks tool ids against ^[a-zA-Z0-9_-]+$; ids from other backends
    # may not match. The mapping is deterministic, so calls and results still pair.
    return UNSAFE_ID_CHARS.sub("_", call_id) or "toolu_"


def _encode_tool(tool: ToolDefinition) -> dict[str, Any]:
    extra = dict((tool.provider_details or {}).get(PROVIDER) or {})
    encoded: dict[str, Any] = {"name": tool.name}
    if tool.description:
        encoded["description"] = tool.description
    # Server tools (``type: "web_search_20250305"``...) take no input_schema.
    if extra.get("type") in (None, "custom"):
        encoded["input_schema"] = tool.input_schema
    encoded.update(extra)
    return encoded


def _encode_tool_choice(choice: ToolChoice) -> dict[str, Any]:
    encoded: dict[str, Any] = {"type": choice.mode}
    if choice.mode == "tool":
        encoded["name"] = choice.name or ""
    if choice.disable_parallel and choice.mode != "none":
        encoded["disable_parallel_tool_use"] = True
    return encoded

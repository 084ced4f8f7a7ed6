"""Responses API requests: what a client sent to ``POST /v1/responses``, as a core request.

``input`` items become messages: ``message`` items by role (``developer`` and
``system`` are system messages, as are ``instructions``, which go first); the items an
assistant turn produced (``reasoning``, assistant ``message``, ``function_call``,
``custom_tool_call``) join one assistant message until the next other item; each
``*_output`` item is a ``tool`` message. A ``compaction`` item is what it stands for
(``compaction.py``): llmbridge's summary as a user message, a backend's own compaction
as the thinking part that carries it back to that backend, anything else left out and
counted (``dropped_compaction``); a last ``compaction_trigger`` asks for the reply to
compact the conversation (``ChatRequest.compaction``). Tools: see ``tools.py``. What the reply needs
to echo or to shape its items (custom and namespaced tools, hosted tools left out,
whether to return ``encrypted_content``) rides in ``provider_details["responses"]``.

``previous_response_id`` and ``conversation`` are a 400 naming the field (Ollama
answers the same): send the whole conversation. With the agent store on, the gateway
resolves ``previous_response_id`` before decoding (``continuation.py``) and the body it
decodes no longer has it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, cast

from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.hosted_mcp import HOSTED_MCP, HostedMcp
from llmbridge.core.messages import (
    ImagePart,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
)
from llmbridge.core.request import (
    ChatRequest,
    GenerationParams,
    ResponseFormat,
    ThinkingConfig,
)
from llmbridge.core.request_limits import (
    DEFAULT_LIMITS,
    RequestLimits,
    check_count,
    check_message_parts,
)
from llmbridge.core.tool_arguments import parse_request_tool_arguments
from llmbridge.dialects.images import split_base64_data_url
from llmbridge.dialects.openai.request import Ranges, check_ranges
from llmbridge.dialects.responses.errors import VALIDATION_WORDING
from llmbridge.dialects.responses.mcp_request import McpInput
from llmbridge.dialects.responses.reasoning import open_reasoning
from llmbridge.dialects.responses.summary import SUMMARY_INTRO, open_summary
from llmbridge.dialects.responses.tools import CUSTOM_INPUT, ToolShapes, decode_tools, flat_name
from llmbridge.dialects.responses.types import (
    CompactionItem,
    CompactionTriggerItem,
    CustomToolCallItem,
    CustomToolCallOutputItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    InputContentPart,
    InputImagePart,
    InputItem,
    InputMessageItem,
    InputTextPart,
    McpApprovalRequestItem,
    McpApprovalResponseItem,
    McpCallItem,
    McpListToolsItem,
    OutputTextPart,
    ReasoningConfig,
    ReasoningItem,
    RefusalPart,
    ResponsesRequestBody,
    TextConfig,
    ToolChoiceObject,
)
from llmbridge.dialects.validation import validate_body

__all__ = [
    "DETAILS_KEY",
    "EFFORT_FROM_WIRE",
    "ENCRYPTED_REASONING",
    "decode_chat_request",
    "decode_input_tokens_request",
]

DETAILS_KEY = "responses"
"""The key of this dialect's fields in ``ChatRequest.provider_details``."""
ENCRYPTED_REASONING = "reasoning.encrypted_content"
"""The ``include`` value asking for reasoning state to send back (Codex always asks)."""

_Effort = Literal["low", "medium", "high", "max"]
# The core has four levels; OpenAI's extra spellings fold onto the nearest, as in
# dialects/openai/request.py.
EFFORT_FROM_WIRE: dict[str, _Effort] = {
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "max",
    "max": "max",
}
_PART_KEYS = ("content",)
"""The list of an input item that counts as its parts (``max_parts_per_message``)."""

# (field, lowest, highest, OpenAI's kind of number): the ranges OpenAI's API enforces.
_RANGES: Ranges = (
    ("max_output_tokens", 1, None, "integer"),
    ("temperature", 0, 2, "decimal"),
    ("top_p", 0, 1, "decimal"),
)
# Echoed in the response object as the client sent them (Response's own fields).
_ECHOED = (
    "instructions",
    "max_output_tokens",
    "metadata",
    "parallel_tool_calls",
    "prompt_cache_key",
    "reasoning",
    "service_tier",
    "store",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_p",
    "truncation",
    "user",
)


def decode_chat_request(body: object, limits: RequestLimits = DEFAULT_LIMITS) -> ChatRequest:
    """Validate a Responses body and translate it to the core request.

    Raises:
        InvalidRequestError: the body is not an object, a field is missing or has the
            wrong type (``param`` names its path, e.g. ``input.1.content``), a value is
            out of the range OpenAI accepts, a count is over ``limits``, or the body
            asks for state llmbridge does not keep (``previous_response_id``,
            ``conversation``, ``background``).
    """
    _check_counts(body, limits)
    wire = validate_body(
        ResponsesRequestBody, body, VALIDATION_WORDING, slice_field="input", part_keys=_PART_KEYS
    )
    data = cast("dict[str, Any]", body)  # an object: validate_body accepted it
    check_ranges(wire, _RANGES)
    _check_stateless(wire)
    tools = decode_tools(wire.tools)
    messages: list[Message] = []
    if wire.instructions:
        messages.append(Message("system", (TextPart(wire.instructions),)))
    include = wire.include or []
    details: dict[str, Any] = tools.details()
    mcp = McpInput(wire.input if isinstance(wire.input, list) else [], limits.max_json_depth)
    dropped = _Dropped()
    compact = _decode_input(wire.input, tools, limits, messages, mcp, dropped)
    if dropped.reasoning:
        details["dropped_reasoning"] = dropped.reasoning
    if dropped.compaction:
        details["dropped_compaction"] = dropped.compaction
    if ENCRYPTED_REASONING in include:
        details["encrypted_reasoning"] = True
    details["echo"] = {key: data[key] for key in _ECHOED if data.get(key) is not None}
    if not messages:
        raise InvalidRequestError(
            "Invalid 'input': empty array. Expected at least one input item.",
            param="input",
            code="empty_array",
        )
    return ChatRequest(
        model=wire.model,
        messages=tuple(messages),
        stream=bool(wire.stream),
        params=GenerationParams(
            max_tokens=wire.max_output_tokens, temperature=wire.temperature, top_p=wire.top_p
        ),
        tools=tuple(tools.definitions),
        tool_choice=_decode_tool_choice(wire.tool_choice, wire.parallel_tool_calls, tools),
        thinking=_decode_thinking(wire.reasoning),
        response_format=_decode_format(wire.text),
        include_usage=True,
        provider_details=_provider_details(details, tools, mcp),
        cache_key=wire.prompt_cache_key or None,
        compaction=compact,
    )


def _provider_details(details: dict[str, Any], tools: ToolShapes, mcp: McpInput) -> dict[str, Any]:
    """This dialect's details, and the MCP servers the gateway is to run tools of."""
    if not tools.mcp and not mcp.approvals:
        return {DETAILS_KEY: details}
    return {DETAILS_KEY: details, HOSTED_MCP: HostedMcp(tuple(tools.mcp), tuple(mcp.approvals))}


def decode_input_tokens_request(
    body: object, limits: RequestLimits = DEFAULT_LIMITS
) -> ChatRequest:
    """``POST /v1/responses/input_tokens``: the same body, whose ``model`` may be left
    out (the default backend then counts)."""
    if isinstance(body, dict) and body.get("model") is None:
        body = {**body, "model": "default"}
    return decode_chat_request(body, limits)


# -- checks -------------------------------------------------------------------------


def _check_counts(body: object, limits: RequestLimits) -> None:
    """Count limits, checked before validation so an oversized body costs little."""
    if not isinstance(body, dict):
        return
    items = body.get("input")
    check_count(items, limits.max_messages, path="input", setting="max_messages", noun="items")
    check_count(
        body.get("tools"), limits.max_tools, path="tools", setting="max_tools", noun="tools"
    )
    if isinstance(items, list):
        check_message_parts(items, limits, _PART_KEYS, "content parts")


def _check_stateless(wire: ResponsesRequestBody) -> None:
    for name in ("previous_response_id", "conversation"):
        if getattr(wire, name) is not None:
            raise InvalidRequestError(
                f"Invalid '{name}': llmbridge is stateless and keeps no responses; "
                "send the whole conversation in 'input' (with 'store': false).",
                param=name,
                code="unsupported_parameter",
            )
    if wire.background:
        raise InvalidRequestError(
            "Invalid 'background': llmbridge keeps no responses to poll; "
            "stream the response instead.",
            param="background",
            code="unsupported_parameter",
        )


# -- input --------------------------------------------------------------------------


class _Dropped:
    """What the input held that no backend here can read (counted for the headers)."""

    __slots__ = ("compaction", "reasoning")

    def __init__(self) -> None:
        self.reasoning = 0
        """Reasoning items whose ``encrypted_content`` another server issued (their
        text is kept)."""
        self.compaction = 0
        """Compaction items another server issued (left out)."""


def _decode_input(
    wire: str | Sequence[InputItem],
    tools: ToolShapes,
    limits: RequestLimits,
    messages: list[Message],
    mcp: McpInput,
    dropped: _Dropped,
) -> bool:
    """Append the input's messages to ``messages``, counting in ``dropped`` what no
    backend can read; whether the input ends with a ``compaction_trigger``."""
    if isinstance(wire, str):
        messages.append(Message("user", (TextPart(wire),)))
        return False
    turn: list[Part] = []  # the assistant turn being joined

    def close_turn() -> None:
        if turn:
            messages.append(Message("assistant", tuple(turn)))
            turn.clear()

    for index, item in enumerate(wire):
        where = f"input.{index}"
        if isinstance(item, InputMessageItem):
            parts = _content_parts(item.content, f"{where}.content")
            if item.role == "assistant":
                turn.extend(parts)
                continue
            close_turn()
            role: Literal["system", "user"] = "user" if item.role == "user" else "system"
            messages.append(Message(role, tuple(parts)))
        elif isinstance(item, FunctionCallItem | CustomToolCallItem):
            turn.append(_call_part(item, where, limits))
        elif isinstance(item, ReasoningItem):
            part, lost = _reasoning_part(item)
            dropped.reasoning += lost
            if part is not None:
                turn.append(part)
        elif isinstance(item, CompactionItem):
            compacted = _compaction(item, dropped)
            if isinstance(compacted, Message):
                close_turn()
                messages.append(compacted)
            elif compacted is not None:
                turn.append(compacted)  # a backend's own: it goes back to that backend
        elif isinstance(item, CompactionTriggerItem):
            _check_last(index, len(wire), where)
            close_turn()
            return True
        elif isinstance(
            item,
            McpCallItem | McpListToolsItem | McpApprovalRequestItem | McpApprovalResponseItem,
        ):
            mcp.decode(item, where, turn, close_turn, messages)
        else:
            close_turn()
            messages.append(_tool_result(item, _turn_names(messages)))
    close_turn()
    return False


def _call_part(
    item: FunctionCallItem | CustomToolCallItem, where: str, limits: RequestLimits
) -> ToolCallPart:
    """A call the model made earlier: a custom tool's input is its one argument."""
    name = flat_name(item.namespace, item.name)
    if isinstance(item, CustomToolCallItem):
        return ToolCallPart(item.call_id, name, {CUSTOM_INPUT: item.input})
    arguments, raw = parse_request_tool_arguments(
        item.arguments, f"{where}.arguments", limits.max_json_depth
    )
    return ToolCallPart(item.call_id, name, arguments, raw)


def _compaction(item: CompactionItem, dropped: _Dropped) -> Message | ThinkingPart | None:
    """What a compaction item stands for: llmbridge's summary as a user message, a
    backend's own compaction as the thinking part that carries it (compaction.py);
    ``None``, counted, for another server's."""
    summary = open_summary(item.encrypted_content)
    if summary is not None:
        return Message("user", (TextPart(SUMMARY_INTRO + summary),))
    opened = open_reasoning("", item.encrypted_content)
    if opened is None:
        dropped.compaction += 1
    return opened


def _check_last(index: int, count: int, where: str) -> None:
    """A ``compaction_trigger`` compacts what comes before it: it must come last."""
    if index != count - 1:
        raise InvalidRequestError(
            f"Invalid '{where}': a 'compaction_trigger' item must be the last input item "
            "(it compacts the conversation before it).",
            param=where,
        )


def _turn_names(messages: list[Message]) -> dict[str, str]:
    """Call id -> tool name of the latest assistant message's calls."""
    for message in reversed(messages):
        if message.role == "assistant":
            return {call.id: call.name for call in message.tool_calls}
    return {}


def _tool_result(
    item: FunctionCallOutputItem | CustomToolCallOutputItem, names: dict[str, str]
) -> Message:
    output = item.output
    text = output if isinstance(output, str) else "".join(_part_text(part) for part in output)
    result = ToolResultPart(item.call_id, text, name=names.get(item.call_id))
    return Message("tool", (result,))


def _part_text(part: InputContentPart) -> str:
    if isinstance(part, InputTextPart | OutputTextPart):
        return part.text
    if isinstance(part, RefusalPart):
        return part.refusal
    return ""  # an image in a tool's output: the core's tool results are text


def _reasoning_part(item: ReasoningItem) -> tuple[ThinkingPart | None, int]:
    texts = [summary.text for summary in item.summary]
    if not texts and item.content:
        texts = [content.text for content in item.content]
    text = "\n\n".join(texts)
    if item.encrypted_content:
        opened = open_reasoning(text, item.encrypted_content)
        if opened is not None:
            return opened, 0
        return (ThinkingPart(text) if text else None), 1
    return (ThinkingPart(text) if text else None), 0


def _content_parts(content: str | list[InputContentPart], where: str) -> list[Part]:
    if isinstance(content, str):
        return [TextPart(content)]
    parts: list[Part] = []
    for position, part in enumerate(content):
        if isinstance(part, InputImagePart):
            parts.append(_image(part, f"{where}.{position}"))
        else:
            parts.append(TextPart(_part_text(part)))
    return parts


def _image(part: InputImagePart, where: str) -> ImagePart:
    url = part.image_url
    if url is None:
        raise InvalidRequestError(
            f"Invalid '{where}': llmbridge stores no files; give the image as "
            "'image_url' (an http(s) or data: URL), not 'file_id'.",
            param=f"{where}.image_url",
        )
    parsed = split_base64_data_url(url)
    if parsed is not None:
        media_type, payload = parsed
        return ImagePart(data=payload, media_type=media_type)
    return ImagePart(url=url)


# -- options ------------------------------------------------------------------------


def _decode_tool_choice(
    choice: str | ToolChoiceObject | None, parallel: bool | None, tools: ToolShapes
) -> ToolChoice | None:
    disable_parallel = parallel is False
    if choice is None:
        return ToolChoice(disable_parallel=True) if disable_parallel else None
    if isinstance(choice, str):
        mode: Literal["auto", "any", "none"] = (
            "any" if choice == "required" else "none" if choice == "none" else "auto"
        )
        return ToolChoice(mode, disable_parallel=disable_parallel)
    if choice.type in ("function", "custom") and choice.name:
        name = choice.name
        if name not in {tool.name for tool in tools.definitions}:
            # A tool inside a namespace, named by its own name.
            name = next((flat for flat, pair in tools.namespaced.items() if pair[1] == name), name)
        return ToolChoice("tool", name=name, disable_parallel=disable_parallel)
    if choice.type == "allowed_tools":
        # The subset is not enforced; the mode is (docs/RESPONSES.md).
        mode = "any" if choice.mode == "required" else "auto"
        return ToolChoice(mode, disable_parallel=disable_parallel)
    # A hosted tool forced: it is not offered to the backend, so the model decides.
    return ToolChoice("auto", disable_parallel=disable_parallel)


def _decode_thinking(reasoning: ReasoningConfig | None) -> ThinkingConfig | None:
    """``reasoning.effort`` as the core's thinking; ``summary`` alone asks for nothing
    (Codex sends it to every model; turning thinking on for it would refuse models that
    cannot think under the strict thinking policy)."""
    if reasoning is None or reasoning.effort is None:
        return None
    if reasoning.effort == "none":
        return ThinkingConfig(enabled=False)
    return ThinkingConfig(effort=EFFORT_FROM_WIRE[reasoning.effort])


def _decode_format(text: TextConfig | None) -> ResponseFormat | None:
    format_ = text.format if text is not None else None
    if format_ is None:
        return None
    param = "text.format"
    if format_.type == "json_schema":
        if format_.schema_ is None:
            raise InvalidRequestError(
                "Missing required parameter: 'text.format.schema'.", param="text.format.schema"
            )
        return ResponseFormat("json_schema", schema=format_.schema_, name=format_.name, param=param)
    if format_.type == "json_object":
        return ResponseFormat("json", param=param)
    return None

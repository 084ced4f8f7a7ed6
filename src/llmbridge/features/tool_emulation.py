"""Tool calling for models that have none: one JSON decision (seed 000).

A backend model without native tools (the embedded model; an Ollama model whose
capabilities lack ``tools``; later, OpenCode) is asked a single question: given the
tools, the system context and the recent conversation, reply with one JSON object,
either ``tool_call`` (a tool name and arguments), ``answer`` (an answer from a tool
result) or ``chat`` (a conversational reply). The decision becomes the neutral events
of a real tool call or of a text reply, so every dialect's client gets real tool calls.

The decision is read while it is generated (``json_stream.FieldStreamer``): the text
of an ``answer`` or ``chat`` streams to the client as the backend writes it, decoded
from its JSON string; a tool call is held back and emitted once, complete.
``ResponseStart`` waits for the first output, so a decision that fails before any
still ends in a fallback or in an error before the first event.

Parsing tolerates code fences and prose around the JSON. A tool name that was never
offered becomes ``unknown`` (the seed's rule, so the client can say so). Arguments are
healed and checked against the tool's schema with the same code as every other tool
call (``tool_healing``). When no decision can be read and nothing was streamed, the
fallbacks run in the seed's order: an answer from the tool result (a plain generation
that sees it), then a chat reply without tools, then an error in the caller's
dialect. Once answer text is out, it is the answer: a JSON object that then breaks
off ends the reply there, and a backend error mid-answer ends it with a stream error.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import orjson
from json_repair import repair_json

from llmbridge.core.accumulate import Accumulator, accumulate
from llmbridge.core.errors import LLMBridgeError, ToolDecisionError
from llmbridge.core.events import (
    PartDelta,
    ResponseEnd,
    ResponseStart,
    StreamError,
    StreamEvent,
    TextDelta,
)
from llmbridge.core.ids import new_id
from llmbridge.core.messages import (
    Message,
    TextPart,
    ToolDefinition,
    ToolResultPart,
)
from llmbridge.core.parts_manager import PartsManager
from llmbridge.core.request import ChatRequest, ResponseFormat
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.features.json_stream import FieldStreamer
from llmbridge.features.tool_healing import heal_arguments
from llmbridge.features.transcript import render_message

__all__ = [
    "DECISION_SYSTEM_PROMPT",
    "HISTORY_MESSAGES",
    "Decision",
    "decision_prompt",
    "emulate_tool_calls",
    "parse_decision",
]

log = logging.getLogger("llmbridge.tool_emulation")

HISTORY_MESSAGES = 10
"""How many recent messages the decision sees (the seed's limit)."""

DECISION_SYSTEM_PROMPT = "You are an intelligent assistant. Respond with valid JSON only."

Action = Literal["tool_call", "answer", "chat"]


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    tool_name: str = ""
    arguments: dict[str, Any] | None = None
    content: str = ""


# -- the prompt ---------------------------------------------------------------------

_RULES = """\
Decide how to respond. Rules:
1. If the last message is a tool result, check whether it answers the user's request.
   If it does, respond with ANSWER, explaining it in natural language. Tool results show
   the state when the tool ran; if that is not enough, call another tool.
2. ACTION requests (turn on/off, set, adjust, control, create, run) -> TOOL_CALL.
   INFORMATION queries (is X on?, what is the status?, get data) -> TOOL_CALL with a
   query tool (Get*, Query*, Fetch*, *Status, *Context).
   CONVERSATION (greetings, thanks, general chat) -> CHAT.
3. Never assume the state of a device or system from the conversation history: it
   may have changed since. When in doubt, call a query tool.
4. If the user repeats a request that was already carried out, EXECUTE IT AGAIN.
5. Extract argument values from the user's request and the system context, with the
   exact types the tool's parameters declare (arrays as ["a", "b"]).
6. Reply in the language of the user's last message.

CRITICAL: Respond with VALID JSON ONLY. No markdown, no explanations, no code blocks.
Choose exactly ONE of:
{"action": "tool_call", "tool_name": "<exact tool name from the list>", "arguments": {...}}
{"action": "answer", "content": "<natural language answer based on the tool result>"}
{"action": "chat", "content": "<natural conversational reply>"}

Examples:
User: "hello" -> {"action": "chat", "content": "Hello! How can I help you?"}
"""


def _format_parameters(schema: dict[str, Any]) -> str:
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return "      (none)"
    required = set(schema.get("required") or [])
    lines = []
    for name, spec in properties.items():
        spec = spec if isinstance(spec, dict) else {}
        kind = spec.get("type", "any")
        need = "required" if name in required else "optional"
        extra = f": {spec['description']}" if spec.get("description") else ""
        if isinstance(spec.get("enum"), list):
            extra += f" (one of {', '.join(map(str, spec['enum']))})"
        lines.append(f"      - {name} ({kind}, {need}){extra}")
    return "\n".join(lines)


def format_tools(tools: Sequence[ToolDefinition]) -> str:
    """The seed's ``formatToolsForLLM``: a numbered list with each tool's parameters."""
    return "\n\n".join(
        f"{i}. {tool.name}\n   Description: {tool.description or '-'}\n   Parameters:\n"
        + _format_parameters(tool.input_schema)
        for i, tool in enumerate(tools, 1)
    )


def _render(message: Message, names: dict[str, str]) -> str:
    label = "tool" if message.role == "tool" else message.role
    return f"{label}: {render_message(message, names)}"


def decision_prompt(request: ChatRequest) -> str:
    """The single prompt: system context, recent history, tools, rules, the request."""
    system = "\n".join(m.text for m in request.messages if m.role == "system" and m.text)
    conversation = [m for m in request.messages if m.role != "system"]
    names: dict[str, str] = {}
    for message in conversation[:-HISTORY_MESSAGES]:
        _render(message, names)  # learn tool-call names for results further on
    history = "\n".join(_render(m, names) for m in conversation[-HISTORY_MESSAGES:])
    sections = []
    if system:
        sections.append(f"System context:\n{system}")
    sections.append(f"Recent conversation (oldest first):\n{history or '(empty)'}")
    sections.append(f"Available tools:\n{format_tools(request.tools)}")
    sections.append(_RULES + _tool_call_example(request.tools))
    return "\n\n".join(sections)


_PLACEHOLDERS: dict[str, Any] = {"integer": 1, "number": 1.5, "boolean": True, "array": []}


def _tool_call_example(tools: Sequence[ToolDefinition]) -> str:
    """A tool-call example built from a tool actually offered: small models copy the
    example's tool name, so an invented one ("turn on the light") would be copied."""
    if not tools:
        return ""
    tool = tools[0]
    properties = tool.input_schema.get("properties")
    arguments = {
        name: _PLACEHOLDERS.get(str(spec.get("type")) if isinstance(spec, dict) else "", "...")
        for name, spec in (properties.items() if isinstance(properties, dict) else [])
    }
    example = {"action": "tool_call", "tool_name": tool.name, "arguments": arguments}
    return f"A request for {tool.name} -> {orjson.dumps(example).decode()}\n"


# -- parsing ------------------------------------------------------------------------

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


def _json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text``, tolerating fences, prose and small damage."""
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1)
    start = text.find("{")
    if start < 0:
        return None
    end = text.rfind("}")
    candidate = text[start : end + 1] if end > start else text[start:]
    try:
        value = orjson.loads(candidate)
    except orjson.JSONDecodeError:
        try:
            value = orjson.loads(repair_json(candidate))
        except (orjson.JSONDecodeError, ValueError, TypeError):
            return None
    return value if isinstance(value, dict) else None


def parse_decision(text: str, tools: Sequence[ToolDefinition]) -> Decision | None:
    """The decision in a model's reply, or ``None`` when there is none to read."""
    data = _json_object(text)
    if data is None:
        return None
    action = data.get("action")
    if action == "tool_call":
        name = data.get("tool_name") or data.get("name")
        offered = {t.name: t for t in tools}
        if not isinstance(name, str) or name not in offered:
            log.warning("the model chose a tool that was not offered: %r", name)
            return Decision("tool_call", tool_name="unknown", arguments={})
        raw = data.get("arguments", data.get("parameters"))
        healed = heal_arguments(raw, offered[name].input_schema, tool_name=name)
        return Decision("tool_call", tool_name=name, arguments=healed.arguments)
    if action in ("answer", "chat"):
        content = data.get("content")
        if isinstance(content, str) and content.strip():
            return Decision(action, content=content)
    return None


# -- the emulated reply -------------------------------------------------------------


async def _generate(backend_chat: Any, request: ChatRequest) -> ChatResponse:
    response: ChatResponse = await accumulate(backend_chat(request))
    return response


def _without_tools(request: ChatRequest, extra_instruction: str | None) -> ChatRequest:
    messages = request.messages
    if extra_instruction:
        messages = (*messages, Message("user", (TextPart(extra_instruction),)))
    return replace(request, tools=(), tool_choice=None, stream=False, messages=messages)


class _Reply:
    """The emulated reply's events. ``ResponseStart`` goes out with the first part
    event, so a failure or a fallback decided before any output still comes before the
    first event (the gateway renders an error before it as an HTTP error status)."""

    __slots__ = ("_held", "_start", "parts")

    def __init__(self, model: str, created: float) -> None:
        self._start: ResponseStart | None = ResponseStart(
            id=new_id("emulated-"), model=model, created=created, input_tokens=None
        )
        self.parts = PartsManager()
        self._held = ""

    @property
    def started(self) -> bool:
        return self._start is None

    def stream_text(self, piece: str) -> list[StreamEvent]:
        """A piece of an answer streamed from the decision as it is written."""
        piece = self._held + piece
        if not self.started and not piece.strip():
            # Whitespace alone is no answer yet: were it all, the fallbacks must still
            # be free to run, as ``parse_decision`` rejects a blank ``content``.
            self._held = piece
            return []
        self._held = ""
        return self._open() + self.parts.text(piece)

    def decision(self, decision: Decision, usage: Usage) -> list[StreamEvent]:
        """The whole reply for a decision known at once: one complete tool call, or the
        answer's text."""
        if decision.action == "tool_call":
            events = self._open() + self.parts.tool_call(
                decision.tool_name, decision.arguments or {}
            )
            return events + self.end(StopReason.TOOL_USE, usage)
        events = self._open() + self.parts.text(decision.content)
        return events + self.end(StopReason.END_TURN, usage)

    def end(self, stop: StopReason, usage: Usage) -> list[StreamEvent]:
        return [*self._open(), *self.parts.finish(), ResponseEnd(stop_reason=stop, usage=usage)]

    def fail(self, error: LLMBridgeError) -> list[StreamEvent]:
        return [*self._open(), *self.parts.finish(), StreamError(error)]

    def _open(self) -> list[StreamEvent]:
        if self._start is None:
            return []
        start, self._start = self._start, None
        return [start]


async def emulate_tool_calls(backend_chat: Any, request: ChatRequest) -> AsyncIterator[StreamEvent]:
    """The reply to ``request`` (which offers tools) from a backend without tools.

    ``backend_chat`` is the backend's ``chat`` method. The decision is read as it is
    generated: the text of a ``chat`` or ``answer`` streams as the backend writes it,
    while a tool call is held back and emitted as one complete call at the end.
    Closing this stream closes the backend's.
    """
    decision_request = replace(
        request,
        messages=(
            Message("system", (TextPart(DECISION_SYSTEM_PROMPT),)),
            Message("user", (TextPart(decision_prompt(request)),)),
        ),
        tools=(),
        tool_choice=None,
        stream=False,
        # A JSON-only reply; backends that can constrain output (the embedded model's
        # grammar, Ollama's format) then cannot produce anything else.
        response_format=ResponseFormat(type="json"),
        thinking=None,
    )
    reply = _Reply(request.model, time.time())
    content = FieldStreamer("content", gate="action", accept=("answer", "chat"))
    generation = Accumulator()
    failure: LLMBridgeError | None = None
    events = backend_chat(decision_request)
    try:
        async for event in events:
            generation.add(event)  # raises the error of an in-band StreamError
            if isinstance(event, PartDelta) and isinstance(event.delta, TextDelta):
                for out in reply.stream_text(content.feed(event.delta.text)):
                    yield out
        decided: ChatResponse | None = generation.response()
    except LLMBridgeError as exc:
        log.warning("the tool decision failed: %s", exc.message)
        decided, failure = None, exc
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()
    if reply.started:
        for out in _end_streamed(reply, content, failure, generation.usage):
            yield out
        return
    decision = await _decide(backend_chat, request, decided)
    for out in reply.decision(decision, decided.usage if decided is not None else Usage()):
        yield out


def _end_streamed(
    reply: _Reply, content: FieldStreamer, failure: LLMBridgeError | None, usage: Usage
) -> list[StreamEvent]:
    """The end of a reply whose answer was (partly) streamed. No fallback can replace
    text already sent, so what was streamed is the answer, even when the JSON then
    broke off or healing would read ``content`` differently."""
    if failure is not None and not content.field_complete:
        return reply.fail(failure)
    if not content.done:
        log.warning("the streamed answer's JSON is broken or unterminated")
    return reply.end(StopReason.END_TURN, usage)


async def _decide(
    backend_chat: Any, request: ChatRequest, decided: ChatResponse | None
) -> Decision:
    """The decision in the generated reply (``None`` when it failed), else a fallback's."""
    if decided is not None:
        decision = parse_decision(decided.message.text, request.tools)
        if decision is not None:
            return decision
        log.warning("no decision in the model's reply: %.200r", decided.message.text)
    return await _fallback(backend_chat, request)


async def _fallback(backend_chat: Any, request: ChatRequest) -> Decision:
    """The seed's fallbacks: an answer from the tool result, then a plain chat reply."""
    last = request.messages[-1] if request.messages else None
    has_result = last is not None and any(isinstance(p, ToolResultPart) for p in last.parts)
    attempts = []
    if has_result:
        attempts.append(
            _without_tools(
                request,
                "Answer my request using the tool result above, in my language.",
            )
        )
    attempts.append(_without_tools(request, None))
    for attempt in attempts:
        try:
            reply = await _generate(backend_chat, attempt)
        except LLMBridgeError as exc:
            log.warning("tool-emulation fallback failed: %s", exc.message)
            continue
        if reply.message.text.strip():
            return Decision("answer" if has_result else "chat", content=reply.message.text)
    raise ToolDecisionError(
        "the model gave no usable reply (no tool decision, and no answer in the fallbacks)"
    )

"""Tool calling for models that have none: one JSON decision (seed 000).

A backend model without native tools (the embedded model; an Ollama model whose
capabilities lack ``tools``; OpenCode) is asked a single question: given the
tools, the system context and the recent conversation, reply with one JSON object,
either ``tool_call`` (a tool name and arguments), ``answer`` (an answer from a tool
result) or ``chat`` (a conversational reply). The decision becomes the neutral events
of a real tool call or of a text reply, so every dialect's client gets real tool calls.

The decision is read while it is generated (``json_stream.FieldStreamer``): the text
of an ``answer`` or ``chat`` streams to the client as the backend writes it, decoded
from its JSON string; a tool call is held back and emitted once, complete.
``ResponseStart`` waits for the first output, so an unusable decision can still end
in a fallback, and a failure before any output in an error before the first event
(an HTTP error status, not an in-stream error).

Parsing tolerates code fences and prose around the JSON. A tool name spelt like one
offered but for case and separators (``GetTime``) is that tool; a tool that was never
offered becomes ``unknown`` (the seed's rule, so the client can say so). Arguments are
healed and checked against the tool's schema with the same code as every other tool
call (``tool_healing``); keys the tool does not declare are dropped unless its schema
allows others.

An agent loop must end. When the conversation ends with tool
results, the decision prompt shows them as the results of the current request
(features/tool_turn.py), and a decided call with the same name and arguments as one
whose result is already in (since the user's last message) is never emitted again:
like an unreadable decision, it goes to the fallbacks, which answer from the result.

The fallbacks run in seed 000's order, when nothing was streamed:

1. the model's decision (above);
2. rule-based selection (features/rule_selection.py): a deterministic match of the
   user's words against the tools, only when unambiguous, and not while tool results
   of the current request are in (they are answered, not re-requested);
3. an answer from the tool results: a plain generation, without tools, that sees
   them, when there are any; otherwise
4. a plain chat reply, without tools;
5. a short apology in the user's language (features/apology.py);
6. an error: a backend failure is never replaced by a fallback. It is raised with its
   own class (unreachable 503, timeout 504, context overflow 400, the backend's 4xx),
   so the gateway's retries, route fallbacks and circuit breaker act on emulated
   requests as on any other, and the client sees what it would without tools.

So a request with emulated tools costs at most two model calls: the decision, and one
fallback generation (3 or 4). The fallback generations see the current date and time,
as seed 000's conversation prompt does; so does the decision.

Once answer text is out, it is the answer: a JSON object that then breaks off ends
the reply there, and a backend error mid-answer ends it with a stream error.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

import orjson
from json_repair import repair_json

from llmbridge.core.accumulate import Accumulator, accumulate
from llmbridge.core.errors import BackendProtocolError, InvalidRequestError, LLMBridgeError
from llmbridge.core.events import (
    PartDelta,
    ResponseEnd,
    ResponseStart,
    StreamError,
    StreamEvent,
    TextDelta,
)
from llmbridge.core.ids import new_id
from llmbridge.core.messages import Message, TextPart, ToolDefinition, ToolResultPart
from llmbridge.core.parts_manager import PartsManager
from llmbridge.core.request import ChatRequest, ResponseFormat
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.core.stream import ChatFn, EventStream
from llmbridge.core.tracing import REQUEST_TRACE, TraceSpan, usage_attributes
from llmbridge.features.apology import apology
from llmbridge.features.json_stream import FieldStreamer
from llmbridge.features.rule_selection import select_tool
from llmbridge.features.token_count import count_text_tokens
from llmbridge.features.tool_healing import heal_arguments
from llmbridge.features.tool_turn import Turn, current_turn
from llmbridge.features.transcript import render_message

__all__ = [
    "ANSWER_FROM_RESULTS",
    "DECISION_SYSTEM_PROMPT",
    "HISTORY_MESSAGES",
    "Decision",
    "date_line",
    "decision_prompt",
    "emulate_tool_calls",
    "parse_decision",
]

log = logging.getLogger("llmbridge.tool_emulation")

HISTORY_MESSAGES = 10
"""How many recent messages the decision sees (the seed's limit)."""

DECISION_SYSTEM_PROMPT = "You are an intelligent assistant. Respond with valid JSON only."

ANSWER_FROM_RESULTS = "Answer my request using the tool results above, in my language."
"""The instruction of the answer-from-the-tool-results fallback."""

Clock = Callable[[], datetime]

_SORTED = orjson.OPT_SORT_KEYS
"""Arguments in prompts have sorted keys: the same call must read the same, whatever
order a client sends its keys in (a local model's prefix cache keeps hitting)."""


def _local_now() -> datetime:
    return datetime.now().astimezone()


def date_line(now: datetime) -> str:
    """Seed 000's ``Current date/time`` line (the weekday helps a model reason)."""
    return f"Current date/time: {now:%A}, {now.isoformat(timespec='seconds')}"


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
1. If the conversation ends with tool results, first check whether they answer the
   user's request. If they do, respond with ANSWER, explaining them in natural
   language. Tool results show the state when the tool ran; if they do not fully
   answer, call another tool, but never again a call whose result is already there.
2. Check the user's intent:
   ACTION requests (turn on/off, set, adjust, control, create, run) -> TOOL_CALL.
   INFORMATION queries (is X on?, what is the status?, get data) -> TOOL_CALL with a
   query tool (Get*, Query*, Fetch*, *Status, *Context).
   CONVERSATION (greetings, thanks, general chat) -> CHAT.
   When in doubt between action and conversation: prefer CHAT.
3. Never assume the state of a device or system from the conversation history: it
   may have changed since (a physical switch, an automation, another app). When in
   doubt about the current state, call a query tool.
4. If the user repeats a request that was already carried out, EXECUTE IT AGAIN.
5. Extract argument values from the user's request and the system context, with the
   exact types the tool's parameters declare (arrays as ["a", "b"]).
6. Reply in the language of the user's last message.

CRITICAL: Respond with VALID JSON ONLY. No markdown, no explanations, no code blocks.
Choose exactly ONE of:
{"action": "tool_call", "tool_name": "<exact tool name from the list>", "arguments": {...}}
{"action": "answer", "content": "<natural language answer based on the tool results>"}
{"action": "chat", "content": "<natural conversational reply>"}

Examples, from a smart home whose tools are CallService and GetLiveContext (call only
the tools listed above):
User: "hello" -> {"action": "chat", "content": "Hello! How can I help you?"}
User: "開客廳的燈" -> {"action": "tool_call", "tool_name": "CallService", \
"arguments": {"domain": "light", "service": "turn_on", "entity_id": "light.living_room"}}
User: "客廳的燈是開著的嗎" -> {"action": "tool_call", "tool_name": "GetLiveContext", \
"arguments": {}}
After GetLiveContext returned "客廳燈: 開啟" -> {"action": "answer", \
"content": "是的，客廳的燈現在是開著的"}
User: "開燈" (the light was turned on 5 minutes ago, in the history) -> \
{"action": "tool_call", "tool_name": "CallService", \
"arguments": {"domain": "light", "service": "turn_on"}} (it may have been turned off since)
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
    # A message of tool results is labelled ``tool`` whatever its role: Anthropic
    # sends results as ``user`` messages, which a model would read as the user talking.
    results_only = bool(message.parts) and all(
        isinstance(part, ToolResultPart) for part in message.parts
    )
    label = "tool" if message.role == "tool" or results_only else message.role
    return f"{label}: {render_message(message, names)}"


def _results_section(turn: Turn) -> str:
    lines = []
    for call in turn.answered:
        arguments = (
            ""
            if call.arguments is None
            else " " + orjson.dumps(call.arguments, option=_SORTED).decode()
        )
        verb = "failed with" if call.is_error else "returned"
        lines.append(f"- {call.name}{arguments} {verb}: {call.result}")
    return (
        "Tool results for the current request (these calls are done: never call them "
        "again with the same arguments; if the results answer the request, respond with "
        "ANSWER):\n" + "\n".join(lines)
    )


def history_start(count: int) -> int:
    """Where the decision's view of a conversation of ``count`` messages begins: at
    least the seed's last ``HISTORY_MESSAGES``, from a multiple of ``HISTORY_MESSAGES``.
    A window that slid by one message per turn would change the prompt right after
    its stable head on every turn; this one moves once every ``HISTORY_MESSAGES``
    messages, so between those moves each prompt begins with the whole previous one."""
    if count <= HISTORY_MESSAGES:
        return 0
    return (count - HISTORY_MESSAGES) // HISTORY_MESSAGES * HISTORY_MESSAGES


def decision_prompt(request: ChatRequest, *, now: datetime | None = None) -> str:
    """The single prompt. What stays the same for a session comes first (system
    context, tools, rules and examples), then what grows (the conversation), and last
    what is new in this request (the user's request, the results already in for it,
    the date and time): llama.cpp and Ollama reuse the longest unchanged prefix of the
    previous prompt, so a turn costs only its new tail."""
    system = "\n".join(m.text for m in request.messages if m.role == "system" and m.text)
    conversation = [m for m in request.messages if m.role != "system"]
    turn = current_turn(conversation)
    start = history_start(len(conversation))
    names: dict[str, str] = {}
    for message in conversation[:start]:
        _render(message, names)  # learn tool-call names for results further on
    history = "\n".join(_render(m, names) for m in conversation[start:])
    sections = []
    if system:
        sections.append(f"System context:\n{system}")
    sections.append(f"Available tools:\n{format_tools(request.tools)}")
    sections.append(_RULES + _tool_call_example(request.tools))
    sections.append(f"Conversation (oldest first):\n{history or '(empty)'}")
    if turn.request:
        sections.append(f"Current user request:\n{turn.request}")
    if turn.answered:
        sections.append(_results_section(turn))
    sections.append(date_line(now or _local_now()))
    return "\n\n".join(sections)


def decision_schema(request: ChatRequest) -> dict[str, Any]:
    """The decision's JSON schema, for backends that hold a reply to one
    (``Capabilities.structured_output``): ``action`` first (the answer streams once it
    is known), a ``tool_name`` from the offered tools, and nothing after the object,
    so generation ends with the JSON instead of running on to ``max_tokens``.

    A tool without parameters whose result is already in for this request is left out
    of the names: calling it again could only repeat that call (which would go to the
    fallbacks); with no tool left, the decision can only answer or chat."""
    turn = current_turn([m for m in request.messages if m.role != "system"])
    repeated = {
        call.name
        for call in turn.answered
        if not call.arguments and _takes_no_arguments(request.tools, call.name)
    }
    names = [tool.name for tool in request.tools if tool.name not in repeated]
    texts = ["answer", "chat"] if turn.answered else ["chat"]
    choice = request.tool_choice
    # A choice that forces a call (features/tool_choice.py keeps it for the emulation)
    # leaves only the call, until this turn has a result: then the model may answer.
    forced = choice is not None and choice.mode in ("any", "tool") and not turn.answered
    reply = {
        "type": "object",
        "properties": {"action": {"enum": texts}, "content": {"type": "string"}},
        "required": ["action", "content"],
        "additionalProperties": False,
    }
    if not names:
        return reply
    call = {
        "type": "object",
        "properties": {
            "action": {"const": "tool_call"},
            "tool_name": {"enum": names},
            "arguments": {"type": "object"},
        },
        "required": ["action", "tool_name", "arguments"],
        "additionalProperties": False,
    }
    return call if forced else {"anyOf": [call, reply]}


def _takes_no_arguments(tools: Sequence[ToolDefinition], name: str) -> bool:
    """Whether every call of tool ``name`` is the same call: it declares no parameters
    and allows no others (``_allowed`` then drops whatever the model invents)."""
    for tool in tools:
        if tool.name == name:
            properties = tool.input_schema.get("properties")
            others = tool.input_schema.get("additionalProperties")
            return isinstance(properties, dict) and not properties and others in (None, False)
    return False


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
        tool = _offered(data.get("tool_name") or data.get("name"), tools)
        if tool is None:
            return Decision("tool_call", tool_name="unknown", arguments={})
        raw = data.get("arguments", data.get("parameters"))
        if raw is not None and not isinstance(raw, str | dict):
            # A list or a number where the object goes (a small model's, repaired):
            # healed as the JSON text it is, so it becomes {"raw": ...}, not a 500.
            raw = orjson.dumps(raw).decode()
        healed = heal_arguments(raw, tool.input_schema, tool_name=tool.name)
        arguments = _allowed(healed.arguments, tool.input_schema)
        return Decision("tool_call", tool_name=tool.name, arguments=arguments)
    if action in ("answer", "chat"):
        content = data.get("content")
        if isinstance(content, str) and content.strip():
            return Decision(action, content=content)
    return None


def _spelling(name: str) -> str:
    return re.sub(r"[^0-9a-z]", "", name.casefold())


def _offered(name: object, tools: Sequence[ToolDefinition]) -> ToolDefinition | None:
    """The offered tool ``name`` means. A name spelt differently only in case and
    separators (``GetTime`` for ``get_time``: small models restyle names after the
    prompt's examples) means the one tool spelt that way."""
    if not isinstance(name, str):
        log.warning("the model's tool call names no tool: %r", name)
        return None
    for tool in tools:
        if tool.name == name:
            return tool
    alike = [tool for tool in tools if _spelling(tool.name) == _spelling(name)]
    if len(alike) == 1:
        log.info("the model wrote tool %r for %r", name, alike[0].name)
        return alike[0]
    log.warning("the model chose a tool that was not offered: %r", name)
    return None


def _allowed(arguments: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` without the keys the tool does not declare. Small models invent
    parameters, often copied from the prompt's examples, that the client would reject
    or misread. A schema that declares no ``properties``, or allows others
    (``additionalProperties`` true or a schema), keeps every key. (``false`` alone
    cannot be the test: the Ollama client drops ``additionalProperties`` from tools.)"""
    properties = schema.get("properties")
    if not isinstance(properties, dict) or schema.get("additionalProperties") not in (None, False):
        return arguments
    extra = [key for key in arguments if key not in properties]
    if extra:
        log.info("dropped arguments the tool does not take: %s", ", ".join(extra))
    return {key: value for key, value in arguments.items() if key in properties}


# -- the emulated reply -------------------------------------------------------------


async def _generate(backend_chat: ChatFn, request: ChatRequest) -> ChatResponse:
    """The answer's model call (a fallback after the decision): a span of its own when
    the request is traced (core/tracing.py)."""
    span = _step("answer", request.model)
    try:
        # aclosing: an error event stops the accumulation; the backend's call ends now.
        async with aclosing(backend_chat(request)) as events:
            generated = await accumulate(events)
    except LLMBridgeError as exc:
        _ended(span, failure=exc)
        raise
    _ended(span, generated.usage)
    return generated


def _step(name: str, model: str) -> TraceSpan | None:
    """A span for one of emulation's model calls (``decision``, ``answer``), as a child
    of the traced request's backend attempt; ``None`` when tracing is off."""
    trace = REQUEST_TRACE.get()
    return None if trace is None else trace.step(name, model)


def _ended(
    span: TraceSpan | None,
    usage: Usage | None = None,
    *,
    failure: LLMBridgeError | None = None,
    streamed: bool | None = None,
) -> None:
    """End ``span`` (when tracing) with the call's usage and failure."""
    if span is None:
        return
    if usage is not None:
        span.set({**usage_attributes(usage), "llmbridge.tool_emulation.streamed": streamed})
    if failure is not None:
        span.fail(failure)
    span.end()


def _conversation_request(
    request: ChatRequest, extra_instruction: str | None, now: datetime
) -> ChatRequest:
    """The request as a plain conversation, without tools, with seed 000's
    ``buildConversationPrompt`` date and time. The seed puts them at the end of the
    system prompt; here they come after the conversation (and the extra instruction,
    when there is one), as a last system message, since a line that changes every
    second at the head of the prompt would make the model re-read all of it."""
    messages = list(request.messages)
    if extra_instruction:
        messages.append(Message("user", (TextPart(extra_instruction),)))
    messages.append(Message("system", (TextPart(date_line(now)),)))
    return replace(request, tools=(), tool_choice=None, stream=False, messages=tuple(messages))


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


DECISION_PARAM = "tool_decision"
"""``ResponseFormat.param`` of the decision's schema: a backend that cannot use the
schema names it in its error, and the decision is then asked for as plain JSON."""


def _decision_request(request: ChatRequest, now: datetime, *, schema: bool) -> ChatRequest:
    fmt = (
        ResponseFormat(
            type="json_schema",
            schema=decision_schema(request),
            name="decision",
            param=DECISION_PARAM,
        )
        if schema
        else ResponseFormat(type="json")
    )
    return replace(
        request,
        messages=(
            Message("system", (TextPart(DECISION_SYSTEM_PROMPT),)),
            Message("user", (TextPart(decision_prompt(request, now=now)),)),
        ),
        tools=(),
        tool_choice=None,
        stream=False,
        # JSON only: a backend that holds a reply to a schema (the embedded model's
        # grammar, Ollama's format) can write nothing else, and stops where the object
        # ends; others are asked for JSON and cut off there (``emulate_tool_calls``).
        response_format=fmt,
        thinking=None,
    )


async def emulate_tool_calls(
    backend_chat: ChatFn,
    request: ChatRequest,
    *,
    clock: Clock = _local_now,
    structured: bool = False,
) -> AsyncGenerator[StreamEvent, None]:
    """The reply to ``request`` (which offers tools) from a backend without tools.

    ``backend_chat`` is the backend's ``chat`` method (or anything else that streams a
    request's reply); ``structured``: the backend holds a reply to a JSON schema
    (``Capabilities.structured_output``), so the decision is asked for with its
    schema. The decision is read as it is generated: the text of a ``chat`` or
    ``answer`` streams as the backend writes it, while a tool call is held back and
    emitted as one complete call at the end. Once the decision's JSON object has
    closed, anything more the backend writes is not waited for: the backend's stream
    is closed (a model in plain JSON mode may add whitespace up to ``max_tokens``). A
    backend error before any output is raised as it is (module docstring). Closing
    this stream closes the backend's.
    """
    now = clock()
    reply = _Reply(request.model, time.time())
    content = FieldStreamer("content", gate="action", accept=("answer", "chat"))
    generation = Accumulator()
    written: list[str] = []
    cut = False
    failure: LLMBridgeError | None = None
    decision_request = _decision_request(request, now, schema=structured)
    span = _step("decision", request.model)  # a span when the request is traced
    try:
        try:
            events = backend_chat(decision_request)
            first = await anext(events)
        except InvalidRequestError as exc:
            if not structured or exc.param != DECISION_PARAM:
                raise
            # The backend could not use the schema (a grammar llama.cpp refused):
            # plain JSON mode still works, without the early end.
            log.warning("the decision's schema was refused (%s): asking for JSON", exc.message)
            decision_request = _decision_request(request, now, schema=False)
            events = backend_chat(decision_request)
            first = await anext(events)
        async with aclosing(events):
            async for event in _chain(first, events):
                generation.add(event)  # raises the error of an in-band StreamError
                if isinstance(event, PartDelta) and isinstance(event.delta, TextDelta):
                    if content.done:
                        cut = True  # the object is complete; more is only trailing text
                        break
                    written.append(event.delta.text)
                    for out in reply.stream_text(content.feed(event.delta.text)):
                        yield out
        if cut:
            usage, text = generation.usage, "".join(written)
        else:
            decided = generation.response()
            usage, text = decided.usage, decided.message.text
    except StopAsyncIteration:
        raise BackendProtocolError("the backend ended its reply without sending anything") from None
    except LLMBridgeError as exc:
        if not reply.started:
            # The backend's own error, not "no usable reply", so the
            # gateway retries, falls back or trips the breaker as without tools.
            log.info("the tool decision failed: %s", exc.message)
            _ended(span, failure=exc)
            raise
        failure = exc
        usage, text = generation.usage, "".join(written)
    if cut and usage.output_tokens is None:
        usage = replace(usage, output_tokens=count_text_tokens(text))
    _ended(span, usage, failure=failure, streamed=reply.started)
    if reply.started:
        for out in _end_streamed(reply, content, failure, usage):
            yield out
        return
    fmt = decision_request.response_format
    held = decision_request if fmt is not None and fmt.type == "json_schema" else None
    decision, spent = await _decide(backend_chat, request, text, now, held)
    for out in reply.decision(decision, _added(usage, spent)):
        yield out


async def _chain(first: StreamEvent, rest: EventStream) -> AsyncGenerator[StreamEvent, None]:
    yield first
    async for event in rest:
        yield event


def _added(first: Usage, second: Usage | None) -> Usage:
    """The usage of both model calls, when a fallback generation ran: the tokens were
    spent on this request."""
    return first if second is None else first.plus(second)


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
    backend_chat: ChatFn,
    request: ChatRequest,
    text: str,
    now: datetime,
    decision_request: ChatRequest | None,
) -> tuple[Decision, Usage | None]:
    """The decision in the model's reply ``text`` when it is usable, else a fallback's;
    with the usage of the fallback's generation, when one ran. ``decision_request``:
    the decision's request when it was asked with its schema (``_fallback``)."""
    turn = current_turn([m for m in request.messages if m.role != "system"])
    decision = parse_decision(text, request.tools)
    if decision is None:
        log.warning("no decision in the model's reply: %.200r", text)
    elif _usable(decision, turn):
        return decision, None
    return await _fallback(backend_chat, request, turn, now, decision_request)


def _usable(decision: Decision, turn: Turn) -> bool:
    """Whether a decision may go to the client: never a call already answered."""
    if decision.action != "tool_call" or not turn.answered:
        return True
    if decision.tool_name == "unknown":
        # The request already led to calls, and their results are in: an invented tool
        # now is no request for something else, only a failure to read the results.
        log.warning("the model chose a tool that was not offered, after tool results")
        return False
    if turn.answered_call(decision.tool_name, decision.arguments) is not None:
        log.info(
            "the model repeated %s with the same arguments after its result: answering "
            "from the result instead",
            decision.tool_name,
        )
        return False
    return True


async def _fallback(
    backend_chat: ChatFn,
    request: ChatRequest,
    turn: Turn,
    now: datetime,
    decision_request: ChatRequest | None = None,
) -> tuple[Decision, Usage | None]:
    """Seed 000's fallbacks after the decision (module docstring, steps 2 to 5). A
    backend error in the generation is raised as it is (step 6).

    ``decision_request``: the decision as it was asked with its schema. The answer
    (or chat reply) is then asked with the very same prompt and a schema that allows
    only that action, rather than as a conversation: the prompt is the one the backend
    has just read, so its prefix cache serves all of it, and the next turn's decision
    still finds its own prefix there (a conversation prompt in between would have
    replaced it)."""
    if not turn.answered:
        tool = select_tool(turn.request, request.tools)
        if tool is not None:
            log.info("rule-based tool selection: %s", tool.name)
            return Decision("tool_call", tool_name=tool.name, arguments={}), None
    action: Action = "answer" if turn.answered else "chat"
    if decision_request is not None:
        generated = await _generate(backend_chat, _only(decision_request, action))
        decision = parse_decision(generated.message.text, request.tools)
        if decision is not None and decision.action == action:
            return decision, generated.usage
        log.warning("no %s in the model's reply: %.200r", action, generated.message.text)
        return Decision("chat", content=apology(turn.request)), generated.usage
    instruction = ANSWER_FROM_RESULTS if turn.answered else None
    generated = await _generate(backend_chat, _conversation_request(request, instruction, now))
    text = generated.message.text
    if text.strip():
        return Decision(action, content=text), generated.usage
    log.warning("no usable reply from the model: apologising in the user's language")
    return Decision("chat", content=apology(turn.request)), generated.usage


def _only(decision_request: ChatRequest, action: Action) -> ChatRequest:
    """The decision's request with a schema that allows only ``action``'s text."""
    schema = {
        "type": "object",
        "properties": {"action": {"const": action}, "content": {"type": "string"}},
        "required": ["action", "content"],
        "additionalProperties": False,
    }
    fmt = ResponseFormat(type="json_schema", schema=schema, name=action, param=DECISION_PARAM)
    return replace(decision_request, response_format=fmt)

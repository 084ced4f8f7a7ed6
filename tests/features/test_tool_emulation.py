"""features/tool_emulation.py: the decision prompt, reading the model's decision, and
the emulated reply's stream; features/json_stream.py: the incremental reader that
lets an answer stream while its JSON is still being written."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.accumulate import accumulate_sync
from llmbridge.core.errors import (
    BackendHTTPError,
    BackendProtocolError,
    BackendTimeoutError,
    BackendUnavailableError,
    ContextLengthError,
    InvalidRequestError,
    LLMBridgeError,
)
from llmbridge.core.events import (
    PartDelta,
    PartEnd,
    PartStart,
    ResponseEnd,
    ResponseStart,
    StreamError,
    StreamEvent,
    TextDelta,
)
from llmbridge.core.messages import (
    Message,
    TextPart,
    ToolCallPart,
    ToolChoice,
    ToolDefinition,
    ToolResultPart,
)
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import StopReason
from llmbridge.features.apology import APOLOGIES
from llmbridge.features.json_stream import FieldStreamer
from llmbridge.features.tool_choice import apply_tool_choice
from llmbridge.features.tool_emulation import (
    DECISION_PARAM,
    HISTORY_MESSAGES,
    decision_prompt,
    decision_schema,
    emulate_tool_calls,
    parse_decision,
)

LIGHT = ToolDefinition(
    "CallService",
    "Call a Home Assistant service",
    {
        "type": "object",
        "properties": {
            "domain": {"type": "string", "description": "e.g. light"},
            "service": {"type": "string", "enum": ["turn_on", "turn_off"]},
            "brightness": {"type": "integer"},
        },
        "required": ["domain", "service"],
    },
)
TOOLS = (LIGHT, ToolDefinition("GetLiveContext", "Current device states"))


@pytest.mark.parametrize(
    "reply",
    [
        '{"action": "tool_call", "tool_name": "CallService", '
        '"arguments": {"domain": "light", "service": "turn_on"}}',
        '```json\n{"action": "tool_call", "tool_name": "CallService", '
        '"arguments": {"domain": "light", "service": "turn_on"}}\n```',
        'Sure! Here is my decision: {"action": "tool_call", "tool_name": "CallService", '
        '"arguments": {"domain": "light", "service": "turn_on"}} Hope that helps.',
        "{'action': 'tool_call', 'tool_name': 'CallService', "
        "'arguments': {'domain': 'light', 'service': 'turn_on'}",  # quotes, missing brace
        '{"action": "tool_call", "tool_name": "CallService", '
        '"arguments": "{\\"domain\\": \\"light\\", \\"service\\": \\"turn_on\\"}"}',
    ],
    ids=["plain", "fenced", "prose-around", "damaged", "arguments-as-string"],
)
def test_tool_calls_are_read_however_they_are_wrapped(reply: str) -> None:
    decision = parse_decision(reply, TOOLS)
    assert decision is not None
    assert (decision.action, decision.tool_name) == ("tool_call", "CallService")
    assert decision.arguments == {"domain": "light", "service": "turn_on"}


@pytest.mark.parametrize("arguments", ["[]", '["Oslo"]', "7", "true"])
def test_arguments_that_are_not_an_object_are_healed_not_a_crash(arguments: str) -> None:
    reply = f'{{"action": "tool_call", "tool_name": "CallService", "arguments": {arguments}}}'
    decision = parse_decision(reply, TOOLS)
    assert decision is not None and decision.tool_name == "CallService"
    assert isinstance(decision.arguments, dict)


def test_a_tool_never_offered_becomes_unknown() -> None:
    decision = parse_decision('{"action": "tool_call", "tool_name": "LaunchRockets"}', TOOLS)
    assert decision is not None and decision.tool_name == "unknown"


@pytest.mark.parametrize(
    ("reply", "action", "content"),
    [
        ('{"action": "chat", "content": "Hallo! Wie kann ich helfen?"}', "chat", "Hallo!"),
        ('{"action": "answer", "content": "客廳的燈是開著的"}', "answer", "客廳的燈"),
    ],
)
def test_answers_and_chat(reply: str, action: str, content: str) -> None:
    decision = parse_decision(reply, TOOLS)
    assert decision is not None and decision.action == action
    assert decision.content.startswith(content)


@pytest.mark.parametrize(
    "reply",
    ["no json here", '{"action": "dance"}', '{"action": "chat", "content": ""}', "[1, 2]"],
)
def test_no_decision(reply: str) -> None:
    assert parse_decision(reply, TOOLS) is None


def test_prompt_has_context_history_tools_rules_and_a_grounded_example() -> None:
    history = [Message("user", (TextPart(f"message {i}"),)) for i in range(25)]
    request = ChatRequest(
        model="m",
        messages=(
            Message("system", (TextPart("You control a smart home."),)),
            *history,
            Message("assistant", (ToolCallPart("c1", "GetLiveContext", {}),)),
            Message("tool", (ToolResultPart("c1", "kitchen light: on"),)),
        ),
        tools=TOOLS,
    )
    prompt = decision_prompt(request)
    assert "You control a smart home." in prompt
    # at least the last 10 messages, from a multiple of 10: of 27, those from the 11th
    assert "message 24" in prompt and "message 9" not in prompt and "message 10" in prompt
    assert HISTORY_MESSAGES == 10
    assert "[GetLiveContext result: kitchen light: on]" in prompt
    assert "1. CallService" in prompt and "service (string, required)" in prompt
    assert "(one of turn_on, turn_off)" in prompt
    assert "EXECUTE IT AGAIN" in prompt and "Never assume the state" in prompt
    assert "language of the user's last message" in prompt
    assert '"tool_name":"CallService"' in prompt  # the example names a real tool


def _turns(count: int) -> list[Message]:
    """A conversation of ``count`` messages: requests, calls, results and answers."""
    messages: list[Message] = []
    for number in itertools.count():
        for message in (
            Message("user", (TextPart(f"request {number}"),)),
            Message("assistant", (ToolCallPart(f"c{number}", "GetLiveContext", {"a": 1}),)),
            Message("tool", (ToolResultPart(f"c{number}", f"state {number}"),)),
            Message("assistant", (TextPart(f"answer {number}"),)),
        ):
            if len(messages) == count:
                return messages
            messages.append(message)
    raise AssertionError("unreachable")


def test_one_turn_later_the_prompt_begins_with_the_previous_one() -> None:
    """The model server (llama.cpp) reuses the longest unchanged prefix, so the stable parts come
    first and each turn's prompt holds the previous one up to its per-turn tail (the
    current request, its results, the date and time), except when the history window
    moves on, once every HISTORY_MESSAGES messages."""
    system = Message("system", (TextPart("You control a smart home."),))
    moved = 0
    for count in range(1, 40):
        before = decision_prompt(
            ChatRequest(model="m", messages=(system, *_turns(count)), tools=TOOLS)
        )
        after = decision_prompt(
            ChatRequest(model="m", messages=(system, *_turns(count + 1)), tools=TOOLS)
        )
        head = before.split("\n\nCurrent user request:")[0].split("\n\nTool results")[0]
        head = head.split("\n\nCurrent date/time:")[0]
        if not after.startswith(head):
            moved += 1
            # the window moved: still the system context, tools, rules and examples
            assert after.startswith(before.split("Conversation (oldest first):")[0])
        assert before.index("Available tools:") < before.index("Conversation (oldest first):")
        assert before.rindex("Current date/time:") > before.index("Conversation (oldest first):")
    assert moved == 3  # at 20, 30 and 40 messages


def test_the_decision_schema_names_the_offered_tools() -> None:
    schema = decision_schema(ASK)
    call, reply = schema["anyOf"]
    assert call["properties"]["tool_name"] == {"enum": ["CallService", "GetLiveContext"]}
    assert list(call["properties"]) == ["action", "tool_name", "arguments"]  # action first
    assert reply["properties"]["action"] == {"enum": ["chat"]}  # no results to answer from
    assert call["additionalProperties"] is reply["additionalProperties"] is False


def test_a_tool_without_parameters_answered_in_this_turn_is_no_longer_offered() -> None:
    clock = ToolDefinition(
        "get_time", "", {"type": "object", "properties": {}, "additionalProperties": False}
    )
    request = ChatRequest(
        model="m",
        messages=(
            Message("user", (TextPart("What time is it?"),)),
            Message("assistant", (ToolCallPart("c1", "get_time", {}),)),
            Message("tool", (ToolResultPart("c1", "14:30"),)),
        ),
        tools=(clock,),
    )
    schema = decision_schema(request)
    assert "anyOf" not in schema  # nothing left to call: answer or chat
    assert schema["properties"]["action"] == {"enum": ["answer", "chat"]}
    with_weather = decision_schema(replace(request, tools=(clock, *TOOLS)))
    names = with_weather["anyOf"][0]["properties"]["tool_name"]["enum"]
    assert names == ["CallService", "GetLiveContext"]


def test_a_forcing_tool_choice_leaves_the_schema_only_the_call_until_a_result_is_in() -> None:
    forced = replace(ASK, tool_choice=ToolChoice("any"))
    schema = decision_schema(forced)
    assert "anyOf" not in schema and schema["properties"]["action"] == {"const": "tool_call"}
    # Kept by the choice's rewrite when the emulation decides, dropped for the backend.
    kept = apply_tool_choice(forced, native=False, emulated=True)
    assert kept.tool_choice == ToolChoice("any") and decision_schema(kept) == schema
    assert apply_tool_choice(forced, native=False).tool_choice is None
    answered = replace(
        forced,
        messages=(
            *forced.messages,
            Message("assistant", (ToolCallPart("c1", "GetLiveContext", {}),)),
            Message("tool", (ToolResultPart("c1", "all lights off"),)),
        ),
    )
    assert "anyOf" in decision_schema(answered)  # with its result in, it may answer


async def test_a_structured_backend_gets_the_schema_and_others_plain_json() -> None:
    backend = toolless(
        Script(text=[decision("chat", "Hi!")]), Script(text=[decision("chat", "Hi")])
    )
    plain = [e async for e in emulate_tool_calls(backend.chat, ASK)]
    schema = [e async for e in emulate_tool_calls(backend.chat, ASK, structured=True)]
    assert accumulate_sync(plain).message.text == "Hi!"
    assert accumulate_sync(schema).message.text == "Hi"
    first, second = (r.response_format for r in backend.requests)
    assert first is not None and first.type == "json"
    assert second is not None and second.type == "json_schema"
    assert second.schema == decision_schema(ASK) and second.param == DECISION_PARAM


async def test_a_refused_schema_asks_again_for_plain_json() -> None:
    refused = InvalidRequestError("tool_decision: the grammar is refused", param=DECISION_PARAM)
    backend = toolless(Script(fail_before=refused), Script(text=[decision("chat", "Hi")]))
    events = [e async for e in emulate_tool_calls(backend.chat, ASK, structured=True)]
    assert accumulate_sync(events).message.text == "Hi"
    assert [r.response_format.type for r in backend.requests if r.response_format] == [
        "json_schema",
        "json",
    ]
    # any other invalid request is the caller's, raised as it is
    other = InvalidRequestError("bad temperature", param="temperature")
    with pytest.raises(InvalidRequestError):
        _ = [e async for e in emulate_tool_calls(toolless(Script(fail_before=other)).chat, ASK)]


@pytest.mark.parametrize("action", ["chat", "tool_call"])
async def test_generation_is_not_waited_for_once_the_json_has_closed(action: str) -> None:
    """A model in plain JSON mode may write whitespace after the object up to its
    ``max_tokens``: the reply ends with the object, and the backend's stream is closed."""
    reply = (
        decision("chat", "Hello there")
        if action == "chat"
        else json.dumps({"action": "tool_call", "tool_name": "GetLiveContext", "arguments": {}})
    )
    backend = toolless(Script(text=[*chunks(reply, 7), "\n", "\n", " ", "\n"] + ["\n"] * 500))
    events = await emulate(backend)
    assert_well_formed(events)
    response = accumulate_sync(events)
    if action == "chat":
        assert response.message.text == "Hello there"
    else:
        assert [c.name for c in response.message.tool_calls] == ["GetLiveContext"]
    assert backend.cancelled == 1 and backend.completed == 0
    end = events[-1]
    assert isinstance(end, ResponseEnd) and end.usage.output_tokens  # estimated from the text
    assert len(backend.requests) == 1


async def test_with_a_schema_the_fallback_answer_reuses_the_decision_prompt() -> None:
    """A repeated call goes to the fallback answer; on a backend that holds a schema it is
    asked with the decision's own prompt (cached whole) and a schema allowing only an
    answer, so the next turn's prefix is still in the cache."""
    request = ChatRequest(
        model="m",
        messages=(
            Message("user", (TextPart("Is the light on?"),)),
            Message("assistant", (ToolCallPart("c1", "GetLiveContext", {}),)),
            Message("tool", (ToolResultPart("c1", "kitchen light: on"),)),
        ),
        tools=TOOLS,
    )
    repeat = json.dumps({"action": "tool_call", "tool_name": "GetLiveContext", "arguments": {}})
    backend = toolless(Script(text=[repeat]), Script(text=[decision("answer", "Yes, it is on.")]))
    events = [e async for e in emulate_tool_calls(backend.chat, request, structured=True)]
    assert accumulate_sync(events).message.text == "Yes, it is on."
    asked, fallback = backend.requests
    assert fallback.messages == asked.messages  # the same prompt, to the byte
    assert fallback.response_format is not None and fallback.response_format.schema
    assert fallback.response_format.schema["properties"]["action"] == {"const": "answer"}
    # a reply that is no answer still ends in the apology, never in a repeated call
    backend = toolless(Script(text=[repeat]), Script(text=[repeat]))
    events = [e async for e in emulate_tool_calls(backend.chat, request, structured=True)]
    reply = accumulate_sync(events)
    assert not reply.message.tool_calls and reply.message.text in APOLOGIES.values()


async def test_the_fallback_conversation_ends_with_the_date_not_starts_with_it() -> None:
    system = Message("system", (TextPart("You control a smart home."),))
    request = replace(ASK, messages=(system, *ASK.messages))
    backend = toolless(Script(text=["no json"]), Script(text=["Hello!"]))
    events = await emulate(backend, request)
    assert accumulate_sync(events).message.text == "Hello!"
    fallback = backend.requests[1]
    assert fallback.messages[0] == system  # the stable head, unchanged
    assert fallback.messages[-1].role == "system"
    assert fallback.messages[-1].text.startswith("Current date/time: ")


# -- the emulated reply's stream -----------------------------------------------------

ASK = ChatRequest(model="m", messages=(Message("user", (TextPart("Hi"),)),), tools=TOOLS)
TOOL_DECISION = (
    '{"action": "tool_call", "tool_name": "CallService", '
    '"arguments": {"domain": "light", "service": "turn_on", "note": "say \\"hi\\""}}'
)


def chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def decision(action: str, content: str, *, ensure_ascii: bool = True) -> str:
    return json.dumps({"action": action, "content": content}, ensure_ascii=ensure_ascii)


def toolless(*scripts: Script) -> ScriptedBackend:
    backend = ScriptedBackend(capabilities=frozenset({"completion"}))
    backend.enqueue(*scripts)
    return backend


async def emulate(backend: ScriptedBackend, request: ChatRequest = ASK) -> list[StreamEvent]:
    return [event async for event in emulate_tool_calls(backend.chat, request)]


def text_deltas(events: Sequence[StreamEvent]) -> list[str]:
    return [
        e.delta.text for e in events if isinstance(e, PartDelta) and isinstance(e.delta, TextDelta)
    ]


def assert_well_formed(events: Sequence[StreamEvent]) -> None:
    assert isinstance(events[0], ResponseStart)
    assert sum(isinstance(e, ResponseStart) for e in events) == 1
    assert isinstance(events[-1], ResponseEnd | StreamError)
    starts = [e.index for e in events if isinstance(e, PartStart)]
    ends = [e.index for e in events if isinstance(e, PartEnd)]
    assert starts == ends == list(range(len(starts)))


@pytest.mark.parametrize("action", ["chat", "answer"])
async def test_answer_text_streams_in_several_deltas(action: str) -> None:
    content = "Hello! The kitchen light is on, and the hall light is off."
    backend = toolless(Script(text=chunks(decision(action, content), 3)))
    events = await emulate(backend)
    assert_well_formed(events)
    deltas = text_deltas(events)
    assert len(deltas) > 1
    assert "".join(deltas) == content
    end = events[-1]
    assert isinstance(end, ResponseEnd) and end.stop_reason is StopReason.END_TURN
    assert end.usage.output_tokens  # the decision generation's usage, as before
    reply = accumulate_sync(events)
    assert reply.message.text == content and not reply.message.tool_calls
    assert len(backend.requests) == 1  # no fallback generation


@pytest.mark.parametrize("ensure_ascii", [True, False])
@pytest.mark.parametrize("size", [1, 2, 5])
async def test_escapes_and_surrogate_pairs_split_across_chunks(
    ensure_ascii: bool, size: int
) -> None:
    content = 'Line 1\nSaid "hi" \\ a/b\t😀 é 客廳 \x01 end'
    reply = decision("chat", content, ensure_ascii=ensure_ascii)
    events = await emulate(toolless(Script(text=chunks(reply, size))))
    assert len(text_deltas(events)) > 1
    assert "".join(text_deltas(events)) == content


async def test_an_escape_and_a_surrogate_pair_split_between_two_chunks() -> None:
    script = ['{"action": "chat", "content": "a\\', "nb\\/ \\ud83d", "\\ude00 c\\u00", 'e9"}']
    events = await emulate(toolless(Script(text=script)))
    # each piece comes out as soon as it is whole: a half escape waits for its rest
    assert text_deltas(events) == ["a", "\nb/ ", "😀 c", "é"]


async def test_content_before_action_is_held_until_the_action_is_known() -> None:
    content = "Bonjour à vous, comment puis-je aider ?"
    reply = json.dumps({"content": content, "action": "chat"}, ensure_ascii=False)
    events = await emulate(toolless(Script(text=chunks(reply, 4))))
    assert_well_formed(events)
    assert "".join(text_deltas(events)) == content
    # and when the action turns out to be a tool call, the held text is never sent
    reply = json.dumps(
        {"content": "never shown", "action": "tool_call", "tool_name": "GetLiveContext"}
    )
    events = await emulate(toolless(Script(text=chunks(reply, 4))))
    assert text_deltas(events) == []
    assert [p.name for p in accumulate_sync(events).message.tool_calls] == ["GetLiveContext"]


async def test_fenced_json_streams() -> None:
    script = ["```json\n", '{"action": "chat", ', '"content": "Hi ', "there", '!"}', "\n```"]
    events = await emulate(toolless(Script(text=script)))
    assert_well_formed(events)
    assert text_deltas(events) == ["Hi ", "there", "!"]


@pytest.mark.parametrize("size", [1, 4, 1000])
async def test_a_tool_call_never_streams_text_and_is_one_complete_call(size: int) -> None:
    events = await emulate(toolless(Script(text=chunks(TOOL_DECISION, size))))
    assert_well_formed(events)
    assert text_deltas(events) == []
    calls = [e.part for e in events if isinstance(e, PartEnd)]
    assert len(calls) == 1 and isinstance(calls[0], ToolCallPart)
    assert calls[0].name == "CallService"
    assert calls[0].arguments["service"] == "turn_on"
    end = events[-1]
    assert isinstance(end, ResponseEnd) and end.stop_reason is StopReason.TOOL_USE


async def test_a_tool_never_offered_still_becomes_unknown_when_streamed() -> None:
    reply = '{"action": "tool_call", "tool_name": "LaunchRockets", "arguments": {}}'
    events = await emulate(toolless(Script(text=chunks(reply, 3))))
    assert [c.name for c in accumulate_sync(events).message.tool_calls] == ["unknown"]


@pytest.mark.parametrize(
    "script",
    [
        ['{"action": "chat", "content": "Half an ', "answer"],  # unterminated
        ['{"action": "chat", "content": "Half an ', 'answer", "action": chat'],  # broken
        ['{"action": "chat", "content": "Half an ', "answer\\x and more"],  # bad escape
    ],
    ids=["unterminated", "broken-after", "bad-escape"],
)
async def test_broken_json_after_streaming_began_ends_with_the_streamed_text(
    script: list[str],
) -> None:
    backend = toolless(Script(text=script))
    events = await emulate(backend)
    assert_well_formed(events)
    assert "".join(text_deltas(events)) == "Half an answer"
    end = events[-1]
    assert isinstance(end, ResponseEnd) and end.stop_reason is StopReason.END_TURN
    assert len(backend.requests) == 1  # no fallback ran


async def test_unterminated_json_keeps_exactly_the_streamed_text() -> None:
    events = await emulate(
        toolless(Script(text=['{"action": "chat", "content": "Half an ', "ans"]))
    )
    assert "".join(text_deltas(events)) == "Half an ans"
    assert accumulate_sync(events).message.text == "Half an ans"


async def test_the_streamed_text_wins_over_a_different_parse() -> None:
    # A JSON reader keeps the last of duplicate keys; the stream already sent the first.
    reply = '{"action": "chat", "content": "first", "content": "second"}'
    assert (parse_decision(reply, TOOLS) or pytest.fail()).content == "second"
    events = await emulate(toolless(Script(text=chunks(reply, 5))))
    assert "".join(text_deltas(events)) == "first"
    assert accumulate_sync(events).message.text == "first"


async def test_a_backend_error_mid_answer_ends_the_stream_with_that_error() -> None:
    script = Script(text=['{"action": "chat", ', '"content": "Half', ' an"}'], fail_after=2)
    events = await emulate(toolless(script))
    assert_well_formed(events)
    assert text_deltas(events) == ["Half"]
    assert isinstance(events[-1], StreamError)
    # once the answer's string has closed, a late error does not spoil it
    script = Script(text=['{"action": "chat", "content": "Whole"', "}"], fail_after=1)
    events = await emulate(toolless(script))
    assert text_deltas(events) == ["Whole"]
    assert isinstance(events[-1], ResponseEnd)


async def test_the_first_event_waits_for_the_first_answer_character_only() -> None:
    backend = toolless(Script(text=chunks(decision("chat", "One two three four five six"), 4)))
    played: list[StreamEvent] = []

    async def chat(request: ChatRequest) -> AsyncIterator[StreamEvent]:
        async for event in backend.chat(request):
            played.append(event)
            yield event

    stream = emulate_tool_calls(chat, ASK)
    first = await anext(stream)
    assert isinstance(first, ResponseStart)
    # the chunk that brought the answer's first character, and nothing further
    assert "".join(text_deltas(played)) == '{"action": "chat", "content": "O'
    assert not any(isinstance(e, ResponseEnd) for e in played)
    assert isinstance(await anext(stream), PartStart)
    delta = await anext(stream)
    assert isinstance(delta, PartDelta) and isinstance(delta.delta, TextDelta)
    rest = [event async for event in stream]
    assert "".join([delta.delta.text, *text_deltas(rest)]) == "One two three four five six"


@pytest.mark.parametrize(
    "error",
    [
        BackendUnavailableError("refused"),
        BackendTimeoutError("no answer within 5 s"),
        ContextLengthError("the prompt is 9000 tokens but the context window is 8192"),
        BackendHTTPError("bad key", backend_status=401),
        BackendProtocolError("garbage"),
    ],
    ids=lambda e: type(e).__name__,
)
async def test_a_backend_error_before_any_output_is_raised_with_its_class(
    error: LLMBridgeError,
) -> None:
    # No fallback swallows it, so the gateway's retries, route
    # fallbacks and breaker act, and the client sees the status it would without tools.
    backend = toolless(Script(fail_before=error), Script(text=["never asked"]))
    seen: list[StreamEvent] = []
    with pytest.raises(type(error)) as info:
        async for event in emulate_tool_calls(backend.chat, ASK):
            seen.append(event)
    assert info.value is error and seen == []
    assert len(backend.requests) == 1
    # an in-band error before any output, likewise
    backend = toolless(Script(text=["{", "}"], fail_after=1, in_band=True, fail_error=error))
    with pytest.raises(type(error)):
        await emulate(backend)
    assert len(backend.requests) == 1


async def test_a_backend_error_in_the_fallback_generation_is_raised_too() -> None:
    backend = toolless(Script(text=["not json"]), Script(fail_before=BackendTimeoutError("slow")))
    with pytest.raises(BackendTimeoutError):
        await emulate(backend)


async def test_blank_content_is_no_answer_and_the_fallback_runs() -> None:
    backend = toolless(Script(text=chunks(decision("chat", "   "), 2)), Script(text=["Hello."]))
    events = await emulate(backend)
    assert_well_formed(events)
    assert "".join(text_deltas(events)) == "Hello."
    # leading whitespace of a real answer is kept, not dropped
    events = await emulate(toolless(Script(text=chunks(decision("chat", "  Hi"), 2))))
    assert "".join(text_deltas(events)) == "  Hi"


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ("Hi", APOLOGIES["en"]),
        ("客廳的燈是開著的嗎", APOLOGIES["zh-Hant"]),
        ("Salut, il fait quel temps ?", APOLOGIES["fr"]),
    ],
)
async def test_when_the_model_gives_nothing_usable_the_user_gets_an_apology(
    words: str, expected: str
) -> None:
    """Seed 000's last resort: a sentence in the user's language, not an error."""
    request = ChatRequest(model="m", messages=(Message("user", (TextPart(words),)),), tools=TOOLS)
    backend = toolless(Script(text=chunks("not json at all", 3)), Script(text=["   "]))
    events = await emulate(backend, request)
    assert_well_formed(events)
    reply = accumulate_sync(events)
    assert reply.message.text == expected and not reply.message.tool_calls
    assert reply.stop_reason is StopReason.END_TURN
    assert len(backend.requests) == 2


async def test_closing_the_reply_closes_the_backend_stream() -> None:
    backend = toolless(Script(text=chunks(decision("chat", "One two three four"), 3)))
    stream = emulate_tool_calls(backend.chat, ASK)
    assert isinstance(await anext(stream), ResponseStart)
    await stream.aclose()
    assert backend.cancelled == 1


# -- the incremental reader ----------------------------------------------------------


def streamed(text: str, cuts: Sequence[int]) -> tuple[str, FieldStreamer]:
    reader = FieldStreamer("content", gate="action", accept=("chat", "answer"))
    bounds = [0, *sorted(cuts), len(text)]
    out = "".join(reader.feed(text[a:b]) for a, b in itertools.pairwise(bounds))
    return out, reader


@settings(max_examples=300, deadline=None)
@given(
    content=st.text(),
    ensure_ascii=st.booleans(),
    content_first=st.booleans(),
    prefix=st.sampled_from(["", "```json\n", "Sure! ", "  \n"]),
    data=st.data(),
)
def test_the_reader_gives_back_exactly_the_content(
    content: str, ensure_ascii: bool, content_first: bool, prefix: str, data: st.DataObject
) -> None:
    value: dict[str, Any] = {"action": "chat", "content": content}
    if content_first:
        value = {"content": content, "extra": [1, {"x": "}"}], "action": "chat"}
    text = prefix + json.dumps(value, ensure_ascii=ensure_ascii)
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(text)), max_size=30))
    out, reader = streamed(text, cuts)
    assert out == content
    assert reader.done and reader.field_complete and reader.streaming


@settings(max_examples=100, deadline=None)
@given(content=st.text(), data=st.data())
def test_the_reader_gives_nothing_for_a_tool_call(content: str, data: st.DataObject) -> None:
    text = json.dumps({"content": content, "action": "tool_call", "arguments": {"a": content}})
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(text)), max_size=30))
    out, reader = streamed(text, cuts)
    assert out == "" and reader.done and not reader.streaming


def test_the_reader_skips_nested_values_and_scalars() -> None:
    text = (
        '{"arguments": {"a": "}\\"", "b": [1, {"c": "]"}]}, "n": -1.5e3, "t": true, '
        '"z": null, "action": "answer", "content": "ok"}'
    )
    out, reader = streamed(text, range(len(text)))
    assert out == "ok" and reader.done and not reader.failed


@pytest.mark.parametrize(
    ("text", "out"),
    [
        ("{'action': 'chat', 'content': 'hi'}", ""),  # not JSON: left to the tolerant parse
        ('{"action": "chat", "content": "hi', "hi"),  # unterminated
        ('{"action": "chat", "content": "a\\q"}', "a"),  # bad escape
        ('{"action": "chat", "content": "a\\u12x4"}', "a"),  # bad \\u escape
    ],
)
def test_the_reader_stops_where_the_json_breaks(text: str, out: str) -> None:
    assert streamed(text, [])[0] == out
    assert streamed(text, range(len(text)))[0] == out


@pytest.mark.parametrize(
    ("escaped", "decoded"),
    [
        ("\\ud83d", "\ufffd"),  # a high surrogate alone
        ("\\ude00x", "\ufffdx"),  # a low surrogate alone
        ("\\ud83d\\n", "\ufffd\n"),  # a high surrogate followed by another escape
        ("\\ud83d\\ud83d\\ude00", "\ufffd😀"),  # two highs, then the low of the second
    ],
)
def test_lone_surrogates_become_replacement_characters(escaped: str, decoded: str) -> None:
    text = '{"action": "chat", "content": "' + escaped + '"}'
    assert streamed(text, range(len(text)))[0] == decoded


def test_a_call_reads_the_same_whatever_order_its_keys_come_in() -> None:
    def prompt(arguments: dict[str, Any]) -> str:
        call = Message("assistant", (ToolCallPart("c1", "CallService", arguments),))
        result = Message("tool", (ToolResultPart("c1", "done"),))
        ask = Message("user", (TextPart("Turn on the kitchen light"),))
        request = ChatRequest(model="m", messages=(ask, call, result), tools=TOOLS)
        return decision_prompt(request, now=datetime(2026, 11, 28, 9, 0, tzinfo=UTC))

    assert prompt({"domain": "light", "service": "turn_on"}) == prompt(
        {"service": "turn_on", "domain": "light"}
    )

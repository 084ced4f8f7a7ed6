"""heal_arguments and heal_tool_calls: every shape of broken arguments models are seen to send."""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import AsyncIterator, Iterable
from typing import Any

import orjson
import pytest

from llmbridge.core.events import (
    PartEnd,
    ResponseEnd,
    ResponseStart,
    StreamEvent,
)
from llmbridge.core.messages import TextPart, ToolCallPart, ToolDefinition
from llmbridge.core.parts_manager import PartsManager
from llmbridge.core.response import StopReason
from llmbridge.features import tool_healing
from llmbridge.features.tool_healing import HealResult, heal_arguments, heal_tool_calls

LOGGER = "llmbridge.tool_healing"
COMMAND = {"command": "ls"}
NOT_AN_OBJECT = "the arguments are not a JSON object and could not be repaired into one"
SHELL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
    "required": ["command"],
}


def encoded(value: object) -> str:
    return orjson.dumps(value).decode()


# -- heal_arguments -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected", "repaired"),
    [
        pytest.param(COMMAND, COMMAND, False, id="object"),
        pytest.param('{"command":"ls"}', COMMAND, False, id="json-string"),
        pytest.param('{\\"command\\":\\"ls\\"}', COMMAND, True, id="doubly-escaped"),
        pytest.param(encoded('{"command":"ls"}'), COMMAND, True, id="double-encoded"),
        pytest.param(encoded(encoded('{"command":"ls"}')), COMMAND, True, id="triple-encoded"),
        pytest.param(encoded('{\\"command\\":\\"ls\\"}'), COMMAND, True, id="encoded-and-escaped"),
        pytest.param('{"a": 1}}}', {"a": 1}, True, id="trailing-braces"),
        pytest.param('{"a":1} trailing text', {"a": 1}, True, id="trailing-text"),
        pytest.param('{"a": 1} {"b": 2}', {"a": 1}, True, id="second-object-is-garbage"),
        pytest.param("{'a': 'b'}", {"a": "b"}, True, id="single-quotes"),
        pytest.param("{a: 1}", {"a": 1}, True, id="unquoted-keys"),
        pytest.param('{"a": "b"', {"a": "b"}, True, id="truncated"),
        pytest.param('{"a": [1, 2', {"a": [1, 2]}, True, id="truncated-array"),
        pytest.param('```json\n{"a": 1}\n```', {"a": 1}, True, id="code-fence"),
        pytest.param(encoded("{'a': 1}"), {"a": 1}, True, id="encoded-single-quotes"),
        pytest.param("{", {}, True, id="lone-brace"),
        pytest.param("", {}, False, id="empty"),
        pytest.param("  \n", {}, False, id="blank"),
        pytest.param(None, {}, False, id="none"),
        pytest.param("null", {}, True, id="json-null"),
        pytest.param('{"path": "C:\\\\dir", "n": "é"}', {"path": "C:\\dir", "n": "é"}, False),
    ],
)
def test_arguments_become_an_object(
    raw: str | dict[str, Any] | None, expected: dict[str, Any], repaired: bool
) -> None:
    assert heal_arguments(raw, None) == HealResult(expected, repaired, None)


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param("list the files please", id="prose"),
        pytest.param("use {} here", id="prose-with-empty-braces"),
        pytest.param("hello {world}", id="prose-with-braces"),
        pytest.param('"just a string"', id="json-string-of-prose"),
        pytest.param("[1, 2]", id="array"),
        pytest.param('[{"a": 1}, {"b": 2}]', id="array-of-objects"),
        pytest.param("42", id="number"),
    ],
)
def test_what_cannot_be_repaired_is_kept_raw(raw: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        result = heal_arguments(raw, SHELL_SCHEMA, tool_name="shell")
    assert result == HealResult({"raw": raw}, False, NOT_AN_OBJECT)
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert "'shell'" in record.getMessage() and repr(raw) in record.getMessage()


def test_a_repair_is_logged_at_info(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        heal_arguments("{'a': 1}", None, tool_name="t")
        heal_arguments('{"a": 1}', None, tool_name="t")  # nothing to repair: no log
    [record] = caplog.records
    assert record.levelno == logging.INFO
    assert record.getMessage() == "tool 't': repaired arguments (fixed almost-JSON): \"{'a': 1}\""


def test_logs_never_carry_a_whole_huge_payload(caplog: pytest.LogCaptureFixture) -> None:
    raw = "x" * 100_000
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert heal_arguments(raw, None).arguments == {"raw": raw}
    message = caplog.records[0].getMessage()
    assert len(message) < 400 and "(100000 characters)" in message


def test_a_huge_repairable_payload_is_kept_whole() -> None:
    value = "y" * 50_000
    assert heal_arguments("{'big': '" + value + "'}", None).arguments == {"big": value}


# -- validation -------------------------------------------------------------------------


def test_valid_arguments_pass_the_schema_silently(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        result = heal_arguments({"command": "ls", "timeout": 5}, SHELL_SCHEMA, tool_name="shell")
    assert result == HealResult({"command": "ls", "timeout": 5}, False, None)
    assert caplog.records == []


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ({"command": "ls", "timeout": "5"}, "$.timeout: '5' is not of type 'integer'"),
        ({"timeout": 5}, "arguments: 'command' is a required property"),
        ("{'timeout': 5}", "arguments: 'command' is a required property"),
    ],
)
def test_invalid_arguments_are_kept_and_reported(
    raw: str | dict[str, Any], problem: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        result = heal_arguments(raw, SHELL_SCHEMA, tool_name="shell")
    expected = raw if isinstance(raw, dict) else {"timeout": 5}
    assert result.arguments == expected
    assert result.problem == problem
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (f"tool 'shell': arguments do not match its schema: {problem!r}")


def test_draft_7_schemas_are_honoured() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "definitions": {"n": {"type": "integer"}},
        "properties": {"n": {"$ref": "#/definitions/n"}},
    }
    assert heal_arguments({"n": 1}, schema).problem is None
    assert heal_arguments({"n": "1"}, schema).problem == "$.n: '1' is not of type 'integer'"


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param({"type": 12}, id="bad-type"),
        pytest.param({"type": "object", "required": "command"}, id="bad-required"),
        pytest.param({"$schema": "https://example.test/unknown", "type": "nope"}, id="unknown"),
    ],
)
def test_an_invalid_schema_is_logged_and_skipped(
    schema: dict[str, Any], caplog: pytest.LogCaptureFixture, request: pytest.FixtureRequest
) -> None:
    name = f"broken-{request.node.callspec.id}"  # validators are cached per schema and tool
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        result = heal_arguments("{'command': 'ls'}", schema, tool_name=name)
    assert result == HealResult(COMMAND, True, None)
    [record] = caplog.records
    assert record.getMessage().startswith(f"tool {name!r}: its input schema is invalid")


def test_a_remote_ref_is_never_fetched(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def no_fetch(*args: object, **kwargs: object) -> None:
        raise AssertionError("the schema's $ref was fetched")

    monkeypatch.setattr(urllib.request, "urlopen", no_fetch)
    schema = {"properties": {"command": {"$ref": "http://127.0.0.1:9/evil.json"}}}
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        result = heal_arguments(COMMAND, schema, tool_name="remote")
    assert result == HealResult(COMMAND, False, None)
    assert "validation failed to run" in caplog.records[0].getMessage()


# -- heal_tool_calls ------------------------------------------------------------------


async def aiter(events: Iterable[StreamEvent]) -> AsyncIterator[StreamEvent]:
    for event in events:
        yield event


async def heal(
    events: list[StreamEvent], tools: tuple[ToolDefinition, ...] = ()
) -> list[StreamEvent]:
    return [event async for event in heal_tool_calls(aiter(events), tools)]


def stream(build: list[list[StreamEvent]]) -> list[StreamEvent]:
    events: list[StreamEvent] = [ResponseStart(id="r", model="m", created=1.0)]
    for chunk in build:
        events.extend(chunk)
    events.append(ResponseEnd(StopReason.TOOL_USE))
    return events


def tool_parts(events: list[StreamEvent]) -> list[ToolCallPart]:
    return [e.part for e in events if isinstance(e, PartEnd) and isinstance(e.part, ToolCallPart)]


async def test_tool_calls_are_healed_and_everything_else_passes_through() -> None:
    parts = PartsManager()
    events = stream(
        [
            parts.thinking("Let me look."),
            parts.text("Listing."),
            # OpenAI-style fragments of doubly-escaped arguments
            parts.tool_call_fragment(0, "call_1", "shell", '{\\"comm'),
            parts.tool_call_fragment(0, None, None, 'and\\":\\"ls\\"}'),
            # a second call claiming index 0 too, single-quoted
            parts.tool_call_fragment(0, "call_2", "shell", "{'command': 'pwd'}"),
            # Ollama-style whole calls: an object, and prose
            parts.tool_call("shell", {"command": "whoami"}, "call_3"),
            parts.tool_call("shell", "run ls for me", "call_4"),
            parts.finish(),
        ]
    )
    assert [p.raw_arguments is not None for p in tool_parts(events)] == [True, True, False, True]

    healed = await heal(events, (ToolDefinition("shell", input_schema=SHELL_SCHEMA),))

    assert len(healed) == len(events)
    for before, after in zip(events, healed, strict=True):
        if not (isinstance(before, PartEnd) and isinstance(before.part, ToolCallPart)):
            assert after is before
    assert tool_parts(healed) == [
        ToolCallPart("call_1", "shell", {"command": "ls"}),
        ToolCallPart("call_2", "shell", {"command": "pwd"}),
        ToolCallPart("call_3", "shell", {"command": "whoami"}),
        ToolCallPart("call_4", "shell", {"raw": "run ls for me"}),
    ]
    # A call that needed nothing keeps its very event.
    kept_parts = [p for p in tool_parts(events) if p.id == "call_3"]
    [kept] = [i for i, e in enumerate(events) if isinstance(e, PartEnd) and e.part in kept_parts]
    assert healed[kept] is events[kept]


async def test_a_stream_without_tool_calls_is_the_same_objects() -> None:
    parts = PartsManager()
    events = stream([parts.text("Hello"), parts.text(" world"), parts.finish()])
    healed = await heal(events, (ToolDefinition("shell", input_schema=SHELL_SCHEMA),))
    assert all(a is b for a, b in zip(events, healed, strict=True))
    assert isinstance(healed[-2], PartEnd) and healed[-2].part == TextPart("Hello world")


async def test_a_valid_call_keeps_its_event(caplog: pytest.LogCaptureFixture) -> None:
    parts = PartsManager()
    events = stream([parts.tool_call("shell", {"command": "ls"}, "c"), parts.finish()])
    with caplog.at_level(logging.INFO, logger=LOGGER):
        healed = await heal(events, (ToolDefinition("shell", input_schema=SHELL_SCHEMA),))
    assert all(a is b for a, b in zip(events, healed, strict=True))
    assert caplog.records == []


async def test_calls_are_validated_against_their_own_tool(
    caplog: pytest.LogCaptureFixture,
) -> None:
    parts = PartsManager()
    events = stream(
        [
            parts.tool_call("shell", {"timeout": 1}, "c1"),
            parts.tool_call("other", {"timeout": "x"}, "c2"),
            parts.tool_call("made_up", {"anything": 1}, "c3"),
            parts.finish(),
        ]
    )
    tools = (
        ToolDefinition("shell", input_schema=SHELL_SCHEMA),
        ToolDefinition("other", input_schema={"type": "object"}),
    )
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        healed = await heal(events, tools)
    assert [p.arguments for p in tool_parts(healed)] == [
        {"timeout": 1},
        {"timeout": "x"},
        {"anything": 1},
    ]
    assert [r.getMessage() for r in caplog.records] == [
        "tool 'shell': arguments do not match its schema: "
        "\"arguments: 'command' is a required property\"",
        "tool call to 'made_up', which is not among the request's tools",
    ]


async def test_without_tools_calls_are_healed_but_not_validated(
    caplog: pytest.LogCaptureFixture,
) -> None:
    parts = PartsManager()
    events = stream([parts.tool_call("shell", "{'x': 1}", "c"), parts.finish()])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        healed = await heal(events)
    assert tool_parts(healed) == [ToolCallPart("c", "shell", {"x": 1})]
    assert caplog.records == []


async def test_closing_the_healed_stream_closes_the_source() -> None:
    closed: list[bool] = []

    async def source() -> AsyncIterator[StreamEvent]:
        try:
            yield ResponseStart(id="r", model="m", created=1.0)
            yield ResponseEnd(StopReason.END_TURN)
        finally:
            closed.append(True)

    healed = heal_tool_calls(source(), ())
    assert isinstance(await anext(healed), ResponseStart)
    await healed.aclose()
    assert closed == [True]


def test_a_lone_surrogate_does_not_crash() -> None:
    assert heal_arguments('{\\"a\\": "\ud800"}', None).arguments == {"a": "\ud800"}


async def test_a_healing_failure_sends_the_call_as_it_came(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: object, **kwargs: object) -> HealResult:
        raise RuntimeError("bug")

    monkeypatch.setattr(tool_healing, "heal_arguments", broken)
    parts = PartsManager()
    events = stream([parts.tool_call("shell", "{'a': 1}", "c"), parts.finish()])
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        healed = await heal(events)
    assert all(a is b for a, b in zip(events, healed, strict=True))
    assert "healing its arguments failed" in caplog.records[0].getMessage()

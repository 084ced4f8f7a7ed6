"""The Responses API (``POST /v1/responses``), through the official ``openai`` client,
over a scripted backend: ``responses.create`` and ``responses.stream`` (whose own
accumulator checks the event grammar), tools of every kind, reasoning, faults, errors,
and the bodies Codex CLI and the Agents SDK really send."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.errors import BackendError
from llmbridge.core.messages import ThinkingPart, ToolCallPart, ToolResultPart
from llmbridge.core.response import StopReason, Usage
from llmbridge.gateway.app import create_app
from llmbridge.gateway.config import load_config
from tests.conftest import RunningServer, openai_client
from tests.embedded_reference import direct_reply

REQUESTS = Path(__file__).parent.parent / "fixtures" / "requests"
"""Bodies real clients sent (captured on loopback, home directories renamed)."""
LOOKUP = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Use the `apply_patch` tool to edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch hunk+"},
}
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch\n"


@pytest.fixture
def client(gateway: RunningServer) -> openai.OpenAI:
    return openai_client(gateway.url, "x")


def streamed(client: openai.OpenAI, **kwargs: Any) -> tuple[list[Any], Any]:
    """The events of ``responses.stream`` and its accumulated final response."""
    with client.responses.stream(**kwargs) as stream:
        events = list(stream)
        final = stream.get_final_response()
    return events, final


def assert_numbered(events: list[Any]) -> None:
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]


def test_create_text(client: openai.OpenAI, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["Hello", " there"]))
    reply = client.responses.create(
        model="gpt-5-codex", input="hi", instructions="Be brief.", max_output_tokens=5
    )
    assert reply.output_text == "Hello there"
    assert reply.status == "completed"
    assert reply.model == "gpt-5-codex"
    assert reply.instructions == "Be brief."
    assert reply.usage is not None and reply.usage.output_tokens > 0
    assert reply.usage.total_tokens == reply.usage.input_tokens + reply.usage.output_tokens
    sent = scripted.requests[-1]
    assert sent.params.max_tokens == 5
    assert [(m.role, m.text) for m in sent.messages] == [("system", "Be brief."), ("user", "hi")]


def test_stream_text_equals_script(client: openai.OpenAI, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["a", "b", "c"], usage=Usage(input_tokens=7, output_tokens=3)))
    events, final = streamed(client, model="scripted", input=[{"role": "user", "content": "hi"}])
    assert_numbered(events)
    assert [e.delta for e in events if e.type == "response.output_text.delta"] == ["a", "b", "c"]
    assert events[-1].type == "response.completed"
    assert final.output_text == "abc"
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens) == (7, 3)
    assert final.usage.input_tokens_details.cached_tokens == 0
    assert final.usage.output_tokens_details.reasoning_tokens == 0
    added = next(e for e in events if e.type == "response.output_item.added")
    done = next(e for e in events if e.type == "response.output_item.done")
    assert added.item.id == done.item.id == final.output[0].id


def test_max_tokens_is_incomplete(client: openai.OpenAI, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["cut"], stop_reason=StopReason.MAX_TOKENS))
    reply = client.responses.create(model="scripted", input="hi")
    assert reply.status == "incomplete"
    assert reply.incomplete_details is not None
    assert reply.incomplete_details.reason == "max_output_tokens"
    scripted.enqueue(Script(text=["cut"], stop_reason=StopReason.MAX_TOKENS))
    events = list(client.responses.create(model="scripted", input="hi", stream=True))
    assert events[-1].type == "response.incomplete"


def test_reasoning_item_with_summary(client: openai.OpenAI, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(thinking=["Let me ", "think."], text=["ok"]))
    events, final = streamed(
        client, model="scripted", input="hi", reasoning={"effort": "high", "summary": "auto"}
    )
    assert_numbered(events)
    assert scripted.requests[-1].thinking is not None
    assert scripted.requests[-1].thinking.effort == "high"
    deltas = [e.delta for e in events if e.type == "response.reasoning_summary_text.delta"]
    assert deltas == ["Let me ", "think."]
    reasoning, message = final.output
    assert reasoning.type == "reasoning"
    assert [s.text for s in reasoning.summary] == ["Let me think."]
    assert message.type == "message" and final.output_text == "ok"
    scripted.enqueue(Script(thinking=["Let me ", "think."], text=["ok"]))
    plain = client.responses.create(model="scripted", input="hi")
    assert [item.type for item in plain.output] == ["reasoning", "message"]


def test_encrypted_reasoning_round_trip(client: openai.OpenAI, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(thinking=["hidden"], signature="sig-123", text=["ok"]))
    first = client.responses.create(
        model="scripted", input="hi", include=["reasoning.encrypted_content"]
    )
    reasoning = first.output[0]
    assert reasoning.type == "reasoning" and reasoning.encrypted_content
    item = reasoning.model_dump(exclude_none=True)
    client.responses.create(
        model="scripted",
        input=[{"role": "user", "content": "hi"}, item, {"role": "user", "content": "again"}],
    )
    thinking = scripted.requests[-1].messages[1].parts[0]
    assert thinking == ThinkingPart("hidden", signature="sig-123")
    # Another server's encrypted reasoning reaches no backend, and the reply says so.
    foreign = {**item, "encrypted_content": "gAAAAAB-openai-sealed"}
    raw = client.responses.with_raw_response.create(
        model="scripted", input=[{"role": "user", "content": "hi"}, foreign]
    )
    assert raw.headers["x-llmbridge-dropped-reasoning"] == "1"
    assert scripted.requests[-1].messages[1].parts == (ThinkingPart("hidden"),)


def test_function_call_round_trip(client: openai.OpenAI, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=[], tool_calls=[("lookup", {"q": "x"})]))
    events, final = streamed(client, model="scripted", input="find x", tools=[LOOKUP])
    assert_numbered(events)
    call = final.output[0]
    assert call.type == "function_call" and call.name == "lookup"
    assert json.loads(call.arguments) == {"q": "x"}
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.done" in kinds
    scripted.enqueue(Script(text=["found"]))
    reply = client.responses.create(
        model="scripted",
        tools=[LOOKUP],
        input=[
            {"role": "user", "content": "find x"},
            call.model_dump(exclude_none=True),
            {"type": "function_call_output", "call_id": call.call_id, "output": "x is 1"},
        ],
    )
    assert reply.output_text == "found"
    _, assistant, result = scripted.requests[-1].messages
    assert assistant.parts == (ToolCallPart(call.call_id, "lookup", {"q": "x"}),)
    assert result.parts == (ToolResultPart(call.call_id, "x is 1", name="lookup"),)


def test_custom_tool_round_trip(client: openai.OpenAI, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=[], tool_calls=[("apply_patch", {"input": PATCH})]))
    events, final = streamed(client, model="scripted", input="add hello", tools=[APPLY_PATCH])
    assert_numbered(events)
    offered = scripted.requests[-1].tools[0]
    assert offered.name == "apply_patch"
    assert offered.input_schema["properties"]["input"]["type"] == "string"
    assert "start: begin_patch hunk+" in offered.description
    call = final.output[0]
    assert call.type == "custom_tool_call"
    assert (call.name, call.input) == ("apply_patch", PATCH)
    inputs = [e.input for e in events if e.type == "response.custom_tool_call_input.done"]
    assert inputs == [PATCH]
    scripted.enqueue(Script(text=["done"]))
    client.responses.create(
        model="scripted",
        tools=[APPLY_PATCH],
        input=[
            {"role": "user", "content": "add hello"},
            call.model_dump(exclude_none=True),
            {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Done!"},
        ],
    )
    _, assistant, result = scripted.requests[-1].messages
    assert assistant.parts == (ToolCallPart(call.call_id, "apply_patch", {"input": PATCH}),)
    assert result.parts == (ToolResultPart(call.call_id, "Done!", name="apply_patch"),)


def test_namespace_tool_names_restored(client: openai.OpenAI, scripted: ScriptedBackend) -> None:
    namespace = {
        "type": "namespace",
        "name": "agents",
        "description": "Sub-agents.",
        "tools": [{"type": "function", "name": "close_agent", "parameters": {"type": "object"}}],
    }
    scripted.enqueue(Script(text=[], tool_calls=[("agents__close_agent", {"target": "a1"})]))
    _, final = streamed(client, model="scripted", input="close it", tools=[namespace])
    assert [t.name for t in scripted.requests[-1].tools] == ["agents__close_agent"]
    call = final.output[0]
    assert (call.type, call.name, call.namespace) == ("function_call", "close_agent", "agents")
    client.responses.create(
        model="scripted",
        tools=[namespace],
        input=[
            call.model_dump(exclude_none=True),
            {"type": "function_call_output", "call_id": call.call_id, "output": "closed"},
        ],
    )
    assert scripted.requests[-1].messages[0].tool_calls[0].name == "agents__close_agent"


def test_hosted_tools_ignored_with_header(client: openai.OpenAI, scripted: ScriptedBackend) -> None:
    raw = client.responses.with_raw_response.create(
        model="scripted",
        input="search",
        tools=[{"type": "web_search"}, LOOKUP, {"type": "image_generation"}],
    )
    assert raw.status_code == 200
    assert raw.headers["x-llmbridge-ignored-tools"] == "web_search,image_generation"
    assert [t.name for t in scripted.requests[-1].tools] == ["lookup"]
    assert raw.parse().output_text


def test_a_tool_type_no_header_can_hold_is_named_percent_encoded(
    client: openai.OpenAI, scripted: ScriptedBackend
) -> None:
    """Found by the fuzz tests: a hosted tool type outside latin-1 was put in the header
    as it was, and Starlette's encoding of it failed the request with a 500."""
    raw = client.responses.with_raw_response.create(
        model="scripted",
        input="hi",
        tools=[{"type": "c~\U000f544c é"}],  # type: ignore[list-item]
    )
    assert raw.status_code == 200
    assert raw.headers["x-llmbridge-ignored-tools"] == "c~%F3%B5%91%8C %C3%A9"


def test_fault_mid_stream_fails_the_response(
    client: openai.OpenAI, scripted: ScriptedBackend
) -> None:
    for in_band in (False, True):
        error = BackendError("the upstream fell over")
        scripted.enqueue(
            Script(text=["a", "b", "c"], fail_after=1, fail_error=error, in_band=in_band)
        )
        events = list(client.responses.create(model="scripted", input="hi", stream=True))
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert [e.type for e in events[-2:]] == ["error", "response.failed"]
        assert events[-2].message == "the upstream fell over"
        failed = events[-1].response
        assert failed.status == "failed" and failed.error is not None
        assert failed.error.code == "server_error"
        assert [item.type for item in failed.output] == []  # the text item never finished


def test_json_schema_format(client: openai.OpenAI, scripted: ScriptedBackend) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    client.responses.create(
        model="scripted",
        input="json",
        text={"format": {"type": "json_schema", "name": "thing", "schema": schema}},
    )
    response_format = scripted.requests[-1].response_format
    assert response_format is not None
    assert (response_format.type, response_format.schema) == ("json_schema", schema)
    assert response_format.param == "text.format"


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        (
            {"input": [{"role": "user", "content": "hi"}, {"type": "message", "role": "user"}]},
            "input.1.content",
            "Missing required parameter: 'input.1.content'.",
        ),
        (
            {"input": [{"type": "telepathy"}]},
            "input.0.type",
            "Invalid value for 'input.0.type': 'telepathy'.",
        ),
        ({"input": "hi", "temperature": 3}, "temperature", "above maximum value"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(
    client: openai.OpenAI, body: dict[str, Any], param: str, message: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="scripted", **body)
    assert caught.value.status_code == 400
    assert caught.value.param == param
    assert message in caught.value.message
    assert caught.value.type == "invalid_request_error"


def test_input_tokens(client: openai.OpenAI) -> None:
    short = client.responses.input_tokens.count(model="scripted", input="hello")
    long = client.responses.input_tokens.count(
        model="scripted", input="hello " * 50, tools=[LOOKUP]
    )
    assert short.object == "response.input_tokens"
    assert 0 < short.input_tokens < long.input_tokens


CODEX = {"originator": "codex_exec", "x-codex-beta-features": "remote_compaction_v2"}
CODEX_HEADERS = {  # what Codex sent beside its body (0.171.0 takes zstd or gzip too)
    "0_169_0": CODEX,
    "0_171_0": {**CODEX, "accept-encoding": "zstd,gzip"},
}


@pytest.mark.parametrize("version", ["0_169_0", "0_171_0"])
def test_codex_request_as_sent(
    gateway: RunningServer, scripted: ScriptedBackend, version: str
) -> None:
    """Codex CLI's own first request (0.169.0, and 0.171.0's, the same but for its
    tools' wording and ``Accept-Encoding: zstd,gzip``): flat, namespace and hosted
    tools, developer messages, ``reasoning.summary``, ``include``, ``client_metadata``.
    The gateway compresses nothing, and an uncompressed stream is what any
    ``Accept-Encoding`` allows."""
    body = json.loads((REQUESTS / f"codex_{version}_responses.json").read_text())
    headers = CODEX_HEADERS[version]
    scripted.enqueue(Script(text=["hi"]))
    with httpx.stream(
        "POST", gateway.url + "/v1/responses", json=body, headers=headers, timeout=30
    ) as reply:
        assert reply.status_code == 200
        assert "content-encoding" not in reply.headers
        assert reply.headers["x-llmbridge-ignored-tools"] == "web_search"
        names = [line[7:] for line in reply.iter_lines() if line.startswith("event: ")]
    assert names[0] == "response.created" and names[-1] == "response.completed"
    sent = scripted.requests[-1]
    assert [m.role for m in sent.messages] == ["system", "system", "user", "user"]
    assert "multi_agent_v1__spawn_agent" in {t.name for t in sent.tools}
    assert len(sent.tools) == 12  # 7 flat functions, 5 in the namespace, no web_search
    assert sent.thinking is None  # summary alone turns nothing on


def test_agents_sdk_request_as_sent(gateway: RunningServer, scripted: ScriptedBackend) -> None:
    body = json.loads((REQUESTS / "openai_agents_0_24_0_responses.json").read_text())
    scripted.enqueue(Script(text=[], tool_calls=[("Bash", {"command": "ls", "description": ""})]))
    with httpx.stream("POST", gateway.url + "/v1/responses", json=body, timeout=30) as reply:
        assert reply.status_code == 200
        data = [json.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: ")]
    sent = scripted.requests[-1]
    assert [(m.role, m.text) for m in sent.messages] == [
        ("system", "You are a coding agent."),
        ("user", "Run the marker command."),
    ]
    completed = data[-1]["response"]
    assert completed["output"][0]["name"] == "Bash"


# -- the embedded model ---------------------------------------------------------------


@pytest.fixture(scope="module")
def zero_config() -> Iterator[RunningServer]:
    with RunningServer(create_app(load_config(None))) as server:
        yield server


@pytest.mark.embedded
def test_embedded_model_streams_and_answers(zero_config: RunningServer) -> None:
    """The real model: a 16-token cap may end it as ``incomplete`` (the SDK's
    accumulator only returns completed responses, so the terminal event is read)."""
    client = openai_client(zero_config.url, "x")
    question = [{"role": "user", "content": "Say something about the sea."}]
    expected = direct_reply(question, max_tokens=16)
    options: dict[str, Any] = {"max_output_tokens": 16, "temperature": 0}
    events = list(client.responses.create(model="smollm2", input=question, stream=True, **options))
    assert_numbered(events)
    kinds = [e.type for e in events]
    assert kinds[-1] == (
        "response.incomplete" if expected.finish_reason == "length" else "response.completed"
    )
    final = events[-1].response
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert final.output_text == deltas == expected.text != ""
    assert final.usage is not None
    assert 0 < final.usage.output_tokens <= 16 and final.usage.input_tokens > 0
    reply = client.responses.create(model="smollm2", input=question, **options)
    assert reply.output_text == expected.text
    assert reply.status == final.status

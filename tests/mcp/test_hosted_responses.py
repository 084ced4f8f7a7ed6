"""MCP tools for any model through OpenAI's Responses API: the official ``openai`` client
sends an ``mcp`` tool naming a configured server (the toolbox over stdio), a scripted
model calls its tool, the gateway runs it and feeds the result back, and the answer has
the ``mcp_list_tools`` and ``mcp_call`` items, streamed and not; approvals, the
``allowed_urls`` refusal, ``max_tool_rounds``, a key's ``mcp_tools``, the ledger's rows
and a stored conversation that keeps the items."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.messages import ToolResultPart
from llmbridge.core.response import Usage
from tests.conftest import RunningServer, create_key, ledger_rows, openai_client
from tests.mcp.conftest import MASTER, mcp_gateway, stdio_toolbox

NEVER: dict[str, Any] = {"type": "mcp", "server_label": "box", "require_approval": "never"}


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hosted") / "gateway.db"


@pytest.fixture(scope="module")
def scripted() -> ScriptedBackend:
    return ScriptedBackend("scripted", models=("scripted",))


@pytest.fixture(scope="module")
def gateway(database: Path, scripted: ScriptedBackend) -> Iterator[RunningServer]:
    with mcp_gateway(
        database,
        {"box": stdio_toolbox()},
        backend=scripted,
        max_tool_rounds=3,
        allowed_urls=["https://mcp.example.com/"],
    ) as server:
        yield server


@pytest.fixture(scope="module")
def key(gateway: RunningServer) -> str:
    return create_key(gateway.url, MASTER, "hosted")


def _calls_then_answers(scripted: ScriptedBackend, *calls: tuple[str, dict[str, Any]]) -> None:
    for call in calls:
        scripted.enqueue(Script(text=[], tool_calls=[call]))
    scripted.enqueue(Script(text=["The", " answer."]))


def _tool_results(scripted: ScriptedBackend) -> list[ToolResultPart]:
    last = scripted.requests[-1]
    return [p for m in last.messages for p in m.parts if isinstance(p, ToolResultPart)]


def test_a_call_run_for_the_model_not_streamed(
    gateway: RunningServer, scripted: ScriptedBackend, database: Path
) -> None:
    key = create_key(gateway.url, MASTER, "hosted-plain")
    _calls_then_answers(scripted, ("box__add", {"a": 2, "b": 3}))
    client = openai_client(gateway.url, key)
    response = client.responses.create(model="scripted", input="2+3?", tools=[NEVER])
    kinds = [item.type for item in response.output]
    assert kinds == ["mcp_list_tools", "mcp_call", "message"]
    listed, call, _message = response.output
    assert listed.type == "mcp_list_tools" and listed.server_label == "box"
    assert "add" in [tool.name for tool in listed.tools]
    assert call.type == "mcp_call" and call.name == "add" and call.server_label == "box"
    assert call.output == "5" and call.error is None
    assert response.output_text == "The answer."
    assert response.status == "completed"
    # The model was offered the tool as a function and got its result back.
    offered = [tool.name for tool in scripted.requests[-2].tools]
    assert "box__add" in offered
    assert [r.content for r in _tool_results(scripted)] == ["5"]
    # Usage: both rounds summed.
    assert response.usage is not None
    rows = ledger_rows(database, "hosted-plain", 3)
    models = sorted(row["model"] for row in rows)
    assert models == ["mcp:box/add", "scripted", "scripted"]
    rounds = [row for row in rows if row["model"] == "scripted"]
    assert sum(row["input_tokens"] for row in rounds) == response.usage.input_tokens
    ids = sorted(row["request_id"] for row in rounds)
    assert ids[1] == ids[0] + "-r2"
    tool_row = next(row for row in rows if row["model"] == "mcp:box/add")
    assert tool_row["endpoint"] == "/v1/responses" and tool_row["status"] == 200


def test_a_call_run_for_the_model_streamed(
    gateway: RunningServer, key: str, scripted: ScriptedBackend
) -> None:
    _calls_then_answers(scripted, ("box__echo", {"text": "über"}))
    client = openai_client(gateway.url, key)
    kinds: list[str] = []
    with client.responses.stream(model="scripted", input="say über", tools=[NEVER]) as stream:
        for event in stream:
            kinds.append(event.type)
        final = stream.get_final_response()
    assert [item.type for item in final.output] == ["mcp_list_tools", "mcp_call", "message"]
    call = final.output[1]
    assert call.type == "mcp_call" and call.output == "über"
    assert final.output_text == "The answer."
    for expected in (
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
    ):
        assert expected in kinds
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert kinds.index("response.mcp_call.completed") < kinds.index("response.output_text.delta")


def test_a_tools_own_error_is_a_failed_call(
    gateway: RunningServer, key: str, scripted: ScriptedBackend
) -> None:
    _calls_then_answers(scripted, ("box__fail", {}))
    response = openai_client(gateway.url, key).responses.create(
        model="scripted",
        input="fail",
        tools=[NEVER],
    )
    call = response.output[1]
    assert call.type == "mcp_call" and call.status == "failed" and call.error is not None
    assert _tool_results(scripted)[0].is_error


def test_max_tool_rounds_ends_incomplete(
    gateway: RunningServer, key: str, scripted: ScriptedBackend
) -> None:
    for _ in range(3):  # mcp.max_tool_rounds: 3, each round calls again
        scripted.enqueue(Script(text=[], tool_calls=[("box__add", {"a": 1, "b": 1})]))
    response = openai_client(gateway.url, key).responses.create(
        model="scripted",
        input="loop",
        tools=[NEVER],
    )
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert [item.type for item in response.output].count("mcp_call") == 3


def test_a_client_tool_goes_back_to_the_client(
    gateway: RunningServer, key: str, scripted: ScriptedBackend
) -> None:
    scripted.enqueue(Script(text=[], tool_calls=[("lookup", {"q": "x"})]))
    mine = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
    response = openai_client(gateway.url, key).responses.create(
        model="scripted",
        input="look it up",
        tools=[NEVER, mine],
    )
    assert [item.type for item in response.output] == ["mcp_list_tools", "function_call"]


def test_approval_round_trip(gateway: RunningServer, key: str, scripted: ScriptedBackend) -> None:
    client = openai_client(gateway.url, key)
    always = {"type": "mcp", "server_label": "box"}  # require_approval: always by default
    scripted.enqueue(Script(text=[], tool_calls=[("box__add", {"a": 4, "b": 5})]))
    asked = client.responses.create(model="scripted", input="4+5?", tools=[always])
    request = asked.output[-1]
    assert request.type == "mcp_approval_request" and request.name == "add"
    assert len(scripted.requests) and _tool_results(scripted) == []
    scripted.enqueue(Script(text=["Nine."]))
    answered = client.responses.create(
        model="scripted",
        previous_response_id=asked.id,
        input=[
            {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
        ],
        tools=[always],
    )
    call = answered.output[1]
    assert call.type == "mcp_call" and call.output == "9"
    assert call.approval_request_id == request.id
    assert answered.output_text == "Nine."
    assert [r.content for r in _tool_results(scripted)] == ["9"]
    # The stored chain keeps the items: a third turn sees the call and its result.
    scripted.enqueue(Script(text=["Still nine."]))
    third = client.responses.create(
        model="scripted",
        previous_response_id=answered.id,
        input="and again?",
        tools=[always],
    )
    assert third.output_text == "Still nine."
    assert [r.content for r in _tool_results(scripted)] == ["9"]
    stored = client.responses.retrieve(answered.id)
    assert [item.type for item in stored.output] == ["mcp_list_tools", "mcp_call", "message"]


def test_a_refused_approval_tells_the_model(
    gateway: RunningServer, key: str, scripted: ScriptedBackend
) -> None:
    client = openai_client(gateway.url, key)
    always = {"type": "mcp", "server_label": "box", "require_approval": "always"}
    scripted.enqueue(Script(text=[], tool_calls=[("box__echo", {"text": "x"})]))
    asked = client.responses.create(model="scripted", input="echo", tools=[always])
    request = asked.output[-1]
    scripted.enqueue(Script(text=["Fine."]))
    answered = client.responses.create(
        model="scripted",
        input=[
            {"role": "user", "content": "echo"},
            request.model_dump(exclude_none=True),
            {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": False},
        ],
        tools=[always],
        store=False,
    )
    assert answered.output_text == "Fine."
    (result,) = _tool_results(scripted)
    assert result.is_error and "refused" in result.content


def test_a_url_outside_allowed_urls_is_a_400(gateway: RunningServer, key: str) -> None:
    tool = {**NEVER, "server_url": "http://169.254.169.254/mcp"}
    with pytest.raises(openai.BadRequestError) as refused:
        openai_client(gateway.url, key).responses.create(
            model="scripted",
            input="x",
            tools=[tool],
        )
    assert "mcp.allowed_urls" in refused.value.message
    assert refused.value.param == "tools.0.server_url"


def test_an_unconfigured_server_is_a_400(gateway: RunningServer, key: str) -> None:
    # No server of that name, and no URL to connect to instead.
    allowed = {**NEVER, "server_label": "elsewhere"}
    with pytest.raises(openai.BadRequestError) as refused:
        openai_client(gateway.url, key).responses.create(
            model="scripted",
            input="x",
            tools=[allowed],
        )
    assert "mcp.servers" in refused.value.message


def test_a_key_with_one_parallel_slot_runs_hosted_calls_inside_its_request(
    gateway: RunningServer, scripted: ScriptedBackend, database: Path
) -> None:
    # The request holds the key's one slot while its tool calls run: they take no other.
    key = create_key(gateway.url, MASTER, "hosted-one-slot", max_parallel=1, rpm=2)
    _calls_then_answers(scripted, ("box__add", {"a": 1, "b": 1}), ("box__add", {"a": 2, "b": 2}))
    client = openai_client(gateway.url, key)
    response = client.responses.create(model="scripted", input="sums", tools=[NEVER])
    calls = [item for item in response.output if item.type == "mcp_call"]
    assert [(c.output, c.error) for c in calls] == [("2", None), ("4", None)]
    assert response.status == "completed"
    rows = ledger_rows(database, "hosted-one-slot", 5)
    assert sorted(row["status"] for row in rows) == [200] * 5  # 3 rounds, 2 calls


def test_a_key_sees_and_calls_only_its_mcp_tools(
    gateway: RunningServer, scripted: ScriptedBackend, database: Path
) -> None:
    key = create_key(gateway.url, MASTER, "hosted-echo-only", mcp_tools=["box__echo"])
    scripted.enqueue(Script(text=[], tool_calls=[("box__add", {"a": 1, "b": 2})]))
    scripted.enqueue(Script(text=["No."]))
    response = openai_client(gateway.url, key).responses.create(
        model="scripted",
        input="add",
        tools=[NEVER],
    )
    listed, call = response.output[0], response.output[1]
    assert listed.type == "mcp_list_tools" and [t.name for t in listed.tools] == ["echo"]
    offered = [tool.name for tool in scripted.requests[-2].tools]
    assert offered == ["box__echo"]
    assert call.type == "mcp_call" and call.status == "failed"
    assert "mcp_tools" in str(call.error)
    rows = ledger_rows(database, "hosted-echo-only", 3)
    refused = next(row for row in rows if row["model"] == "mcp:box/add")
    assert refused["status"] == 403


def test_later_rounds_count_to_the_keys_tokens_per_minute(
    gateway: RunningServer, scripted: ScriptedBackend, database: Path
) -> None:
    # The second round (after the tool's result) is its own model call: its tokens count
    # to the key as the first round's do, so the next request sees them spent.
    key = create_key(gateway.url, MASTER, "hosted-tpm", tpm=100_000)
    small, large = (
        Usage(input_tokens=5, output_tokens=5),
        Usage(input_tokens=5, output_tokens=60_000),
    )
    scripted.enqueue(Script(text=[], tool_calls=[("box__add", {"a": 1, "b": 1})], usage=small))
    scripted.enqueue(Script(text=["Two."], usage=large))
    client = openai_client(gateway.url, key)
    response = client.responses.create(model="scripted", input="sum", tools=[NEVER])
    assert response.status == "completed"
    ledger_rows(database, "hosted-tpm", 3)  # both rounds and the call ended
    scripted.enqueue(Script(text=["ok"]))
    raw = client.responses.with_raw_response.create(model="scripted", input="next")
    assert int(raw.headers["x-ratelimit-remaining-tokens"]) < 100_000 - 60_000


@pytest.mark.parametrize("when", ["before", "inside"])
def test_a_later_round_that_fails_fails_the_clients_request(
    gateway: RunningServer, scripted: ScriptedBackend, database: Path, when: str
) -> None:
    name = f"hosted-round-fails-{when}"
    key = create_key(gateway.url, MASTER, name)
    scripted.enqueue(Script(text=[], tool_calls=[("box__add", {"a": 1, "b": 1})]))
    down = InvalidRequestError("the scripted round refused")  # not retried
    if when == "before":
        scripted.enqueue(Script(fail_before=down))
    else:
        scripted.enqueue(Script(text=["a", "b"], fail_after=1, fail_error=down))
    client = openai_client(gateway.url, key)
    kinds: list[str] = []
    with client.responses.stream(model="scripted", input="sum", tools=[NEVER]) as stream:
        for event in stream:
            kinds.append(event.type)
    assert "response.mcp_call.completed" in kinds
    assert kinds[-1] in ("error", "response.failed")
    rows = {row["request_id"]: row for row in ledger_rows(database, name, 3)}
    first = next(row for rid, row in rows.items() if rid.endswith("-r2"))
    client_row = rows[first["request_id"].removesuffix("-r2")]
    assert first["status"] == 400 and client_row["status"] == 400

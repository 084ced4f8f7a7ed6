"""The agent's MCP tools (agent/mcp_tools.py, gateway/agent_mcp.py) end to end: a
gateway serving the toolbox (tests/mcp/servers/toolbox.py) over streamable HTTP as
``web``, the agent on a scripted model whose persona names MCP tools by globs
(``mcp_tools``). The tool runs through the MCP gateway's one path (the key's
permission, a ledger row naming the agent's route), its result reaches the model's
next round and the stored turn, a key's own ``mcp_tools`` narrow what the persona
offers, and every failure is a tool result the model reads, never a failed turn."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import pytest
from pydantic import ValidationError

from llmbridge.agent.persona_settings import AgentSettings
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.messages import ToolResultPart
from llmbridge.core.request import ChatRequest
from llmbridge.mcp.results import result_text
from tests.agent.serving import error_of, messages_of
from tests.conftest import RunningServer, create_key, ledger_rows
from tests.mcp.conftest import MASTER, mcp_gateway, stdio_toolbox
from tests.mcp.servers.toolbox import build
from tests.waiting import scaled

MAX_RESULT_BYTES = 4096


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("agent-mcp") / "gateway.db"


@pytest.fixture(scope="module")
def model() -> ScriptedBackend:
    return ScriptedBackend("scripted")


@pytest.fixture(scope="module")
def gateway(database: Path, model: ScriptedBackend) -> Iterator[RunningServer]:
    """The toolbox as ``web`` (streamable HTTP) and ``box`` (stdio, which its
    ``crash`` tool kills) behind a gateway whose agent offers ``web_search`` too
    (without a Tavily key: it stays one of the tools, whose call would say so)."""
    with RunningServer(build("web").streamable_http_app()) as toolbox:
        servers = {"web": {"url": toolbox.url + "/mcp"}, "box": stdio_toolbox()}
        with mcp_gateway(
            database,
            servers,
            backend=model,
            agent={"web_search": True},
            max_result_bytes=MAX_RESULT_BYTES,
        ) as server:
            yield server


@pytest.fixture(autouse=True)
def _fresh_model(model: ScriptedBackend) -> None:
    model.requests.clear()


def _client(gateway: RunningServer, key: str) -> httpx.AsyncClient:
    auth = {"Authorization": f"Bearer {key}"}
    return httpx.AsyncClient(base_url=gateway.url, headers=auth, timeout=scaled(60))


async def _session_with(client: httpx.AsyncClient, mcp_tools: list[str]) -> str:
    """A session whose persona names ``mcp_tools``."""
    made = await client.post(
        "/agent/personas", json={"name": "tooled", "settings": {"mcp_tools": mcp_tools}}
    )
    assert made.status_code == 201, made.text
    assert made.json()["settings"]["mcp_tools"] == mcp_tools
    session = await client.post("/agent/sessions", json={"persona_id": made.json()["id"]})
    assert session.status_code == 201, session.text
    session_id: str = session.json()["id"]
    return session_id


async def _turn(client: httpx.AsyncClient, session_id: str, **body: Any) -> dict[str, Any]:
    reply = await client.post(
        f"/agent/sessions/{session_id}/messages",
        json={"input": "use the tools", "model": "scripted", **body},
    )
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def _offered(request: ChatRequest) -> list[str]:
    return [tool.name for tool in request.tools]


def _results_sent(request: ChatRequest) -> list[ToolResultPart]:
    """The tool results the model got back in ``request`` (its last message)."""
    return [p for p in request.messages[-1].parts if isinstance(p, ToolResultPart)]


async def test_a_personas_mcp_tool_runs_and_its_result_reaches_the_model(
    gateway: RunningServer, database: Path, model: ScriptedBackend
) -> None:
    key = create_key(gateway.url, MASTER, "agent-open")
    model.enqueue(
        Script(text=[], tool_calls=[("web__echo", {"text": "hello through MCP"})]),
        Script(text=["It said hello."]),
    )
    async with _client(gateway, key) as client:
        session_id = await _session_with(client, ["web__echo", "web__a*"])
        reply = await _turn(client, session_id)
        stored = await messages_of(client, session_id)

    assert reply["reply"] == "It said hello." and reply["rounds"] == 2
    first, second = model.requests
    # The persona's globs against the server's tools, beside the agent's own.
    assert _offered(first) == ["web_search", "web__echo", "web__add"]
    (sent,) = _results_sent(second)
    assert sent.content == "hello through MCP" and not sent.is_error
    assert [r["content"] for r in reply["tool_results"]] == ["hello through MCP"]
    tool_data = stored[-1]["tool_data"]
    assert tool_data["calls"][0]["name"] == "web__echo"
    assert tool_data["results"][0]["content"] == "hello through MCP"

    rows = ledger_rows(database, "agent-open", 2)  # the tool call and the turn
    (call,) = [r for r in rows if r["model"] == "mcp:web/echo"]
    assert call["status"] == 200 and call["dialect"] == "mcp"
    assert call["endpoint"] == "/agent/sessions/{session_id}/messages"


async def test_a_keys_mcp_tools_narrow_what_the_agent_offers_and_calls(
    gateway: RunningServer, database: Path, model: ScriptedBackend
) -> None:
    name = "agent-echo-only"
    key = create_key(gateway.url, MASTER, name, mcp_tools=["web__echo"])
    # The model calls a tool the persona names but the key may not use.
    model.enqueue(
        Script(text=[], tool_calls=[("web__add", {"a": 1, "b": 2})]),
        Script(text=["I may not add."]),
    )
    async with _client(gateway, key) as client:
        session_id = await _session_with(client, ["web__*"])
        reply = await _turn(client, session_id)

    first, second = model.requests
    assert _offered(first) == ["web_search", "web__echo"]  # web__add is not offered
    (refused,) = _results_sent(second)
    assert refused.is_error
    assert "mcp_tools" in refused.content and name in refused.content
    assert reply["reply"] == "I may not add."
    assert reply["tool_results"][0]["is_error"] is True
    rows = ledger_rows(database, name, 2)
    (call,) = [r for r in rows if r["model"] == "mcp:web/add"]
    assert call["status"] == 403


async def test_failures_are_tool_results_the_model_reads(
    gateway: RunningServer, model: ScriptedBackend
) -> None:
    key = create_key(gateway.url, MASTER, "agent-failures")
    model.enqueue(
        Script(
            text=[],
            tool_calls=[
                ("web__fail", {}),  # the tool's own isError result
                ("web__big", {"size": MAX_RESULT_BYTES * 2}),  # over mcp.max_result_bytes
                ("other__tool", {}),  # outside the persona's globs
            ],
        ),
        Script(text=["All three failed."]),
    )
    async with _client(gateway, key) as client:
        session_id = await _session_with(client, ["web__fail", "web__big"])
        reply = await _turn(client, session_id)

    assert reply["reply"] == "All three failed."
    failed, too_big, unknown = _results_sent(model.requests[1])
    assert failed.is_error and "the tool failed on purpose" in failed.content
    assert too_big.is_error and "max_result_bytes" in too_big.content
    assert unknown.is_error and "unknown tool 'other__tool'" in unknown.content


async def test_a_server_lost_mid_call_is_a_tool_result(
    gateway: RunningServer, model: ScriptedBackend
) -> None:
    key = create_key(gateway.url, MASTER, "agent-crash")
    model.enqueue(
        Script(text=[], tool_calls=[("box__crash", {})]),
        Script(text=["The server went away."]),
    )
    async with _client(gateway, key) as client:
        session_id = await _session_with(client, ["box__crash"])
        reply = await _turn(client, session_id)
    assert reply["reply"] == "The server went away."
    (lost,) = _results_sent(model.requests[1])
    assert lost.is_error and "'box'" in lost.content


async def test_a_turn_may_leave_the_mcp_tools_out(
    gateway: RunningServer, model: ScriptedBackend
) -> None:
    key = create_key(gateway.url, MASTER, "agent-choosing")
    model.enqueue(Script(text=["One tool."]), Script(text=["No MCP tools."]))
    async with _client(gateway, key) as client:
        session_id = await _session_with(client, ["web__*"])
        await _turn(client, session_id, tools=["web__echo"])
        await _turn(client, session_id, settings={"mcp_tools": []})
    chosen, without = model.requests
    assert _offered(chosen) == ["web__echo"]
    assert _offered(without) == ["web_search"]


async def test_a_bad_glob_is_a_400_naming_the_setting(gateway: RunningServer) -> None:
    key = create_key(gateway.url, MASTER, "agent-bad-glob")
    async with _client(gateway, key) as client:
        made = await client.post(
            "/agent/personas", json={"name": "bad", "settings": {"mcp_tools": ["files read"]}}
        )
    error = error_of(made, 400)
    assert "mcp_tools" in error["message"]


def test_globs_are_checked_and_unknown_servers_allowed() -> None:
    settings = AgentSettings(mcp_tools=("files__*", "nowhere__tool", "*"))
    assert settings.set_values()["mcp_tools"] == ["files__*", "nowhere__tool", "*"]
    for bad in ("", "files tool", "x" * 201, "files/*"):
        with pytest.raises(ValidationError):
            AgentSettings(mcp_tools=(bad,))
    with pytest.raises(ValidationError):
        AgentSettings(mcp_tools=tuple(f"s__t{n}" for n in range(65)))


def test_a_results_text_is_its_text_blocks_joined() -> None:
    result = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="first"),
            types.ImageContent(type="image", data="aGk=", mime_type="image/png"),
            types.EmbeddedResource(
                type="resource",
                resource=types.TextResourceContents(uri="file:///a.md", text="the file"),
            ),
        ]
    )
    assert result_text(result) == "first\n[image: image/png]\nthe file"
    structured = types.CallToolResult(content=[], structured_content={"sum": 3})
    assert result_text(structured) == '{"sum":3}'

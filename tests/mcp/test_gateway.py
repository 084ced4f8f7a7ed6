"""The MCP gateway end to end: the SDK's client against a running gateway that serves
the toolbox over stdio (``box``, spawned from its configuration), over streamable HTTP
(``web``) and over HTTP+SSE (``old``, with a header from the environment), in both
protocol eras (the 2026-07-28 envelope and the handshake)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from llmbridge.dialects.jsonrpc import PERMISSION_DENIED, UNAUTHENTICATED
from tests.conftest import RunningServer, create_key, ledger_rows
from tests.mcp.conftest import MASTER, TOOLBOX_TOOLS, mcp_client, mcp_gateway, stdio_toolbox
from tests.waiting import scaled

MODES = ["auto", "legacy"]


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp") / "gateway.db"


@pytest.fixture(scope="module")
def gateway(database: Path, toolbox_url: str, old_toolbox_url: str) -> Iterator[RunningServer]:
    servers = {
        "box": stdio_toolbox(),
        "web": {"url": toolbox_url},
        "old": {
            "url": old_toolbox_url,
            "transport": "sse",
            "headers": {"X-Team-Token": "${MCP_TEST_TOKEN}"},
        },
    }
    os.environ["MCP_TEST_TOKEN"] = "from-the-environment"
    try:
        # A stdio server starts slowly on a busy machine: its connection's bound is scaled.
        with mcp_gateway(database, servers, connect_timeout_s=scaled(30)) as server:
            yield server
    finally:
        del os.environ["MCP_TEST_TOKEN"]


def _texts(result: types.CallToolResult) -> list[str]:
    return [block.text for block in result.content if isinstance(block, types.TextContent)]


@pytest.mark.parametrize("mode", MODES)
async def test_tools_listed_with_their_servers_names(gateway: RunningServer, mode: str) -> None:
    async with mcp_client(gateway.url + "/mcp", MASTER, mode) as client:
        listed = await client.list_tools()
    names = [tool.name for tool in listed.tools]
    assert names == [f"{server}__{t}" for server in ("box", "web", "old") for t in TOOLBOX_TOOLS]
    add = next(tool for tool in listed.tools if tool.name == "box__add")
    assert add.description == "The sum of two numbers."
    assert set(add.input_schema["properties"]) == {"a", "b"}


@pytest.mark.parametrize("mode", MODES)
async def test_a_tool_call_end_to_end(gateway: RunningServer, mode: str) -> None:
    async with mcp_client(gateway.url + "/mcp", MASTER, mode) as client:
        stdio = await client.call_tool("box__add", {"a": 2, "b": 3})
        http = await client.call_tool("web__echo", {"text": "über"})
        sse = await client.call_tool("old__echo", {"text": "old"})
        header = await client.call_tool("old__header", {"name": "X-Team-Token"})
    assert _texts(stdio) == ["5"] and not stdio.is_error
    assert _texts(http) == ["über"]
    assert _texts(sse) == ["old"]
    assert _texts(header) == ["from-the-environment"]  # ${MCP_TEST_TOKEN}, expanded


async def test_one_server_under_its_own_names(gateway: RunningServer) -> None:
    async with mcp_client(gateway.url + "/mcp/web", MASTER) as client:
        listed = await client.list_tools()
        result = await client.call_tool("add", {"a": 40, "b": 2})
    assert [tool.name for tool in listed.tools] == list(TOOLBOX_TOOLS)
    assert _texts(result) == ["42"]


async def test_a_tools_own_error_is_its_result(gateway: RunningServer) -> None:
    async with mcp_client(gateway.url + "/mcp", MASTER) as client:
        result = await client.call_tool("web__fail", {})
    assert result.is_error
    assert "the tool failed on purpose" in " ".join(_texts(result))


async def test_an_unknown_tool_is_invalid_params(gateway: RunningServer) -> None:
    async with mcp_client(gateway.url + "/mcp", MASTER) as client:
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("box__nope", {})
        with pytest.raises(MCPError) as unprefixed:
            await client.call_tool("echo", {"text": "x"})
    assert unknown.value.code == types.INVALID_PARAMS
    assert "unknown tool" in unknown.value.message
    assert unprefixed.value.code == types.INVALID_PARAMS
    assert "<server>__<tool>" in unprefixed.value.message


def test_no_key_is_a_401_in_json_rpc(gateway: RunningServer) -> None:
    reply = httpx.post(
        gateway.url + "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream"},
        timeout=scaled(30),
    )
    assert reply.status_code == 401
    assert reply.headers["content-type"].startswith("application/json")
    body = reply.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None
    assert body["error"]["code"] == UNAUTHENTICATED
    assert "missing API key" in body["error"]["message"]
    assert body["error"]["data"]["status"] == 401


async def test_the_sdk_client_reports_the_401(gateway: RunningServer) -> None:
    # The SDK wraps the failed handshake in its own exception (group): its text names it.
    with pytest.raises(Exception) as refused:
        async with mcp_client(gateway.url + "/mcp", "sk-wrong", mode="legacy") as client:
            await client.list_tools()
    assert "invalid API key" in repr(refused.value) or "invalid API key" in str(
        getattr(refused.value, "exceptions", "")
    )


def test_an_unknown_server_is_a_404_in_json_rpc(gateway: RunningServer) -> None:
    reply = httpx.post(
        gateway.url + "/mcp/nope",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Authorization": f"Bearer {MASTER}"},
        timeout=scaled(30),
    )
    assert reply.status_code == 404
    error = reply.json()["error"]
    assert "no MCP server named 'nope'" in error["message"]
    assert "box, web, old" in error["message"]


def test_malformed_json_rpc_is_the_sdks_parse_error(gateway: RunningServer) -> None:
    headers = {
        "Authorization": f"Bearer {MASTER}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    broken = httpx.post(gateway.url + "/mcp", content=b"{not json", headers=headers, timeout=30)
    assert broken.status_code == 400
    assert broken.json()["error"]["code"] == types.PARSE_ERROR
    wrong = httpx.post(
        gateway.url + "/mcp", content=b'{"jsonrpc": "1.0", "x": 1}', headers=headers, timeout=30
    )
    assert 400 <= wrong.status_code < 500
    # The SDK's verdict on a message that is not a JSON-RPC request (its codes, its shape).
    error = wrong.json()["error"]
    assert error["code"] in (types.INVALID_REQUEST, types.INVALID_PARAMS, types.PARSE_ERROR)
    assert error["message"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_keys_mcp_tools_restrict_its_list_and_calls(
    gateway: RunningServer, database: Path, mode: str
) -> None:
    name = f"reader-{mode}"
    key = create_key(gateway.url, MASTER, name, mcp_tools=["box__echo", "web__a*"])
    async with mcp_client(gateway.url + "/mcp", key, mode) as client:
        listed = await client.list_tools()
        allowed = await client.call_tool("box__echo", {"text": "hi"})
        with pytest.raises(MCPError) as refused:
            await client.call_tool("box__add", {"a": 1, "b": 2})
        resources = await client.list_resources()
        prompts = await client.list_prompts()
    assert [tool.name for tool in listed.tools] == ["box__echo", "web__add"]
    assert _texts(allowed) == ["hi"]
    assert refused.value.code == PERMISSION_DENIED
    assert "mcp_tools" in refused.value.message and name in refused.value.message
    assert refused.value.data["status"] == 403
    # Its globs reach box and web, not old: those two servers' resources, no prompt
    # (neither box__greet nor web__greet matches).
    assert [r.uri for r in resources.resources] == ["toolbox://readme"] * 2
    assert prompts.prompts == []
    async with mcp_client(gateway.url + "/mcp/web", key, mode) as client:
        own_names = await client.list_tools()
    assert [tool.name for tool in own_names.tools] == ["add"]
    rows = ledger_rows(database, name, 2)
    recorded = [(r["model"], r["status"]) for r in rows]
    assert recorded == [("mcp:box/echo", 200), ("mcp:box/add", 403)]


@pytest.mark.parametrize("mode", MODES)
async def test_a_keys_mcp_tools_restrict_its_prompts_and_resources(
    gateway: RunningServer, mode: str
) -> None:
    name = f"prompter-{mode}"
    key = create_key(gateway.url, MASTER, name, mcp_tools=["box__greet", "web__*"])
    async with mcp_client(gateway.url + "/mcp", key, mode) as client:
        prompts = await client.list_prompts()
        greeted = await client.get_prompt("box__greet", {"who": "Ada"})
        with pytest.raises(MCPError) as prompt_refused:
            await client.get_prompt("old__greet", {"who": "Ada"})
        resources = await client.list_resources()
        read = await client.read_resource("toolbox://readme")
    assert [p.name for p in prompts.prompts] == ["box__greet", "web__greet"]
    assert isinstance(greeted.messages[0].content, types.TextContent)
    assert "Ada" in greeted.messages[0].content.text
    assert prompt_refused.value.code == PERMISSION_DENIED
    assert prompt_refused.value.data["status"] == 403
    assert "prompt 'old__greet'" in prompt_refused.value.message
    assert name in prompt_refused.value.message
    assert [r.uri for r in resources.resources] == ["toolbox://readme"] * 2  # box, web
    assert isinstance(read.contents[0], types.TextResourceContents)
    # One server under its own names: the same globs, under their /mcp names.
    async with mcp_client(gateway.url + "/mcp/old", key, mode) as client:
        own_prompts = await client.list_prompts()
        own_resources = await client.list_resources()
        with pytest.raises(MCPError) as own_prompt_refused:
            await client.get_prompt("greet", {"who": "Ada"})
        with pytest.raises(MCPError) as read_refused:
            await client.read_resource("toolbox://readme")
    assert own_prompts.prompts == [] and own_resources.resources == []
    assert own_prompt_refused.value.code == PERMISSION_DENIED
    assert read_refused.value.code == PERMISSION_DENIED
    assert read_refused.value.data["status"] == 403
    assert "server 'old'" in read_refused.value.message
    async with mcp_client(gateway.url + "/mcp/web", key, mode) as client:
        web_prompts = await client.list_prompts()
    assert [p.name for p in web_prompts.prompts] == ["greet"]


async def test_a_key_that_reaches_no_server_reads_no_resource(gateway: RunningServer) -> None:
    key = create_key(gateway.url, MASTER, "elsewhere", mcp_tools=["search__*"])
    async with mcp_client(gateway.url + "/mcp", key) as client:
        resources = await client.list_resources()
        templates = await client.list_resource_templates()
        prompts = await client.list_prompts()
        with pytest.raises(MCPError) as refused:
            await client.read_resource("toolbox://readme")
        with pytest.raises(MCPError) as unknown:
            await client.read_resource("toolbox://nothing-serves-this")
    assert resources.resources == [] and templates.resource_templates == []
    assert prompts.prompts == []
    assert refused.value.code == PERMISSION_DENIED
    assert "'elsewhere'" in refused.value.message and "mcp_tools" in refused.value.message
    assert unknown.value.code == types.INVALID_PARAMS  # unknown to everyone: not a refusal


async def test_each_call_is_a_ledger_row(gateway: RunningServer, database: Path) -> None:
    key = create_key(gateway.url, MASTER, "ledgered")
    async with mcp_client(gateway.url + "/mcp", key) as client:
        await client.call_tool("web__echo", {"text": "one"})
    (row,) = ledger_rows(database, "ledgered", 1)
    assert row["model"] == "mcp:web/echo"
    assert row["status"] == 200
    assert row["backend"] == "mcp" and row["deployment"] == "web"
    assert row["dialect"] == "mcp" and row["endpoint"] == "/mcp"
    assert row["input_tokens"] is None and row["cost_usd"] is None
    assert row["latency_ms"] > 0
    facts = httpx.Response(200, content=row["facts"]).json()
    assert facts["mcp-bytes-in"] == str(len(b'{"text":"one"}'))
    assert int(facts["mcp-bytes-out"]) > 0
    auth = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(headers=auth, timeout=scaled(30)) as http:
        metrics = (await http.get(gateway.url + "/metrics")).text
    assert 'llmbridge_mcp_tool_calls_total{server="web",status="200",tool="echo"}' in metrics


async def test_resources_and_prompts_pass_through(gateway: RunningServer) -> None:
    async with mcp_client(gateway.url + "/mcp", MASTER) as client:
        resources = await client.list_resources()
        read = await client.read_resource("toolbox://readme")
        prompts = await client.list_prompts()
        prompt = await client.get_prompt("web__greet", {"who": "Ada"})
    assert [r.uri for r in resources.resources] == ["toolbox://readme"] * 3
    assert isinstance(read.contents[0], types.TextResourceContents)
    assert "toolbox" in read.contents[0].text
    assert [p.name for p in prompts.prompts] == ["box__greet", "web__greet", "old__greet"]
    message = prompt.messages[0].content
    assert isinstance(message, types.TextContent) and "Ada" in message.text


def test_health_names_the_servers(gateway: RunningServer) -> None:
    auth = {"Authorization": f"Bearer {create_key(gateway.url, MASTER, 'health')}"}
    health = httpx.get(gateway.url + "/health", headers=auth, timeout=scaled(30)).json()
    assert health["mcp"]["box"]["state"] == "up"
    assert health["mcp"]["box"]["transport"] == "stdio"
    assert health["mcp"]["web"]["tools"] == len(TOOLBOX_TOOLS)


def test_the_admin_api_takes_and_checks_mcp_tools(gateway: RunningServer) -> None:
    auth = {"Authorization": f"Bearer {MASTER}"}
    made = httpx.post(
        gateway.url + "/admin/keys",
        headers=auth,
        json={"name": "scoped-by-api", "mcp_tools": ["web__*"]},
        timeout=scaled(30),
    )
    assert made.status_code == 201, made.text
    assert made.json()["mcp_tools"] == ["web__*"]
    empty = httpx.post(
        gateway.url + "/admin/keys",
        headers=auth,
        json={"name": "allows-nothing", "mcp_tools": []},
        timeout=scaled(30),
    )
    assert empty.status_code == 400
    assert empty.json()["error"]["param"] == "mcp_tools"

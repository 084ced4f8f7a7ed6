"""The MCP gateway's faults, each a JSON-RPC error within a bounded time: a stdio
server that dies mid-call (the call fails, the server is started again), one that
hangs (the call times out), a result over ``mcp.max_result_bytes``, a server that
is not there, a key over its requests per minute; and pagination, and list-changed
notifications passed on from a server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
from mcp.client.subscriptions import ToolsListChanged
from mcp.shared.exceptions import MCPError

from llmbridge.dialects.jsonrpc import RATE_LIMITED, RESULT_TOO_LARGE, UPSTREAM_UNAVAILABLE
from tests.conftest import RunningServer, create_key, ledger_rows
from tests.mcp.conftest import (
    MASTER,
    TOOLBOX_TOOLS,
    mcp_client,
    mcp_gateway,
    stdio_toolbox,
    tool_names,
)
from tests.waiting import scaled, until

EXTRA_TOOLS = 7


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp-faults") / "gateway.db"


@pytest.fixture(scope="module")
def gateway(database: Path) -> Iterator[RunningServer]:
    servers = {
        # A short call bound for the hanging tool; the wait in backoff short too.
        "box": stdio_toolbox(call_timeout_s=1.0, env={"TOOLBOX_EXTRA_TOOLS": str(EXTRA_TOOLS)}),
        # Nothing listens there: a server that is down from the start.
        "gone": {"url": "http://127.0.0.1:9/mcp"},
    }
    with mcp_gateway(
        database,
        servers,
        max_result_bytes=64 * 1024,
        page_size=4,
        restart_backoff_s=0.2,
    ) as server:
        yield server


def _health(gateway: RunningServer, key: str) -> dict[str, Any]:
    reply = httpx.get(
        gateway.url + "/health", headers={"Authorization": f"Bearer {key}"}, timeout=scaled(30)
    )
    health: dict[str, Any] = reply.json()
    return health


def _texts(result: types.CallToolResult) -> list[str]:
    return [block.text for block in result.content if isinstance(block, types.TextContent)]


async def test_a_stdio_server_that_dies_is_started_again(gateway: RunningServer) -> None:
    watcher = create_key(gateway.url, MASTER, "watcher")
    async with mcp_client(gateway.url + "/mcp", MASTER) as client:
        before = _texts(await client.call_tool("box__pid", {}))
        with anyio.fail_after(scaled(60)), pytest.raises(MCPError) as died:
            await client.call_tool("box__crash", {})
    assert died.value.code == UPSTREAM_UNAVAILABLE
    assert "closed its connection" in died.value.message

    def connected_again() -> bool:
        box = (_health(gateway, watcher))["mcp"]["box"]
        return bool(box["state"] == "up" and box["connections"] >= 2)

    await until(lambda: asyncio.to_thread(connected_again), "the box server started again")
    async with mcp_client(gateway.url + "/mcp", MASTER) as client:
        after = _texts(await client.call_tool("box__pid", {}))
    assert before != after  # another process


async def test_a_hanging_tool_times_out(gateway: RunningServer) -> None:
    async with mcp_client(gateway.url + "/mcp", MASTER) as client:
        with anyio.fail_after(scaled(60)), pytest.raises(MCPError) as hung:
            await client.call_tool("box__hang", {})
        still = await client.call_tool("box__echo", {"text": "still here"})
    assert hung.value.code == types.REQUEST_TIMEOUT
    assert "did not answer the tool 'hang' within 1 s" in hung.value.message
    assert hung.value.data["status"] == 504
    assert _texts(still) == ["still here"]


async def test_a_huge_result_is_refused_saying_so(gateway: RunningServer) -> None:
    async with mcp_client(gateway.url + "/mcp", MASTER) as client:
        with pytest.raises(MCPError) as huge:
            await client.call_tool("box__big", {"size": 1_000_000})
        small = await client.call_tool("box__big", {"size": 10})
    assert huge.value.code == RESULT_TOO_LARGE
    assert "over mcp.max_result_bytes (65536)" in huge.value.message
    assert _texts(small) == ["x" * 10]


async def test_a_server_that_is_down_fails_at_once(gateway: RunningServer) -> None:
    async with mcp_client(gateway.url + "/mcp", MASTER) as client:
        listed = await tool_names(client)
        with pytest.raises(MCPError) as down:
            await client.call_tool("gone__anything", {})
    assert not any(name.startswith("gone__") for name in listed)
    # It never listed a tool: the name is unknown, and says which servers there are.
    assert down.value.code == types.INVALID_PARAMS
    assert "gone" in down.value.message
    health = _health(gateway, create_key(gateway.url, MASTER, "prober"))
    assert health["mcp"]["gone"]["state"] in ("down", "starting")
    assert health["status"] == "up"  # the model APIs are served


async def test_pages_of_tools(gateway: RunningServer) -> None:
    names: list[str] = []
    async with mcp_client(gateway.url + "/mcp", MASTER, mode="legacy") as client:
        cursor: str | None = None
        pages = 0
        while True:
            listed = await client.session.list_tools(
                params=types.PaginatedRequestParams(cursor=cursor) if cursor else None
            )
            assert len(listed.tools) <= 4
            names += [tool.name for tool in listed.tools]
            pages += 1
            cursor = listed.next_cursor
            if not cursor:
                break
        with pytest.raises(MCPError) as forged:
            await client.session.list_tools(params=types.PaginatedRequestParams(cursor="x"))
    extra = [f"box__t{n:02d}" for n in range(EXTRA_TOOLS)]
    assert names == [f"box__{t}" for t in TOOLBOX_TOOLS] + extra
    assert pages == -(-len(names) // 4)
    assert forged.value.code == types.INVALID_PARAMS


async def test_tool_calls_count_in_the_keys_requests_per_minute(
    gateway: RunningServer, database: Path
) -> None:
    key = create_key(gateway.url, MASTER, "two-a-minute", rpm=2)
    async with mcp_client(gateway.url + "/mcp", key) as client:
        await client.call_tool("box__echo", {"text": "1"})
        await client.call_tool("box__echo", {"text": "2"})
        with pytest.raises(MCPError) as limited:
            await client.call_tool("box__echo", {"text": "3"})
    assert limited.value.code == RATE_LIMITED
    assert "2 requests per minute" in limited.value.message
    rows = ledger_rows(database, "two-a-minute", 3)
    assert [r["status"] for r in rows] == [200, 200, 429]


async def test_a_list_change_is_passed_on(gateway: RunningServer) -> None:
    changed = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    url = gateway.url + "/mcp"
    async with mcp_client(url, MASTER, mode="legacy", message_handler=on_message) as client:
        await client.list_tools()  # a client that has listed is told of changes
        await client.call_tool("box__grow", {"tool": "sprout"})
        with anyio.fail_after(scaled(60)):
            await changed.wait()

        async def listed() -> bool:
            return "box__sprout" in await tool_names(client)

        await until(listed, "the new tool listed")


async def test_a_list_change_reaches_a_listen_stream(gateway: RunningServer) -> None:
    async with mcp_client(gateway.url + "/mcp", MASTER) as client:  # 2026-07-28
        assert client.protocol_version == "2026-07-28"
        async with client.listen(tools_list_changed=True) as subscription:
            await client.call_tool("box__grow", {"tool": "shoot"})
            with anyio.fail_after(scaled(60)):
                event = await anext(aiter(subscription))
        assert isinstance(event, ToolsListChanged)
        assert "box__shoot" in await tool_names(client)

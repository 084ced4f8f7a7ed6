"""The console and the MCP gateway: the "MCP servers" page (listed in the navigation
when ``mcp.servers`` names any; each server's state and why it is down, transport,
tools, calls and failures, tool calls and errors, breaker), MCP tool calls in the
request log read as tool calls (the tool and its server, the bytes in and out, no
tokens or cost), and the keys form's ``mcp_tools``, which the MCP gateway then
applies. Over HTTP, and the page in Chromium."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from llmbridge.dialects.jsonrpc import PERMISSION_DENIED
from tests.conftest import RunningServer, create_key, ledger_rows
from tests.console.conftest import CHROMIUM, console_gateway, csrf_of, sign_in, type_master_key
from tests.mcp.conftest import MASTER, TOOLBOX_TOOLS, mcp_client, mcp_gateway, stdio_toolbox
from tests.waiting import scaled, wait_until

UNSET = "LLMBRIDGE_CONSOLE_TEST_UNSET_TOKEN"
"""A variable no test sets: the server ``gone`` needs it, so it stays down."""
WAIT_MS = scaled(30) * 1000


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("console-mcp") / "gateway.db"


@pytest.fixture(scope="module")
def gateway(database: Path) -> Iterator[RunningServer]:
    servers = {
        "box": stdio_toolbox(),
        "gone": stdio_toolbox(env={"TOKEN": "${" + UNSET + "}"}),
    }
    # A loaded machine starts the toolbox slowly: its connection's bound is scaled.
    with mcp_gateway(database, servers) as server:
        auth = {"Authorization": f"Bearer {create_key(server.url, MASTER, 'watcher')}"}

        def box_up() -> bool:
            health = httpx.get(server.url + "/health", headers=auth, timeout=scaled(30))
            return bool(health.json()["mcp"]["box"]["state"] == "up")

        wait_until(box_up, "the toolbox box is up")
        yield server


@pytest.fixture
async def client(gateway: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    """The console signed in with the gateway's master key."""
    async with httpx.AsyncClient(base_url=gateway.url, timeout=scaled(30)) as c:
        signed_in = await c.post("/ui/sign-in", data={"master_key": MASTER})
        assert signed_in.status_code == 303
        yield c


def _server_row(page: str, server: str) -> str:
    """The text of the MCP page's row of ``server`` (its cells, tags removed)."""
    for row in re.findall(r"<tr>(.*?)</tr>", page, flags=re.S):
        if f"<code>{server}</code>" in row:
            return " ".join(re.sub(r"<[^>]+>", " ", row).split())
    raise AssertionError(f"no row for {server} in {page}")


def _tool_calls(page: str, server: str) -> tuple[int, int]:
    """The "tool calls / errors" cell of ``server``'s row."""
    cells = re.findall(r"<td[^>]*>(.*?)</td>", page.split(f"<code>{server}</code>")[1], re.S)
    calls, errors = re.sub(r"<[^>]+>", "", cells[6]).split("/")
    return int(calls), int(errors)


async def test_the_mcp_page_shows_each_servers_state_calls_and_breaker(
    client: httpx.AsyncClient, gateway: RunningServer
) -> None:
    page = await client.get("/ui/mcp")
    assert page.status_code == 200
    assert '<a href="/ui/mcp" aria-current="page">MCP servers</a>' in page.text
    box = _server_row(page.text, "box")
    assert box.startswith(f"box up stdio 2025-11-25 {len(TOOLBOX_TOOLS)} 1 / 1 1")
    assert box.endswith("closed")
    gone = _server_row(page.text, "gone")
    assert gone.startswith("gone down") and UNSET in gone  # why it is down
    assert " 0 0 / 0 " in gone  # nothing listed, no connection

    before = _tool_calls(page.text, "box")
    key = create_key(gateway.url, MASTER, "counted", mcp_tools=["box__echo"])
    async with mcp_client(gateway.url + "/mcp", key) as mcp:
        await mcp.call_tool("box__echo", {"text": "hi"})
        with pytest.raises(MCPError) as refused:
            await mcp.call_tool("box__add", {"a": 1, "b": 2})
    assert refused.value.code == PERMISSION_DENIED
    after = _tool_calls((await client.get("/ui/mcp")).text, "box")
    assert after == (before[0] + 2, before[1] + 1)  # the refusal is an error


async def test_a_tool_call_reads_as_one_in_the_request_log(
    client: httpx.AsyncClient, gateway: RunningServer, database: Path
) -> None:
    key = create_key(gateway.url, MASTER, "logged")
    async with mcp_client(gateway.url + "/mcp", key) as mcp:
        await mcp.call_tool("box__echo", {"text": "hi"})
    (row,) = ledger_rows(database, "logged", 1)
    rows = await client.get("/ui/requests/rows", params={"key": "logged"})
    assert rows.status_code == 200
    text = " ".join(re.sub(r"<[^>]+>", " ", rows.text).split())
    arguments = len(b'{"text":"hi"}')
    assert "tool echo on box" in text and "box MCP server" in text
    assert f"{arguments} B / " in text and "arguments / result" in text
    assert "mcp:box/echo" not in text and "→" not in text  # not a model asked and served
    assert "MCP 2026-07-28" in text  # the protocol the client spoke
    assert "mcp-bytes-in" not in text  # shown as bytes, not as a raw fact

    detail = await client.get(f"/ui/requests/{row['request_id']}")
    assert detail.status_code == 200
    shown = " ".join(re.sub(r"<[^>]+>", " ", detail.text).split())
    for fact in ("an MCP tool call", "Tool echo", "Server box", f"Arguments {arguments} B"):
        assert fact in shown, (fact, shown)
    assert "Input tokens" not in shown and "Finish reason" not in shown


async def test_the_keys_form_sets_mcp_tools_and_the_gateway_applies_them(
    client: httpx.AsyncClient, gateway: RunningServer
) -> None:
    token = csrf_of(await client.get("/ui/keys"))
    made = await client.post(
        "/ui/keys",
        data={"name": "form-scoped", "mcp_tools": "box__echo, box__greet", "csrf": token},
    )
    assert made.status_code == 201
    key = made.text.split('id="new-key" class="secret">')[1].split("<")[0]
    listed = (await client.get("/ui/keys")).text
    row = next(r for r in re.findall(r"<tr>(.*?)</tr>", listed, re.S) if "form-scoped" in r)
    assert "box__echo, box__greet" in row
    async with mcp_client(gateway.url + "/mcp", key) as mcp:
        tools = await mcp.list_tools()
        prompts = await mcp.list_prompts()
    assert [tool.name for tool in tools.tools] == ["box__echo"]
    assert [prompt.name for prompt in prompts.prompts] == ["box__greet"]


def test_without_mcp_servers_the_page_is_not_listed(tmp_path: Path) -> None:
    with (
        console_gateway(tmp_path) as gateway,
        httpx.Client(base_url=gateway.url, timeout=scaled(30)) as client,
    ):
        sign_in(client)
        overview = client.get("/ui/")
        missing = client.get("/ui/mcp")
    assert overview.status_code == 200 and "MCP servers" not in overview.text
    assert missing.status_code == 404 and "mcp.servers" in missing.text


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Chromium is not installed (make chromium)")
def test_the_mcp_page_in_a_browser(gateway: RunningServer, browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(gateway.url + "/ui/sign-in")
    type_master_key(page, WAIT_MS, MASTER)
    page.wait_for_url("**/ui/", timeout=WAIT_MS)
    page.click("nav >> text=MCP servers")
    page.wait_for_url("**/ui/mcp", timeout=WAIT_MS)
    assert page.locator("h1").inner_text() == "MCP servers"
    box = page.locator("tr", has_text="stdio").first.inner_text()
    assert "box" in box and "up" in box and "closed" in box
    assert UNSET in page.locator("tr", has_text="gone").inner_text()
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    overflow = page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0, f"the MCP page is {overflow} px wider than the phone"
    assert errors == []
    page.close()

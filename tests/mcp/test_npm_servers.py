"""The gateway in front of the reference MCP servers from npm (tests/mcp/npm_servers.py):
server-everything over stdio (``everything``) and over its own streamable HTTP server
(``web``), server-filesystem over stdio on a temporary directory (``files``), driven
with the SDK's client on ``/mcp``: their tools under ``<server>__<tool>``, calls that
reach them, server-everything's resources and prompts, and the ledger row of a call."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import mcp_types as types
import pytest

from tests.conftest import RunningServer, create_key, ledger_rows
from tests.mcp.conftest import MASTER, mcp_client, mcp_gateway, tool_names
from tests.mcp.npm_servers import (
    EVERYTHING_DOCS,
    everything_over_http,
    everything_stdio,
    filesystem_stdio,
    installed_node,
)

# Tools each server lists whatever the client's capabilities (server-everything adds
# more, such as get-roots-list, for clients that offer roots, sampling or elicitation).
EVERYTHING_TOOLS = {"echo", "get-sum", "get-env", "get-tiny-image", "get-structured-content"}
FILESYSTEM_TOOLS = {
    "read_file",
    "read_text_file",
    "write_file",
    "list_directory",
    "search_files",
    "list_allowed_directories",
}
NOTE = "The gateway read this through server-filesystem.\n"


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory server-filesystem is given, with one file in it."""
    folder = tmp_path_factory.mktemp("shared")
    (folder / "note.md").write_text(NOTE, encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp-npm") / "gateway.db"


@pytest.fixture(scope="module")
def gateway(
    database: Path, shared: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    node = installed_node()
    log = tmp_path_factory.mktemp("everything-http") / "server.log"
    with everything_over_http(node, log) as web_url:
        servers = {
            "everything": everything_stdio(node),
            "files": filesystem_stdio(node, shared),
            "web": {"url": web_url},
        }
        with mcp_gateway(database, servers) as server:
            yield server


def _texts(result: types.CallToolResult) -> list[str]:
    return [block.text for block in result.content if isinstance(block, types.TextContent)]


async def test_their_tools_are_listed_under_the_servers_names(gateway: RunningServer) -> None:
    async with mcp_client(gateway.url + "/mcp", MASTER) as client:
        names = await tool_names(client)
    by_server: dict[str, set[str]] = {}
    for name in names:
        server, separator, tool = name.partition("__")
        assert separator and tool, name
        by_server.setdefault(server, set()).add(tool)
    assert list(by_server) == ["everything", "files", "web"], names  # the configured order
    assert by_server["everything"] >= EVERYTHING_TOOLS, names
    assert by_server["files"] >= FILESYSTEM_TOOLS, names
    assert by_server["web"] >= EVERYTHING_TOOLS, names


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_calls_reach_the_servers(gateway: RunningServer, shared: Path, mode: str) -> None:
    async with mcp_client(gateway.url + "/mcp", MASTER, mode) as client:
        echoed = await client.call_tool("everything__echo", {"message": "über stdio"})
        summed = await client.call_tool("everything__get-sum", {"a": 40, "b": 2})
        over_http = await client.call_tool("web__echo", {"message": "over HTTP"})
        read = await client.call_tool("files__read_file", {"path": str(shared / "note.md")})
        listed = await client.call_tool("files__list_directory", {"path": str(shared)})
        outside = await client.call_tool("files__read_file", {"path": "/etc/hostname"})
    assert _texts(echoed) == ["Echo: über stdio"] and not echoed.is_error
    assert "42" in " ".join(_texts(summed))
    assert _texts(over_http) == ["Echo: over HTTP"]
    assert _texts(read) == [NOTE] and not read.is_error
    assert "[FILE] note.md" in _texts(listed)[0]
    # server-filesystem's own refusal of a path outside its directory, passed on.
    assert outside.is_error
    assert "outside allowed directories" in " ".join(_texts(outside))


async def test_resources_of_server_everything_are_listed_and_read(gateway: RunningServer) -> None:
    async with mcp_client(gateway.url + "/mcp", MASTER) as client:
        listed = await client.list_resources()
        templates = await client.list_resource_templates()
        uri = "demo://resource/static/document/features.md"
        read = await client.read_resource(uri)
        dynamic = await client.read_resource("demo://resource/dynamic/text/7")
    uris = [str(resource.uri) for resource in listed.resources]
    assert uri in uris, uris
    patterns = [template.uri_template for template in templates.resource_templates]
    assert "demo://resource/dynamic/text/{resourceId}" in patterns, patterns
    (content,) = read.contents
    assert isinstance(content, types.TextResourceContents)
    assert content.text == (EVERYTHING_DOCS / "features.md").read_text(encoding="utf-8")
    # A URI no server listed, matched by server-everything's template.
    (generated,) = dynamic.contents
    assert isinstance(generated, types.TextResourceContents)
    assert "7" in generated.text


async def test_prompts_of_server_everything_are_listed_and_got(gateway: RunningServer) -> None:
    async with mcp_client(gateway.url + "/mcp", MASTER) as client:
        listed = await client.list_prompts()
        simple = await client.get_prompt("everything__simple-prompt")
        with_arguments = await client.get_prompt("web__args-prompt", {"city": "Lyon"})
    names = [prompt.name for prompt in listed.prompts]
    assert {"everything__simple-prompt", "everything__args-prompt", "web__args-prompt"} <= set(
        names
    ), names
    (message,) = simple.messages
    assert isinstance(message.content, types.TextContent)
    assert message.content.text == "This is a simple prompt without arguments."
    texts = [
        m.content.text for m in with_arguments.messages if isinstance(m.content, types.TextContent)
    ]
    assert any("Lyon" in text for text in texts), texts


async def test_a_call_is_in_the_ledger(
    gateway: RunningServer, database: Path, shared: Path
) -> None:
    key = create_key(gateway.url, MASTER, "npm-reader", mcp_tools=["files__read_*"])
    async with mcp_client(gateway.url + "/mcp", key) as client:
        names = await tool_names(client)
        read = await client.call_tool("files__read_text_file", {"path": str(shared / "note.md")})
    assert names and all(name.startswith("files__read_") for name in names), names
    assert _texts(read) == [NOTE]
    (row,) = ledger_rows(database, "npm-reader", 1)
    assert row["model"] == "mcp:files/read_text_file" and row["backend"] == "mcp"
    assert row["status"] == 200

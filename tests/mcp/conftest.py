"""The MCP gateway's fixtures: the toolbox server (tests/mcp/servers/toolbox.py) over
stdio (spawned by the gateway from its configuration) and over streamable HTTP (on a
loopback port), a gateway in front of them, and the SDK's own client against it."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import MessageHandlerFnT
from mcp.client.streamable_http import streamable_http_client

from llmbridge.backends.scripted import ScriptedBackend
from tests.conftest import RunningServer, running_gateway
from tests.mcp.servers.toolbox import build
from tests.waiting import scaled

TOOLBOX = Path(__file__).parent / "servers" / "toolbox.py"
MASTER = "sk-master-mcp"
TOOLBOX_TOOLS = ("echo", "add", "pid", "crash", "hang", "big", "fail", "grow", "header")


def stdio_toolbox(**settings: Any) -> dict[str, Any]:
    """An ``mcp.servers`` entry running the toolbox over stdio."""
    return {"command": [sys.executable, str(TOOLBOX)], **settings}


@pytest.fixture(scope="module")
def toolbox_url() -> Iterator[str]:
    """The toolbox over streamable HTTP on a loopback port: its endpoint's URL."""
    with RunningServer(build("web").streamable_http_app()) as server:
        yield server.url + "/mcp"


@pytest.fixture(scope="module")
def old_toolbox_url() -> Iterator[str]:
    """The toolbox over the 2024-11-05 revision's HTTP+SSE transport: its SSE URL."""
    with RunningServer(build("old").sse_app()) as server:
        yield server.url + "/sse"


@contextmanager
def mcp_gateway(
    database: Path,
    servers: dict[str, Any],
    gateway_config: dict[str, Any] | None = None,
    *,
    backend: ScriptedBackend | None = None,
    agent: dict[str, Any] | None = None,
    **settings: Any,
) -> Iterator[RunningServer]:
    """A gateway with the master key ``MASTER`` (so keys and the ledger are on), its
    database at ``database``, serving ``servers`` on ``/mcp`` with the ``mcp``
    ``settings``; ``gateway_config``: more of its configuration's sections;
    ``backend``: its model backend (a new scripted one); ``agent``: more of the agent's
    settings."""
    # The gateway's own deadlines on a server's start, scaled like the tests' waits: a
    # stdio server written with the SDK took 41 s to import itself beside busy loops.
    mcp = {"servers": servers, "start_wait_s": scaled(60), "connect_timeout_s": scaled(30)}
    mcp.update(settings)
    with running_gateway(
        {"scripted": backend or ScriptedBackend()},
        server={"master_key": MASTER},
        agent={"database": str(database), **(agent or {})},
        mcp=mcp,
        **(gateway_config or {}),
    ) as gateway:
        yield gateway


@asynccontextmanager
async def mcp_client(
    url: str,
    key: str | None = None,
    mode: str = "auto",
    message_handler: MessageHandlerFnT | None = None,
) -> AsyncIterator[Client]:
    """The SDK's client on ``url`` (``…/mcp`` or ``…/mcp/<server>``), sending ``key``
    as ``Authorization: Bearer``; ``mode`` ``auto`` speaks 2026-07-28 to the gateway,
    ``legacy`` the initialize handshake (2025-11-25); ``message_handler`` gets the
    notifications."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(scaled(30), read=scaled(120)))
    transport = streamable_http_client(url, http_client=http)
    async with http, Client(transport, mode=mode, message_handler=message_handler) as client:
        yield client


async def tool_names(client: Client) -> list[str]:
    """Every tool ``client``'s endpoint lists, its pages followed (``Client.list_tools``
    reads one page)."""
    names: list[str] = []
    cursor: str | None = None
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        listed = await client.session.list_tools(params=params)
        names += [tool.name for tool in listed.tools]
        cursor = listed.next_cursor
        if not cursor:
            return names

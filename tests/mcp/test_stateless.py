"""``mcp.stateless`` (the default under ``--workers N``, where the next request may
reach another worker): no sessions, every request stands alone, and handshake
clients work all the same; 2026-07-28 clients are stateless anyway."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import mcp_types as types
import pytest

from tests.conftest import RunningServer
from tests.mcp.conftest import MASTER, mcp_client, mcp_gateway
from tests.waiting import scaled


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, toolbox_url: str) -> Iterator[RunningServer]:
    database: Path = tmp_path_factory.mktemp("mcp-stateless") / "gateway.db"
    with mcp_gateway(database, {"web": {"url": toolbox_url}}, stateless=True) as server:
        yield server


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_calls_without_a_session(gateway: RunningServer, mode: str) -> None:
    async with mcp_client(gateway.url + "/mcp", MASTER, mode) as client:
        result = await client.call_tool("web__add", {"a": 1, "b": 1})
    assert [b.text for b in result.content if isinstance(b, types.TextContent)] == ["2"]


def test_the_handshake_opens_no_session(gateway: RunningServer) -> None:
    reply = httpx.post(
        gateway.url + "/mcp",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "probe", "version": "1"},
            },
        },
        headers={
            "Authorization": f"Bearer {MASTER}",
            "Accept": "application/json, text/event-stream",
        },
        timeout=scaled(30),
    )
    assert reply.status_code == 200
    assert "mcp-session-id" not in reply.headers
    assert "2025-06-18" in reply.text  # negotiated down to what the client offered
    assert '"listChanged":false' in reply.text.replace(" ", "")  # no stream to tell it on

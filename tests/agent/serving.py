"""Helpers for the agent's HTTP tests: a gateway with the agent on a given database,
and a Server-Sent Events reader.

The gateway listens on a socket that names ``IPPROTO_TCP`` (``tests/fuzz/conftest.py``
explains why: asyncio turns Nagle off only there, which saves ~45 ms a request)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import orjson

from llmbridge.agent.tools import ToolRegistry
from llmbridge.backends.scripted import ScriptedBackend
from llmbridge.gateway.app import create_app
from llmbridge.gateway.config import GatewayConfig
from tests.conftest import RunningServer


@contextmanager
def agent_gateway(
    database: str,
    backends: dict[str, ScriptedBackend],
    *,
    keys: tuple[str, ...] = (),
    tools: ToolRegistry | None = None,
    routes: tuple[dict[str, Any], ...] = (),
    **agent: Any,
) -> Iterator[RunningServer]:
    """The gateway over ``backends`` (the first is the default) with the agent service
    on ``database`` (no tools unless given: deterministic whatever the environment)."""
    names = list(backends)
    config = GatewayConfig.model_validate(
        {
            "server": {"api_keys": list(keys)},
            "backends": {name: {"type": "scripted"} for name in names},
            "default_backend": names[0],
            "models": list(routes),
            "database": {"url": database},
            "agent": agent,
        }
    )
    app = create_app(config, backends=dict(backends), agent_tools=tools or ToolRegistry())
    # A long keep-alive: a test that holds many connections while turns queue behind a
    # session's lock (test_hardening's 200 concurrent turns) reuses some of them after
    # uvicorn's default 5 s; a server closing one just as the client sends on it is
    # "Server disconnected" in the client, a race of the test's making, not the gateway's.
    with RunningServer(app, _tcp_socket(), timeout_keep_alive=120) as server:
        yield server


def _tcp_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def sse_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    """``(event, data)`` of every event in an SSE body (data is one JSON line)."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name, data = "message", None
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data = line[5:].strip()
        if data is not None:
            events.append((name, orjson.loads(data)))
    return events


async def session_of(client: httpx.AsyncClient, **body: Any) -> str:
    """A new session's id (``POST /agent/sessions`` with ``body``)."""
    response = await client.post("/agent/sessions", json=body)
    assert response.status_code == 201, response.text
    session_id: str = response.json()["id"]
    return session_id


async def messages_of(client: httpx.AsyncClient, session_id: str) -> list[dict[str, Any]]:
    """Every stored message of a session."""
    response = await client.get(f"/agent/sessions/{session_id}/messages", params={"limit": 1000})
    assert response.status_code == 200, response.text
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    """The agent API's JSON error of ``response``, which must have ``status``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error: dict[str, Any] = response.json()["error"]
    assert error["message"] and error["type"]
    assert "Traceback" not in response.text
    return error

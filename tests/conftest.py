"""Shared fixtures: a real gateway on a loopback port, and a clean environment.

Every protocol test talks to a real uvicorn server over 127.0.0.1 with the official
client of its dialect; nothing here patches a client or a transport.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.types import ASGIApp

from llmbridge.backends.base import Backend
from llmbridge.backends.scripted import ScriptedBackend
from llmbridge.gateway.app import create_app, http_protocol
from llmbridge.gateway.config import GatewayConfig
from tests.waiting import scaled

# The session's PostgreSQL and Redis, defined once so every module shares them.
pytest_plugins = ["tests.servers"]

_CLIENT_ENV = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "OLLAMA_HOST",
)


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients must reach the loopback gateway directly, whatever the shell exported."""
    for name in _CLIENT_ENV:
        monkeypatch.delenv(name, raising=False)
    for name in list(os.environ):
        if name.startswith("LLMBRIDGE_"):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture(autouse=True, scope="session")
def _private_data_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Gateways open the agent store at start: keep its default SQLite file (under
    ``$XDG_DATA_HOME``) out of the user's home during tests."""
    saved = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = str(tmp_path_factory.mktemp("data-home"))
    yield
    if saved is None:
        os.environ.pop("XDG_DATA_HOME", None)
    else:
        os.environ["XDG_DATA_HOME"] = saved


class RunningServer:
    """A uvicorn server running ``app`` in a background thread on 127.0.0.1.
    ``options`` go to ``uvicorn.Config`` (``http=`` a protocol class, say)."""

    def __init__(self, app: ASGIApp, sock: socket.socket | None = None, **options: Any) -> None:
        sock = sock or self.reserve()
        self.port: int = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, loop="asyncio", lifespan="on", **options
        )
        self.server = uvicorn.Server(config)
        self._sock = sock
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def reserve() -> socket.socket:
        """A bound loopback socket: its port is known before the app is built (for a
        configuration that names the gateway's own address)."""
        # IPPROTO_TCP named explicitly: asyncio turns Nagle's algorithm off
        # (TCP_NODELAY) only on sockets whose protocol says TCP; with 0, every small
        # response waited ~40 ms for the client's delayed ACK.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        return sock

    def _run(self) -> None:
        asyncio.run(self.server.serve(sockets=[self._sock]))

    def __enter__(self) -> RunningServer:
        self._thread.start()
        # Started is an event; the bound only stops a hang (a gateway's start-up opens
        # its stores and backends, which takes seconds on a busy machine).
        deadline = time.monotonic() + scaled(60.0)
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the test server failed to start")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the test server did not start within {scaled(60.0):.0f} s")
            threading.Event().wait(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()


@contextmanager
def running_gateway(backends: dict[str, Backend], **config: Any) -> Iterator[RunningServer]:
    """The gateway over ``backends`` (the first is the default), served on loopback
    through the same HTTP protocol (and read limits) as ``llmbridge serve``."""
    names = list(backends)
    settings: dict[str, Any] = {
        "backends": {name: {"type": "scripted"} for name in names},
        "default_backend": names[0],
    }
    settings.update(config)
    app = create_app(GatewayConfig.model_validate(settings), backends=backends)
    with RunningServer(app, http=http_protocol(app)) as server:
        yield server


@pytest.fixture(scope="module")
def scripted() -> ScriptedBackend:
    return ScriptedBackend("scripted", models=("scripted", "other"))


@pytest.fixture(scope="module")
def gateway(scripted: ScriptedBackend) -> Iterator[RunningServer]:
    """A gateway whose default backend is the module's scripted backend."""
    with running_gateway({"scripted": scripted}) as server:
        yield server


@pytest.fixture(autouse=True)
def _reset_scripted(request: pytest.FixtureRequest) -> None:
    if "scripted" in request.fixturenames:
        backend: ScriptedBackend = request.getfixturevalue("scripted")
        backend.queue.clear()


# -- official clients, closed after each test ---------------------------------------

_open_clients: list[Any] = []


def ollama_client(url: str, **kwargs: Any) -> Any:
    import ollama

    client = ollama.Client(host=url, **kwargs)
    _open_clients.append(client)
    return client


def openai_client(url: str, api_key: str = "x") -> Any:
    import openai

    client = openai.OpenAI(base_url=url + "/v1", api_key=api_key, max_retries=0)
    _open_clients.append(client)
    return client


def anthropic_client(url: str, api_key: str = "x") -> Any:
    import anthropic

    client = anthropic.Anthropic(base_url=url, api_key=api_key, max_retries=0)
    _open_clients.append(client)
    return client


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _open_clients:
        _open_clients.pop().close()


def create_key(url: str, master: str, name: str, **limits: Any) -> str:
    """A database key made through the gateway's admin API (``POST /admin/keys``)."""
    import httpx

    reply = httpx.post(
        url + "/admin/keys",
        headers={"Authorization": f"Bearer {master}"},
        json={"name": name, **limits},
        timeout=30,
    )
    assert reply.status_code == 201, reply.text
    key: str = reply.json()["key"]
    return key


def ledger_rows(database: Path, key_name: str, count: int) -> list[sqlite3.Row]:
    """The SQLite usage ledger's rows of ``key_name`` once there are ``count`` (it
    writes every second): a bounded poll."""
    waited = threading.Event()
    rows: list[sqlite3.Row] = []
    for _ in range(150):
        with sqlite3.connect(database) as db:
            db.row_factory = sqlite3.Row
            rows = db.execute(
                "SELECT * FROM usage WHERE key_name = ? ORDER BY created_at", (key_name,)
            ).fetchall()
        if len(rows) >= count:
            return rows
        waited.wait(0.1)
    raise AssertionError(f"the ledger has {len(rows)} of {count} rows for {key_name}")

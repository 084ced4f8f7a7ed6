"""Shared fixtures: a real gateway on a loopback port, and a clean environment.

Every protocol test talks to a real uvicorn server over 127.0.0.1 with the official
client of its dialect; nothing here patches a client or a transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from hypothesis import HealthCheck, settings
from starlette.types import ASGIApp

from llmbridge.backends.base import Backend
from llmbridge.backends.embedded.backend import THREADS_VARIABLE
from llmbridge.backends.scripted import ScriptedBackend
from llmbridge.gateway.app import create_app, http_protocol
from llmbridge.gateway.config import GatewayConfig
from tests.waiting import scaled

# The session's PostgreSQL and Redis, defined once so every module shares them; the
# scheduler of make test's workers; the guard that turns a hang into one failure.
pytest_plugins = ["tests.servers", "tests.parallel", "tests.hang_guard"]

# Property tests judge their examples, not the clock: Hypothesis's health check that
# fails a test whose examples are slow to generate fails it beside busy loops (as its
# per-example deadline would), so neither applies; every test keeps its own settings
# over this profile.
settings.register_profile("llmbridge", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("llmbridge")

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
        # The embedded model's threads are the harness's (tests/parallel.py), and no
        # test's outcome depends on them.
        if name.startswith("LLMBRIDGE_") and name != THREADS_VARIABLE:
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


class _PromptServer(uvicorn.Server):
    """uvicorn's server, minus its ticks: stock uvicorn checks ``should_exit`` every
    0.1 s, sleeps a fixed 0.1 s after asking connections to close and polls them every
    0.1 s; the suite starts some 250 gateways, so those ticks cost it tens of seconds.
    Here ``stop()`` wakes the main loop at once, readiness is a ``threading.Event``, and
    shutdown polls connections every 5 ms. Graceful behaviour is unchanged: idle
    keep-alive connections are closed at once (as uvicorn does), in-flight requests run
    to their end, and the lifespan shutdown runs."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        await super().startup(sockets=sockets)

    async def main_loop(self) -> None:
        assert self._wake is not None
        self.ready.set()
        # on_tick keeps the Date header fresh (each 10th tick) and reads should_exit.
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 10) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=1.0)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        # Idle connections close at once; one with a response under way finishes it
        # (within timeout_graceful_shutdown, when a test sets one, as in uvicorn).
        try:
            await asyncio.wait_for(self._drained(), self.config.timeout_graceful_shutdown)
        except TimeoutError:
            for task in self.server_state.tasks:
                task.cancel()
        for server in self.servers:
            await server.wait_closed()
        await self.lifespan.shutdown()

    async def _drained(self) -> None:
        # uvicorn's connection and task sets have no event to wait on: a 5 ms poll.
        while self.server_state.connections or self.server_state.tasks:  # noqa: ASYNC110
            await asyncio.sleep(0.005)

    def stop(self) -> None:
        """Ask the server to stop, from any thread: it wakes at once."""
        self.should_exit = True
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already closed
                loop.call_soon_threadsafe(wake.set)


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
        self.server = _PromptServer(config)
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
        try:
            asyncio.run(self.server.serve(sockets=[self._sock]))
        finally:
            self.server.ready.set()  # a failed start wakes __enter__ too

    def __enter__(self) -> RunningServer:
        self._thread.start()
        # Started is an event; the bound only stops a hang (a gateway's start-up opens
        # its stores and backends, which takes seconds on a busy machine).
        if not self.server.ready.wait(timeout=scaled(60.0)):
            raise RuntimeError(f"the test server did not start within {scaled(60.0):.0f} s")
        if not self.server.started or not self._thread.is_alive():
            raise RuntimeError("the test server failed to start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()
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
    gateway_config = GatewayConfig.model_validate(settings)
    app = create_app(gateway_config, backends=backends)
    # Forwarded headers and WebSockets as llmbridge serve has them (ServerConfig.uvicorn_options).
    options = gateway_config.server.uvicorn_options()
    with RunningServer(app, http=http_protocol(app), **options) as server:
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

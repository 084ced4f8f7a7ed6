"""A real Redis for the shared-state tests: Debian's ``redis-server`` on a free
loopback port, in a temporary directory, with persistence off.

One server per test session (``redis_server``); each test that asks for
``redis_url`` starts from an empty database. ``RedisServer.stop()`` and
``start()`` take it away and bring it back mid-test (on the same port) for the
failover tests (``pause()`` and ``resume()`` freeze it); a test that stops or
pauses it brings it back before it ends. When
``redis-server`` is not installed the tests that need it are skipped with a
message naming the package (``make test`` installs it, as it does PostgreSQL).
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from llmbridge.state.failover import FailoverState
from llmbridge.state.local import LocalState
from llmbridge.state.redis import RedisState
from tests.waiting import scaled

INSTALL_HINT = "install it with `apt-get install redis-server` (Debian/Ubuntu) or `make redis`"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One ``redis-server`` process that tests may stop and start again."""

    def __init__(self, binary: str, port: int, directory: Path) -> None:
        self.binary = binary
        self.port = port
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        if self.process is not None:
            return
        options = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), *options, "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not _answers(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)

    def stop(self) -> None:
        """Kill it (SIGKILL: as an outage looks to clients, no goodbye) and wait."""
        if self.process is None:
            return
        self.process.kill()
        self.process.wait(timeout=10)
        self.process = None

    def pause(self) -> None:
        """Freeze it (SIGSTOP): connections stay open and nothing answers, as with a
        Redis that hangs or a network that drops packets. ``resume()`` thaws it with
        its data intact."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def flush(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
            sock.sendall(b"FLUSHALL\r\n")
            assert sock.recv(64).startswith(b"+OK")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip(f"redis-server was not found on PATH; {INSTALL_HINT}")
    server = RedisServer(binary, free_port(), tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session's Redis, running and empty."""
    redis_server.start()
    redis_server.flush()
    return redis_server.url


State = LocalState | RedisState | FailoverState
"""Every implementation of the shared-state contract."""


@pytest.fixture(params=["local", "redis", "failover"])
async def state(request: pytest.FixtureRequest) -> AsyncIterator[State]:
    """Each implementation in turn: in process, Redis, Redis with the local fallback."""
    if request.param == "local":
        yield LocalState()
        return
    url: str = request.getfixturevalue("redis_url")
    shared: RedisState | FailoverState = (
        RedisState(url) if request.param == "redis" else FailoverState(url)
    )
    try:
        yield shared
    finally:
        await shared.aclose()


async def eventually(check: Callable[[], Awaitable[bool]], within_s: float = 60.0) -> bool:
    """Poll ``check`` until it holds (a bound on a hang, not a timing assertion; scaled in
    tests/waiting.py)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + scaled(within_s)
    while loop.time() < deadline:
        if await check():
            return True
        await asyncio.sleep(0.05)
    return await check()

"""The session's database servers: one PostgreSQL and one Redis for the whole test run.

Registered once, as a plugin, by tests/conftest.py (``pytest_plugins``), so every test
module sees the same two servers; a test module or conftest must not import the fixtures
below by name (an imported fixture is a second definition, and a session fixture defined
twice starts a second server: the suite once started four PostgreSQL and three Redis
servers that way). The classes and helpers may be imported freely.

PostgreSQL: the ``postgres_server`` fixture starts one server per test session from
the Debian ``postgresql`` package's binaries (``initdb``/``pg_ctl`` on ``PATH`` or
under ``/usr/lib/postgresql/<version>/bin``), in a fresh data directory, listening on
a free port of 127.0.0.1 only, with its unix socket inside that directory, fsync off
(a throwaway cluster), trust authentication for the ``postgres`` user; each test that
asks for ``pg_url`` gets a new database on it. When the binaries are missing the
tests that need them are skipped with a message naming the package to install.

Running as root (as in CI containers): ``initdb`` refuses to run as root, so the
server is initialised and run as the unprivileged ``nobody`` user through
``runuser -u nobody --`` (util-linux, present on Debian), and the data directory is
created directly under the system temporary directory (``/tmp``, world-traversable;
pytest's own ``tmp_path`` is private to root) and handed to ``nobody`` with
``chown``. Where neither ``runuser`` nor a ``nobody`` user exists, the skip says so.

Redis: Debian's ``redis-server`` on a free loopback port, in a temporary directory,
with persistence off; each test that asks for ``redis_url`` starts from an empty
database. ``RedisServer.stop()`` and ``start()`` take it away and bring it back
mid-test (on the same port) for the failover tests (``pause()`` and ``resume()``
freeze it); a test that stops or pauses it brings it back before it ends. When
``redis-server`` is not installed the tests that need it are skipped with a message
naming the package (``make test`` installs it, as it does PostgreSQL).
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.waiting import wait_until


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# -- PostgreSQL ---------------------------------------------------------------------

PG_INSTALL_HINT = (
    "install the server with `apt-get install postgresql` (Debian/Ubuntu) or put "
    "initdb and pg_ctl on PATH"
)


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int

    def url(self, database: str) -> str:
        return f"postgresql+asyncpg://postgres@{self.host}:{self.port}/{database}"


def _pg_bin_dir() -> Path | None:
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(os.path.realpath(initdb)).parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
    )
    for candidate in reversed(candidates):
        if (Path(candidate) / "initdb").exists() and (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    return None


def _as_server_user() -> tuple[list[str], pwd.struct_passwd | None]:
    """The command prefix that runs PostgreSQL's tools as a non-root user."""
    if os.geteuid() != 0:
        return [], None
    runuser = shutil.which("runuser")
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("running as root and there is no 'nobody' user to run PostgreSQL as")
    if runuser is None:
        pytest.skip("running as root and runuser (util-linux) is missing: initdb refuses root")
    return [runuser, "-u", "nobody", "--"], nobody


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    bin_dir = _pg_bin_dir()
    if bin_dir is None:
        pytest.skip(
            "PostgreSQL server binaries (initdb, pg_ctl) were not found on PATH or in "
            f"/usr/lib/postgresql/*/bin; {PG_INSTALL_HINT}"
        )
    prefix, user = _as_server_user()
    root = Path(tempfile.mkdtemp(prefix="llmbridge-pg-"))
    if user is not None:
        os.chown(root, user.pw_uid, user.pw_gid)
    data, log = root / "data", root / "server.log"
    port = free_port()

    def run(*args: str) -> None:
        done = subprocess.run(
            [*prefix, *args], capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{args[0]} failed: {done.stderr or done.stdout}\n{tail}")

    try:
        run(
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
        )
        options = (
            f"-c listen_addresses=127.0.0.1 -p {port} -k {root} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options, "-w", "start")
        yield PostgresServer("127.0.0.1", port)
    finally:
        if (data / "postmaster.pid").exists():
            with contextlib.suppress(Exception):
                run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


def _admin(server: PostgresServer, sql: str) -> None:
    """Run one statement on the ``postgres`` database, from a thread with its own
    event loop (fixtures that create databases are synchronous)."""
    import asyncpg

    async def execute() -> None:
        conn = await asyncpg.connect(
            host=server.host, port=server.port, user="postgres", database="postgres"
        )
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, execute()).result(timeout=60)


@pytest.fixture
def pg_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh, empty database on the session's PostgreSQL server."""
    name = "t_" + uuid.uuid4().hex[:12]
    _admin(postgres_server, f'CREATE DATABASE "{name}"')
    yield postgres_server.url(name)
    _admin(postgres_server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database URL: a SQLite file, then a PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "agent.db")
    url: str = request.getfixturevalue("pg_url")
    return url


# -- Redis --------------------------------------------------------------------------

REDIS_INSTALL_HINT = (
    "install it with `apt-get install redis-server` (Debian/Ubuntu) or `make redis`"
)


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
        process = self.process

        def up() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"redis-server exited on port {self.port}")
            return _answers(self.port)

        try:
            wait_until(up, f"redis-server answering on port {self.port}", 30)
        except AssertionError:
            self.stop()
            raise

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
        pytest.skip(f"redis-server was not found on PATH; {REDIS_INSTALL_HINT}")
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

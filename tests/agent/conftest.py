"""Agent fixtures: a migrated SQLite store per test, and a real PostgreSQL server.

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
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmbridge.agent.store import AgentStore

INSTALL_HINT = (
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


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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
            f"/usr/lib/postgresql/*/bin; {INSTALL_HINT}"
        )
    prefix, user = _as_server_user()
    root = Path(tempfile.mkdtemp(prefix="llmbridge-pg-"))
    if user is not None:
        os.chown(root, user.pw_uid, user.pw_gid)
    data, log = root / "data", root / "server.log"
    port = _free_port()

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


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[AgentStore]:
    """A migrated SQLite store in a file of its own."""
    opened = await AgentStore.open(tmp_path / "agent.db")
    yield opened
    await opened.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database URL: a SQLite file, then a PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "agent.db")
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
async def any_store(db_url: str) -> AsyncIterator[AgentStore]:
    """A migrated store on SQLite, then on PostgreSQL."""
    opened = await AgentStore.open(db_url)
    yield opened
    await opened.close()

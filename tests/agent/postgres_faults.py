"""A PostgreSQL server frozen for real: ``frozen(server)`` stops the session's server
(``tests/agent/conftest.py``'s ``postgres_server``) with SIGSTOP, every process of it,
and thaws it with SIGCONT on the way out, whatever happened inside.

Every process, not only the postmaster: a frozen postmaster alone still lets the
backends of open connections answer, and only stops new connections (the kernel
accepts the TCP connection into the listen backlog, and nobody answers the startup
message). With every process stopped, an open connection's statement waits too: a
server that hangs, or a network that drops its packets, as the client sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from tests.servers import PostgresServer
from tests.waiting import scaled

__all__ = ["SHORT_DEADLINES", "frozen"]

_SHORT_S = f"{scaled(1.0):g}"
SHORT_DEADLINES = f"connect_timeout={_SHORT_S}&command_timeout={_SHORT_S}&pool_timeout={_SHORT_S}"
"""Database deadlines for a URL's query string, short enough that a frozen database
fails each call within seconds, and scaled like every wait in the tests: unscaled, a
loaded machine's first call missed 1 s before anything froze."""


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone meanwhile
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    return int(stat.rsplit(")", 1)[1].split()[1])


def _postmaster(server: PostgresServer) -> int:
    """The server's postmaster: the parent of the backend serving a new connection."""
    import asyncpg

    async def backend_pid() -> int:
        conn = await asyncpg.connect(
            host=server.host, port=server.port, user="postgres", database="postgres"
        )
        try:
            pid: int = await conn.fetchval("SELECT pg_backend_pid()")
            parent = _parent(pid)
        finally:
            await conn.close()
        assert parent is not None, "the backend went away while it was being asked"
        return parent

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, backend_pid()).result(timeout=60)


def _children(postmaster: int) -> list[int]:
    """Every process ``postmaster`` started (checkpointer, WAL writer, autovacuum,
    the backends of open connections)."""
    return [
        int(name)
        for name in os.listdir("/proc")
        if name.isdigit() and _parent(int(name)) == postmaster
    ]


@contextmanager
def frozen(server: PostgresServer) -> Iterator[None]:
    """The server stopped (SIGSTOP) inside the block, thawed (SIGCONT) after it."""
    postmaster = _postmaster(server)
    stopped: list[int] = []
    try:
        # The postmaster first: once it is stopped it starts no process that would
        # escape the list below.
        os.kill(postmaster, signal.SIGSTOP)
        stopped.append(postmaster)
        for pid in _children(postmaster):
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:  # exited meanwhile
                continue
            stopped.append(pid)
        yield
    finally:
        for pid in reversed(stopped):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

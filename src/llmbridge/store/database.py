"""``Database``: the one handle on the product's database, and ``OpenOnce``, the
gateway's way to open it once.

One database holds every product's tables (store/tables.py): the agent's, the API
keys, the usage ledger and its rollups, the stored Responses. A process opens it once:
``await Database.open(url)`` makes the engine (its deadlines from the URL,
store/engine.py), runs the migrations (store/migrate.py), and hands out the read
engine, the write engine (``BEGIN IMMEDIATE`` on SQLite) and transactions that raise
only ``core.errors`` (store/errors.py). Each product keeps its own repository on the
handle (``agent.store.AgentStore``, ``accounts.keys.KeyStore``,
``accounts.ledger.UsageLedger``, ``gateway.stored_responses.ResponseStore``); none of
them makes an engine or migrates. Three engines, three pools and three migration runs
on one database at every start was what this replaced.

Ownership: whoever opens a ``Database`` closes it, once. A repository built on one it
was handed never closes it; the ``open(url)`` shortcuts of the repositories (the CLI's,
the tests') open a ``Database`` of their own and close it with themselves.

The gateway does not know at build time which of its parts needs the database first,
nor whether it is up: the key store opens at start, the agent service when it is on,
the ledger when database keys appear later. ``OpenOnce`` is that one database for the
process: the first caller opens it (and migrates), callers meanwhile wait for that
open, later callers get the same handle; an open that failed is tried again by the
next caller (a database that was down at start is used once it is back); the gateway
closes it at shutdown, after everything that used it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker

from llmbridge.store.engine import Deadlines, deadlines_of, make_engine, shown_url, write_engine
from llmbridge.store.errors import mapped_errors
from llmbridge.store.migrate import migrate

__all__ = ["Database", "OpenOnce"]


class Database:
    """The product's database: its engine, write engine and deadlines, migrated once
    (``open``) and closed once (``close``). ``Database(engine)`` wraps an engine made
    elsewhere (a test's, with options of its own) and leaves closing it to its maker."""

    def __init__(self, engine: AsyncEngine, *, owned: bool = False) -> None:
        self.engine = engine
        """Reads: SQLite's deferred ``BEGIN``, a snapshot in WAL mode."""
        self.writer = write_engine(engine)
        """Writes: ``BEGIN IMMEDIATE`` on SQLite, so a read-then-write transaction
        takes the write lock up front (store/engine.py)."""
        self.dialect = engine.dialect.name
        """``sqlite`` or ``postgresql``."""
        self.deadlines: Deadlines = deadlines_of(engine)
        self._owned = owned
        self._closed = False
        self._read = async_sessionmaker(engine, expire_on_commit=False)
        self._write = async_sessionmaker(self.writer, expire_on_commit=False)

    @classmethod
    async def open(
        cls, url: str | Path | URL | None, *, run_migrations: bool = True, **engine_options: Any
    ) -> Database:
        """The database at ``url`` (a path or a URL, ``engine.resolve_url``), migrated
        to the newest schema. A database that cannot be reached raises
        ``ServiceUnavailableError`` (store/errors.py), never the driver's exception.
        ``engine_options`` go to ``make_engine`` (a pool class, say)."""
        engine = make_engine(url, **engine_options)
        if run_migrations:
            try:
                with mapped_errors():
                    await migrate(engine)
            except BaseException:
                await engine.dispose()
                raise
        return cls(engine, owned=True)

    @property
    def url(self) -> str:
        """The URL as logs show it (no password)."""
        return shown_url(self.engine.url)

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Dispose of the engine's pool, once; nothing for a wrapped engine."""
        if self._closed:
            return
        self._closed = True
        if self._owned:
            await self.engine.dispose()

    # -- transactions, every one inside the error boundary (store/errors.py) -----------

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[AsyncSession]:
        """A read transaction (one snapshot on SQLite WAL and PostgreSQL)."""
        with mapped_errors():
            async with self._read() as session, session.begin():
                yield session

    @asynccontextmanager
    async def writing(
        self, *, conflict: str | None = None, missing: str | None = None
    ) -> AsyncIterator[AsyncSession]:
        """A write transaction, committed on exit (rolled back on an exception).
        ``conflict`` and ``missing`` word the ``ConflictError`` of a unique violation
        and the ``NotFoundError`` of a foreign-key one (store/errors.py)."""
        with mapped_errors(conflict=conflict, missing=missing):
            async with self._write() as session, session.begin():
                yield session

    @asynccontextmanager
    async def reader(self) -> AsyncIterator[AsyncConnection]:
        """A raw connection in one read transaction, for several consistent reads."""
        with mapped_errors():
            async with self.engine.connect() as conn, conn.begin():
                yield conn


class OpenOnce:
    """A process's one ``Database`` on ``url``, opened by the first caller that needs
    it (module docstring)."""

    def __init__(self, url: str | Path) -> None:
        self.url = url
        """As configured (``agent.database``, ``--db``); ``shown_url`` for a log."""
        self._database: Database | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    @property
    def opened(self) -> Database | None:
        """The database once open (``None`` before, or while it cannot be opened)."""
        return self._database

    async def get(self) -> Database:
        """The database, opened and migrated on the first call; raises what
        ``Database.open`` raises, and the next call tries again."""
        if self._database is not None:
            return self._database
        async with self._lock:
            if self._closed:
                raise RuntimeError("the database was closed")
            if self._database is None:
                self._database = await Database.open(self.url)
            return self._database

    async def close(self) -> None:
        """Close the database, if it was opened; later ``get`` calls fail."""
        async with self._lock:
            self._closed = True
            database, self._database = self._database, None
        if database is not None:
            await database.close()

"""Where the agent's data lives: database URLs and the async engine.

The database is named by the configuration (``agent.database``; gateway/config.py
fills in the default file, ``$XDG_DATA_HOME/llmbridge/agent.db``, and ``--db`` /
``LLMBRIDGE_DB`` set it). Accepted spellings:

- a path (``./agent.db``, ``/var/lib/llmbridge/agent.db``) or ``sqlite:///path``
  (``sqlite+aiosqlite`` is filled in), or ``sqlite://`` / ``:memory:`` for a private
  in-memory database (tests);
- ``postgresql://user:pass@host/db`` or ``postgres://...`` (``+asyncpg`` is filled
  in).

SQLite connections are set up on connect: WAL (readers never block the writer),
``foreign_keys=ON`` (SQLite ignores foreign keys otherwise, so cascades would not
run), ``synchronous=NORMAL`` (durable at every checkpoint; WAL's recommended
setting) and a ``busy_timeout`` so concurrent writers wait rather than fail.
Python's sqlite3 module opens transactions lazily and only before writes, so the
engine takes over ``BEGIN`` itself (SQLAlchemy's documented recipe): reads get a
real snapshot, and ``write_engine(...)`` begins with ``BEGIN IMMEDIATE`` so a
read-then-write transaction takes the write lock up front instead of failing with
``SQLITE_BUSY`` when another writer committed in between.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

__all__ = [
    "make_engine",
    "resolve_url",
    "write_engine",
]

_BEGIN_OPTION = "llmbridge_sqlite_begin"
BUSY_TIMEOUT_MS = 10_000


def resolve_url(url: str | Path | None) -> URL:
    """The SQLAlchemy async URL for ``url`` (a path or a URL, module docstring)."""
    if url is None or not str(url):
        raise ValueError(
            "no agent database: set agent.database in the configuration, --db or LLMBRIDGE_DB"
        )
    raw = str(url)
    if raw in (":memory:", "sqlite://", "sqlite:///:memory:"):
        return make_url("sqlite+aiosqlite://")
    if "://" not in raw:
        return make_url(f"sqlite+aiosqlite:///{Path(raw).expanduser().resolve()}")
    parsed = make_url(raw)
    backend = parsed.get_backend_name()
    if backend == "postgres":
        backend = "postgresql"
    if backend == "sqlite":
        return parsed.set(drivername="sqlite+aiosqlite")
    if backend == "postgresql":
        return parsed.set(drivername="postgresql+asyncpg")
    raise ValueError(
        f"unsupported agent database {raw!r}: use a SQLite path or a postgresql:// URL"
    )


def make_engine(url: str | Path | URL | None = None, **kwargs: Any) -> AsyncEngine:
    """An async engine for ``url`` (see ``resolve_url``), set up for its database."""
    resolved = url if isinstance(url, URL) else resolve_url(url)
    if resolved.get_backend_name() != "sqlite":
        kwargs.setdefault("pool_pre_ping", True)
        return create_async_engine(resolved, **kwargs)
    database = resolved.database
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    else:
        # One shared connection, or every pooled connection would see its own empty db.
        kwargs.setdefault("poolclass", StaticPool)
    engine = create_async_engine(resolved, **kwargs)
    _setup_sqlite(engine)
    return engine


def write_engine(engine: AsyncEngine) -> AsyncEngine:
    """The same engine, whose transactions start as writers (``BEGIN IMMEDIATE`` on
    SQLite; nothing changes on PostgreSQL)."""
    return engine.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"})


def _setup_sqlite(engine: AsyncEngine) -> None:
    sync_engine = engine.sync_engine

    @event.listens_for(sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        # busy_timeout first: switching a new file to WAL takes a lock, and a second
        # process starting at the same moment (two workers migrating) must wait for
        # it rather than fail at once with "database is locked".
        for pragma in (
            f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}",
            "PRAGMA journal_mode=WAL",
            "PRAGMA foreign_keys=ON",
            "PRAGMA synchronous=NORMAL",
        ):
            cursor.execute(pragma)
        cursor.close()
        # Stop the driver from emitting its own (lazy, write-only) BEGIN.
        dbapi_connection.isolation_level = None

    @event.listens_for(sync_engine, "begin")
    def _on_begin(connection: Any) -> None:
        mode = connection.get_execution_options().get(_BEGIN_OPTION, "DEFERRED")
        connection.exec_driver_sql(f"BEGIN {mode}")

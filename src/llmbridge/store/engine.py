"""Where the product's data lives: database URLs and the async engine.

One database holds the agent's tables, the API keys, the usage ledger and the stored
Responses; ``store.database.Database`` is the one handle a process opens on it. It is
named by the configuration (``database.url``, store/config.py; gateway/config.py
fills in the default file, ``$XDG_DATA_HOME/llmbridge/llmbridge.db``, and ``--db`` /
``LLMBRIDGE_DB`` set it). Accepted spellings:

- a path (``./llmbridge.db``, ``/var/lib/llmbridge/llmbridge.db``) or ``sqlite:///path``
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

Deadlines: nothing waits on the database without one, so a frozen
or unreachable server costs a request a 503 (``store.errors``), never a hang. Three,
in seconds, set by the URL's own query parameters (``?connect_timeout=2&
command_timeout=5&pool_timeout=5``; read and removed here, the driver never sees
them), so every engine opened on that URL (the gateway's one ``Database``, the CLI's,
the ``/health`` probe's own) gets the same ones. The configuration file's
``database:`` section sets them too (store/config.py adds its settings to the URL,
where the URL names none):

- ``connect_timeout`` (5): opening a connection, TCP and authentication (asyncpg's
  ``timeout``). A healthy server on a LAN answers in milliseconds; 5 s still rides
  out a lost SYN (the first retransmission comes after 1 s, the second 3 s later).
- ``command_timeout`` (10): one statement, the pool's pre-ping included (asyncpg's
  ``command_timeout``); on SQLite, the ``busy_timeout`` a statement waits for
  another writer's lock. The product's statements are indexed reads and small writes
  (milliseconds); the slowest, ``/admin/usage`` over a long ledger, stays far below.
- ``pool_timeout`` (10): waiting for a pooled connection when every one is in use
  (SQLAlchemy's ``pool_timeout``, 30 by default).

A request fails at its first statement that gives up, so it waits at most a pool
checkout and one statement (or a connect): about 20 s with the defaults, below the
60 s of common proxies (nginx's ``proxy_read_timeout``, an AWS ALB's idle timeout)
and far below the 600 s the OpenAI and Anthropic SDKs wait. Migrations are the one
exception: ``migration_engine`` gives them ``MIGRATION_STATEMENT_S``, since a
schema change on a large table, or a second worker waiting on the first one's
migration lock, may rightly take longer than a request's statement.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool, QueuePool, StaticPool

__all__ = [
    "BUSY_TIMEOUT_MS",
    "MIGRATION_STATEMENT_S",
    "Deadlines",
    "deadlines_of",
    "make_engine",
    "migration_engine",
    "resolve_url",
    "shown_url",
    "split_deadlines",
    "write_engine",
]

_BEGIN_OPTION = "llmbridge_sqlite_begin"

CONNECT_TIMEOUT_S = 5.0
STATEMENT_TIMEOUT_S = 10.0
POOL_TIMEOUT_S = 10.0
MIGRATION_STATEMENT_S = 600.0
"""A migration's statement deadline (module docstring): long, still not for ever."""

BUSY_TIMEOUT_MS = int(STATEMENT_TIMEOUT_S * 1000)
"""SQLite's default busy timeout: the statement deadline, in milliseconds."""


@dataclass(frozen=True, slots=True)
class Deadlines:
    """How long an engine waits on its database before giving up, in seconds
    (module docstring); past one, the store answers 503 (``store.errors``)."""

    connect_s: float = CONNECT_TIMEOUT_S
    """Opening a connection (PostgreSQL; SQLite opens a local file)."""
    statement_s: float = STATEMENT_TIMEOUT_S
    """One statement (PostgreSQL), or a wait for SQLite's write lock."""
    pool_s: float = POOL_TIMEOUT_S
    """A free connection from the pool."""


_PARAMETERS = {
    "connect_timeout": "connect_s",
    "command_timeout": "statement_s",
    "pool_timeout": "pool_s",
}
"""The URL's query parameters that set ``Deadlines`` (named as asyncpg and SQLAlchemy
name them; seconds)."""

_DEADLINES: weakref.WeakKeyDictionary[Engine, Deadlines] = weakref.WeakKeyDictionary()
"""Each engine ``make_engine`` built, and its deadlines (``deadlines_of``)."""

_SECRET_WORDS = ("pass", "secret", "token", "key")
"""Query parameters ``shown_url`` hides (asyncpg takes ``password``,
``sslpassword``... from the URL too)."""


def resolve_url(url: str | Path | None) -> URL:
    """The SQLAlchemy async URL for ``url`` (a path or a URL, module docstring)."""
    if url is None or not str(url):
        raise ValueError("no database: set database.url in the configuration, --db or LLMBRIDGE_DB")
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
        f"unsupported database {shown_url(raw)!r}: use a SQLite path or a postgresql:// URL"
    )


def split_deadlines(url: URL) -> tuple[URL, Deadlines]:
    """``url`` without the deadline parameters, and the ``Deadlines`` they set (the
    defaults for those it does not name). ``ValueError`` names a bad one."""
    values: dict[str, float] = {}
    for name, field_name in _PARAMETERS.items():
        raw = url.query.get(name)
        if raw is None:
            continue
        text = raw[-1] if isinstance(raw, tuple) else raw
        try:
            seconds = float(text)
        except ValueError:
            seconds = math.nan
        # 0 or less would mean "no deadline" to some drivers and "fail at once" to
        # others; neither is wanted, so a deadline is a positive, finite number.
        if not 0 < seconds < math.inf:
            raise ValueError(
                f"the database URL's {name}={text!r} is not a number of seconds above 0"
            )
        values[field_name] = seconds
    return url.difference_update_query(_PARAMETERS), Deadlines(**values)


def shown_url(url: str | Path | URL) -> str:
    """``url`` as logs and ``/health`` show it: no password, in the user part or in a
    query parameter; a path as it is."""
    if isinstance(url, Path) or (isinstance(url, str) and "://" not in url):
        return str(url)
    try:
        parsed = url if isinstance(url, URL) else make_url(url)
    except Exception:  # noqa: BLE001 - an unusable URL: say so, never echo it
        return "(unparsable database URL)"
    hidden = {
        name: "***" for name in parsed.query if any(word in name.lower() for word in _SECRET_WORDS)
    }
    return parsed.update_query_dict(hidden).render_as_string(hide_password=True)


def make_engine(
    url: str | Path | URL | None = None, *, deadlines: Deadlines | None = None, **kwargs: Any
) -> AsyncEngine:
    """An async engine for ``url`` (see ``resolve_url``), set up for its database, with
    the ``deadlines`` given, else those the URL names, else the defaults (module
    docstring)."""
    resolved = url if isinstance(url, URL) else resolve_url(url)
    resolved, named = split_deadlines(resolved)
    deadlines = deadlines or named
    pooled = kwargs.get("poolclass") is None or issubclass(kwargs["poolclass"], QueuePool)
    if resolved.get_backend_name() != "sqlite":
        kwargs.setdefault("pool_pre_ping", True)
        connect_args = dict(kwargs.pop("connect_args", {}))
        connect_args.setdefault("timeout", deadlines.connect_s)
        connect_args.setdefault("command_timeout", deadlines.statement_s)
        kwargs["connect_args"] = connect_args
        if pooled:
            kwargs.setdefault("pool_timeout", deadlines.pool_s)
        return _remember(create_async_engine(resolved, **kwargs), deadlines)
    database = resolved.database
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
        if pooled:  # aiosqlite pools a file's connections (AsyncAdaptedQueuePool)
            kwargs.setdefault("pool_timeout", deadlines.pool_s)
    else:
        # One shared connection, or every pooled connection would see its own empty db.
        kwargs.setdefault("poolclass", StaticPool)
    engine = create_async_engine(resolved, **kwargs)
    _setup_sqlite(engine, busy_timeout_ms=max(1, round(deadlines.statement_s * 1000)))
    return _remember(engine, deadlines)


def deadlines_of(engine: AsyncEngine) -> Deadlines:
    """The deadlines ``engine`` was made with (the defaults for one made elsewhere)."""
    return _DEADLINES.get(engine.sync_engine, Deadlines())


@asynccontextmanager
async def migration_engine(engine: AsyncEngine) -> AsyncIterator[AsyncEngine]:
    """The engine a migration run on ``engine``'s database uses. On PostgreSQL, one of
    its own: the same connect deadline, a statement deadline of at least
    ``MIGRATION_STATEMENT_S`` (module docstring), no pool (it opens one connection,
    once), disposed after. SQLite's deadline is a lock wait, the same for both, and an
    in-memory database is only reachable through its own engine: ``engine`` itself."""
    if engine.dialect.name == "sqlite":
        yield engine
        return
    deadlines = deadlines_of(engine)
    longer = replace(deadlines, statement_s=max(deadlines.statement_s, MIGRATION_STATEMENT_S))
    migrating = make_engine(engine.url, deadlines=longer, poolclass=NullPool)
    try:
        yield migrating
    finally:
        await migrating.dispose()


def _remember(engine: AsyncEngine, deadlines: Deadlines) -> AsyncEngine:
    _DEADLINES[engine.sync_engine] = deadlines
    return engine


def write_engine(engine: AsyncEngine) -> AsyncEngine:
    """The same engine, whose transactions start as writers (``BEGIN IMMEDIATE`` on
    SQLite; nothing changes on PostgreSQL)."""
    return engine.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"})


def _setup_sqlite(engine: AsyncEngine, *, busy_timeout_ms: int) -> None:
    sync_engine = engine.sync_engine

    @event.listens_for(sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        # busy_timeout first: switching a new file to WAL takes a lock, and a second
        # process starting at the same moment (two workers migrating) must wait for
        # it rather than fail at once with "database is locked".
        for pragma in (
            f"PRAGMA busy_timeout={busy_timeout_ms}",
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

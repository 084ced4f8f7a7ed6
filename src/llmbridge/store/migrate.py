"""Bring the product's database to the current schema: ``await migrate(url)``.

``Database.open`` (store/database.py) runs it once per process start; every product's
tables (the agent's, the keys, the ledger, stored responses) are in the one set of
migrations, under their original revision ids and file names, so a database created
before they moved here upgrades as before.

Alembic runs in process from a ``Config`` built in code, with the migration scripts
shipped inside this package (``store/migrations``), so no ``alembic.ini`` is needed
at run time. The whole upgrade is one transaction; on SQLite it starts with
``BEGIN IMMEDIATE`` and on PostgreSQL it takes an advisory lock, so two processes
starting at once upgrade one after the other instead of racing.

On SQLite a migration runs with foreign keys off (``PRAGMA foreign_keys`` can only be
switched outside a transaction, so before ``BEGIN``) and ``PRAGMA foreign_key_check``
before the commit, which refuses the upgrade if any row refers to one not there:
SQLite's own procedure for rebuilding a table that others refer to (0010 rebuilds
``sessions``), since ``DROP TABLE`` with foreign keys on deletes the rows first and
cascades into every table that refers to them. They are switched on again before the
connection goes back to the pool. ``downgrade`` (tests, an operator going back) runs
the same way.

What a start says: one line, ``database: sqlite:////srv/agent.db, schema 0009, migrated
from 0007`` (or ``up to date``, or ``created``), logged at INFO the first time a process
migrates that database and at DEBUG after (the gateway opens it more than once as it
starts: the banner's key count, then the lifespan). Alembic's own INFO lines (its
plugins, its context, each ``Running upgrade``) are debug detail: a serving process
shows them at ``--log-level debug`` only (gateway/server/asgi.py ``configure_logging``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection
from sqlalchemy.engine import URL
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from llmbridge.store.engine import (
    BUSY_TIMEOUT_MS,
    make_engine,
    migration_engine,
    shown_url,
    write_engine,
)

__all__ = [
    "MIGRATIONS",
    "Migrated",
    "alembic_config",
    "current_revision",
    "downgrade",
    "head_revision",
    "migrate",
]

log = logging.getLogger("llmbridge.store")

MIGRATIONS = Path(__file__).with_name("migrations")
_LOCK_KEY = 0x6C6C6D62  # "llmb": the PostgreSQL advisory lock held while migrating
_SAID: set[str] = set()
"""The databases this process has said its line about at INFO (module docstring)."""


@dataclass(frozen=True)
class Migrated:
    """What one ``migrate`` did: the schema before (``None``: a new database) and after."""

    url: str
    """The database as a log shows it: no password, no driver (``sqlite:///...``)."""
    before: str | None
    after: str

    def __str__(self) -> str:
        if self.before == self.after:
            done = "up to date"
        elif self.before is None:
            done = "created"
        else:
            done = f"migrated from {self.before}"
        return f"database: {self.url}, schema {self.after}, {done}"


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "the store ships at least one migration"
    return head


async def migrate(target: str | Path | URL | AsyncEngine | None = None) -> Migrated:
    """Upgrade the database at ``target`` (a URL, a path, an engine, or the default
    from ``resolve_url``) to the newest schema, and say so in one line (module
    docstring). Safe to call on every start."""
    engine = target if isinstance(target, AsyncEngine) else make_engine(target)
    try:
        before, after = await _migrating(engine, _upgrade)
    finally:
        if engine is not target:
            await engine.dispose()
    assert after is not None, "an upgrade to head ends at a revision"
    url = engine.url
    migrated = Migrated(shown_url(url.set(drivername=url.get_backend_name())), before, after)
    log.log(logging.DEBUG if migrated.url in _SAID else logging.INFO, "%s", migrated)
    _SAID.add(migrated.url)
    return migrated


async def downgrade(target: str | Path | URL | AsyncEngine, revision: str) -> str | None:
    """Take the database at ``target`` back to ``revision``, the way ``migrate`` goes
    forward (one transaction, the lock, SQLite's foreign keys off); the revision it
    is at after (``None``: before the first)."""
    engine = target if isinstance(target, AsyncEngine) else make_engine(target)

    def back(connection: Connection) -> tuple[str | None, str | None]:
        before = MigrationContext.configure(connection).get_current_revision()
        command.downgrade(alembic_config(connection), revision)
        return before, MigrationContext.configure(connection).get_current_revision()

    try:
        _, after = await _migrating(engine, back)
    finally:
        if engine is not target:
            await engine.dispose()
    return after


Step = Callable[[Connection], tuple[str | None, str | None]]
"""What ``_migrating`` runs: an upgrade or a downgrade, returning the revisions before
and after."""


async def _migrating(engine: AsyncEngine, step: Step) -> tuple[str | None, str | None]:
    """``step`` on one connection of ``engine``, in one transaction (module docstring)."""
    # Its own statement deadline: waiting for another process's migration, or a
    # schema change on a large table, may outlast a request's (store/engine.py).
    async with migration_engine(engine) as migrating:
        conn = await _connect(write_engine(migrating))
        sqlite = conn.dialect.name == "sqlite"
        try:
            if sqlite:
                await conn.run_sync(_set_foreign_keys, False)
            async with conn.begin():
                if not sqlite:
                    await conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_LOCK_KEY})")
                done = await conn.run_sync(step)
                before, after = done
                if sqlite and before != after:  # a full scan: only when something changed
                    await conn.run_sync(_check_foreign_keys)
            return done
        finally:
            try:
                if sqlite and not conn.invalidated:
                    await conn.run_sync(_set_foreign_keys, True)
            finally:
                await conn.close()


def _set_foreign_keys(connection: Connection, on: bool) -> None:
    """SQLite's ``PRAGMA foreign_keys``, on the driver's connection: through SQLAlchemy
    the statement would begin a transaction, inside which the pragma does nothing."""
    cursor = connection.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(f"PRAGMA foreign_keys={'ON' if on else 'OFF'}")
    finally:
        cursor.close()


def _check_foreign_keys(connection: Connection) -> None:
    """Refuse (roll back) a migration that left a row referring to one not there."""
    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if broken:
        shown = ", ".join(f"{row[0]} rowid {row[1]} -> {row[2]}" for row in broken[:5])
        raise RuntimeError(f"the migration broke {len(broken)} foreign key(s): {shown}")


async def _connect(engine: AsyncEngine) -> AsyncConnection:
    """A connection, waiting out the one race the busy timeout cannot: two processes
    opening a new SQLite file at once both switch it to WAL on connect, and SQLite
    answers the second "database is locked" at once, without its busy handler (its
    deadlock avoidance). Once the file is in WAL mode the switch is a no-op."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            return await engine.connect()
        except OperationalError as exc:
            if "database is locked" not in str(exc) or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.02)


def _upgrade(connection: Connection) -> tuple[str | None, str | None]:
    """The revision before and after upgrading, in the migration's one transaction."""
    before = MigrationContext.configure(connection).get_current_revision()
    command.upgrade(alembic_config(connection), "head")
    after = MigrationContext.configure(connection).get_current_revision()
    assert after is not None, "an upgrade to head ends at a revision"
    return before, after


async def current_revision(engine: AsyncEngine) -> str | None:
    """The revision the database is at (``None`` before the first migration)."""
    async with engine.connect() as conn:
        return await conn.run_sync(
            lambda sync: MigrationContext.configure(sync).get_current_revision()
        )

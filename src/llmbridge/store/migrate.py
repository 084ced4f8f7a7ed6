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
        # Its own statement deadline: waiting for another process's migration, or a
        # schema change on a large table, may outlast a request's (store/engine.py).
        async with migration_engine(engine) as migrating:
            conn = await _connect(write_engine(migrating))
            try:
                async with conn.begin():
                    if conn.dialect.name == "postgresql":
                        await conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_LOCK_KEY})")
                    before, after = await conn.run_sync(_upgrade)
            finally:
                await conn.close()
    finally:
        if engine is not target:
            await engine.dispose()
    url = engine.url
    migrated = Migrated(shown_url(url.set(drivername=url.get_backend_name())), before, after)
    log.log(logging.DEBUG if migrated.url in _SAID else logging.INFO, "%s", migrated)
    _SAID.add(migrated.url)
    return migrated


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


def _upgrade(connection: Connection) -> tuple[str | None, str]:
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

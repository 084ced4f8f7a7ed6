"""Bring an agent database to the current schema: ``await migrate(url)``.

Alembic runs in process from a ``Config`` built in code, with the migration scripts
shipped inside this package (``store/migrations``), so no ``alembic.ini`` is needed
at run time. The whole upgrade is one transaction; on SQLite it starts with
``BEGIN IMMEDIATE`` and on PostgreSQL it takes an advisory lock, so two processes
starting at once upgrade one after the other instead of racing.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from llmbridge.agent.store.engine import make_engine, write_engine

__all__ = ["MIGRATIONS", "alembic_config", "current_revision", "head_revision", "migrate"]

MIGRATIONS = Path(__file__).with_name("migrations")
_LOCK_KEY = 0x6C6C6D62  # "llmb": the PostgreSQL advisory lock held while migrating


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "the agent store ships at least one migration"
    return head


async def migrate(target: str | Path | URL | AsyncEngine | None = None) -> None:
    """Upgrade the database at ``target`` (a URL, a path, an engine, or the default
    from ``resolve_url``) to the newest schema. Safe to call on every start."""
    engine = target if isinstance(target, AsyncEngine) else make_engine(target)
    try:
        async with write_engine(engine).begin() as conn:
            if conn.dialect.name == "postgresql":
                await conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_LOCK_KEY})")
            await conn.run_sync(_upgrade)
    finally:
        if engine is not target:
            await engine.dispose()


def _upgrade(connection: Connection) -> None:
    command.upgrade(alembic_config(connection), "head")


async def current_revision(engine: AsyncEngine) -> str | None:
    """The revision the database is at (``None`` before the first migration)."""
    async with engine.connect() as conn:
        return await conn.run_sync(
            lambda sync: MigrationContext.configure(sync).get_current_revision()
        )

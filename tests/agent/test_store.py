"""The agent store on SQLite and on a real PostgreSQL server: migrations, the
conversation tables, bounded reads, and concurrent writers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text

from llmbridge.agent.domains.eldercare import tables as eldercare_tables
from llmbridge.agent.store import AgentStore
from llmbridge.core.errors import NotFoundError
from llmbridge.gateway.config import load_config
from llmbridge.store import current_revision, head_revision, make_engine, migrate, resolve_url
from llmbridge.store.tables import Base

# -- URLs ----------------------------------------------------------------------------


def test_the_default_database_is_a_sqlite_file_under_xdg_data_home(tmp_path: Path) -> None:
    # The configuration reader fills it in; the store never reads the environment.
    config = load_config(None, environ={"XDG_DATA_HOME": str(tmp_path)})
    assert config.agent.database == str(tmp_path / "llmbridge" / "agent.db")
    url = resolve_url(config.agent.database)
    assert url.drivername == "sqlite+aiosqlite"
    assert url.database == str(tmp_path / "llmbridge" / "agent.db")
    home = load_config(None, environ={}).agent.database
    assert home == str(Path.home() / ".local" / "share" / "llmbridge" / "agent.db")
    with pytest.raises(ValueError, match="no database"):
        resolve_url(None)


def test_urls_from_arguments() -> None:
    env = resolve_url("postgres://u:p@db.example:5433/agent")
    assert (env.drivername, env.host, env.port, env.database) == (
        "postgresql+asyncpg",
        "db.example",
        5433,
        "agent",
    )
    assert resolve_url("postgresql://u@h/d").drivername == "postgresql+asyncpg"
    assert resolve_url("sqlite:////var/x.db").drivername == "sqlite+aiosqlite"
    assert resolve_url(":memory:").database is None
    assert resolve_url("relative.db").database == str(Path("relative.db").resolve())
    with pytest.raises(ValueError, match="unsupported database"):
        resolve_url("mysql://u@h/d")


# -- migrations ----------------------------------------------------------------------


async def test_migrations_create_exactly_the_tables(any_store: AgentStore) -> None:
    """Every product's tables, and the eldercare domain's, which it declares on the
    same ``Base`` from the agent (store/ imports no agent module)."""
    assert eldercare_tables.Patient.__table__.metadata is Base.metadata
    assert await current_revision(any_store.engine) == head_revision()
    async with any_store.engine.connect() as conn:
        diff = await conn.run_sync(
            lambda sync: compare_metadata(
                MigrationContext.configure(sync, opts={"compare_type": True}), Base.metadata
            )
        )
    assert diff == []


async def test_migrate_is_idempotent_and_serialised(db_url: str) -> None:
    # Two starts at once (two gateway workers): both succeed, the schema is made once.
    await asyncio.gather(migrate(db_url), migrate(db_url))
    await migrate(db_url)
    engine = make_engine(db_url)
    try:
        assert await current_revision(engine) == head_revision()
    finally:
        await engine.dispose()


async def test_concurrent_first_starts_on_a_new_sqlite_file_all_migrate(tmp_path: Path) -> None:
    """Three processes' worth of first starts on new files: switching a new file to WAL
    on connect made all but one fail with "database is locked" (SQLite answers that race
    without its busy handler); migrate waits it out (store/migrate.py ``_connect``)."""
    for attempt in range(15):
        path = tmp_path / f"new-{attempt}.db"
        await asyncio.gather(migrate(path), migrate(path), migrate(path))
        engine = make_engine(path)
        try:
            assert await current_revision(engine) == head_revision()
        finally:
            await engine.dispose()


async def test_sqlite_runs_in_wal_mode_with_foreign_keys(store: AgentStore) -> None:
    async with store.engine.connect() as conn:
        assert (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar() == "wal"
        assert (await conn.exec_driver_sql("PRAGMA foreign_keys")).scalar() == 1
    with pytest.raises(NotFoundError):
        await store.add_message("no-such-session", "user", "hi")


# -- conversation tables -------------------------------------------------------------


async def test_personas_round_trip(any_store: AgentStore) -> None:
    stored = await any_store.put_persona(
        "nurse", name="Nurse", prompt="You are a nurse.", settings={"temperature": 0.3}
    )
    assert stored.settings == {"temperature": 0.3}
    await any_store.put_persona("nurse", name="Nurse", prompt="Kind nurse.", settings={})
    again = await any_store.find_persona("nurse")
    assert again is not None and again.prompt == "Kind nurse." and again.settings == {}
    assert [p.id for p in await any_store.list_personas()] == ["nurse"]
    assert await any_store.delete_persona("nurse")
    assert await any_store.find_persona("nurse") is None
    with pytest.raises(NotFoundError, match="no persona 'nurse'"):
        await any_store.get_persona("nurse")


async def test_messages_keep_their_order_and_reads_are_bounded(any_store: AgentStore) -> None:
    session = await any_store.create_session(name="chat")
    ids = [(await any_store.add_message(session.id, "user", f"m{i}")).id for i in range(30)]
    assert ids == sorted(ids)
    last = await any_store.last_messages(session.id, 5)
    assert [m.content for m in last] == ["m25", "m26", "m27", "m28", "m29"]
    window = await any_store.last_messages(session.id, 3, before_id=ids[10], after_id=ids[5])
    assert [m.content for m in window] == ["m7", "m8", "m9"]
    first = await any_store.first_messages(session.id, 2, after_id=ids[27])
    assert [m.content for m in first] == ["m28", "m29"]
    assert await any_store.count_messages(session.id) == 30
    assert await any_store.count_messages(session.id, after_id=ids[9], cap=7) == 7
    assert last[0].token_count == 1 and last[0].status == "complete"
    assert last[0].created_at.tzinfo is not None


async def test_deleting_a_session_deletes_its_history(any_store: AgentStore) -> None:
    session = await any_store.create_session()
    message = await any_store.add_message(session.id, "user", "remember this")
    await any_store.add_pin(session.id, "a fact", message_id=message.id)
    await any_store.add_summary(session.id, "summary", [message.id])
    assert await any_store.delete_session(session.id)
    assert await any_store.last_messages(session.id, 10) == []
    assert await any_store.pins(session.id) == []
    assert await any_store.last_summaries(session.id, 10) == []


async def test_a_run_is_summarised_once(any_store: AgentStore) -> None:
    session = await any_store.create_session()
    ids = [(await any_store.add_message(session.id, "user", f"m{i}")).id for i in range(4)]
    first = await any_store.add_summary(session.id, "first two", ids[1::-1], model="m")
    assert first is not None and first.message_ids == (ids[0], ids[1])
    assert await any_store.add_summary(session.id, "again", ids[:2]) is None
    assert await any_store.summarised_upto(session.id) == ids[1]
    (listed,) = await any_store.last_summaries(session.id, 5)
    assert listed == first


async def test_sessions_newest_first(any_store: AgentStore) -> None:
    for name in ("a", "b", "c"):
        await any_store.create_session(name=name)
    assert [s.name for s in await any_store.list_sessions()] == ["c", "b", "a"]
    assert [s.name for s in await any_store.list_sessions(limit=1, offset=1)] == ["b"]


async def test_concurrent_writers_on_one_session(any_store: AgentStore) -> None:
    """Many tasks append to one session at once (and create it at once): nothing is
    lost, no id repeats, and the stored order is one total order."""
    sessions = await asyncio.gather(*(any_store.ensure_session("shared") for _ in range(10)))
    assert {s.id for s in sessions} == {"shared"}

    async def writer(number: int) -> list[int]:
        return [
            (await any_store.add_message("shared", "user", f"w{number} m{i}")).id for i in range(10)
        ]

    written = await asyncio.gather(*(writer(n) for n in range(8)))
    for ids in written:
        assert ids == sorted(ids)  # each writer's messages keep its own order
    stored = await any_store.last_messages("shared", 1000)
    assert len(stored) == 80
    assert sorted(m.id for m in stored) == sorted(i for ids in written for i in ids)


async def test_last_messages_use_the_session_index(store: AgentStore) -> None:
    query = text(
        "EXPLAIN QUERY PLAN SELECT id FROM messages WHERE session_id = 's' AND id < 10 "
        "ORDER BY id DESC LIMIT 5"
    )
    async with store.engine.connect() as conn:
        plan = " ".join(str(row[-1]) for row in (await conn.execute(query)).all())
    assert "ix_messages_session_id_id" in plan
    assert "TEMP B-TREE" not in plan  # ordered by the index, not sorted afterwards

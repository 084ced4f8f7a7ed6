"""The store's boundary (``store/errors.py``): whatever a database or its driver
raises leaves the store as one ``core.errors`` class with its status, on SQLite and
on a real PostgreSQL server; and ``find_*`` returns ``None`` where ``get_*`` raises.
The HTTP tests (``test_http.py``) check that clients see these as before."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from llmbridge.agent.documents import DocumentStore
from llmbridge.agent.store import AgentStore
from llmbridge.core.errors import (
    ConflictError,
    NotFoundError,
    PermissionDeniedError,
    ServiceUnavailableError,
)
from llmbridge.store.errors import REFUSED, UNREACHABLE

# Nothing listens on port 1 of the loopback address: asyncpg's connect is refused.
DEAD_POSTGRES = "postgresql://postgres@127.0.0.1:1/agent"


async def test_a_duplicate_id_is_a_conflict_from_the_store_itself(any_store: AgentStore) -> None:
    await any_store.create_persona("nurse", name="Nurse")
    with pytest.raises(ConflictError) as taken:
        await any_store.create_persona("nurse", name="Another")
    assert taken.value.status_code == 409 and taken.value.code == "conflict"
    assert taken.value.message == "persona id 'nurse' is taken"
    await any_store.create_session("chat")
    with pytest.raises(ConflictError, match="session id 'chat' is taken"):
        await any_store.create_session("chat")


async def test_a_row_referring_to_one_not_there_is_not_found(any_store: AgentStore) -> None:
    """Foreign-key violations, told apart from unique ones by the database's code."""
    with pytest.raises(NotFoundError) as missing:
        await any_store.add_message("no-such-session", "user", "hi")
    assert missing.value.status_code == 404
    assert missing.value.message == "no session 'no-such-session'"
    with pytest.raises(NotFoundError, match="no such persona"):
        await any_store.create_session(persona_id="ghost")
    session = await any_store.create_session()
    with pytest.raises(NotFoundError, match="no such persona"):
        await any_store.update_session(session.id, persona_id="ghost")
    with pytest.raises(NotFoundError):
        await any_store.add_pin(session.id, "fact", message_id=12345)


async def test_a_race_on_a_summary_is_no_error(any_store: AgentStore) -> None:
    """The second summary of the same run is the store's ``None``, not a conflict."""
    session = await any_store.create_session()
    message = await any_store.add_message(session.id, "user", "hello")
    assert await any_store.add_summary(session.id, "first", [message.id]) is not None
    assert await any_store.add_summary(session.id, "second", [message.id]) is None


async def test_find_returns_none_where_get_raises(any_store: AgentStore) -> None:
    session = await any_store.create_session(owner="key-a")
    assert await any_store.find_session(session.id, owner="key-b") is None
    with pytest.raises(NotFoundError, match=f"no session '{session.id}'"):
        await any_store.get_session(session.id, owner="key-b")
    assert (await any_store.get_session(session.id, owner="key-a")).id == session.id
    assert await any_store.find_persona("ghost") is None
    with pytest.raises(NotFoundError, match="no persona 'ghost'"):
        await any_store.get_persona("ghost")
    assert await any_store.find_message(session.id, 1) is None
    with pytest.raises(NotFoundError, match=f"no message 1 in session '{session.id}'"):
        await any_store.get_message(session.id, 1)
    documents = DocumentStore(any_store)
    assert await documents.find(1) is None
    with pytest.raises(NotFoundError, match="no document 1"):
        await documents.get(1)


async def test_a_shared_row_written_by_a_key_is_permission_denied(any_store: AgentStore) -> None:
    await any_store.create_persona("nurse", name="Nurse")  # no owner: shared
    with pytest.raises(PermissionDeniedError) as denied:
        await any_store.update_persona("nurse", owner="key-a", name="Mine")
    assert denied.value.status_code == 403


async def test_a_postgresql_server_that_is_not_there_is_unavailable() -> None:
    store = await AgentStore.open(DEAD_POSTGRES, run_migrations=False)
    try:
        with pytest.raises(ServiceUnavailableError) as down:
            await store.list_personas()
        assert down.value.status_code == 503 and down.value.message == UNREACHABLE
        with pytest.raises(ServiceUnavailableError):
            await store.add_message("s", "user", "hi")
    finally:
        await store.close()


async def test_a_sqlite_database_locked_past_its_busy_timeout_is_unavailable(
    tmp_path: Path,
) -> None:
    """Another process holds SQLite's write lock: the store's writer gets SQLITE_BUSY
    (an ``OperationalError``), a 503. The busy timeout is made 0 so it fails at once."""
    path = tmp_path / "agent.db"
    store = await AgentStore.open(path)

    @event.listens_for(store.engine.sync_engine, "connect")
    def _no_waiting(dbapi_connection: Any, _record: Any) -> None:
        # After the store's own set-up (listeners run in order): no busy wait.
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA busy_timeout=0")
        cursor.close()

    await store.engine.dispose()  # connect again, with the listener
    locker = sqlite3.connect(path, isolation_level=None)
    try:
        locker.execute("BEGIN IMMEDIATE")
        with pytest.raises(ServiceUnavailableError) as down:
            await store.create_session()
        assert down.value.status_code == 503 and down.value.message == REFUSED
        locker.execute("ROLLBACK")
        assert (await store.create_session("after")).id == "after"  # and back
    finally:
        locker.close()
        await store.close()

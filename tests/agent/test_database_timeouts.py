"""Deadlines on the database: a frozen, unreachable or saturated
database costs a caller a ``ServiceUnavailableError`` (503), never a wait without
end; the deadlines come from the database URL (``store/engine.py``) and every
way a deadline passes is mapped once, at the store's boundary
(``store/errors.py``).

The PostgreSQL server is frozen for real (SIGSTOP on every process of it,
``postgres_faults.frozen``). Waits are bounded generously (``_BOUND_S``) so that a hang
fails the test instead of the run; nothing asserts how long anything took."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from llmbridge.accounts.keys import KeyStore
from llmbridge.agent.store import AgentStore
from llmbridge.core.errors import ServiceUnavailableError
from llmbridge.store import Database
from llmbridge.store.engine import (
    Deadlines,
    deadlines_of,
    make_engine,
    resolve_url,
    shown_url,
    split_deadlines,
)
from llmbridge.store.errors import (
    POOL_EXHAUSTED,
    REFUSED,
    TIMED_OUT,
    UNREACHABLE,
    mapped_errors,
)
from tests.agent.postgres_faults import SHORT_DEADLINES, frozen
from tests.servers import PostgresServer
from tests.waiting import scaled

T = TypeVar("T")

_BOUND_S = scaled(120.0)
"""How long a test waits on the store before calling it a hang (far above any
deadline below: a bound, not a timing)."""

"""Deadlines short enough for a quick test, set the way an operator sets them."""


async def _bounded(call: Awaitable[T]) -> T:
    return await asyncio.wait_for(call, _BOUND_S)


# -- every way a deadline passes is one 503 ------------------------------------------


@pytest.mark.parametrize(
    ("raised", "message"),
    [
        # asyncpg, past connect_timeout or command_timeout: the builtin class, which
        # asyncio.TimeoutError is too (one class since Python 3.11)
        (TimeoutError(), TIMED_OUT),
        # SQLAlchemy's pool, no connection free within pool_timeout
        (PoolTimeoutError("QueuePool limit of size 5 overflow 10 reached"), POOL_EXHAUSTED),
        # asyncpg cannot connect at all
        (ConnectionRefusedError(111, "Connect call failed"), UNREACHABLE),
        (socket.gaierror(-2, "Name or service not known"), UNREACHABLE),
        # SQLAlchemy's translation of a driver's "the connection is gone"
        (OperationalError("SELECT 1", {}, Exception("server closed the connection")), REFUSED),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else "",
)
def test_each_way_a_database_fails_to_answer_is_a_503(raised: Exception, message: str) -> None:
    with pytest.raises(ServiceUnavailableError) as caught, mapped_errors():
        raise raised
    assert caught.value.status_code == 503
    assert caught.value.message == message
    assert caught.value.__cause__ is raised


async def test_a_statement_past_postgresqls_own_statement_timeout_is_a_503(pg_url: str) -> None:
    """SQLSTATE 57014 (query_canceled), a real server-side deadline."""
    store = await AgentStore.open(pg_url)
    try:
        with pytest.raises(ServiceUnavailableError) as caught:
            async with store.reading() as session:
                await session.execute(text("SET LOCAL statement_timeout = 50"))
                await session.execute(text("SELECT pg_sleep(30)"))
        assert caught.value.message == TIMED_OUT
        assert await store.list_personas() == []  # and the connection pool is fine
    finally:
        await store.close()


async def test_a_pool_with_no_free_connection_is_a_503(tmp_path: Path) -> None:
    """Every pooled connection held (here by the test, on a frozen server by
    statements waiting out their deadline): the next caller waits ``pool_timeout``,
    then gets a 503, on a real SQLite file's pool."""
    store = await AgentStore.open(f"sqlite:///{tmp_path / 'agent.db'}?pool_timeout=0.2")
    await store.engine.dispose()
    small = make_engine(
        f"sqlite:///{tmp_path / 'agent.db'}?pool_timeout=0.2", pool_size=1, max_overflow=0
    )
    limited = AgentStore(Database(small))
    try:
        async with small.connect():
            with pytest.raises(ServiceUnavailableError) as caught:
                await _bounded(limited.list_personas())
        assert caught.value.message == POOL_EXHAUSTED
        assert await limited.list_personas() == []  # released: served again
    finally:
        await small.dispose()
        await store.close()


# -- the deadlines, from the URL ------------------------------------------------------


def test_the_deadlines_come_from_the_url_and_leave_it() -> None:
    url, deadlines = split_deadlines(
        resolve_url("postgresql://u:pw@db/llmb?connect_timeout=2&command_timeout=3.5&sslmode=x")
    )
    assert deadlines == Deadlines(connect_s=2.0, statement_s=3.5, pool_s=Deadlines().pool_s)
    assert dict(url.query) == {"sslmode": "x"}  # the driver never sees ours
    assert split_deadlines(resolve_url("/tmp/agent.db"))[1] == Deadlines()
    engine = make_engine("postgresql://u:pw@db/llmb?pool_timeout=7")
    try:
        assert deadlines_of(engine) == Deadlines(pool_s=7.0)
        assert "pool_timeout" not in engine.url.query
    finally:
        engine.sync_engine.dispose()


@pytest.mark.parametrize("value", ["0", "-1", "soon", "inf", "nan"])
def test_a_deadline_that_is_not_a_positive_number_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match=f"command_timeout='{value}'") as refused:
        make_engine(f"postgresql://user:s3cret@db/llmb?command_timeout={value}")
    assert "s3cret" not in str(refused.value)


def test_a_shown_url_has_no_password() -> None:
    shown = shown_url("postgresql://llmb:s3cret@db:5432/llmb?sslpassword=k3y&sslmode=require")
    assert "s3cret" not in shown and "k3y" not in shown
    assert shown.startswith("postgresql://llmb:***@db:5432/llmb?")
    assert "sslmode=require" in shown
    assert shown_url("/var/lib/llmbridge/agent.db") == "/var/lib/llmbridge/agent.db"


async def test_sqlite_waits_its_statement_deadline_for_a_lock_then_503(tmp_path: Path) -> None:
    """SQLite's deadline is its busy timeout, set from ``command_timeout``."""
    import sqlite3

    path = tmp_path / "agent.db"
    store = await AgentStore.open(f"sqlite:///{path}?command_timeout=0.2")
    locker = sqlite3.connect(path, isolation_level=None)
    try:
        async with store.reading() as session:
            timeout = (await session.execute(text("PRAGMA busy_timeout"))).scalar_one()
        assert timeout == 200
        locker.execute("BEGIN IMMEDIATE")
        with pytest.raises(ServiceUnavailableError) as caught:
            await _bounded(store.create_session())
        assert caught.value.message == REFUSED  # SQLITE_BUSY past the busy timeout
        locker.execute("ROLLBACK")
        assert (await store.create_session("after")).id == "after"
    finally:
        locker.close()
        await store.close()


# -- a frozen PostgreSQL server -------------------------------------------------------


async def test_a_frozen_server_is_a_503_for_reads_and_writes_then_served_again(
    postgres_server: PostgresServer, pg_url: str
) -> None:
    store = await AgentStore.open(f"{pg_url}?{SHORT_DEADLINES}")
    try:
        await store.create_persona("nurse", name="Nurse")  # a pooled connection now
        with frozen(postgres_server):
            with pytest.raises(ServiceUnavailableError) as read:
                await _bounded(store.list_personas())
            assert read.value.message == TIMED_OUT
            with pytest.raises(ServiceUnavailableError):
                await _bounded(store.create_session())
            # Many at once: each gets its 503, none waits for ever behind the others.
            many = await _bounded(
                asyncio.gather(
                    *(store.get_persona("nurse") for _ in range(20)), return_exceptions=True
                )
            )
            assert all(isinstance(result, ServiceUnavailableError) for result in many), many
        assert [p.id for p in await _bounded(store.list_personas())] == ["nurse"]
    finally:
        await store.close()


async def test_a_key_lookup_on_a_frozen_server_is_a_503(
    postgres_server: PostgresServer, pg_url: str
) -> None:
    """The gateway's key lookup (``KeyStore.cached``, on the same URL's engine): past
    its cache, a frozen database is a 503, for a key it knows and one it does not."""
    keys = await KeyStore.open(f"{pg_url}?{SHORT_DEADLINES}", cache_s=0)
    try:
        _, key = await keys.create("team-a")
        assert (await keys.cached(key)) is not None
        with frozen(postgres_server):
            for presented in (key, "llmb-not-a-key-anyone-has"):
                with pytest.raises(ServiceUnavailableError) as caught:
                    await _bounded(keys.cached(presented))
                assert caught.value.status_code == 503
        record = await _bounded(keys.cached(key))
        assert record is not None and record.name == "team-a"
    finally:
        await keys.close()


async def test_a_server_frozen_before_the_start_is_a_503_at_open(
    postgres_server: PostgresServer, pg_url: str
) -> None:
    """Opening (and migrating) waits the connect deadline, not for ever."""
    with frozen(postgres_server), pytest.raises(ServiceUnavailableError) as caught:
        await _bounded(AgentStore.open(f"{pg_url}?{SHORT_DEADLINES}"))
    assert caught.value.message == TIMED_OUT


async def test_lookups_on_a_frozen_server_do_not_queue_for_one_deadline_each(
    postgres_server: PostgresServer, pg_url: str
) -> None:
    """Many key lookups at once while the database is frozen: each gets its 503 from
    the attempts made while it waited, and none starts another attempt after one of
    them has failed (requests queued behind a shared read would otherwise wait one
    deadline each, the last of N for N deadlines). Told by the order of events: the
    connection attempts, and the 503s."""
    keys = await KeyStore.open(f"{pg_url}?{SHORT_DEADLINES}", cache_s=0)
    timeline: list[str] = []

    @event.listens_for(keys.engine.sync_engine, "do_connect")
    def _attempt(*_: object) -> None:
        timeline.append("connect")

    async def lookup(key: str) -> None:
        try:
            await keys.cached(key)
        finally:
            timeline.append("answered")

    try:
        await keys.engine.dispose()  # no pooled connection: each read is an attempt
        with frozen(postgres_server):
            answers = await _bounded(
                asyncio.gather(
                    *(lookup(f"llmb-guess-{n}") for n in range(8)), return_exceptions=True
                )
            )
        assert all(isinstance(answer, ServiceUnavailableError) for answer in answers), answers
        first_answer = timeline.index("answered")
        assert "connect" not in timeline[first_answer:], timeline
    finally:
        await keys.close()

"""The usage ledger under values a database refuses, on SQLite and
PostgreSQL.

Before: one NUL in a model name made PostgreSQL refuse the whole batch, which was
retried first every second for ever, and nothing behind it was ever written (an
int over 64 bits did the same on SQLite). Now values are made storable when they
are recorded, and a row the database still refuses (a real CHECK constraint or
trigger here, or a value sent with the cleaning switched off) is set aside, counted
and logged, while its neighbours and the batches behind it are written.

Also ``record(..., spend_counted=True)``: the caller already added the cost to the
shared spend counter, so the ledger does not add it again.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmbridge.accounts import ledger as ledger_module
from llmbridge.accounts.ledger import API_KEYS, USAGE, UsageLedger, spend_key
from llmbridge.accounts.usage_record import INT_MAX, UsageRecord, storable_record
from llmbridge.state.local import LocalState
from llmbridge.store import Database, make_engine, migrate


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    made = make_engine(db_url)
    await migrate(made)
    yield made
    await made.dispose()


def _record(request_id: str, **fields: object) -> UsageRecord:
    values: dict[str, object] = {"model": "m", "status": 200, **fields}
    return UsageRecord(request_id=request_id, **values)  # type: ignore[arg-type]


async def _stored(engine: AsyncEngine) -> dict[str, object]:
    async with engine.connect() as conn:
        return {row.request_id: row for row in await conn.execute(select(USAGE))}


async def _spent(engine: AsyncEngine, key_id: str) -> float:
    async with engine.connect() as conn:
        query = select(API_KEYS.c.spent_usd).where(API_KEYS.c.id == key_id)
        return float((await conn.execute(query)).scalar_one())


async def _add_key(engine: AsyncEngine, key_id: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            insert(API_KEYS).values(
                id=key_id, name=key_id, key_hash=key_id.ljust(64, "0"), identity=key_id
            )
        )


async def test_hostile_values_are_stored_cleaned_and_the_batches_behind_them_too(
    engine: AsyncEngine,
) -> None:
    ledger = UsageLedger(Database(engine), flush_interval_s=3600)
    hostile = [
        _record("req_nul", model="qwen\x00evil", key_name="team\x00"),
        _record("req_long", model="m" * 4096, endpoint="/" + "x" * 4096),
        _record("req_plain", model="qwen3", input_tokens=5, cost_usd=0.5),
        _record(
            "req_numbers",
            model="lone \ud800 surrogate",
            input_tokens=2**70,
            output_tokens=-(2**64),
            cost_usd=float("nan"),
            latency_ms=float("inf"),
        ),
    ]
    for record in hostile:
        ledger.record(record)
    assert await ledger.flush()  # before: False on PostgreSQL (NUL), on SQLite (2**70)
    for n in range(3):  # the batches behind them
        ledger.record(_record(f"req_after_{n}"))
        assert await ledger.flush()
    await ledger.aclose()
    rows = await _stored(engine)
    assert set(rows) == {r.request_id for r in hostile} | {f"req_after_{n}" for n in range(3)}
    assert rows["req_nul"].model == "qwen\ufffdevil"  # type: ignore[attr-defined]
    assert rows["req_nul"].key_name == "team\ufffd"  # type: ignore[attr-defined]
    assert rows["req_long"].model == "m" * 200  # type: ignore[attr-defined]
    assert rows["req_long"].endpoint == "/" + "x" * 99  # type: ignore[attr-defined]
    assert rows["req_plain"].model == "qwen3"  # type: ignore[attr-defined]
    numbers = rows["req_numbers"]
    assert numbers.model == "lone \ufffd surrogate"  # type: ignore[attr-defined]
    assert numbers.input_tokens == INT_MAX  # type: ignore[attr-defined]
    assert numbers.output_tokens == -(2**31)  # type: ignore[attr-defined]
    assert numbers.cost_usd is None  # type: ignore[attr-defined]
    assert numbers.latency_ms is None  # type: ignore[attr-defined]
    assert (ledger.set_aside, ledger.flush_failures, ledger.written) == (0, 0, 7)


def test_a_clean_record_is_not_copied() -> None:
    record = _record("req_1", model="qwen3", input_tokens=3, cost_usd=0.1, streamed=True)
    assert storable_record(record) is record


async def _refuse_poison(engine: AsyncEngine) -> None:
    """A real refusal by the database for rows whose model is 'poison': a CHECK
    constraint on PostgreSQL, a trigger raising ABORT (a constraint error) on SQLite."""
    async with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            await conn.exec_driver_sql(
                "ALTER TABLE usage ADD CONSTRAINT ck_no_poison CHECK (model <> 'poison')"
            )
        else:
            await conn.exec_driver_sql(
                "CREATE TRIGGER no_poison BEFORE INSERT ON usage WHEN NEW.model = 'poison' "
                "BEGIN SELECT RAISE(ABORT, 'poison refused'); END"
            )


async def test_a_row_the_database_refuses_is_set_aside_and_its_neighbours_written(
    engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    await _refuse_poison(engine)
    await _add_key(engine, "key_p")
    state = LocalState()
    counted: list[int] = []
    ledger = UsageLedger(
        Database(engine),
        spend=state,
        flush_interval_s=3600,
        batch_size=50,
        on_set_aside=counted.append,
    )
    for n in range(50):
        model = "poison" if n in (7, 31) else "m"
        ledger.record(_record(f"req_{n}", model=model, key_id="key_p", cost_usd=0.25))
    with caplog.at_level(logging.ERROR, logger="llmbridge.accounts"):
        assert await ledger.flush()
    for n in range(50, 60):  # the next batch is not held up
        ledger.record(_record(f"req_{n}", key_id="key_p", cost_usd=0.25))
    assert await ledger.flush()
    await ledger.aclose()
    rows = await _stored(engine)
    assert set(rows) == {f"req_{n}" for n in range(60)} - {"req_7", "req_31"}
    assert (ledger.set_aside, sum(counted), ledger.pending) == (2, 2, 0)
    assert ledger.flush_failures == 0
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "req_7" in logged and "req_31" in logged
    # spent_usd has every written row's cost, once; the set-aside rows' cost stays
    # in the shared counter (the requests were served: their budget still sees it).
    assert await _spent(engine, "key_p") == pytest.approx(58 * 0.25)
    assert await state.get_float(spend_key("key_p")) == pytest.approx(2 * 0.25)


async def test_a_value_the_driver_cannot_send_is_set_aside(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the cleaning switched off, an int over 64 bits fails in the driver
    (sqlite3's OverflowError, asyncpg's DataError): a refusal, not an outage."""
    monkeypatch.setattr(ledger_module, "storable_record", lambda record: record)
    ledger = UsageLedger(Database(engine), flush_interval_s=3600)
    for n in range(9):
        ledger.record(_record(f"req_{n}", input_tokens=2**70 if n == 4 else n))
    assert await ledger.flush()
    await ledger.aclose()
    assert set(await _stored(engine)) == {f"req_{n}" for n in range(9)} - {"req_4"}
    assert ledger.set_aside == 1


async def test_an_unreachable_database_keeps_the_batch_whole(db_url: str) -> None:
    """A missing table is the database's state, not the rows': nothing is set aside,
    everything is written once the schema is there."""
    engine = make_engine(db_url)
    ledger = UsageLedger(Database(engine, owned=True), flush_interval_s=3600, owns_database=True)
    try:
        for n in range(5):
            ledger.record(_record(f"req_{n}"))
        assert not await ledger.flush()
        assert (ledger.pending, ledger.set_aside) == (5, 0)
        await migrate(engine)
        assert await ledger.flush()
        assert len(await _stored(engine)) == 5
    finally:
        await ledger.aclose()


async def test_a_server_that_is_not_there_keeps_the_batch_whole() -> None:
    """A connection refused (no PostgreSQL on that port) is an outage, not a refusal:
    the batch waits whole, nothing is set aside."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    engine = make_engine(f"postgresql+asyncpg://postgres@127.0.0.1:{port}/none")
    ledger = UsageLedger(Database(engine, owned=True), flush_interval_s=3600, owns_database=True)
    for n in range(3):
        ledger.record(_record(f"req_{n}"))
    assert not await ledger.flush()
    assert (ledger.pending, ledger.set_aside, ledger.flush_failures) == (3, 0, 1)
    assert not await ledger.flush()
    assert (ledger.pending, ledger.set_aside) == (3, 0)
    await ledger.aclose(attempts=1)


async def test_spend_counted_by_the_caller_is_not_added_again(engine: AsyncEngine) -> None:
    await _add_key(engine, "key_s")
    state = LocalState()
    ledger = UsageLedger(Database(engine), spend=state, flush_interval_s=3600)
    # The caller settles its reservation and adds the cost itself, atomically.
    await state.add_float(spend_key("key_s"), 0.4)
    ledger.record(_record("req_s1", key_id="key_s", cost_usd=0.4), spend_counted=True)
    assert await state.get_float(spend_key("key_s")) == pytest.approx(0.4)  # not 0.8
    ledger.record(_record("req_s2", key_id="key_s", cost_usd=0.1))  # the default: added
    assert await state.get_float(spend_key("key_s")) == pytest.approx(0.5)
    assert await ledger.flush()
    await ledger.aclose()
    assert len(await _stored(engine)) == 2
    assert await _spent(engine, "key_s") == pytest.approx(0.5)
    # The committed batch's cost was taken back out of the counter, both records'.
    assert await state.get_float(spend_key("key_s")) == pytest.approx(0.0)
    async with engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(USAGE))).scalar_one() == 2

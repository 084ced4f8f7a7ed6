"""The usage ledger (accounts/ledger.py) and the price table (accounts/prices.py) on a
real database: SQLite, then PostgreSQL.

Batches are written by the background task (every interval, or at ``batch_size``),
a duplicate ``request_id`` is written once and its cost added to ``spent_usd`` once,
a failed write keeps its records and succeeds on a later flush, the buffer is
bounded, and ``aclose`` writes what is left. Waits are bounded polls, never timed
assertions.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmbridge.accounts import ledger as ledger_module
from llmbridge.accounts.ledger import API_KEYS, USAGE, UsageLedger, UsageRecord, spend_key
from llmbridge.accounts.prices import ModelPrice, PriceTable, cost_of
from llmbridge.accounts.usage import parse_when, usage_report
from llmbridge.accounts.usage_record import COLUMNS
from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.response import Usage
from llmbridge.gateway.accounting import ledger_enabled
from llmbridge.gateway.config import ConfigError, GatewayConfig, load_config
from llmbridge.state.local import LocalState
from llmbridge.store import Database, make_engine, migrate
from tests.waiting import until as wait_for_event


async def _rows(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(USAGE))).scalar_one())


async def _spent(engine: AsyncEngine, key_id: str) -> float:
    async with engine.connect() as conn:
        query = select(API_KEYS.c.spent_usd).where(API_KEYS.c.id == key_id)
        return float((await conn.execute(query)).scalar_one())


async def _add_key(engine: AsyncEngine, key_id: str, name: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            insert(API_KEYS).values(
                id=key_id,
                name=name,
                key_hash=key_id.ljust(64, "0"),
                identity=key_id,
                created_at=datetime.now(UTC),
            )
        )


async def _until(condition: object, what: str) -> None:
    """Poll ``condition`` (an async callable returning bool): a bound on a hang, scaled
    in tests/waiting.py."""
    await wait_for_event(condition, what)  # type: ignore[arg-type]


def _record(request_id: str, **fields: object) -> UsageRecord:
    values: dict[str, object] = {"model": "m", "status": 200, **fields}
    return UsageRecord(request_id=request_id, **values)  # type: ignore[arg-type]


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    """A migrated database (SQLite file, then PostgreSQL) and its engine."""
    made = make_engine(db_url)
    await migrate(made)
    yield made
    await made.dispose()


# -- prices ---------------------------------------------------------------------------


def test_reasoning_is_part_of_the_output_and_billed_once() -> None:
    price = ModelPrice(input=1.0, output=10.0, reasoning=100.0)
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000, reasoning_tokens=250_000)
    # 1M input at $1, 750k plain output at $10, 250k reasoning at $100.
    assert cost_of(usage, price) == pytest.approx(1.0 + 7.5 + 25.0)


def test_cached_input_defaults_and_conventions() -> None:
    usage = Usage(input_tokens=1_000_000, output_tokens=0, cache_read_input_tokens=400_000)
    # OpenAI's prompt_tokens include the cached ones: 600k at $2, 400k at $0.5.
    assert cost_of(usage, ModelPrice(input=2.0, cached_input=0.5)) == pytest.approx(1.4)
    # No cached price: cached tokens cost the input price.
    assert cost_of(usage, ModelPrice(input=2.0)) == pytest.approx(2.0)
    # Anthropic counts cache reads beside input_tokens (and cache writes at input).
    anthropic = Usage(
        input_tokens=1_000_000,
        cache_read_input_tokens=400_000,
        cache_creation_input_tokens=100_000,
    )
    assert cost_of(
        anthropic, ModelPrice(input=2.0, cached_input=0.5), cached_beside_input=True
    ) == pytest.approx(2.2 + 0.2)
    # From an Anthropic backend the dialect's decoder has counted them in.
    decoded = Usage(
        input_tokens=1_500_000,
        cache_read_input_tokens=400_000,
        cache_creation_input_tokens=100_000,
    )
    table = PriceTable({"c*": ModelPrice(input=2.0, cached_input=0.5)})
    assert table.cost("claude", decoded, backend_kind="anthropic") == pytest.approx(2.4)
    # Reasoning defaults to the output price.
    assert cost_of(
        Usage(output_tokens=1_000_000, reasoning_tokens=500_000), ModelPrice(output=4.0)
    ) == pytest.approx(4.0)


def test_price_lookup_exact_before_globs_in_order() -> None:
    table = PriceTable(
        {
            "gpt-4o*": ModelPrice(input=2.5),
            "gpt-*": ModelPrice(input=1.0),
            "gpt-4o-mini": ModelPrice(input=0.15),
        }
    )
    assert table.price("gpt-4o-mini") == ModelPrice(input=0.15)
    assert table.price("gpt-4o-2024") == ModelPrice(input=2.5)
    assert table.price("gpt-5") == ModelPrice(input=1.0)
    assert table.price("qwen3") is None
    assert table.cost("qwen3", Usage(input_tokens=5)) is None


def test_prices_from_the_configuration_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        'prices:\n  "gpt-4o*": {input: 2.5, output: 10, cached_input: 1.25}\n'
        "  qwen3: {input: 0.1, output: 0.4}\n",
        encoding="utf-8",
    )
    config = load_config(path, environ={})
    assert config.prices["gpt-4o*"].cached_input == 1.25
    assert list(config.prices) == ["gpt-4o*", "qwen3"]
    path.write_text("prices:\n  qwen3: {input: -1}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"prices\.qwen3\.input"):
        load_config(path, environ={})
    path.write_text("prices:\n  qwen3: {inputs: 1}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"prices\.qwen3\.inputs"):
        load_config(path, environ={})


def test_the_ledger_is_on_with_auth_or_when_asked() -> None:
    def enabled(server: dict[str, object]) -> bool:
        return ledger_enabled(GatewayConfig.model_validate({"server": server}))

    assert not enabled({})  # zero configuration: no database write per request
    assert enabled({"api_keys": ["sk-1"]})
    assert enabled({"master_key": "sk-admin"})
    assert enabled({"ledger": True})
    assert not enabled({"api_keys": ["sk-1"], "ledger": False})


def test_usage_report_dates() -> None:
    assert parse_when("2026-11-23", "since") == datetime(2026, 11, 23, tzinfo=UTC)
    assert parse_when("2026-11-23T18:00:00+02:00", "until") == datetime(
        2026, 11, 23, 16, tzinfo=UTC
    )
    assert parse_when(None, "since") is None
    with pytest.raises(InvalidRequestError) as caught:
        parse_when("yesterday", "since")
    assert caught.value.param == "since"


# -- the ledger -----------------------------------------------------------------------


async def test_batches_are_written_by_the_background_task(engine: AsyncEngine) -> None:
    ledger = UsageLedger(Database(engine), flush_interval_s=0.05)
    ledger.start()
    try:
        for n in range(5):
            ledger.record(_record(f"req_{n}", input_tokens=n, output_tokens=1))
        assert ledger.pending == 5  # record() only buffers
        await _until(lambda: _written(engine, 5), "5 rows")
        assert ledger.pending == 0
    finally:
        await ledger.aclose()
    report = await usage_report(engine, "model")
    assert [(g.group, g.requests, g.input_tokens, g.output_tokens) for g in report] == [
        ("m", 5, 0 + 1 + 2 + 3 + 4, 5)
    ]


async def _written(engine: AsyncEngine, count: int) -> bool:
    return await _rows(engine) == count


async def test_a_full_batch_is_written_before_the_interval(engine: AsyncEngine) -> None:
    # An interval far longer than the test's wait: only the batch size can trigger it.
    ledger = UsageLedger(Database(engine), flush_interval_s=3600, batch_size=10)
    ledger.start()
    try:
        for n in range(9):
            ledger.record(_record(f"req_{n}"))
        await asyncio.sleep(0.1)
        assert await _rows(engine) == 0
        ledger.record(_record("req_9"))
        await _until(lambda: _written(engine, 10), "the batch of 10")
    finally:
        await ledger.aclose()


async def test_a_flush_writes_what_waited_when_it_began(engine: AsyncEngine) -> None:
    """Records that arrive during a write wait for the next tick: a flush that drained
    to empty would chase a busy gateway with a write every few requests."""

    class Busy(UsageLedger):
        arrivals = 0

        async def _write(self, batch: list[UsageRecord]) -> int:
            if Busy.arrivals < 2:
                Busy.arrivals += 1
                self.record(_record(f"late_{Busy.arrivals}"))  # a request ends meanwhile
            return await super()._write(batch)

    ledger = Busy(Database(engine), flush_interval_s=3600, batch_size=2)
    for n in range(3):
        ledger.record(_record(f"req_{n}"))
    assert await ledger.flush()
    assert (await _rows(engine), ledger.pending) == (3, 2)  # two batches, two arrivals
    await ledger.aclose()
    assert await _rows(engine) == 5  # aclose wrote the rest


async def test_shutdown_writes_what_is_left(engine: AsyncEngine) -> None:
    ledger = UsageLedger(Database(engine), flush_interval_s=3600)
    ledger.start()
    for n in range(3):
        ledger.record(_record(f"req_{n}", status=500 if n == 0 else 200))
    await ledger.aclose()
    assert await _rows(engine) == 3
    (group,) = await usage_report(engine, "day")
    assert group.group == datetime.now(UTC).date().isoformat()
    assert (group.requests, group.errors) == (3, 1)


async def test_every_column_reads_back_as_recorded(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger writes rows with its own multi-row statement (not SQLAlchemy's
    parameter processing): every value, the timestamp to the microsecond (given aware
    or naive, naive being UTC, as the column type takes it), reads back through the
    ORM's column types; a batch larger than one statement's rows goes in whole."""
    at = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
    full = UsageRecord(
        request_id="req_full", model="qwen3:8b", status=200, created_at=at,
        key_id="key_1", key_name="team \u00e9", backend="openai", deployment="gpu1",
        endpoint="/v1/chat/completions", input_tokens=11, output_tokens=22,
        reasoning_tokens=3, cached_tokens=4, cost_usd=0.000123, latency_ms=12.5,
        ttft_ms=3.25, streamed=True, replica="host:1",
    )  # fmt: skip
    naive = UsageRecord("req_naive", "m", 499, created_at=at.replace(tzinfo=None), streamed=False)
    more = [_record(f"req_more_{n}") for n in range(5)]
    ledger = UsageLedger(Database(engine), flush_interval_s=3600)
    monkeypatch.setattr(ledger_module, "ROWS_PER_INSERT", 3)  # 3 statements for these 7
    for record in (full, naive, *more):
        ledger.record(record)
    assert await ledger.flush()
    await ledger.aclose()
    assert ledger.written == 7
    async with engine.connect() as conn:
        rows = {row.request_id: row for row in await conn.execute(select(USAGE))}
    assert len(rows) == 7
    got = rows["req_full"]
    for name in COLUMNS:
        assert getattr(got, name) == getattr(full, name), name
    assert rows["req_naive"].created_at == at
    assert (rows["req_naive"].status, rows["req_naive"].streamed) == (499, False)
    assert rows["req_naive"].key_id is None


async def test_a_duplicate_request_id_is_recorded_and_charged_once(engine: AsyncEngine) -> None:
    await _add_key(engine, "key_dup", "dup")
    state = LocalState()
    ledger = UsageLedger(Database(engine), spend=state, flush_interval_s=3600)
    first = _record("req_same", key_id="key_dup", key_name="dup", cost_usd=0.25)
    ledger.record(first)
    # In-process state takes the spend at once: no task, nothing to wait for.
    assert await state.get_float(spend_key("key_dup")) == pytest.approx(0.25)
    assert await ledger.flush()
    # The same request again (a retried flush whose first commit went through, or a
    # replica writing the same id): no second row, no second charge.
    ledger.record(first)
    ledger.record(_record("req_other", key_id="key_dup", key_name="dup", cost_usd=0.5))
    assert await ledger.flush()
    await ledger.aclose()
    assert await _rows(engine) == 2
    assert ledger.written == 2
    assert await _spent(engine, "key_dup") == pytest.approx(0.75)
    # Flushed spend is in spent_usd now: the "not yet flushed" counter is back to 0.
    assert await state.get_float(spend_key("key_dup")) == pytest.approx(0.0)


async def test_a_failed_write_is_retried_and_nothing_is_lost(db_url: str) -> None:
    # A database without the schema yet: every write fails until it is migrated.
    engine = make_engine(db_url)
    ledger = UsageLedger(Database(engine, owned=True), flush_interval_s=3600, owns_database=True)
    try:
        for n in range(3):
            ledger.record(_record(f"req_{n}"))
        assert not await ledger.flush()
        assert (ledger.pending, ledger.flush_failures) == (3, 1)
        ledger.record(_record("req_3"))
        assert not await ledger.flush()
        assert ledger.pending == 4
        await migrate(engine)
        assert await ledger.flush()
        assert ledger.pending == 0
        assert await _rows(engine) == 4
        assert {g.requests for g in await usage_report(engine, "key")} == {4}
    finally:
        await ledger.aclose()


async def test_the_buffer_is_bounded_while_the_database_is_down(db_url: str) -> None:
    engine = make_engine(db_url)
    counted: list[int] = []
    ledger = UsageLedger(
        Database(engine, owned=True),
        flush_interval_s=3600,
        max_buffer=5,
        owns_database=True,
        on_dropped=counted.append,
    )
    try:
        for n in range(8):
            ledger.record(_record(f"req_{n}"))
        assert (ledger.pending, ledger.dropped, sum(counted)) == (5, 3, 3)
        await migrate(engine)
        assert await ledger.flush()
        async with engine.connect() as conn:
            kept = set((await conn.execute(select(USAGE.c.request_id))).scalars())
        assert kept == {f"req_{n}" for n in range(3, 8)}  # the newest are kept
    finally:
        await ledger.aclose()


async def test_report_groups_and_time_window(engine: AsyncEngine) -> None:
    now = datetime.now(UTC)
    yesterday = now - timedelta(days=1)
    ledger = UsageLedger(Database(engine), flush_interval_s=3600)
    rows = [
        _record("a1", key_id="key_a", key_name="alice", model="gpt", input_tokens=10,
                output_tokens=5, reasoning_tokens=2, cached_tokens=4, cost_usd=0.5),
        _record("a2", key_id="key_a", key_name="alice", model="qwen", input_tokens=1,
                output_tokens=1, status=429, created_at=yesterday),
        _record("b1", key_id="key_b", key_name="bob", model="gpt", input_tokens=100,
                output_tokens=50, cost_usd=2.0),
        _record("s1", key_name="static:0123456789ab", model="qwen", status=499),
        _record("n1", model="qwen", input_tokens=3),
    ]  # fmt: skip
    for row in rows:
        ledger.record(row)
    await ledger.aclose()

    by_key = {g.group: g for g in await usage_report(engine, "key")}
    assert set(by_key) == {"alice", "bob", "static:0123456789ab", None}
    alice = by_key["alice"]
    assert (alice.requests, alice.input_tokens, alice.output_tokens) == (2, 11, 6)
    assert (alice.reasoning_tokens, alice.cached_tokens, alice.errors) == (2, 4, 1)
    assert (alice.cost_usd, alice.priced) == (pytest.approx(0.5), 1)
    assert by_key["static:0123456789ab"].errors == 1
    # Keys by cost: bob first.
    assert [g.group for g in await usage_report(engine, "key")][:2] == ["bob", "alice"]

    by_model = {g.group: g for g in await usage_report(engine, "model")}
    assert (by_model["gpt"].requests, by_model["gpt"].cost_usd) == (2, pytest.approx(2.5))
    assert (by_model["qwen"].requests, by_model["qwen"].priced) == (3, 0)

    days = await usage_report(engine, "day")
    assert [(g.group, g.requests) for g in days] == [
        (yesterday.date().isoformat(), 1),
        (now.date().isoformat(), 4),
    ]
    today = datetime(now.year, now.month, now.day, tzinfo=UTC)
    assert sum(g.requests for g in await usage_report(engine, "key", since=today)) == 4
    assert sum(g.requests for g in await usage_report(engine, "key", until=today)) == 1
    with pytest.raises(InvalidRequestError):
        await usage_report(engine, "week")

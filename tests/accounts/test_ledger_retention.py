"""The ledger's life, on SQLite and PostgreSQL: rows past
``ledger.retention_days`` are summed into ``usage_daily`` and deleted in bounded
batches, and the usage report (``GET /admin/usage``, ``llmbridge usage``) gives the
same totals by key, model and day before and after.

200,000 backdated rows are inserted by one ``INSERT ... SELECT`` over a generated
series (PostgreSQL's ``generate_series``, a recursive CTE on SQLite), so the test
spends its time in the cleanup, not in building rows in Python. Costs are multiples
of 1/1024, so their sums are exact in binary floating point and compared exactly.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmbridge.accounts.ledger import USAGE, UsageLedger, UsageRecord
from llmbridge.accounts.rollups import USAGE_DAILY, cutoff_for
from llmbridge.accounts.usage import UsageGroup, usage_report
from llmbridge.backends.scripted import ScriptedBackend
from llmbridge.cli import cli
from llmbridge.gateway.config import ConfigError, load_config
from llmbridge.store import Database, make_engine, migrate
from tests.conftest import running_gateway
from tests.waiting import scaled, until

OLD_ROWS = 200_000
BATCH = 5000


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    # The statements here move thousands of rows at once: on a loaded machine one can
    # take longer than the product's 10 s statement deadline, so that deadline is
    # scaled like every bound of the suite (tests/waiting.py).
    patient = f"command_timeout={scaled(10):g}&pool_timeout={scaled(10):g}"
    made = make_engine(f"{db_url}?{patient}" if "://" in db_url else db_url)
    await migrate(made)
    yield made
    await made.dispose()


_COLUMNS = (
    "request_id, created_at, key_id, key_name, model, status, input_tokens, "
    "output_tokens, reasoning_tokens, cached_tokens, cost_usd, streamed"
)
# One expression per column but created_at, the same on both databases; i is the
# row's number. A third of the rows have no key, a fifth no price, a tenth failed.
_VALUES = (
    "CASE WHEN i % 3 = 0 THEN NULL ELSE 'key_' || (i % 3) END, "
    "CASE WHEN i % 3 = 0 THEN NULL ELSE 'team ' || (i % 3) END, "
    "'model_' || (i % 4), "
    "CASE WHEN i % 10 = 0 THEN 500 ELSE 200 END, "
    "i % 100, i % 7, i % 3, i % 5, "
    "CASE WHEN i % 5 = 0 THEN NULL ELSE (i % 8) / 1024.0 END, "
    "{true}"
)


async def _insert_old_rows(engine: AsyncEngine, count: int, newest: datetime) -> None:
    """``count`` rows spread over the 30 days up to ``newest``, in one statement."""
    async with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            await conn.exec_driver_sql(
                f"INSERT INTO usage ({_COLUMNS}) SELECT 'old_' || i, "
                "$1::timestamptz - make_interval(days => i % 30, secs => i % 86000), "
                f"{_VALUES.format(true='true')} FROM generate_series(0, $2 - 1) AS i",
                (newest, count),
            )
        else:
            base = newest.astimezone(UTC).replace(tzinfo=None).isoformat(" ")
            await conn.exec_driver_sql(
                "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
                f"INSERT INTO usage ({_COLUMNS}) SELECT 'old_' || i, "
                "strftime('%Y-%m-%d %H:%M:%S', ?, '-' || (i % 30) || ' days', "
                "'-' || (i % 86000) || ' seconds') || '.000000', "
                f"{_VALUES.format(true='1')} FROM n",
                (count - 1, base),
            )


async def _count(engine: AsyncEngine, table: object) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(table))).scalar_one())  # type: ignore[arg-type]


Reports = dict[str, list[UsageGroup]]


async def _reports(engine: AsyncEngine, **window: datetime) -> Reports:
    return {by: await usage_report(engine, by, **window) for by in ("key", "model", "day")}


async def test_a_cleanup_keeps_every_total_by_key_model_and_day(engine: AsyncEngine) -> None:
    now = datetime.now(UTC)
    cutoff = cutoff_for(90, now)
    assert cutoff is not None
    await _insert_old_rows(engine, OLD_ROWS, cutoff - timedelta(seconds=1))
    # And rows inside the retention, through the ledger: they stay.
    writer = UsageLedger(Database(engine), flush_interval_s=3600)
    for n in range(50):
        writer.record(
            UsageRecord(
                f"new_{n}", "model_1", 200, created_at=now - timedelta(days=n % 3),
                key_id="key_1", key_name="team 1", input_tokens=n, cost_usd=1 / 64,
            )
        )  # fmt: skip
    await writer.aclose()

    before = await _reports(engine)
    assert sum(g.requests for g in before["key"]) == OLD_ROWS + 50
    old_days = [
        g for g in before["day"] if g.group is not None and g.group < cutoff.date().isoformat()
    ]
    assert len(old_days) >= 30  # 30 days back from the last second before the cutoff
    windowed = await _reports(engine, since=cutoff - timedelta(days=10), until=now)

    pending: list[int] = []
    ledger = UsageLedger(
        Database(engine), retention_days=90, cleanup_batch=BATCH, cleanup_pause_s=0,
        on_cleanup_pending=pending.append,
    )  # fmt: skip
    moved = await ledger.cleanup(now)
    await ledger.aclose()

    assert moved == OLD_ROWS == ledger.rolled_up
    # Bounded: every transaction moved at most BATCH rows.
    assert ledger.cleanup_batches == OLD_ROWS // BATCH
    assert pending[0] == OLD_ROWS and pending[-1] == 0 == ledger.cleanup_pending
    assert pending == sorted(pending, reverse=True)
    assert await _count(engine, USAGE) == 50  # what is inside the retention stays
    # A row per day, key and model (and a few more where a batch split a group).
    assert await _count(engine, USAGE_DAILY) <= 31 * 3 * 4 + OLD_ROWS // BATCH

    assert await _reports(engine) == before
    # A window that starts inside the rolled-up days, at a day's start: the same too.
    assert await _reports(engine, since=cutoff - timedelta(days=10), until=now) == windowed
    # Nothing left to do: a second run moves nothing.
    again = UsageLedger(Database(engine), retention_days=90, cleanup_batch=BATCH)
    assert await again.cleanup(now) == 0
    await again.aclose()


async def test_the_ledger_cleans_up_at_start(engine: AsyncEngine, db_url: str) -> None:
    cutoff = cutoff_for(30)
    assert cutoff is not None
    await _insert_old_rows(engine, 1234, cutoff - timedelta(hours=1))
    before = await _reports(engine)
    ledger = UsageLedger(Database(engine), retention_days=30, cleanup_batch=100, cleanup_pause_s=0)
    ledger.start()
    try:
        await until(
            lambda: ledger.rolled_up == 1234 and ledger.cleanup_pending == 0,
            "every old row rolled up",
        )
        assert (ledger.rolled_up, ledger.cleanup_batches) == (1234, 13)
    finally:
        await ledger.aclose()
    assert await _count(engine, USAGE) == 0
    assert await _reports(engine) == before
    # ``llmbridge usage`` reads the rollups: the same days and totals as before.
    # (In a thread: the command runs its own event loop.)
    args = ["usage", "--group-by", "day", "--json", "--db", db_url]
    result = await asyncio.to_thread(CliRunner().invoke, cli, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [g.to_json() for g in before["day"]]


async def test_two_replicas_cleaning_up_at_once_count_each_row_once(engine: AsyncEngine) -> None:
    """Each batch's ``DELETE ... RETURNING`` sums exactly the rows it removed: two
    ledgers (two replicas) racing over the same old rows move each row once."""
    now = datetime.now(UTC)
    cutoff = cutoff_for(90, now)
    assert cutoff is not None
    await _insert_old_rows(engine, 20_000, cutoff - timedelta(seconds=1))
    before = await _reports(engine)
    first, second = (
        UsageLedger(Database(engine), retention_days=90, cleanup_batch=1000, cleanup_pause_s=0)
        for _ in range(2)
    )
    await asyncio.gather(first.cleanup(now), second.cleanup(now))
    await first.aclose()
    await second.aclose()
    assert first.rolled_up + second.rolled_up == 20_000
    assert await _count(engine, USAGE) == 0
    assert await _reports(engine) == before


async def test_no_retention_keeps_every_row(engine: AsyncEngine) -> None:
    await _insert_old_rows(engine, 100, datetime(2020, 1, 31, tzinfo=UTC))
    for days in (None, 0):
        ledger = UsageLedger(Database(engine), retention_days=days)
        ledger.start()
        assert await ledger.cleanup() == 0
        await ledger.aclose()
    assert await _count(engine, USAGE) == 100


def test_retention_from_the_file_and_the_environment(tmp_path: Path) -> None:
    assert load_config(None, environ={}).ledger.retention_days == 90
    path = tmp_path / "config.yaml"
    path.write_text("ledger:\n  retention_days: 30\n", encoding="utf-8")
    assert load_config(path, environ={}).ledger.retention_days == 30
    env = {"LLMBRIDGE_LEDGER_RETENTION_DAYS": "7"}
    assert load_config(path, environ=env).ledger.retention_days == 30  # the file wins
    assert load_config(None, environ=env).ledger.retention_days == 7
    path.write_text("ledger:\n  retention_days: null\n", encoding="utf-8")
    assert load_config(path, environ={}).ledger.retention_days is None  # for ever
    path.write_text("ledger:\n  retention_days: -1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"ledger\.retention_days"):
        load_config(path, environ={})
    with pytest.raises(ConfigError, match="LLMBRIDGE_LEDGER_RETENTION_DAYS"):
        load_config(None, environ={"LLMBRIDGE_LEDGER_RETENTION_DAYS": "ninety"})


def test_a_gateway_rolls_up_at_start_and_admin_usage_reads_the_rollups(db_url: str) -> None:
    """A gateway started on a database with rows past its ``ledger.retention_days``
    (30 here: rows 31 days old, which the default 90 would keep) rolls them up in its
    ledger's cleanup, ``GET /admin/usage`` answers the same totals as before (and as
    ``llmbridge usage``), and ``/metrics`` shows no row left to clean up."""
    cutoff = cutoff_for(30)
    assert cutoff is not None

    async def prepare() -> Reports:
        engine = make_engine(db_url)
        try:
            await migrate(engine)
            await _insert_old_rows(engine, 3000, cutoff - timedelta(days=1))
            return await _reports(engine)
        finally:
            await engine.dispose()

    async def rows_left() -> int:
        engine = make_engine(db_url)
        try:
            return await _count(engine, USAGE)
        finally:
            await engine.dispose()

    before = asyncio.run(prepare())
    master = "sk-master-retention"
    with running_gateway(
        {"scripted": ScriptedBackend("scripted", models=("m",))},
        server={"master_key": master},
        agent={"database": db_url, "summaries": False},
        ledger={"retention_days": 30},
    ) as server:
        waited = threading.Event()
        for _ in range(200):  # bounded: 20 s
            if asyncio.run(rows_left()) == 0:
                break
            waited.wait(0.1)
        assert asyncio.run(rows_left()) == 0, "the gateway's ledger never cleaned up"
        created = httpx.post(
            server.url + "/admin/keys",
            json={"name": "scraper"},
            headers={"Authorization": f"Bearer {master}"},
            timeout=10,
        )
        scraper = {"Authorization": f"Bearer {created.json()['key']}"}
        metrics = httpx.get(server.url + "/metrics", headers=scraper, timeout=10).text
        assert "llmbridge_usage_rows_pending_cleanup 0.0" in metrics
        assert "llmbridge_usage_records_set_aside_total 0.0" in metrics
        for group_by in ("key", "model", "day"):
            response = httpx.get(
                server.url + "/admin/usage",
                params={"group_by": group_by},
                headers={"Authorization": f"Bearer {master}"},
                timeout=10,
            )
            assert response.status_code == 200, response.text
            assert response.json()["data"] == [g.to_json() for g in before[group_by]]

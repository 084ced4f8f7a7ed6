"""The request log's queries (accounts/request_log.py) on rows written through
the real usage ledger, on SQLite and on PostgreSQL: the same answers on both.

The list's filters and keyset pages, one request's detail, the overview's buckets,
nearest-rank percentiles, groups and rolled-up days (``partial``), the sessions, and
hostile values in the new columns stored cleaned.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import insert, select

from llmbridge.accounts.ledger import USAGE, UsageLedger, UsageRecord
from llmbridge.accounts.request_log import (
    RequestRow,
    overview,
    recent_requests,
    request_detail,
    session_requests,
    sessions,
)
from llmbridge.accounts.rollups import roll_up_batch
from llmbridge.core.errors import InvalidRequestError
from llmbridge.store import Database
from llmbridge.store.tables import ERROR_LENGTH, UsageBodyRow

NOW = datetime(2026, 11, 20, 12, 30, 15, tzinfo=UTC)
"""The tests' "now": rows are placed around it, and ``overview`` is asked as of it."""


async def _write(database: Database, *records: UsageRecord) -> None:
    ledger = UsageLedger(database, flush_interval_s=3600)
    for record in records:
        ledger.record(record)
    assert await ledger.flush()
    await ledger.aclose()


def _row(n: int, **values: object) -> UsageRecord:
    """Request ``r<n>``, ``n`` minutes before ``NOW`` unless ``created_at`` is given."""
    fields: dict[str, object] = {
        "created_at": NOW - timedelta(minutes=n),
        "key_id": "key_a",
        "key_name": "alice",
        "dialect": "openai",
        "endpoint": "/v1/chat/completions",
        "backend": "scripted",
        "deployment": "local",
        "served_model": "served-m",
        "input_tokens": 10,
        "output_tokens": 5,
        "cached_tokens": 2,
        "reasoning_tokens": 1,
        "cost_usd": 0.25,
        "latency_ms": 100.0,
        "ttft_ms": 10.0,
    }
    fields.update(values)
    model = str(fields.pop("model", "m"))
    status = int(fields.pop("status", 200))  # type: ignore[call-overload]
    return UsageRecord(f"r{n}", model, status, **fields)  # type: ignore[arg-type]


def _ids(rows: list[RequestRow]) -> list[str]:
    return [row.request_id for row in rows]


async def test_the_list_is_newest_first_filtered_and_paged_by_keyset(database: Database) -> None:
    await _write(
        database,
        *(_row(n) for n in range(7)),
        _row(7, key_id="key_b", key_name="bob", model="other", status=429),
        _row(8, status=500, error="backend down", session_id="s-1"),
        _row(9, status=499, session_id="s-1"),
    )
    engine = database.engine
    page = await recent_requests(engine, limit=4)
    assert _ids(page.rows) == ["r0", "r1", "r2", "r3"]
    assert page.next_before is not None
    second = await recent_requests(engine, limit=4, before=page.next_before)
    assert _ids(second.rows) == ["r4", "r5", "r6", "r7"]
    # A row written meanwhile (newer than every page) does not shift the next one.
    await _write(database, _row(-1))
    assert second.next_before is not None
    last = await recent_requests(engine, limit=4, before=second.next_before)
    assert _ids(last.rows) == ["r8", "r9"]
    assert last.next_before is None

    assert _ids((await recent_requests(engine, key="bob")).rows) == ["r7"]
    assert _ids((await recent_requests(engine, key="key_b")).rows) == ["r7"]
    assert _ids((await recent_requests(engine, model="other")).rows) == ["r7"]
    served = await recent_requests(engine, model="served-m", limit=3)
    assert _ids(served.rows) == ["r-1", "r0", "r1"]
    assert _ids((await recent_requests(engine, status="error")).rows) == ["r7", "r8", "r9"]
    assert _ids((await recent_requests(engine, status=500)).rows) == ["r8"]
    ok = await recent_requests(engine, status="ok", limit=500)
    assert len(ok.rows) == 8
    window = await recent_requests(
        engine, since=NOW - timedelta(minutes=3), until=NOW - timedelta(minutes=1)
    )
    assert _ids(window.rows) == ["r2", "r3"]  # since inclusive, until exclusive
    assert _ids((await recent_requests(engine, session="s-1")).rows) == ["r8", "r9"]

    row = (await recent_requests(engine, status=500)).rows[0]
    assert (row.error, row.dialect, row.served_model, row.deployment) == (
        "backend down",
        "openai",
        "served-m",
        "local",
    )
    assert row.created_at == NOW - timedelta(minutes=8)

    for bad in ({"limit": 0}, {"limit": 501}, {"before": "nonsense"}, {"status": "fine"}):
        with pytest.raises(InvalidRequestError):
            await recent_requests(engine, **bad)  # type: ignore[arg-type]


async def test_a_request_s_detail_with_and_without_kept_bodies(database: Database) -> None:
    facts = '{"x-llmbridge-tools":"emulated","x-llmbridge-fallback":"b/m"}'
    await _write(
        database,
        _row(1, facts=facts, retries=1, fallbacks=2, trace_id="ab" * 16, finish_reason="stop"),
        _row(2),
    )
    bodies: object = UsageBodyRow.__table__
    async with database.writer.begin() as conn:
        await conn.execute(
            insert(bodies).values(  # type: ignore[arg-type]
                request_id="r1", created_at=NOW, request='{"q": 1}', response='{"a": 2}'
            )
        )
    detail = await request_detail(database.engine, "r1")
    assert detail is not None
    assert detail.row.facts == {"x-llmbridge-tools": "emulated", "x-llmbridge-fallback": "b/m"}
    assert (detail.row.retries, detail.row.fallbacks) == (1, 2)
    assert (detail.row.trace_id, detail.row.finish_reason) == ("ab" * 16, "stop")
    assert (detail.request_body, detail.response_body) == ('{"q": 1}', '{"a": 2}')
    plain = await request_detail(database.engine, "r2")
    assert plain is not None and plain.request_body is None and plain.row.facts == {}
    assert await request_detail(database.engine, "nope") is None


async def test_the_overview_buckets_totals_percentiles_and_groups(database: Database) -> None:
    # Ten requests over the last hour, latencies 10..100 ms; two of them errors; two
    # dialects. Nearest rank: p50 of ten values is the 5th, p99 the 10th.
    records = [
        _row(
            n * 5,
            latency_ms=float(10 * (n + 1)),
            ttft_ms=float(n + 1),
            dialect="openai" if n < 6 else "anthropic",
            status=500 if n in (2, 3) else 200,
        )
        for n in range(10)
    ]
    old = _row(90, created_at=NOW - timedelta(hours=3))  # outside the hour, inside the day
    await _write(database, *records, old)
    engine = database.engine
    hour = await overview(engine, "hour", "dialect", now=NOW)
    assert hour.bucket_seconds == 60 and len(hour.buckets) == 60
    assert hour.until == datetime(2026, 11, 20, 12, 31, tzinfo=UTC)
    assert hour.since == hour.until - timedelta(hours=1)
    assert sum(b.stats.requests for b in hour.buckets) == 10
    totals = hour.totals
    assert (totals.requests, totals.errors) == (10, 2)
    assert (totals.latency_p50_ms, totals.latency_p99_ms) == (50.0, 100.0)
    assert (totals.ttft_p50_ms, totals.ttft_p99_ms) == (5.0, 10.0)
    assert (totals.input_tokens, totals.output_tokens) == (100, 50)
    assert (totals.cached_tokens, totals.reasoning_tokens) == (20, 10)
    assert totals.cost_usd == pytest.approx(2.5)
    # r0 is NOW's minute, the last bucket; r5 five minutes before.
    assert hour.buckets[-1].start == datetime(2026, 11, 20, 12, 30, tzinfo=UTC)
    assert hour.buckets[-1].stats.requests == 1
    assert hour.buckets[-1].stats.latency_p50_ms == 10.0
    assert hour.buckets[-6].stats.requests == 1
    assert hour.buckets[-2].stats.requests == 0 and hour.buckets[-2].stats.latency_p50_ms is None
    groups = {g.name: g.stats for g in hour.groups}
    assert [g.name for g in hour.groups] == ["openai", "anthropic"]  # busiest first
    assert (groups["openai"].requests, groups["openai"].errors) == (6, 2)
    assert (groups["openai"].latency_p50_ms, groups["openai"].latency_p99_ms) == (30.0, 60.0)
    assert (groups["anthropic"].latency_p50_ms, groups["anthropic"].latency_p99_ms) == (80.0, 100.0)
    assert not hour.partial and hour.percentile_stride == 1
    # A window past max_percentile_rows: percentiles over every k-th row by id (ids 3,
    # 6 and 9 here: latencies 30, 60 and 90 ms), counts and sums still over all.
    sampled = await overview(engine, "hour", now=NOW, max_percentile_rows=4)
    assert sampled.percentile_stride == 3 and sampled.totals.requests == 10
    assert (sampled.totals.latency_p50_ms, sampled.totals.latency_p99_ms) == (60.0, 90.0)

    day = await overview(engine, "day", "model", now=NOW)
    assert len(day.buckets) == 24 and day.totals.requests == 11
    assert day.buckets[-4].stats.requests == 1  # 09:30: three hours before
    assert [(g.name, g.stats.requests) for g in day.groups] == [("m", 11)]
    for bad in ({"window": "week"}, {"group_by": "colour"}):
        with pytest.raises(InvalidRequestError):
            await overview(engine, **bad)  # type: ignore[arg-type]


async def test_rolled_up_days_count_in_the_30_day_overview_without_latencies(
    database: Database,
) -> None:
    await _write(
        database,
        _row(1, latency_ms=40.0),
        _row(2, created_at=NOW - timedelta(days=5), latency_ms=1000.0, model="old"),
        _row(3, created_at=NOW - timedelta(days=5), status=500, model="old"),
    )
    engine = database.engine
    before = await overview(engine, "30d", "model", now=NOW)
    assert not before.partial
    assert before.totals.latency_p99_ms == 1000.0
    # Roll up everything older than two days ago (as a short retention would).
    assert await roll_up_batch(database.writer, NOW - timedelta(days=2)) == 2
    after = await overview(engine, "30d", "model", now=NOW)
    assert after.partial
    assert (after.totals.requests, after.totals.errors) == (3, 1)
    assert after.totals.cost_usd == pytest.approx(0.75)
    assert after.totals.latency_p99_ms == 40.0  # the kept rows only
    assert after.buckets[-6].stats.requests == 2  # the rolled-up day, in its bucket
    assert after.buckets[-6].stats.latency_p50_ms is None
    assert {g.name: g.stats.requests for g in after.groups} == {"old": 2, "m": 1}
    by_dialect = await overview(engine, "30d", "dialect", now=NOW)
    assert {g.name: g.stats.requests for g in by_dialect.groups} == {"openai": 1, None: 2}
    # The hour window cannot split a day's rollup, but says it exists.
    assert not (await overview(engine, "hour", now=NOW)).partial
    assert (await overview(engine, "day", now=NOW - timedelta(days=5))).partial


async def test_sessions_and_a_session_s_timeline(database: Database) -> None:
    await _write(
        database,
        _row(10, session_id="claude-1", model="sonnet"),
        _row(9, session_id="claude-1", model="haiku", cached_tokens=7),
        _row(8, session_id="claude-1", model="sonnet", status=500),
        _row(5, session_id="codex-1", model="gpt"),
        _row(1),
    )
    engine = database.engine
    lines = await sessions(engine)
    assert [line.session_id for line in lines] == ["codex-1", "claude-1"]  # latest first
    claude = lines[1]
    assert claude.turns == 3 and claude.errors == 1
    assert claude.models == ["haiku", "sonnet"]
    assert (claude.input_tokens, claude.output_tokens, claude.cached_tokens) == (30, 15, 11)
    assert claude.cost_usd == pytest.approx(0.75)
    assert claude.first_at == NOW - timedelta(minutes=10)
    assert claude.last_at == NOW - timedelta(minutes=8)
    assert [line.session_id for line in await sessions(engine, limit=1)] == ["codex-1"]
    recent = await sessions(engine, since=NOW - timedelta(minutes=6))
    assert [line.session_id for line in recent] == ["codex-1"]
    timeline = await session_requests(engine, "claude-1")
    assert _ids(timeline) == ["r10", "r9", "r8"]  # oldest first
    assert await session_requests(engine, "") == []


async def test_hostile_values_in_the_new_columns_are_stored_cleaned(database: Database) -> None:
    await _write(
        database,
        _row(
            1,
            dialect="open\x00ai",
            served_model="m\ud800",
            facts='{"x-llmbridge-a": "\x00"}',
            trace_id="z" * 100,
            finish_reason="s" * 100,
            error="e" * 10_000,
            retries=2**40,
            fallbacks=-(2**40),
            overhead_ms=float("nan"),
        ),
    )
    async with database.engine.connect() as conn:
        stored = (await conn.execute(select(USAGE).where(USAGE.c.request_id == "r1"))).one()
    assert stored.dialect == "open\ufffdai"
    assert stored.served_model == "m\ufffd"
    assert len(stored.trace_id) == 32 and len(stored.finish_reason) == 40
    assert stored.error == "e" * ERROR_LENGTH
    assert (stored.retries, stored.fallbacks) == (2**31 - 1, -(2**31))
    assert stored.overhead_ms is None
    detail = await request_detail(database.engine, "r1")
    assert detail is not None and detail.row.facts == {"x-llmbridge-a": "\ufffd"}

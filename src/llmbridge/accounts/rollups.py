"""The ledger's life: rows past the retention are summed into daily rollups
(``usage_daily``) and deleted, a small batch per transaction.

``ledger.retention_days`` (default 90; ``0`` or ``null``: keep every row) says how
long a ``usage`` row stays. The cutoff is a UTC midnight, ``retention_days`` before
today's: a day is kept whole or rolled up whole, so a report over old days reads the
same, at the day's grain, before and after a cleanup.

``roll_up_batch`` is one transaction that moves at most ``limit`` rows (5,000 by
default) from ``usage`` into ``usage_daily``:

1. ``DELETE FROM usage WHERE id IN (SELECT id ... WHERE created_at < cutoff LIMIT n)
   RETURNING ...``: the rows it removes are exactly the rows it sums. Two replicas
   cleaning up at once never count a row twice: PostgreSQL's second ``DELETE`` waits
   for the first and then skips the rows already gone; SQLite runs one writer.
2. Those rows summed per (day, key, model) in Python and added to the group's
   ``usage_daily`` row, or inserted as a new one: one read of the days' rollup
   rows, one ``UPDATE`` and one ``INSERT`` (each executed many), whatever the
   number of groups.

Rows and their sums change in the same transaction, so a report (accounts/usage.py
sums ``usage`` and ``usage_daily`` together) never sees a row in both or in neither.
A group may end with more than one ``usage_daily`` row (two replicas inserting the
same new group at once): readers sum them, so that costs nothing but a row.

Kept bodies (``ledger.keep_bodies``: accounts/kept_bodies.py) have a
retention of their own, ``ledger.body_retention_days`` (7 by default): the same
cleanup deletes the older ones, ``delete_bodies_batch`` at a time, summing nothing.

Why batches: one ``DELETE`` of a year's rows would hold the table's write lock (all
of SQLite, and PostgreSQL's rows with a long transaction) for minutes while the
gateway's ledger waits; 5,000 rows take milliseconds. ``UsageLedger`` runs the
cleanup in its own task, once at start and then hourly, pausing between batches.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Table, bindparam, delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from llmbridge.store.tables import UsageBodyRow, UsageDailyRow, UsageRow

__all__ = [
    "CLEANUP_BATCH",
    "DEFAULT_RETENTION_DAYS",
    "USAGE_BODIES",
    "USAGE_DAILY",
    "cutoff_for",
    "day_of",
    "delete_bodies_batch",
    "pending_cleanup",
    "roll_up_batch",
]

USAGE: Table = UsageRow.__table__  # type: ignore[assignment]
USAGE_DAILY: Table = UsageDailyRow.__table__  # type: ignore[assignment]
USAGE_BODIES: Table = UsageBodyRow.__table__  # type: ignore[assignment]

DEFAULT_RETENTION_DAYS = 90
"""``ledger.retention_days`` when the configuration says nothing."""

CLEANUP_BATCH = 5000
"""Rows moved per transaction: milliseconds of lock on either database."""

_SUMMED = (
    "requests",
    "errors",
    "priced",
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cached_tokens",
    "cost_usd",
)


def cutoff_for(retention_days: int | None, now: datetime | None = None) -> datetime | None:
    """The first instant kept: UTC midnight ``retention_days`` before today's;
    ``None`` when rows are kept for ever (``0`` or ``None``)."""
    if not retention_days:
        return None
    now = (now or datetime.now(UTC)).astimezone(UTC)
    midnight = datetime(now.year, now.month, now.day, tzinfo=UTC)
    return midnight - timedelta(days=retention_days)


async def pending_cleanup(engine: AsyncEngine, cutoff: datetime) -> int:
    """Rows older than ``cutoff``: what the cleanup still has to move (a range count
    on ``ix_usage_created_at``)."""
    async with engine.connect() as conn:
        query = select(func.count()).select_from(USAGE).where(USAGE.c.created_at < cutoff)
        return int((await conn.execute(query)).scalar_one())


def day_of(dialect: str) -> ColumnElement[Any]:
    """``usage.created_at``'s UTC day as ``YYYY-MM-DD`` text, in SQL."""
    created = USAGE.c.created_at
    if dialect == "postgresql":
        return func.to_char(func.timezone("UTC", created), "YYYY-MM-DD")
    # SQLite keeps the naive UTC time as text, "YYYY-MM-DD HH:MM:SS..." (models.UTCDateTime).
    return func.substr(created, 1, 10)


GroupKey = tuple[str, str | None, str | None, str]
"""(day, key_id, key_name, model)"""


async def roll_up_batch(engine: AsyncEngine, cutoff: datetime, limit: int = CLEANUP_BATCH) -> int:
    """Move at most ``limit`` rows older than ``cutoff`` into ``usage_daily``, in one
    transaction on ``engine`` (the writer); the number of rows moved (0: done)."""
    chosen = select(USAGE.c.id).where(USAGE.c.created_at < cutoff).limit(limit)
    removed = (
        delete(USAGE)
        .where(USAGE.c.id.in_(chosen.scalar_subquery()))
        .returning(
            day_of(engine.dialect.name),
            USAGE.c.key_id,
            USAGE.c.key_name,
            USAGE.c.model,
            USAGE.c.status,
            USAGE.c.input_tokens,
            USAGE.c.output_tokens,
            USAGE.c.reasoning_tokens,
            USAGE.c.cached_tokens,
            USAGE.c.cost_usd,
        )
    )
    async with engine.begin() as conn:
        rows = (await conn.execute(removed)).all()
        if not rows:
            return 0
        # requests, errors, priced, input, output, reasoning, cached, cost
        groups: dict[GroupKey, list[Any]] = {}
        for day, key_id, key_name, model, status, tin, tout, treason, tcached, cost in rows:
            sums = groups.get((day, key_id, key_name, model))
            if sums is None:
                sums = groups[(day, key_id, key_name, model)] = [0, 0, 0, 0, 0, 0, 0, 0.0]
            sums[0] += 1
            if status >= 400:
                sums[1] += 1
            sums[3] += tin or 0
            sums[4] += tout or 0
            sums[5] += treason or 0
            sums[6] += tcached or 0
            if cost is not None:
                sums[2] += 1
                sums[7] += cost
        await _add(conn, groups)
    return len(rows)


async def delete_bodies_batch(
    engine: AsyncEngine, cutoff: datetime, limit: int = CLEANUP_BATCH
) -> int:
    """Delete at most ``limit`` kept bodies (``usage_bodies``, accounts/kept_bodies.py)
    older than ``cutoff``, in one transaction on ``engine`` (the writer); how many (0:
    done). Bodies are not summed anywhere: they just go."""
    chosen = (
        select(USAGE_BODIES.c.request_id).where(USAGE_BODIES.c.created_at < cutoff).limit(limit)
    )
    removed = delete(USAGE_BODIES).where(USAGE_BODIES.c.request_id.in_(chosen.scalar_subquery()))
    async with engine.begin() as conn:
        return int((await conn.execute(removed)).rowcount or 0)


async def _add(conn: AsyncConnection, groups: dict[GroupKey, list[Any]]) -> None:
    """Add each group's sums to ONE of its rollup rows (adding to each of two would
    count twice), or insert one: three statements whatever the number of groups."""
    c = USAGE_DAILY.c
    days = sorted({group[0] for group in groups})
    existing: dict[GroupKey, int] = {}
    found = await conn.execute(
        select(c.id, c.day, c.key_id, c.key_name, c.model).where(c.day.in_(days)).order_by(c.id)
    )
    for row_id, day, key_id, key_name, model in found:
        existing.setdefault((day, key_id, key_name, model), row_id)
    updates, inserts = [], []
    for group, sums in groups.items():
        values = dict(zip(_SUMMED, sums, strict=True))
        row_id = existing.get(group)
        if row_id is None:
            day, key_id, key_name, model = group
            inserts.append({"day": day, "key_id": key_id, "key_name": key_name, "model": model})
            inserts[-1].update(values)
        else:
            updates.append({"row_id": row_id, **{f"add_{k}": v for k, v in values.items()}})
    if updates:
        await conn.execute(
            update(USAGE_DAILY)
            .where(c.id == bindparam("row_id"))
            .values({c[name]: c[name] + bindparam(f"add_{name}") for name in _SUMMED}),
            updates,
        )
    if inserts:
        await conn.execute(insert(USAGE_DAILY), inserts)

"""The ledger's life (issue 24): rows past the retention are summed into daily rollups
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
2. Those rows summed per (day, key, model) in Python (a batch spans a few groups)
   and added to the group's ``usage_daily`` row, or inserted as a new one.

Rows and their sums change in the same transaction, so a report (accounts/usage.py
sums ``usage`` and ``usage_daily`` together) never sees a row in both or in neither.
A group may end with more than one ``usage_daily`` row (two replicas inserting the
same new group at once): readers sum them, so that costs nothing but a row.

Why batches: one ``DELETE`` of a year's rows would hold the table's write lock (all
of SQLite, and PostgreSQL's rows with a long transaction) for minutes while the
gateway's ledger waits; 5,000 rows take milliseconds. ``UsageLedger`` runs the
cleanup in its own task, once at start and then hourly, pausing between batches.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Table, delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from llmbridge.agent.store.models import UsageDailyRow, UsageRow

__all__ = [
    "CLEANUP_BATCH",
    "DEFAULT_RETENTION_DAYS",
    "USAGE_DAILY",
    "cutoff_for",
    "pending_cleanup",
    "roll_up_batch",
]

USAGE: Table = UsageRow.__table__  # type: ignore[assignment]
USAGE_DAILY: Table = UsageDailyRow.__table__  # type: ignore[assignment]

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


@dataclass(slots=True)
class _Sums:
    requests: int = 0
    errors: int = 0
    priced: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0


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
            USAGE.c.created_at,
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
        groups: defaultdict[GroupKey, _Sums] = defaultdict(_Sums)
        for at, key_id, key_name, model, status, tin, tout, treason, tcached, cost in rows:
            sums = groups[(at.astimezone(UTC).date().isoformat(), key_id, key_name, model)]
            sums.requests += 1
            sums.errors += status >= 400
            sums.input_tokens += tin or 0
            sums.output_tokens += tout or 0
            sums.reasoning_tokens += treason or 0
            sums.cached_tokens += tcached or 0
            if cost is not None:
                sums.priced += 1
                sums.cost_usd += cost
        for group, sums in groups.items():
            await _add(conn, group, sums)
    return len(rows)


async def _add(conn: AsyncConnection, group: GroupKey, sums: _Sums) -> None:
    """Add ``sums`` to ONE of the group's rollup rows (adding to each of two would
    count twice), or insert one."""
    day, key_id, key_name, model = group
    values: dict[str, Any] = {name: getattr(sums, name) for name in _SUMMED}
    c = USAGE_DAILY.c
    found = await conn.execute(
        select(func.min(c.id)).where(
            c.day == day,
            c.key_id.is_not_distinct_from(key_id),
            c.key_name.is_not_distinct_from(key_name),
            c.model == model,
        )
    )
    row_id = found.scalar_one()
    if row_id is None:
        await conn.execute(
            insert(USAGE_DAILY).values(
                day=day, key_id=key_id, key_name=key_name, model=model, **values
            )
        )
        return
    await conn.execute(
        update(USAGE_DAILY)
        .where(c.id == row_id)
        .values({c[name]: c[name] + value for name, value in values.items()})
    )

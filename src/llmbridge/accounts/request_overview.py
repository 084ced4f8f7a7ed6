"""The request log's overview: the requests of the last hour, day or 30 days
in time buckets, in total and per group, for the operator console's Overview page; the
rest of the request log (and the module docstring that explains both: percentiles,
rollups, bounds) is accounts/request_log.py, which re-exports ``overview``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, get_args

from sqlalchemy import (
    ColumnElement,
    Select,
    Table,
    and_,
    case,
    func,
    literal_column,
    or_,
    select,
)
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from llmbridge.accounts.rollups import USAGE_DAILY
from llmbridge.core.errors import InvalidRequestError
from llmbridge.store.tables import UsageRow

__all__ = [
    "GROUP_BY",
    "WINDOWS",
    "Bucket",
    "GroupBy",
    "GroupStats",
    "Overview",
    "Stats",
    "Window",
    "overview",
]

USAGE: Table = UsageRow.__table__  # type: ignore[assignment]

Window = Literal["hour", "day", "30d"]
WINDOWS: tuple[str, ...] = get_args(Window)
GroupBy = Literal["dialect", "model", "backend", "key"]
GROUP_BY: tuple[str, ...] = get_args(GroupBy)

_WINDOW_SHAPE: dict[str, tuple[int, int]] = {
    "hour": (60, 60),
    "day": (3600, 24),
    "30d": (86400, 30),
}
"""A window's bucket width (seconds) and number of buckets."""

_BUCKET_TEXT: dict[int, tuple[int, str]] = {
    60: (16, "YYYY-MM-DD HH24:MI"),
    3600: (13, "YYYY-MM-DD HH24"),
    86400: (10, "YYYY-MM-DD"),
}
"""A bucket's width -> its key as text: the first characters of SQLite's
``YYYY-MM-DD HH:MM:SS`` (store/tables.py ``UTCDateTime``), PostgreSQL's ``to_char``."""


@dataclass(frozen=True, slots=True)
class Stats:
    """Requests summed: counts, percentiles (over the rows kept), tokens, cost."""

    requests: int = 0
    errors: int = 0
    """Answered with a status of 400 or more (499: the client left)."""
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float = 0.0


@dataclass(frozen=True, slots=True)
class Bucket:
    """One time bucket of an overview."""

    start: datetime
    """The bucket's first instant (UTC); it lasts ``Overview.bucket_seconds``."""
    stats: Stats


@dataclass(frozen=True, slots=True)
class GroupStats:
    """One group of an overview (``group_by``)."""

    name: str | None
    """The dialect, model, deployment or key name; ``None``: rows that name none."""
    stats: Stats


@dataclass(frozen=True, slots=True)
class Overview:
    """The requests of a window, bucketed, totalled and grouped (module docstring)."""

    window: str
    group_by: str | None
    bucket_seconds: int
    since: datetime
    """The first bucket's start (inclusive)."""
    until: datetime
    """The last bucket's end (exclusive)."""
    buckets: list[Bucket]
    """Every bucket of the window, oldest first, empty ones included."""
    totals: Stats
    groups: list[GroupStats] = field(default_factory=list)
    """The busiest ``max_groups`` groups, most requests first."""
    partial: bool = False
    """Rolled-up days (no latencies) were counted, or exist in the window: the
    percentiles describe the rows still kept only (module docstring)."""
    percentile_stride: int = 1
    """1: the percentiles are over every row kept in the window; ``k``: over every
    ``k``-th (by id, the order rows were written), a window holding more than
    ``max_percentile_rows`` rows: a sample, so their cost stays bounded."""


def _sum(column: ColumnElement[Any]) -> ColumnElement[Any]:
    return func.coalesce(func.sum(column), 0)


# -- the overview ---------------------------------------------------------------------


def _bucket_of(dialect: str, width: int) -> ColumnElement[Any]:
    """``usage.created_at``'s bucket as text (``_BUCKET_TEXT``), in SQL."""
    chars, pattern = _BUCKET_TEXT[width]
    if dialect == "postgresql":
        return func.to_char(func.timezone("UTC", USAGE.c.created_at), pattern)
    return func.substr(USAGE.c.created_at, 1, chars)


def _group_of(group_by: str) -> ColumnElement[Any]:
    c = USAGE.c
    if group_by == "dialect":
        return c.dialect
    if group_by == "model":
        return c.model
    if group_by == "backend":
        return c.deployment
    return func.coalesce(c.key_name, c.key_id)


def _daily_group_of(group_by: str) -> ColumnElement[Any] | None:
    """The rollups' column for ``group_by``; ``None``: rollups do not keep it."""
    d = USAGE_DAILY.c
    if group_by == "model":
        return d.model
    if group_by == "key":
        return func.coalesce(d.key_name, d.key_id)
    return None


_SUMS = ("input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens", "cost_usd")


def _sums_query(partition: Sequence[ColumnElement[Any]], where: ColumnElement[bool]) -> Select[Any]:
    c = USAGE.c
    return (
        select(
            *partition,
            func.count(),
            _sum(case((c.status >= 400, 1), else_=0)),
            *(_sum(c[name]) for name in _SUMS),
        )
        .where(where)
        .group_by(*partition)
    )


def _percentiles_query(
    value: ColumnElement[Any],
    partition: Sequence[ColumnElement[Any]],
    where: ColumnElement[bool],
    *,
    total: bool = False,
) -> Select[Any]:
    """The p50 and p99 of ``value`` per ``partition`` (nearest rank), as rows
    ``(*partition, rank, n, total rank, total n, value)``: two per partition (and, with
    ``total``, the two of the whole set, from the same scan), picked in the database."""
    over: dict[str, Any] = {"partition_by": list(partition)} if partition else {}
    columns = [
        *(p.label(f"p{i}") for i, p in enumerate(partition)),
        value.label("v"),
        func.row_number().over(order_by=value, **over).label("rn"),
        func.count().over(**over).label("n"),
    ]
    if total:
        columns += [func.row_number().over(order_by=value).label("trn")]
        columns += [func.count().over().label("tn")]
    ranked = select(*columns).where(where, value.is_not(None)).subquery()
    keys = [ranked.c[f"p{i}"] for i in range(len(partition))]
    n, rn = ranked.c.n, ranked.c.rn
    # ceil(n * p / 100) in integer arithmetic, the same on both databases.
    picked = [rn == (n * 50 + 99) // 100, rn == (n * 99 + 99) // 100]
    ranks = [rn, n]
    if total:
        tn, trn = ranked.c.tn, ranked.c.trn
        picked += [trn == (tn * 50 + 99) // 100, trn == (tn * 99 + 99) // 100]
        ranks += [trn, tn]
    return select(*keys, *ranks, ranked.c.v).where(or_(*picked))


Pair = tuple[float | None, float | None]


def _pick(pair: list[float | None], rank: int, n: int, value: float) -> None:
    if rank == (n * 50 + 99) // 100:
        pair[0] = value
    if rank == (n * 99 + 99) // 100:
        pair[1] = value


async def _percentiles(
    conn: AsyncConnection,
    value: ColumnElement[Any],
    partition: Sequence[ColumnElement[Any]],
    where: ColumnElement[bool],
    *,
    total: bool = False,
) -> tuple[dict[tuple[Any, ...], Pair], Pair]:
    """p50 and p99 per partition, and of the whole set when ``total`` (one scan)."""
    found: dict[tuple[Any, ...], list[float | None]] = {}
    whole: list[float | None] = [None, None]
    width = len(partition)
    query = _percentiles_query(value, partition, where, total=total)
    for row in (await conn.execute(query)).all():
        key, ranks, v = tuple(row[:width]), row[width:-1], float(row[-1])
        _pick(found.setdefault(key, [None, None]), int(ranks[0]), int(ranks[1]), v)
        if total:
            _pick(whole, int(ranks[2]), int(ranks[3]), v)
    return {key: (pair[0], pair[1]) for key, pair in found.items()}, (whole[0], whole[1])


class _Acc:
    """A group's sums as they are read (kept rows and rollups added together)."""

    __slots__ = ("errors", "requests", "sums")

    def __init__(self) -> None:
        self.requests = 0
        self.errors = 0
        self.sums = [0, 0, 0, 0, 0.0]

    def add(self, requests: Any, errors: Any, sums: Sequence[Any]) -> None:
        self.requests += int(requests)
        self.errors += int(errors)
        for i, value in enumerate(sums):
            self.sums[i] += value or 0

    def stats(self, latency: tuple[float | None, ...], ttft: tuple[float | None, ...]) -> Stats:
        tin, tout, tcached, treason, cost = self.sums
        return Stats(
            requests=self.requests,
            errors=self.errors,
            latency_p50_ms=latency[0],
            latency_p99_ms=latency[1],
            ttft_p50_ms=ttft[0],
            ttft_p99_ms=ttft[1],
            input_tokens=int(tin),
            output_tokens=int(tout),
            cached_tokens=int(tcached),
            reasoning_tokens=int(treason),
            cost_usd=round(float(cost), 10),
        )


_NONE = (None, None)


async def overview(
    engine: AsyncEngine,
    window: str = "hour",
    group_by: str | None = None,
    *,
    now: datetime | None = None,
    max_groups: int = 20,
    max_percentile_rows: int = 20_000,
) -> Overview:
    """The requests of the last ``window``, per bucket, in total and per group
    (module docstring)."""
    if window not in _WINDOW_SHAPE:
        raise InvalidRequestError(
            f"'window' must be one of {', '.join(WINDOWS)}, got {window!r}", param="window"
        )
    if group_by is not None and group_by not in GROUP_BY:
        raise InvalidRequestError(
            f"'group_by' must be one of {', '.join(GROUP_BY)}, got {group_by!r}",
            param="group_by",
        )
    width, count = _WINDOW_SHAPE[window]
    now = (now or datetime.now(UTC)).astimezone(UTC)
    epoch = int(now.timestamp())
    until = datetime.fromtimestamp(epoch - epoch % width + width, UTC)
    since = until - timedelta(seconds=width * count)
    dialect = engine.dialect.name
    c = USAGE.c
    created: ColumnElement[Any] = c.created_at
    if dialect == "sqlite" and width == 86400:
        # 30 days hold a large part of the table: a scan reads it 3-4 times faster than
        # the index's row-by-row lookups (measured: docs/DEPLOY.md, "Request log"), and
        # SQLite's planner, without statistics, would take the index ("+" prevents it).
        created = literal_column("+usage.created_at", type_=c.created_at.type)
    in_window = and_(created >= since, created < until)
    bucket = _bucket_of(dialect, width)
    first_day, end_day = since.date().isoformat(), (until - timedelta(microseconds=1)).date()
    days = USAGE_DAILY.c.day.between(first_day, end_day.isoformat())
    async with engine.connect() as conn:
        per_bucket: dict[str, _Acc] = {}
        for row in (await conn.execute(_sums_query([bucket], in_window))).all():
            per_bucket.setdefault(row[0], _Acc()).add(row[1], row[2], row[3:])
        # Sorting every row of a busy month took seconds: past max_percentile_rows the
        # percentiles are of a sample, every stride-th row by id (unrelated to latency).
        kept_rows = sum(acc.requests for acc in per_bucket.values())
        stride = max(1, -(-kept_rows // max(max_percentile_rows, 1)))
        sampled = in_window if stride == 1 else and_(in_window, c.id % stride == 0)
        latency, total_latency = await _percentiles(
            conn, c.latency_ms, [bucket], sampled, total=True
        )
        ttft, total_ttft = await _percentiles(conn, c.ttft_ms, [bucket], sampled, total=True)
        rolled = await _rollups(conn, days, width == 86400, per_bucket)
        totals = _Acc()  # every row is in one bucket: the totals are their sums
        for kept in per_bucket.values():
            totals.add(kept.requests, kept.errors, kept.sums)
        groups: list[GroupStats] = []
        if group_by is not None:
            groups = await _groups(
                conn, group_by, (in_window, sampled), days, width == 86400, max_groups
            )
    buckets = []
    for i in range(count):
        start = since + timedelta(seconds=width * i)
        acc = per_bucket.get(_bucket_key(start, width))
        if acc is None:
            buckets.append(Bucket(start, Stats()))
            continue
        key = (_bucket_key(start, width),)
        buckets.append(Bucket(start, acc.stats(latency.get(key, _NONE), ttft.get(key, _NONE))))
    return Overview(
        window=window,
        group_by=group_by,
        bucket_seconds=width,
        since=since,
        until=until,
        buckets=buckets,
        totals=totals.stats(total_latency, total_ttft),
        groups=groups,
        partial=rolled,
        percentile_stride=stride,
    )


def _bucket_key(start: datetime, width: int) -> str:
    return start.strftime({60: "%Y-%m-%d %H:%M", 3600: "%Y-%m-%d %H", 86400: "%Y-%m-%d"}[width])


def _rollup_sums(
    partition: Sequence[ColumnElement[Any]], where: ColumnElement[bool]
) -> Select[Any]:
    d = USAGE_DAILY.c
    return (
        select(
            *partition,
            _sum(d.requests),
            _sum(d.errors),
            *(_sum(d[name]) for name in _SUMS),
        )
        .where(where)
        .group_by(*partition)
        .having(func.count() > 0)
    )


async def _rollups(
    conn: AsyncConnection,
    days: ColumnElement[bool],
    by_day: bool,
    per_bucket: dict[str, _Acc],
) -> bool:
    """Add the rolled-up days to the day buckets (``by_day``: a window
    of day buckets), or only tell whether any exist for the window's days (an hour
    is finer than a rollup). Whether any were found."""
    if not by_day:
        query = select(func.count()).select_from(USAGE_DAILY).where(days)
        return int((await conn.execute(query)).scalar_one()) > 0
    found = False
    for row in (await conn.execute(_rollup_sums([USAGE_DAILY.c.day], days))).all():
        found = True
        per_bucket.setdefault(row[0], _Acc()).add(row[1], row[2], row[3:])
    return found


async def _groups(
    conn: AsyncConnection,
    group_by: str,
    where: tuple[ColumnElement[bool], ColumnElement[bool]],
    days: ColumnElement[bool],
    by_day: bool,
    max_groups: int,
) -> list[GroupStats]:
    """The busiest ``max_groups`` groups' stats (rollups counted in a window of days);
    ``where``: the window's rows, and those its percentiles are over."""
    in_window, sampled = where
    group = _group_of(group_by).label("g")
    accs: dict[Any, _Acc] = {}
    for row in (await conn.execute(_sums_query([group], in_window))).all():
        accs.setdefault(row[0], _Acc()).add(row[1], row[2], row[3:])
    if by_day:
        daily = _daily_group_of(group_by)
        partition = [daily.label("g")] if daily is not None else []
        for row in (await conn.execute(_rollup_sums(partition, days))).all():
            name = row[0] if daily is not None else None
            offset = 1 if daily is not None else 0
            accs.setdefault(name, _Acc()).add(row[offset], row[offset + 1], row[offset + 2 :])
    busiest = sorted(accs.items(), key=lambda kv: (-kv[1].requests, kv[0] is None, str(kv[0])))
    busiest = busiest[:max_groups]
    names = [name for name, _ in busiest if name is not None]
    chosen = and_(sampled, group.in_(names)) if names else None
    latency: dict[tuple[Any, ...], Pair] = {}
    ttft: dict[tuple[Any, ...], Pair] = {}
    if chosen is not None:
        latency, _ = await _percentiles(conn, USAGE.c.latency_ms, [group], chosen)
        ttft, _ = await _percentiles(conn, USAGE.c.ttft_ms, [group], chosen)
    if any(name is None for name, _ in busiest):
        unnamed = and_(sampled, _group_of(group_by).is_(None))
        latency[(None,)] = (await _percentiles(conn, USAGE.c.latency_ms, [], unnamed))[0].get(
            (), _NONE
        )
        ttft[(None,)] = (await _percentiles(conn, USAGE.c.ttft_ms, [], unnamed))[0].get((), _NONE)
    return [
        GroupStats(
            None if name is None else str(name),
            acc.stats(latency.get((name,), _NONE), ttft.get((name,), _NONE)),
        )
        for name, acc in busiest
    ]

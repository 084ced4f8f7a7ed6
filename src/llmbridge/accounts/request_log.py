"""The request log: the usage ledger's rows read as the operator console's
Requests, Overview and Sessions pages show them. Plain dataclasses out, no HTML.

Public signatures (``engine``: the product's database, the one the ledger writes and
``GET /admin/usage`` reads: ``GatewayState.database.engine``, or
``Accounts.keys.engine``)::

    async def recent_requests(engine, *, key=None, model=None, status=None, since=None,
                              until=None, session=None, limit=50, before=None
                              ) -> RequestPage
    async def request_detail(engine, request_id) -> RequestDetail | None
    async def overview(engine, window="hour", group_by=None, *, now=None,
                       max_groups=20, max_percentile_rows=20_000) -> Overview
    async def sessions(engine, *, since=None, limit=50) -> list[SessionLine]
    async def session_requests(engine, session_id, *, limit=500) -> list[RequestRow]

- ``recent_requests``: newest first (``created_at`` then ``id``, descending), at most
  ``limit`` (1..500) rows. ``key``: a key's name or id; ``model``: the model asked for
  or served; ``status``: ``"ok"`` (below 400), ``"error"`` (400 and up, a client's 499
  included) or one status code; ``since`` inclusive, ``until`` exclusive;
  ``session``: one client session. The next page: ``before=page.next_before`` (an
  opaque cursor; ``None`` on the last page). Keyset pagination: a page costs the same
  however deep it is, and a row written meanwhile never shifts the next page.
- ``request_detail``: one row by its request id, with its kept bodies
  (``ledger.keep_bodies``, accounts/kept_bodies.py; ``None`` when not kept).
- ``overview``: ``window`` ``"hour"`` (60 buckets of a minute), ``"day"`` (24 of an
  hour) or ``"30d"`` (30 of a day), ending now; each bucket, the totals and, with
  ``group_by`` (``"dialect"``, ``"model"``, ``"backend"``: the deployment that served,
  ``"key"``), each of the ``max_groups`` busiest groups: requests, errors, latency and
  time to first token p50/p99, tokens in/out/cached/reasoning, cost.
- ``sessions``: one line per client session (``usage.session_id``) seen since
  ``since``, the latest first: first and last time, turns, tokens, cached tokens,
  cost, the models it used. ``session_requests``: one session's rows, oldest first
  (its timeline).

Bounded work: every figure is computed in SQL, the same statements on SQLite and
PostgreSQL. Percentiles are the nearest rank (the value at rank ``ceil(p * n)`` of the
``n`` values in order), picked by ``row_number()`` over a window in the database, so
what comes back is two rows per bucket or group, never the rows themselves. A query
returns at most ``limit`` rows, ``max_groups`` groups or the window's buckets. Sorting
is what costs: past ``max_percentile_rows`` (20,000) rows in the window, the
percentiles are over every ``k``-th row by id (``Overview.percentile_stride``), while
counts, tokens and cost stay over every row. On SQLite the 30-day window scans the
table rather than the ``created_at`` index (a month is a large part of it: the scan
reads it 3-4 times faster).

Rollups: rows past ``ledger.retention_days`` are summed per day, key and model into
``usage_daily`` and deleted (accounts/rollups.py), without their latencies, dialect
or backend. ``overview("30d")`` adds the rolled-up days' requests, errors, tokens and
cost to its day buckets, its totals and the ``model``/``key`` groups (by
``dialect``/``backend`` they count under ``None``); its percentiles are over the rows
still kept. ``Overview.partial`` says when rollups were counted (or, for the hour
and day windows, exist for days the window touches): the percentiles then describe
part of the requests only. Sessions and the request list read kept rows only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
from sqlalchemy import (
    ColumnElement,
    Table,
    and_,
    case,
    func,
    literal_column,
    or_,
    select,
)
from sqlalchemy.ext.asyncio import AsyncEngine

from llmbridge.accounts.request_overview import (
    GROUP_BY,
    WINDOWS,
    Bucket,
    GroupBy,
    GroupStats,
    Overview,
    Stats,
    Window,
    overview,
)
from llmbridge.accounts.usage import session_filter
from llmbridge.core.errors import InvalidRequestError
from llmbridge.store.tables import UsageBodyRow, UsageRow

__all__ = [
    "GROUP_BY",
    "MAX_LIMIT",
    "WINDOWS",
    "Bucket",
    "GroupBy",
    "GroupStats",
    "Overview",
    "RequestDetail",
    "RequestPage",
    "RequestRow",
    "SessionLine",
    "Stats",
    "Status",
    "Window",
    "overview",
    "recent_requests",
    "request_detail",
    "session_requests",
    "sessions",
]

USAGE: Table = UsageRow.__table__  # type: ignore[assignment]
BODIES: Table = UsageBodyRow.__table__  # type: ignore[assignment]

Status = Literal["ok", "error"] | int

MAX_LIMIT = 500
"""The most rows one call returns."""


@dataclass(frozen=True, slots=True)
class RequestRow:
    """One request of the log (a ``usage`` row: store/tables.py ``UsageRow``)."""

    id: int
    request_id: str
    created_at: datetime
    """When the request ended (UTC)."""
    status: int
    model: str
    """The model asked for."""
    served_model: str | None
    """The model the backend was asked for (after aliases, routes, fallbacks)."""
    dialect: str | None
    endpoint: str | None
    key_id: str | None
    key_name: str | None
    backend: str | None
    """The backend's kind (``ollama``, ``openai``...)."""
    deployment: str | None
    """The configured backend that served it."""
    streamed: bool | None
    latency_ms: float | None
    ttft_ms: float | None
    overhead_ms: float | None
    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None
    reasoning_tokens: int | None
    cost_usd: float | None
    retries: int | None
    fallbacks: int | None
    facts: dict[str, str]
    """The reply's ``x-llmbridge-*`` headers: what the gateway changed."""
    finish_reason: str | None
    error: str | None
    session_id: str | None
    trace_id: str | None
    replica: str | None


@dataclass(frozen=True, slots=True)
class RequestPage:
    """A page of ``recent_requests``."""

    rows: list[RequestRow]
    next_before: str | None
    """``before`` for the next (older) page; ``None`` when this one is the last."""


@dataclass(frozen=True, slots=True)
class RequestDetail:
    """One request and its kept bodies."""

    row: RequestRow
    request_body: str | None = None
    """The request as the gateway read it (JSON), bounded and redacted; ``None`` when
    bodies are not kept (``ledger.keep_bodies``) or past their retention."""
    response_body: str | None = None
    """The reply (JSON), bounded and redacted, as ``request_body``."""


@dataclass(frozen=True, slots=True)
class SessionLine:
    """One client session (``usage.session_id``)."""

    session_id: str
    first_at: datetime
    last_at: datetime
    turns: int
    """Requests that named the session."""
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cost_usd: float
    errors: int
    models: list[str]
    """The models it asked for, sorted."""


# -- the request list -----------------------------------------------------------------

_ROW_COLUMNS = (
    "id",
    "request_id",
    "created_at",
    "status",
    "model",
    "served_model",
    "dialect",
    "endpoint",
    "key_id",
    "key_name",
    "backend",
    "deployment",
    "streamed",
    "latency_ms",
    "ttft_ms",
    "overhead_ms",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "cost_usd",
    "retries",
    "fallbacks",
    "facts",
    "finish_reason",
    "error",
    "session_id",
    "trace_id",
    "replica",
)


def _facts(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _request_row(row: Sequence[Any]) -> RequestRow:
    values = dict(zip(_ROW_COLUMNS, row, strict=True))
    values["facts"] = _facts(values["facts"])
    return RequestRow(**values)


def _limit(limit: int) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequestError(
            f"'limit' must be a whole number from 1 to {MAX_LIMIT}, got {limit!r}", param="limit"
        )
    return limit


def _cursor(row: RequestRow) -> str:
    return f"{row.created_at.astimezone(UTC).isoformat()}/{row.id}"


def _parse_cursor(before: str) -> tuple[datetime, int]:
    try:
        when, _, row_id = before.rpartition("/")
        at = datetime.fromisoformat(when)
        return (at if at.tzinfo else at.replace(tzinfo=UTC)), int(row_id)
    except ValueError:
        raise InvalidRequestError(
            "'before' must be a cursor from a previous page (next_before)", param="before"
        ) from None


def _status_filter(status: Status) -> ColumnElement[bool]:
    if status == "ok":
        return USAGE.c.status < 400
    if status == "error":
        return USAGE.c.status >= 400
    if isinstance(status, int) and not isinstance(status, bool):
        return USAGE.c.status == status
    raise InvalidRequestError(
        f"'status' must be 'ok', 'error' or a status code, got {status!r}", param="status"
    )


async def recent_requests(
    engine: AsyncEngine,
    *,
    key: str | None = None,
    model: str | None = None,
    status: Status | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    session: str | None = None,
    limit: int = 50,
    before: str | None = None,
) -> RequestPage:
    """The newest requests matching every filter given (module docstring)."""
    limit = _limit(limit)
    c = USAGE.c
    query = select(*(c[name] for name in _ROW_COLUMNS))
    if key:
        query = query.where(or_(c.key_name == key, c.key_id == key))
    if model:
        query = query.where(or_(c.model == model, c.served_model == model))
    if status is not None:
        query = query.where(_status_filter(status))
    if since is not None:
        query = query.where(c.created_at >= since)
    if until is not None:
        query = query.where(c.created_at < until)
    session = session_filter(session)
    if session is not None:
        query = query.where(c.session_id == session)
    if before:
        at, row_id = _parse_cursor(before)
        query = query.where(or_(c.created_at < at, and_(c.created_at == at, c.id < row_id)))
    # One row more than asked: whether there is a next page, without a count.
    query = query.order_by(c.created_at.desc(), c.id.desc()).limit(limit + 1)
    async with engine.connect() as conn:
        rows = [_request_row(row) for row in (await conn.execute(query)).all()]
    more = len(rows) > limit
    rows = rows[:limit]
    return RequestPage(rows, _cursor(rows[-1]) if more else None)


async def request_detail(engine: AsyncEngine, request_id: str) -> RequestDetail | None:
    """The request ``request_id`` with its kept bodies; ``None`` when there is no such
    row (never written, not yet flushed, or rolled up past the retention)."""
    c = USAGE.c
    query = (
        select(*(c[name] for name in _ROW_COLUMNS), BODIES.c.request, BODIES.c.response)
        .select_from(USAGE.outerjoin(BODIES, BODIES.c.request_id == c.request_id))
        .where(c.request_id == request_id)
    )
    async with engine.connect() as conn:
        found = (await conn.execute(query)).first()
    if found is None:
        return None
    width = len(_ROW_COLUMNS)
    return RequestDetail(_request_row(found[:width]), found[width], found[width + 1])


async def session_requests(
    engine: AsyncEngine, session_id: str, *, limit: int = MAX_LIMIT
) -> list[RequestRow]:
    """One client session's requests, oldest first (its timeline), at most ``limit``
    (the first ones)."""
    limit = _limit(limit)
    session = session_filter(session_id)
    if session is None:
        return []
    c = USAGE.c
    query = (
        select(*(c[name] for name in _ROW_COLUMNS))
        .where(c.session_id == session)
        .order_by(c.created_at, c.id)
        .limit(limit)
    )
    async with engine.connect() as conn:
        return [_request_row(row) for row in (await conn.execute(query)).all()]


# -- sessions -------------------------------------------------------------------------


def _sum(column: ColumnElement[Any]) -> ColumnElement[Any]:
    return func.coalesce(func.sum(column), 0)


def _distinct_models(dialect: str) -> ColumnElement[Any]:
    """The group's distinct models as one text, ``\\n`` between them."""
    if dialect == "postgresql":
        return func.string_agg(USAGE.c.model.distinct(), literal_column("E'\\n'"))
    return func.group_concat(USAGE.c.model.distinct())  # "," between: split below


async def sessions(
    engine: AsyncEngine, *, since: datetime | None = None, limit: int = 50
) -> list[SessionLine]:
    """One line per client session with a request since ``since``, the most recently
    active first, at most ``limit``."""
    limit = _limit(limit)
    c = USAGE.c
    dialect = engine.dialect.name
    last_at = func.max(c.created_at)
    query = (
        select(
            c.session_id,
            func.min(c.created_at),
            last_at,
            func.count(),
            _sum(c.input_tokens),
            _sum(c.output_tokens),
            _sum(c.cached_tokens),
            _sum(c.cost_usd),
            _sum(case((c.status >= 400, 1), else_=0)),
            _distinct_models(dialect),
        )
        .where(c.session_id.is_not(None))
        .group_by(c.session_id)
        .order_by(last_at.desc(), c.session_id)
        .limit(limit)
    )
    if since is not None:
        query = query.where(c.created_at >= since)
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    lines = []
    for sid, first, last, turns, tin, tout, tcached, cost, errors, models in rows:
        # SQLite's group_concat joins with ","; a model name may hold one, so on SQLite
        # the split can cut a name in two: the names are for display only.
        names = (models or "").split("\n" if dialect == "postgresql" else ",")
        lines.append(
            SessionLine(
                session_id=sid,
                first_at=_aware(first),
                last_at=_aware(last),
                turns=int(turns),
                input_tokens=int(tin),
                output_tokens=int(tout),
                cached_tokens=int(tcached),
                cost_usd=round(float(cost), 10),
                errors=int(errors),
                models=sorted({name for name in names if name}),
            )
        )
    return lines


def _aware(value: datetime | str) -> datetime:
    """``min``/``max`` of a timestamp come back as text on SQLite (no type)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

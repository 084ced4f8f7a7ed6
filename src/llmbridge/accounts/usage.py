"""The usage report: the ledger's rows summed by key, model, day or client session, in
SQL.

``usage_report(engine, group_by, since, until, session)`` is what ``GET /admin/usage``
(``usage_endpoint``) and ``llmbridge usage`` answer. Each group sums requests,
tokens (input, output with reasoning included, reasoning, cached) and cost, and
counts errors (status 400 and up, a client's 499 included). Days are UTC days.
``since`` is inclusive, ``until`` exclusive. Rows with no price count 0 toward
``cost_usd``; ``priced`` says how many requests had one, so "free" and "unknown"
stay apart.

Rows past the ledger's retention are summed per day, key and model into
``usage_daily`` and deleted (accounts/rollups.py); the report sums ``usage`` and
``usage_daily`` together, so its totals are the same before and after a cleanup.
A rolled-up day is read whole: ``since`` and ``until`` inside such a day take it
all (a range from ``2026-08-01T18:00`` counts that day's rollups from midnight).
A row is in one table or the other, never both (a cleanup batch moves it in one
transaction).

Sessions: ``group_by="session"`` sums by ``usage.session_id`` (the session
a client named: accounts/usage_record.py), and ``session`` keeps one session's rows,
whatever the grouping, so one Claude Code or Codex session's cost is one line. Rollups
keep no session (a day, key and model's sums): past the retention a session's rows
count under the ``None`` group, with the requests that named none, and a ``session``
filter finds only the rows still kept. The filter goes through
``ix_usage_session_id``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, get_args

import orjson
from sqlalchemy import (
    ColumnElement,
    Select,
    String,
    Table,
    case,
    func,
    literal,
    select,
    union_all,
)
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.requests import Request
from starlette.responses import Response

from llmbridge.accounts.rollups import USAGE_DAILY, day_of
from llmbridge.accounts.service import Accounts
from llmbridge.core.errors import InvalidRequestError
from llmbridge.store.tables import SESSION_ID_LENGTH, UsageRow
from llmbridge.store.values import storable_text

__all__ = [
    "GROUP_BY",
    "GroupBy",
    "UsageGroup",
    "parse_when",
    "session_filter",
    "usage_endpoint",
    "usage_report",
]

USAGE: Table = UsageRow.__table__  # type: ignore[assignment]

GroupBy = Literal["key", "model", "day", "session"]
GROUP_BY: tuple[str, ...] = get_args(GroupBy)


@dataclass(frozen=True, slots=True)
class UsageGroup:
    """One line of the report."""

    group: str | None
    """The key's name (its id when it has none), the model, the UTC day
    (``YYYY-MM-DD``) or the client's session; ``None`` for requests made with no key
    (by key) or that named no session (by session: rolled-up days too)."""
    requests: int
    input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    cached_tokens: int
    cost_usd: float
    priced: int
    """Requests whose model had a price."""
    errors: int
    """Requests answered with a status of 400 or more (499: the client left)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_when(value: str | None, param: str) -> datetime | None:
    """An ISO 8601 date or date-time (``2026-11-23``, ``2026-11-23T18:00:00Z``); naive
    values are UTC. ``InvalidRequestError`` naming ``param`` otherwise."""
    if value is None or value == "":
        return None
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise InvalidRequestError(
            f"'{param}' must be an ISO 8601 date or date-time (2026-11-23T18:00:00Z), "
            f"got {value!r}",
            param=param,
        ) from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _total(column: ColumnElement[Any]) -> ColumnElement[Any]:
    return func.coalesce(func.sum(column), 0)


def session_filter(value: str | None) -> str | None:
    """``value`` as the ledger stores a session id (accounts/usage_record.py: U+0000
    and lone surrogates replaced, cut to the column), so a filter finds what was
    recorded for it; ``None`` for no filter (absent or empty)."""
    if not value:
        return None
    return storable_text(value)[:SESSION_ID_LENGTH]


def _rows_query(
    group_by: str,
    dialect: str,
    since: datetime | None,
    until: datetime | None,
    session: str | None,
) -> tuple[Select[Any], int]:
    """``usage`` summed by the group's columns over ``[since, until)``, of ``session``
    alone when one is given; the width of the group's columns."""
    columns: list[ColumnElement[Any]]
    if group_by == "key":
        columns = [USAGE.c.key_id, USAGE.c.key_name]
    elif group_by == "model":
        columns = [USAGE.c.model]
    elif group_by == "session":
        columns = [USAGE.c.session_id]
    else:
        columns = [day_of(dialect).label("day")]
    query = select(
        *columns,
        func.count(),
        _total(USAGE.c.input_tokens),
        _total(USAGE.c.output_tokens),
        _total(USAGE.c.reasoning_tokens),
        _total(USAGE.c.cached_tokens),
        _total(USAGE.c.cost_usd),
        func.count(USAGE.c.cost_usd),
        _total(case((USAGE.c.status >= 400, 1), else_=0)),
    ).group_by(*columns)
    if since is not None:
        query = query.where(USAGE.c.created_at >= since)
    if until is not None:
        query = query.where(USAGE.c.created_at < until)
    if session is not None:
        query = query.where(USAGE.c.session_id == session)
    return query, len(columns)


def _rollups_query(
    group_by: str, since: datetime | None, until: datetime | None
) -> tuple[Select[Any], int]:
    """``usage_daily`` summed the same way, over the days ``[since, until)`` touches
    (by session: all under ``None``, a rollup keeps none)."""
    daily = USAGE_DAILY.c
    columns: list[ColumnElement[Any]]
    if group_by == "key":
        columns = [daily.key_id, daily.key_name]
    elif group_by == "model":
        columns = [daily.model]
    elif group_by == "session":
        columns = [literal(None, String(SESSION_ID_LENGTH)).label("session_id")]
    else:
        columns = [daily.day]
    sums = (
        _total(daily[name])
        for name in (
            "requests",
            "input_tokens",
            "output_tokens",
            "reasoning_tokens",
            "cached_tokens",
            "cost_usd",
            "priced",
            "errors",
        )
    )
    query = select(*columns, *sums)
    # By session, one group of a constant: no GROUP BY, and no line at all when
    # nothing is rolled up (an aggregate over no rows is still one row).
    grouped = group_by != "session"
    query = query.group_by(*columns) if grouped else query.having(func.count() > 0)
    if since is not None:
        query = query.where(daily.day >= since.astimezone(UTC).date().isoformat())
    if until is not None:
        until = until.astimezone(UTC)
        # The first day not touched: until's own day when until is its midnight.
        end = until.date() if until.time() == until.min.time() else until.date() + timedelta(1)
        query = query.where(daily.day < end.isoformat())
    return query, len(columns)


async def usage_report(
    engine: AsyncEngine,
    group_by: str = "key",
    since: datetime | None = None,
    until: datetime | None = None,
    session: str | None = None,
) -> list[UsageGroup]:
    """The ledger (its rows and its daily rollups) summed by ``group_by`` (``key``,
    ``model``, ``day`` or ``session``) over ``[since, until)``, of one client
    ``session`` alone when given (its rows: rollups keep no session); days in order,
    the others by cost then requests."""
    if group_by not in GROUP_BY:
        raise InvalidRequestError(
            f"'group_by' must be one of {', '.join(GROUP_BY)}, got {group_by!r}",
            param="group_by",
        )
    session = session_filter(session)
    rows_query, width = _rows_query(group_by, engine.dialect.name, since, until, session)
    if session is None:
        rollups_query, _ = _rollups_query(group_by, since, until)
        # ONE statement over both tables: one snapshot, so a cleanup batch committing
        # meanwhile (rows out of usage, their sums into usage_daily) is seen whole or
        # not at all, never a row in both or neither.
        both = union_all(rows_query, rollups_query).subquery()
    else:
        both = rows_query.subquery()
    group_columns = list(both.c)[:width]
    query = select(*group_columns, *(func.sum(c) for c in list(both.c)[width:])).group_by(
        *group_columns
    )
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    report = []
    for row in rows:
        if group_by == "key":
            key_id, key_name = row[0], row[1]
            group = key_name or key_id
        else:
            group = None if row[0] is None else str(row[0])
        (requests_n, input_n, output_n, reasoning_n, cached_n, cost_usd, priced, errors) = row[
            width:
        ]
        report.append(
            UsageGroup(
                group=group,
                requests=int(requests_n),
                input_tokens=int(input_n),
                output_tokens=int(output_n),
                reasoning_tokens=int(reasoning_n),
                cached_tokens=int(cached_n),
                cost_usd=round(float(cost_usd), 10),  # float sums (0.04500000000000001)
                priced=int(priced),
                errors=int(errors),
            )
        )
    if group_by == "day":
        report.sort(key=lambda g: g.group or "")
    else:
        report.sort(key=lambda g: (-g.cost_usd, -g.requests, g.group is None, g.group or ""))
    return report


async def usage_endpoint(request: Request, accounts: Accounts) -> Response:
    """``GET /admin/usage?group_by=key|model|day|session&since=ISO&until=ISO&session=ID``
    (behind the master key: ``accounts.routes.admin_endpoint``): ``{"object": "list",
    "group_by", "since", "until", "session", "data": [UsageGroup...]}``, read through
    the key store's engine (the same database the ledger writes)."""
    assert accounts.keys is not None
    query = request.query_params
    group_by = query.get("group_by", "key")
    since = parse_when(query.get("since"), "since")
    until = parse_when(query.get("until"), "until")
    session = session_filter(query.get("session"))
    groups = await usage_report(accounts.keys.engine, group_by, since, until, session)
    body = {
        "object": "list",
        "group_by": group_by,
        "since": since.isoformat() if since else None,
        "until": until.isoformat() if until else None,
        "session": session,
        "data": [group.to_json() for group in groups],
    }
    return Response(orjson.dumps(body), media_type="application/json")

"""The usage report: the ledger's rows summed by key, model or day, in SQL.

``usage_report(engine, group_by, since, until)`` is what ``GET /admin/usage``
(``usage_endpoint``) and ``llmbridge usage`` answer. Each group sums requests,
tokens (input, output with reasoning included, reasoning, cached) and cost, and
counts errors (status 400 and up, a client's 499 included). Days are UTC days.
``since`` is inclusive, ``until`` exclusive. Rows with no price count 0 toward
``cost_usd``; ``priced`` says how many requests had one, so "free" and "unknown"
stay apart.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Literal, get_args

import orjson
from sqlalchemy import ColumnElement, Table, and_, case, func, select
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.requests import Request
from starlette.responses import Response

from llmbridge.accounts.service import Accounts
from llmbridge.agent.store.models import UsageRow
from llmbridge.core.errors import InvalidRequestError

__all__ = ["GROUP_BY", "GroupBy", "UsageGroup", "parse_when", "usage_endpoint", "usage_report"]

USAGE: Table = UsageRow.__table__  # type: ignore[assignment]

GroupBy = Literal["key", "model", "day"]
GROUP_BY: tuple[str, ...] = get_args(GroupBy)


@dataclass(frozen=True, slots=True)
class UsageGroup:
    """One line of the report."""

    group: str | None
    """The key's name (its id when it has none), the model, or the UTC day
    (``YYYY-MM-DD``); ``None`` for requests made with no database key."""
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


def _day(dialect: str) -> ColumnElement[Any]:
    created = USAGE.c.created_at
    if dialect == "postgresql":
        return func.to_char(func.timezone("UTC", created), "YYYY-MM-DD")
    # SQLite keeps the naive UTC time as text, "YYYY-MM-DD HH:MM:SS..." (models.UTCDateTime).
    return func.substr(created, 1, 10)


def _total(column: ColumnElement[Any]) -> ColumnElement[Any]:
    return func.coalesce(func.sum(column), 0)


async def usage_report(
    engine: AsyncEngine,
    group_by: str = "key",
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[UsageGroup]:
    """The ledger summed by ``group_by`` (``key``, ``model`` or ``day``) over
    ``[since, until)``; days in order, keys and models by cost then requests."""
    if group_by not in GROUP_BY:
        raise InvalidRequestError(
            f"'group_by' must be one of {', '.join(GROUP_BY)}, got {group_by!r}",
            param="group_by",
        )
    columns: list[ColumnElement[Any]]
    if group_by == "key":
        columns = [USAGE.c.key_id, USAGE.c.key_name]
    elif group_by == "model":
        columns = [USAGE.c.model]
    else:
        columns = [_day(engine.dialect.name).label("day")]
    cost = _total(USAGE.c.cost_usd).label("cost_usd")
    requests = func.count().label("requests")
    query = (
        select(
            *columns,
            requests,
            _total(USAGE.c.input_tokens),
            _total(USAGE.c.output_tokens),
            _total(USAGE.c.reasoning_tokens),
            _total(USAGE.c.cached_tokens),
            cost,
            func.count(USAGE.c.cost_usd),
            _total(case((USAGE.c.status >= 400, 1), else_=0)),
        )
        .group_by(*columns)
        .order_by(*(columns if group_by == "day" else [cost.desc(), requests.desc(), *columns]))
    )
    conditions = []
    if since is not None:
        conditions.append(USAGE.c.created_at >= since)
    if until is not None:
        conditions.append(USAGE.c.created_at < until)
    if conditions:
        query = query.where(and_(*conditions))
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    width = len(columns)
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
    return report


async def usage_endpoint(request: Request, accounts: Accounts) -> Response:
    """``GET /admin/usage?group_by=key|model|day&since=ISO&until=ISO`` (behind the
    master key: ``accounts.routes.admin_endpoint``): ``{"object": "list", "group_by",
    "since", "until", "data": [UsageGroup...]}``, read through the key store's engine
    (the same database the ledger writes)."""
    assert accounts.keys is not None
    query = request.query_params
    group_by = query.get("group_by", "key")
    since = parse_when(query.get("since"), "since")
    until = parse_when(query.get("until"), "until")
    groups = await usage_report(accounts.keys.engine, group_by, since, until)
    body = {
        "object": "list",
        "group_by": group_by,
        "since": since.isoformat() if since else None,
        "until": until.isoformat() if until else None,
        "data": [group.to_json() for group in groups],
    }
    return Response(orjson.dumps(body), media_type="application/json")

"""The console's pages over the request log (accounts/request_log.py): the overview,
the live request list and one request's detail, the client sessions and one session's
timeline.

Every page reads the product's database through the request log's queries (bounded:
figures computed in SQL, at most a page of rows), each through the store's boundary
(``store.errors.mapped_errors``: its deadlines hold, its failures are core errors).
With no usage ledger (``server.ledger: false``) a page says so. With the database down
(frozen, unreachable, saturated) a page is the "database unavailable" page, 503, once
its deadline has passed, and the request list's poll a 503 row that says so; the log
says it once per outage (``GatewayState.console_outage``, store/outages.py), not once
per poll.

Filters are checked before they reach a query: a status is ``ok``, ``error`` or a code
from 100 to 599, a key or model at most ``MAX_FILTER_CHARS`` printable characters;
anything else is a 400 page naming the filter (a 23-digit status was an
``OverflowError``, 5,000 digits a ``ValueError``: 500s).

The request list polls a fragment (``/ui/requests/rows``, the same filters) every 2 s
with htmx; a row's time links to its detail page.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import urlencode

from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmbridge.accounts import request_log
from llmbridge.accounts.key_fields import has_control
from llmbridge.accounts.request_log import GROUP_BY, Overview, RequestRow, Status
from llmbridge.core.errors import InvalidRequestError, LLMBridgeError, ServiceUnavailableError
from llmbridge.gateway.console.charts import Span, bar_chart, column_chart, timeline
from llmbridge.gateway.console.session import Session
from llmbridge.gateway.console.web import PREFIX, console_page, error_page, render
from llmbridge.gateway.state import GatewayState
from llmbridge.store.errors import mapped_errors

__all__ = ["PERIODS", "routes"]

PERIODS = (
    ("15m", "15 minutes", timedelta(minutes=15)),
    ("1h", "hour", timedelta(hours=1)),
    ("24h", "day", timedelta(days=1)),
    ("7d", "7 days", timedelta(days=7)),
    ("30d", "30 days", timedelta(days=30)),
    ("all", "all kept", None),
)
"""The request list's ``since`` choices."""
WINDOWS = (
    ("hour", "Last hour", "minute"),
    ("day", "Last day", "hour"),
    ("30d", "Last 30 days", "day"),
)
"""The overview's windows, and what one of their buckets is."""
ROWS = 100
"""Requests the live list shows."""
MAX_FILTER_CHARS = 200
"""The longest key or model a filter names (a key's name has at most 200)."""

T = TypeVar("T")


class _NoLog(Exception):
    """The request log is not kept (no ledger): why, for the page."""


def _unavailable(request: Request, session: Session, exc: Exception) -> Response:
    """The "database unavailable" page (a row, for the polled fragment), 503."""
    if request.url.path.endswith("/rows"):
        return render(request, "rows_unavailable.html", 503, session, message=str(exc))
    return render(request, "unavailable.html", 503, session, message=str(exc))


def _failed(request: Request, session: Session, exc: LLMBridgeError) -> Response:
    """The page for a read that failed: "database unavailable" (503) when the database
    is down, else the error's own page with its status (a filter out of range: 400)."""
    if isinstance(exc, ServiceUnavailableError):
        return _unavailable(request, session, exc)
    return error_page(request, exc.status_code, str(exc), session)


async def _read(state: GatewayState, query: Callable[[AsyncEngine], Awaitable[T]]) -> T:
    """``query`` on the request log's database through the store's boundary: its
    deadlines, its errors (a database down is ``ServiceUnavailableError``, said once
    per outage in the log, here)."""
    if state.ledger is None:
        raise _NoLog(
            "the usage ledger is off (server.ledger: false, or no keys): no request is recorded"
        )
    try:
        with mapped_errors(log_unavailable=False):
            try:
                engine = (await state.database.get()).engine
            except LLMBridgeError:
                raise
            except Exception as exc:  # noqa: BLE001 - the kind of failure, never the URL
                raise ServiceUnavailableError(
                    f"the database is unavailable ({type(exc).__name__})"
                ) from None
            result = await query(engine)
    except ServiceUnavailableError as exc:
        state.console_outage.failed(str(exc))
        raise
    state.console_outage.answered()
    return result


def _text_filter(name: str, value: str) -> str:
    if len(value) > MAX_FILTER_CHARS or has_control(value):
        raise InvalidRequestError(
            f"the {name} filter is at most {MAX_FILTER_CHARS} characters, none a control character",
            param=name,
        )
    return value


def _filters(request: Request) -> dict[str, str]:
    """The request list's filters; ``InvalidRequestError`` naming one out of range."""
    params = request.query_params
    since = params.get("since", "1h")
    filters = {
        "key": _text_filter("key", params.get("key", "").strip()),
        "model": _text_filter("model", params.get("model", "").strip()),
        "status": params.get("status", "").strip(),
        "since": since if since in {p[0] for p in PERIODS} else "1h",
    }
    _status(filters["status"])  # checked now: a 400 before any query
    return filters


def _status(text: str) -> Status | None:
    """The status filter: none, ``ok``, ``error`` or an HTTP status code."""
    if not text:
        return None
    if text in ("ok", "error"):
        return text  # type: ignore[return-value]
    # At most 3 ASCII digits before int(): "²" passes isdigit(), and 5,000 digits are
    # past int()'s own limit.
    if text.isascii() and text.isdigit() and len(text) <= 3 and 100 <= int(text) <= 599:
        return int(text)
    shown = text if len(text) <= 20 else text[:20] + "..."
    raise InvalidRequestError(
        f"the status filter is 'ok', 'error' or a status code from 100 to 599, not {shown!r}",
        param="status",
    )


async def _rows(state: GatewayState, filters: dict[str, str]) -> list[RequestRow]:
    period = next(p[2] for p in PERIODS if p[0] == filters["since"])

    async def query(engine: AsyncEngine) -> list[RequestRow]:
        page = await request_log.recent_requests(
            engine,
            key=filters["key"] or None,
            model=filters["model"] or None,
            status=_status(filters["status"]),
            since=None if period is None else datetime.now(UTC) - period,
            limit=ROWS,
        )
        return page.rows

    return await _read(state, query)


async def _requests(request: Request, state: GatewayState, session: Session) -> Response:
    try:
        filters = _filters(request)
    except InvalidRequestError as exc:
        return error_page(request, 400, str(exc), session)
    context: dict[str, Any] = {
        "filters": filters,
        "periods": [(p[0], p[1]) for p in PERIODS],
        "query": urlencode(filters),
        "filtered": any(filters[k] for k in ("key", "model", "status")),
    }
    try:
        rows = await _rows(state, filters)
    except _NoLog as exc:
        return render(
            request, "requests.html", 200, session, rows=[], unavailable=str(exc), **context
        )
    except LLMBridgeError as exc:
        return _failed(request, session, exc)
    return render(request, "requests.html", session=session, rows=rows, **context)


async def _request_rows(request: Request, state: GatewayState, session: Session) -> Response:
    try:
        filters = _filters(request)
        rows = await _rows(state, filters)
    except _NoLog:
        rows = []
    except LLMBridgeError as exc:
        return _failed(request, session, exc)
    filtered = any(filters[k] for k in ("key", "model", "status"))
    return render(request, "request_rows.html", session=session, rows=rows, filtered=filtered)


async def _request(request: Request, state: GatewayState, session: Session) -> Response:
    request_id = request.path_params["request_id"]
    if len(request_id) > MAX_FILTER_CHARS or has_control(request_id):
        return error_page(request, 404, "no such request in the log", session)
    try:
        detail = await _read(state, lambda engine: request_log.request_detail(engine, request_id))
    except _NoLog as exc:
        return error_page(request, 503, str(exc), session)
    except LLMBridgeError as exc:
        return _failed(request, session, exc)
    if detail is None:
        message = f"no request {request_id!r} in the log (not yet written, or rolled up)"
        return error_page(request, 404, message, session)
    bodies = [
        (label, text)
        for label, text in (("Request", detail.request_body), ("Response", detail.response_body))
        if text
    ]
    return render(request, "request_detail.html", session=session, r=detail.row, bodies=bodies)


def _bucket_label(start: datetime, window: str) -> str:
    return start.strftime({"hour": "%H:%M", "day": "%H:00", "30d": "%m-%d"}[window])


def _overview_charts(view: Overview) -> dict[str, Any]:
    window = view.window
    unit = next(w[2] for w in WINDOWS if w[0] == window)
    every = {"hour": 10, "day": 4, "30d": 5}[window]
    columns = [(_bucket_label(b.start, window), float(b.stats.requests)) for b in view.buckets]
    tokens = [
        (_bucket_label(b.start, window), float(b.stats.input_tokens + b.stats.output_tokens))
        for b in view.buckets
    ]
    spend = [(_bucket_label(b.start, window), b.stats.cost_usd) for b in view.buckets]
    return {
        "requests_chart": column_chart("Requests", columns, f"requests per {unit}", every),
        "tokens_chart": column_chart("Tokens", tokens, f"tokens (in + out) per {unit}", every),
        "spend_chart": column_chart("Spend", spend, f"USD per {unit}", every),
    }


async def _overview(request: Request, state: GatewayState, session: Session) -> Response:
    """One window's figures and charts, and one grouping of them (``by``: dialect,
    model, backend or key; links switch). One grouping per page: each ``overview`` call
    computes the window's buckets too, so four groupings were four times the work (a
    30-day window over 100,000 SQLite rows: seconds per call)."""
    params = request.query_params
    window = params.get("window", "hour")
    if window not in {w[0] for w in WINDOWS}:
        window = "hour"
    group = params.get("by", "model")
    if group not in GROUP_BY:
        group = "model"
    context: dict[str, Any] = {
        "window": window,
        "windows": WINDOWS,
        "group": group,
        "groupings": GROUP_BY,
    }
    try:
        view = await _read(
            state, lambda engine: request_log.overview(engine, window, group, max_groups=10)
        )
    except _NoLog as exc:
        return render(request, "overview.html", 200, session, unavailable=str(exc), **context)
    except LLMBridgeError as exc:
        return _failed(request, session, exc)
    seconds = view.bucket_seconds * len(view.buckets)
    names = [g.name or "(none)" for g in view.groups]
    requests_by = bar_chart(
        f"Requests by {group}",
        [(n, float(g.stats.requests)) for n, g in zip(names, view.groups, strict=True)],
        "requests",
    )
    spend_by = bar_chart(
        f"Spend by {group}",
        [(n, g.stats.cost_usd) for n, g in zip(names, view.groups, strict=True)],
        "USD",
    )
    return render(
        request,
        "overview.html",
        session=session,
        view=view,
        requests_by=requests_by,
        spend_by=spend_by,
        rate=view.totals.requests / seconds,
        **_overview_charts(view),
        **context,
    )


async def _sessions(request: Request, state: GatewayState, session: Session) -> Response:
    try:
        lines = await _read(state, lambda engine: request_log.sessions(engine, limit=100))
    except _NoLog as exc:
        return render(request, "sessions.html", 200, session, lines=[], unavailable=str(exc))
    except LLMBridgeError as exc:
        return _failed(request, session, exc)
    return render(request, "sessions.html", session=session, lines=lines)


def _spans(rows: list[RequestRow]) -> list[Span]:
    """Each request from its start (its end less its latency) to its end."""
    if not rows:
        return []

    def start(row: RequestRow) -> datetime:
        return row.created_at - timedelta(milliseconds=row.latency_ms or 0)

    first = min(start(r) for r in rows)
    spans = []
    for i, row in enumerate(rows, 1):
        note = (
            f"{row.input_tokens or 0} in ({row.cached_tokens or 0} cached), "
            f"{row.output_tokens or 0} out, ${row.cost_usd or 0:.6f}"
        )
        spans.append(
            Span(
                label=f"{i}. {row.model}",
                start_s=(start(row) - first).total_seconds(),
                duration_s=(row.latency_ms or 0) / 1000,
                note=note,
                failed=row.status >= 400,
            )
        )
    return spans


async def _session(request: Request, state: GatewayState, session: Session) -> Response:
    session_id = request.path_params["session_id"]
    try:
        rows = await _read(state, lambda engine: request_log.session_requests(engine, session_id))
    except _NoLog as exc:
        return error_page(request, 503, str(exc), session)
    except LLMBridgeError as exc:
        return _failed(request, session, exc)
    if not rows:
        return error_page(request, 404, "no requests in that session", session)
    totals = {
        "turns": len(rows),
        "input_tokens": sum(r.input_tokens or 0 for r in rows),
        "output_tokens": sum(r.output_tokens or 0 for r in rows),
        "cached_tokens": sum(r.cached_tokens or 0 for r in rows),
        "cost_usd": sum(r.cost_usd or 0 for r in rows),
    }
    chart = timeline(f"Session {session_id}", _spans(rows))
    return render(
        request,
        "session.html",
        session=session,
        session_id=session_id,
        rows=rows,
        totals=totals,
        chart=chart,
    )


routes = [
    Route(f"{PREFIX}/", console_page(_overview), methods=["GET"]),
    Route(f"{PREFIX}/requests", console_page(_requests), methods=["GET"]),
    Route(f"{PREFIX}/requests/rows", console_page(_request_rows), methods=["GET"]),
    Route(f"{PREFIX}/requests/{{request_id}}", console_page(_request), methods=["GET"]),
    Route(f"{PREFIX}/sessions", console_page(_sessions), methods=["GET"]),
    Route(f"{PREFIX}/sessions/{{session_id:path}}", console_page(_session), methods=["GET"]),
]

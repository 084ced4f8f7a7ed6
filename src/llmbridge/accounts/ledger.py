"""The usage ledger: one row per request in the ``usage`` table, written in batches
off the request path.

``UsageLedger.record(r)`` is all a request pays: it appends ``r`` to a buffer in
memory, and adds its cost to the key's "spent, not yet flushed" counter in the shared
state (``spend:<key_id>``), so a budget check (``api_keys.spent_usd`` plus that
counter) sees it at once, on every replica. With Redis the adds gather for
``SPEND_BATCH_S`` (50 ms) and go as one per key (a budget check sees a cost up to
50 ms late), not as a round trip per request; in-process state takes each add at once,
without a task. A background task writes the buffer
every ``flush_interval_s`` (1 s), or as soon as ``batch_size`` (200) records wait,
in one transaction per batch:

- one ``INSERT ... ON CONFLICT (request_id) DO NOTHING RETURNING request_id``
  (SQLite and PostgreSQL both have it), so a batch written again after a failure
  that hid a commit, or a request id some other replica already wrote, is never
  counted twice;
- ``api_keys.spent_usd += cost`` for the rows that went in, summed per key, in the
  same transaction: spend and ledger never disagree. After the commit the batch's
  cost is taken back out of the shared counters.

A failed write keeps its records at the head of the buffer and is tried again at
the next tick (logged once per outage). The buffer is bounded (``max_buffer``): while
the database stays down past that, the oldest records are dropped, counted in
``dropped`` and logged. ``aclose()`` stops the task and writes what is left, so a
graceful shutdown loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import operator
import os
import socket
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Table, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from llmbridge.agent.store.engine import make_engine, write_engine
from llmbridge.agent.store.migrate import migrate
from llmbridge.agent.store.models import ApiKeyRow, UsageRow
from llmbridge.state.base import SharedState
from llmbridge.state.local import LocalState

__all__ = ["UsageLedger", "UsageRecord", "replica_name", "spend_key"]

log = logging.getLogger("llmbridge.accounts")

USAGE: Table = UsageRow.__table__  # type: ignore[assignment]
API_KEYS: Table = ApiKeyRow.__table__  # type: ignore[assignment]


SPEND_BATCH_S = 0.05
"""With Redis, spend gathers this long before it is sent (one round trip per key per
50 ms, not one per request); in-process state gets it at once."""


def replica_name() -> str:
    """This process, as the ledger's ``replica`` column names it: ``hostname:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"[:100]


def spend_key(key_id: str) -> str:
    """The shared-state float counter of a key's spend (``state.add_float``)."""
    return f"spend:{key_id}"


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """One request, as the ``usage`` table keeps it (agent/store/models.py ``UsageRow``)."""

    request_id: str
    """Unique: the second write of the same request is ignored."""
    model: str
    """The public model name the caller asked for."""
    status: int
    """The HTTP status; 499 when the client left; an in-stream error's own status."""
    created_at: datetime = field(default_factory=_now)
    key_id: str | None = None
    """``api_keys.id`` of a database key; ``None`` for a static key or no auth."""
    key_name: str | None = None
    backend: str | None = None
    """The serving backend's kind (``ollama``, ``openai``...)."""
    deployment: str | None = None
    """The configured backend that served it, after fallbacks and balancing."""
    endpoint: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    """Reasoning tokens included, as in the core's ``Usage``."""
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None
    """Prompt tokens read from the backend's cache."""
    cost_usd: float | None = None
    """From the price table; ``None`` when the model has no price."""
    latency_ms: float | None = None
    ttft_ms: float | None = None
    streamed: bool | None = None
    replica: str | None = None
    """``hostname:pid`` of the process that served it."""


_COLUMNS = tuple(f.name for f in fields(UsageRecord))
_CREATED_AT = _COLUMNS.index("created_at")
_ROW = operator.attrgetter(*_COLUMNS)
"""A record's values in column order, in one C call."""


ROWS_PER_INSERT = 1000
"""Rows per INSERT statement: 18 parameters each, under SQLite's and PostgreSQL's
limit of 32,766 and 32,767 parameters per statement."""


async def _insert(conn: AsyncConnection, batch: list[UsageRecord]) -> list[str]:
    """``INSERT ... ON CONFLICT (request_id) DO NOTHING RETURNING request_id`` of
    ``batch`` as ONE multi-row statement with plain driver parameters: the request
    ids that went in.

    Why not SQLAlchemy's own ``insert`` with a list of rows: it runs its parameter
    processing (``construct_params``, a bind processor per column, the UTC timestamp
    type) once per row in Python, about 25 µs of the gateway's CPU per request here
    against about 5 µs for SQLite to store the row (docs/PERFORMANCE.md, "Issue 17").
    The values are already of the types the drivers take; the timestamp is given as
    ``UTCDateTime`` (agent/store/models.py) stores it: naive UTC text on SQLite, an
    aware UTC datetime on PostgreSQL."""
    dialect = conn.dialect
    # The agent store's engines are aiosqlite (qmark) or asyncpg (numeric_dollar) only
    # (agent/store/engine.py resolve_url).
    paramstyle = dialect.paramstyle
    on_sqlite = dialect.name == "sqlite"
    values: list[Any] = []
    for record in batch:
        row = list(_ROW(record))
        at = record.created_at
        # As UTCDateTime.process_bind_param: a naive value is UTC already.
        at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
        if on_sqlite:
            row[_CREATED_AT] = at.replace(tzinfo=None).isoformat(" ", "microseconds")
        else:
            row[_CREATED_AT] = at
        values += row
    sql = _insert_sql(paramstyle, len(batch), dialect.identifier_preparer.quote)
    return list((await conn.exec_driver_sql(sql, tuple(values))).scalars())


@functools.lru_cache(maxsize=32)
def _insert_sql(paramstyle: str, rows: int, quote: Callable[[str], str]) -> str:
    """The statement text of ``_insert`` for ``rows`` rows, built once per size."""
    width = len(_COLUMNS)
    if paramstyle == "qmark":
        groups = ["(" + ", ".join("?" * width) + ")"] * rows
    else:  # numeric_dollar: $1, $2, ... across the rows
        groups = [
            "(" + ", ".join(f"${row * width + i + 1}" for i in range(width)) + ")"
            for row in range(rows)
        ]
    columns = ", ".join(quote(name) for name in _COLUMNS)
    return (
        f"INSERT INTO {quote(USAGE.name)} ({columns}) VALUES {', '.join(groups)} "
        f"ON CONFLICT ({quote('request_id')}) DO NOTHING RETURNING {quote('request_id')}"
    )


class UsageLedger:
    """The batched writer of ``usage`` rows (module docstring)."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        spend: SharedState | None = None,
        flush_interval_s: float = 1.0,
        batch_size: int = 200,
        max_buffer: int = 100_000,
        owns_engine: bool = False,
        on_dropped: Callable[[int], None] | None = None,
        spend_batch_s: float | None = None,
    ) -> None:
        self.engine = engine
        self.replica = replica_name()
        """This process (records name it in ``replica``): taken where the ledger opens,
        in the serving process."""
        self._writer = write_engine(engine)
        self._spend = spend
        self.flush_interval_s = flush_interval_s
        self.batch_size = batch_size
        self.max_buffer = max_buffer
        self._owns_engine = owns_engine
        self._on_dropped = on_dropped
        """Told how many records were dropped (the gateway's metrics counter)."""
        self._buffer: deque[UsageRecord] = deque()
        self._wake = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._unsent_spend: dict[str, float] = {}
        self.spend_batch_s = (
            spend_batch_s
            if spend_batch_s is not None
            else (0.0 if spend is None or spend.kind == "local" else SPEND_BATCH_S)
        )
        """How long spend gathers before it is sent, one add per key (module docstring)."""
        self._spend_task: asyncio.Task[None] | None = None
        self._spend_now = spend.add_float_now if isinstance(spend, LocalState) else None
        """In-process state takes a request's spend synchronously (no task per request)."""
        self._failing = False
        self._closing = False
        self.dropped = 0
        """Records dropped because the buffer was full while the database was down."""
        self.flush_failures = 0
        """Writes that failed (each retried at the next tick)."""
        self.written = 0
        """Rows inserted (duplicates not counted)."""

    @classmethod
    async def open(
        cls, database: str | Path, *, spend: SharedState | None = None, **options: Any
    ) -> UsageLedger:
        """A started ledger on ``database`` (a URL or a SQLite path, as ``--db``),
        migrated to the newest schema first, as the agent store is."""
        engine = make_engine(database)
        try:
            await migrate(engine)
        except BaseException:
            await engine.dispose()
            raise
        ledger = cls(engine, spend=spend, owns_engine=True, **options)
        ledger.start()
        return ledger

    @property
    def pending(self) -> int:
        """Records waiting to be written."""
        return len(self._buffer)

    def start(self) -> None:
        """Start the background writer (on the running event loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="usage-ledger-flush"
            )

    def record(self, record: UsageRecord) -> None:
        """Keep ``record`` for the next write; never waits for the database."""
        if len(self._buffer) >= self.max_buffer:
            self._buffer.popleft()
            self._dropped(1)
        self._buffer.append(record)
        if len(self._buffer) >= self.batch_size:
            self._wake.set()
        if self._spend is not None and record.key_id is not None and record.cost_usd:
            if self._spend_now is not None:  # this process's state: added at once
                self._spend_now(spend_key(record.key_id), record.cost_usd)
                return
            # The shared spend counter is what budget checks read between flushes. One
            # task adds what accumulated since it last ran, not one task per request.
            key = spend_key(record.key_id)
            self._unsent_spend[key] = self._unsent_spend.get(key, 0.0) + record.cost_usd
            if self._spend_task is None:
                self._spend_task = asyncio.get_running_loop().create_task(self._send_spend())

    async def _send_spend(self) -> None:
        assert self._spend is not None
        try:
            if self.spend_batch_s > 0:
                await asyncio.sleep(self.spend_batch_s)
            while self._unsent_spend:
                unsent, self._unsent_spend = self._unsent_spend, {}
                await self._add_spend(unsent)
        finally:
            self._spend_task = None

    async def _add_spend(self, unsent: dict[str, float]) -> None:
        assert self._spend is not None
        for key, amount in unsent.items():
            try:
                await self._spend.add_float(key, amount)
            except Exception as exc:  # noqa: BLE001 - the budget reads low for a while
                log.warning("usage ledger: the spend counter was not updated: %s", exc)

    def _dropped(self, count: int) -> None:
        if self.dropped == 0 or self.dropped // 1000 != (self.dropped + count) // 1000:
            log.warning(
                "usage ledger: buffer full (%d records) while the database is unreachable: "
                "%d records dropped so far",
                self.max_buffer,
                self.dropped + count,
            )
        self.dropped += count
        if self._on_dropped is not None:
            self._on_dropped(count)

    async def _run(self) -> None:
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.flush_interval_s)
            self._wake.clear()
            await self.flush()

    async def flush(self) -> bool:
        """Write what waited when it was called, a batch at a time; ``False`` when a
        write failed (its records stay, to be tried again). Records that arrive
        meanwhile wait for the next tick: draining to empty would chase a busy
        gateway with a write every few requests."""
        async with self._flush_lock:
            todo = len(self._buffer)
            while todo > 0 and self._buffer:
                size = min(self.batch_size, todo, len(self._buffer))
                todo -= size
                batch = [self._buffer.popleft() for _ in range(size)]
                try:
                    self.written += await self._write(batch)
                except asyncio.CancelledError:
                    self._buffer.extendleft(reversed(batch))  # rolled back: write it later
                    raise
                except Exception as exc:  # noqa: BLE001 - kept and retried, never lost silently
                    self._buffer.extendleft(reversed(batch))
                    overflow = len(self._buffer) - self.max_buffer
                    for _ in range(max(overflow, 0)):
                        self._buffer.popleft()
                    if overflow > 0:
                        self._dropped(overflow)
                    self.flush_failures += 1
                    if not self._failing:
                        log.warning(
                            "usage ledger: writing %d records failed, will retry: %s: %s",
                            len(batch),
                            type(exc).__name__,
                            exc,
                        )
                    self._failing = True
                    return False
                if self._failing:
                    log.warning("usage ledger: writing works again")
                    self._failing = False
                if self._unsent_spend:
                    # The batch's spend is added before it is taken back out.
                    unsent, self._unsent_spend = self._unsent_spend, {}
                    await self._add_spend(unsent)
                await self._flushed_spend(batch)
            return True

    async def _flushed_spend(self, batch: list[UsageRecord]) -> None:
        """Take the batch's cost out of the shared "not yet flushed" counters: it is in
        ``api_keys.spent_usd`` now (or was already, for a request written before)."""
        if self._spend is None:
            return
        spent: defaultdict[str, float] = defaultdict(float)
        for record in batch:
            if record.key_id is not None and record.cost_usd:
                spent[record.key_id] += record.cost_usd
        for key_id, amount in spent.items():
            try:
                await self._spend.add_float(spend_key(key_id), -amount)
            except Exception as exc:  # noqa: BLE001 - the budget reads high until restart
                log.warning("usage ledger: the spend counter was not updated: %s", exc)

    async def _write(self, batch: list[UsageRecord]) -> int:
        """Insert ``batch`` and add its cost to the keys' spend, in one transaction;
        the number of rows inserted."""
        async with self._writer.begin() as conn:
            inserted: set[str] = set()
            for start in range(0, len(batch), ROWS_PER_INSERT):
                inserted.update(await _insert(conn, batch[start : start + ROWS_PER_INSERT]))
            spent: defaultdict[str, float] = defaultdict(float)
            for record in batch:
                if record.request_id in inserted and record.key_id and record.cost_usd:
                    spent[record.key_id] += record.cost_usd
            for key_id, amount in spent.items():
                await conn.execute(
                    update(API_KEYS)
                    .where(API_KEYS.c.id == key_id)
                    .values(spent_usd=API_KEYS.c.spent_usd + amount)
                )
        return len(inserted)

    async def aclose(self, *, attempts: int = 3) -> None:
        """Stop the writer and write what is left (tried ``attempts`` times; what
        still cannot be written is logged as lost)."""
        if self._task is not None:
            # Not cancelled: a write under way finishes (or fails and keeps its records).
            self._closing = True
            self._wake.set()
            await self._task
            self._task = None
        if self._spend_task is not None:
            await self._spend_task
        for attempt in range(attempts):
            written = await self.flush()
            if not self._buffer:
                break
            if not written:
                await asyncio.sleep(0.2 * (attempt + 1))
        if self._buffer:
            log.error(
                "usage ledger: %d records could not be written at shutdown", len(self._buffer)
            )
        if self._owns_engine:
            await self.engine.dispose()

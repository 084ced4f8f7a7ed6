"""The usage ledger: one row per request in the ``usage`` table, written in batches
off the request path.

``UsageLedger.record(r)`` is all a request pays: it appends ``r`` to a buffer in
memory, and adds its cost to the key's "spent, not yet flushed" counter in the shared
state (``spend:<key_id>``), so a budget check (``api_keys.spent_usd`` plus that
counter) sees it at once, on every replica. With Redis the adds gather for
``SPEND_BATCH_S`` (50 ms) and go as one per key (a budget check sees a cost up to
50 ms late), not as a round trip per request; in-process state takes each add at once,
without a task. ``record(r, spend_counted=True)`` skips that add: the caller already
made it, atomically with releasing its budget reservation. A background task writes
the buffer every ``flush_interval_s`` (1 s), or as soon as ``batch_size`` (1,000) records wait,
in one transaction per batch (a transaction's begin and commit cost about 1.3 ms:
per 200 rows that was a fifth of a row's write), its rows inserted ``ROWS_PER_INSERT``
(250) at a time, so the event loop runs between two statements:

- ``INSERT ... ON CONFLICT (request_id) DO NOTHING RETURNING request_id``
  (SQLite and PostgreSQL both have it), so a batch written again after a failure
  that hid a commit, or a request id some other replica already wrote, is never
  counted twice;
- ``api_keys.spent_usd += cost RETURNING spent_usd`` for the rows that went in, summed
  per key, in the same transaction: spend and ledger never disagree. Still inside it,
  before the commit, the batch's cost is handed over in the shared state
  (``SharedState.hand_over``, one step for every key): it leaves the ``spend:`` counter
  and joins ``handed:<key_id>``, the spend handed to the ledger. The budget check counts
  ``max(spent_usd, handed) + spend``, which the hand-over leaves unchanged, so a process
  whose cached key record was read before the commit, or after it, counts each request
  once (state/base.py). A hand-over that fails rolls the transaction back (the batch is
  retried and handed over again: were the first one made after all, making it twice
  leaves the sum the same). A commit that fails after the hand-over may have happened
  (a connection lost at the commit): its requests are marked handed, and the retry
  writes their rows without handing them over again. A request whose row was already
  there (another replica wrote its request id) leaves the spend counter without
  joining ``handed``: ``spent_usd`` holds it once.

Values are made storable in ``record()``, before they are queued, the
same on SQLite and PostgreSQL (``storable_record``): U+0000 and unpaired surrogates
become U+FFFD, text is cut to its column's length, integers are clamped to the
columns' 32 bits, a non-finite float becomes NULL. One hostile model name then
costs nothing but itself.

A failed write is one of two things (``refused``):

- **The database is unreachable** (a connection refused or lost, a timeout, a
  missing table): the batch keeps its records at the head of the buffer and is
  tried again at the next tick (logged once per outage). The buffer is bounded
  (``max_buffer``): while the database stays down past that, the oldest records are
  dropped, counted in ``dropped`` and logged.
- **The database refused the batch's values** (SQLSTATE classes 22 "data exception"
  and 23 "integrity constraint", a value the driver cannot send): the batch is
  split in two and each half written on its own, down to single rows, so every row
  that can be written is. A row refused on its own is **set aside**: logged with its
  request id, counted in ``set_aside`` (and ``on_set_aside``, the gateway's metric),
  and never tried again, so it never blocks the rows behind it. Its cost stays in
  the shared spend counter: the request was served, its budget still sees it.

``aclose()`` stops the task and writes what is left, so a graceful shutdown loses
nothing.

A row is visible to readers (``GET /admin/usage``, the console's request log:
accounts/request_log.py) once its batch is written: within ``flush_interval_s`` (1 s)
of the request's end, the "within a few seconds" the console promises,
for one write per second whatever the traffic.

With ``bodies`` (a ``BodyKeeper``: ``ledger.keep_bodies``, accounts/kept_bodies.py),
``keep_bodies`` queues a request's bodies, redacted and cut to their bound at once, and
each write inserts them into ``usage_bodies`` after the rows, best effort (a failure
drops them, logged; the rows never wait on them). What waits is bounded in bytes
(``ledger.max_pending_body_bytes``): past it a request's bodies are dropped and
``keep_bodies`` says so, for its row to say it.

With ``retention_days`` set (``ledger.retention_days``, 90 by default in the
gateway), a second task moves rows past the retention into daily rollups and
deletes them, a small batch per transaction, once at start and then hourly
(accounts/rollups.py); ``cleanup_pending`` is how many rows it still has to move.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
from collections import defaultdict, deque
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Table, update
from sqlalchemy.ext.asyncio import AsyncConnection

from llmbridge.accounts.kept_bodies import (
    DEFAULT_BODY_RETENTION_DAYS,
    BodyKeeper,
    write_bodies,
)
from llmbridge.accounts.rollups import (
    CLEANUP_BATCH,
    DEFAULT_RETENTION_DAYS,
    cutoff_for,
    delete_bodies_batch,
    pending_cleanup,
    roll_up_batch,
)
from llmbridge.accounts.usage_record import (
    COLUMNS,
    CREATED_AT,
    ROW,
    UsageRecord,
    refused,
    storable_record,
)
from llmbridge.core.tasks import stop_task
from llmbridge.state.base import SharedState, SpendHandOver
from llmbridge.state.local import LocalState
from llmbridge.store.database import Database
from llmbridge.store.tables import ApiKeyRow, UsageRow

__all__ = [
    "UsageLedger",
    "UsageRecord",
    "handed_key",
    "refused",
    "replica_name",
    "spend_key",
    "storable_record",
]

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
    """The shared-state float counter of a key's spend not yet written
    (``state.add_float``)."""
    return f"spend:{key_id}"


def handed_key(key_id: str) -> str:
    """The shared-state float counter of a key's spend handed to ``spent_usd``
    (``state.hand_over``)."""
    return f"handed:{key_id}"


ROWS_PER_INSERT = 250
"""Rows per INSERT statement: one parameter per column (28 of them), far
under SQLite's and PostgreSQL's limit of 32,766 and 32,767 parameters per statement;
what the event loop spends on one statement's values (a few microseconds a row) is
held under 2 ms."""


async def _insert(conn: AsyncConnection, batch: list[UsageRecord]) -> list[str]:
    """``INSERT ... ON CONFLICT (request_id) DO NOTHING RETURNING request_id`` of
    ``batch`` as ONE multi-row statement with plain driver parameters: the request
    ids that went in.

    Why not SQLAlchemy's own ``insert`` with a list of rows: it runs its parameter
    processing (``construct_params``, a bind processor per column, the UTC timestamp
    type) once per row in Python, about 25 µs of the gateway's CPU per request here
    against about 5 µs for SQLite to store the row (docs/PERFORMANCE.md, "The usage ledger").
    The values are already of the types the drivers take; the timestamp is given as
    ``UTCDateTime`` (store/tables.py) stores it: naive UTC text on SQLite, an
    aware UTC datetime on PostgreSQL."""
    dialect = conn.dialect
    # The store's engines are aiosqlite (qmark) or asyncpg (numeric_dollar) only
    # (store/engine.py resolve_url).
    paramstyle = dialect.paramstyle
    on_sqlite = dialect.name == "sqlite"
    values: list[Any] = []
    for record in batch:
        row = list(ROW(record))
        at = record.created_at
        # As UTCDateTime.process_bind_param: a naive value is UTC already.
        at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
        if on_sqlite:
            row[CREATED_AT] = at.replace(tzinfo=None).isoformat(" ", "microseconds")
        else:
            row[CREATED_AT] = at
        values += row
    sql = _insert_sql(paramstyle, len(batch), dialect.identifier_preparer.quote)
    return list((await conn.exec_driver_sql(sql, tuple(values))).scalars())


@functools.lru_cache(maxsize=32)
def _insert_sql(paramstyle: str, rows: int, quote: Callable[[str], str]) -> str:
    """The statement text of ``_insert`` for ``rows`` rows, built once per size."""
    width = len(COLUMNS)
    if paramstyle == "qmark":
        groups = ["(" + ", ".join("?" * width) + ")"] * rows
    else:  # numeric_dollar: $1, $2, ... across the rows
        groups = [
            "(" + ", ".join(f"${row * width + i + 1}" for i in range(width)) + ")"
            for row in range(rows)
        ]
    columns = ", ".join(quote(name) for name in COLUMNS)
    return (
        f"INSERT INTO {quote(USAGE.name)} ({columns}) VALUES {', '.join(groups)} "
        f"ON CONFLICT ({quote('request_id')}) DO NOTHING RETURNING {quote('request_id')}"
    )


class UsageLedger:
    """The batched writer of ``usage`` rows (module docstring)."""

    def __init__(
        self,
        database: Database,
        *,
        spend: SharedState | None = None,
        flush_interval_s: float = 1.0,
        batch_size: int = 1000,
        max_buffer: int = 100_000,
        owns_database: bool = False,
        on_dropped: Callable[[int], None] | None = None,
        spend_batch_s: float | None = None,
        on_set_aside: Callable[[int], None] | None = None,
        retention_days: int | None = None,
        cleanup_interval_s: float = 3600.0,
        cleanup_batch: int = CLEANUP_BATCH,
        cleanup_pause_s: float = 0.05,
        on_cleanup_pending: Callable[[int], None] | None = None,
        bodies: BodyKeeper | None = None,
        body_retention_days: int | None = DEFAULT_BODY_RETENTION_DAYS,
    ) -> None:
        self.database = database
        """The product's database (store/database.py): the gateway's one, handed in."""
        self.engine = database.engine
        self.replica = replica_name()
        """This process (records name it in ``replica``): taken where the ledger opens,
        in the serving process."""
        self._writer = database.writer
        self._spend = spend
        self.flush_interval_s = flush_interval_s
        self.batch_size = batch_size
        self.max_buffer = max_buffer
        self._owns_database = owns_database
        self._on_dropped = on_dropped
        """Told how many records were dropped (the gateway's metrics counter)."""
        self._on_set_aside = on_set_aside
        """Told how many records were set aside (a counter, as ``on_dropped``)."""
        self.retention_days = retention_days
        """Days a row is kept before it is rolled up (accounts/rollups.py); ``None``
        or 0: for ever, and no cleanup task."""
        self.bodies = bodies
        """Where requests' bodies wait for the next write when they are kept
        (``ledger.keep_bodies``); ``None``: not kept, and nothing is built for them."""
        self.body_retention_days = body_retention_days
        """Days a kept body stays (``ledger.body_retention_days``); ``None`` or 0: for
        ever."""
        self.bodies_deleted = 0
        """Kept bodies deleted past their retention by this process."""
        self.cleanup_interval_s = cleanup_interval_s
        self.cleanup_batch = cleanup_batch
        self.cleanup_pause_s = cleanup_pause_s
        """Between two cleanup transactions: the ledger's own writes go first."""
        self._on_cleanup_pending = on_cleanup_pending
        """Told ``cleanup_pending`` each time it changes (a gauge)."""
        self._cleanup_task: asyncio.Task[None] | None = None
        self._cleanup_lock = asyncio.Lock()
        self._buffer: deque[UsageRecord] = deque()
        self._wake = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._unsent_spend: dict[str, float] = {}
        self._handed: set[str] = set()
        """Request ids whose cost a write handed over and whose commit then failed
        (``_write``): a retry writes their rows without handing them over again."""
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
        self.set_aside = 0
        """Records the database refused on their own: logged, never retried."""
        self.cleanup_pending = 0
        """Rows past the retention still to be rolled up (as of the last cleanup)."""
        self.rolled_up = 0
        """Rows moved into the daily rollups by this process."""
        self.cleanup_batches = 0
        """Cleanup transactions that moved rows."""

    @classmethod
    async def open(
        cls,
        database: Database | str | Path,
        *,
        spend: SharedState | None = None,
        retention_days: int | None = DEFAULT_RETENTION_DAYS,
        **options: Any,
    ) -> UsageLedger:
        """A started ledger on ``database``: the gateway's ``Database``, or a URL or a
        SQLite path (as ``--db``) for a ``Database`` of the ledger's own, migrated to
        the newest schema first and closed with the ledger. Rows past
        ``retention_days`` (``ledger.retention_days``) are rolled up."""
        owned = not isinstance(database, Database)
        handle = await Database.open(database) if not isinstance(database, Database) else database
        ledger = cls(
            handle, spend=spend, owns_database=owned, retention_days=retention_days, **options
        )
        ledger.start()
        return ledger

    @property
    def pending(self) -> int:
        """Records waiting to be written."""
        return len(self._buffer)

    def start(self) -> None:
        """Start the background writer, and the cleanup when rows have a retention
        (on the running event loop)."""
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._task = loop.create_task(self._run(), name="usage-ledger-flush")
        if self._cleanup_task is None and (self.retention_days or self._bodies_expire):
            self._cleanup_task = loop.create_task(self._run_cleanup(), name="usage-ledger-cleanup")

    @property
    def _bodies_expire(self) -> bool:
        return self.bodies is not None and bool(self.body_retention_days)

    def keep_bodies(self, record: UsageRecord, request: object, reply: object) -> bool:
        """Keep ``record``'s request and reply (neutral objects or JSON data), when
        bodies are kept (``bodies``): rendered and cut now, written with the next batch
        (accounts/kept_bodies.py). ``False`` when they were dropped: the bodies waiting
        already hold ``ledger.max_pending_body_bytes`` (or none are kept)."""
        if self.bodies is None:
            return False
        return self.bodies.keep(record.request_id, record.created_at, request, reply)

    def record(self, record: UsageRecord, *, spend_counted: bool = False) -> None:
        """Keep ``record`` for the next write, its values made storable; never waits
        for the database. ``spend_counted``: the caller already added the record's
        cost to the shared ``spend:<key>`` counter (atomically with releasing its
        budget reservation), so it is not added again here; the row, ``spent_usd``
        and taking the flushed cost back out of the counter are as for any record."""
        record = storable_record(record)
        if len(self._buffer) >= self.max_buffer:
            self._buffer.popleft()
            self._dropped(1)
        self._buffer.append(record)
        if len(self._buffer) >= self.batch_size:
            self._wake.set()
        if spend_counted:
            return
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
        """Write what waited when it was called, a batch at a time; ``False`` when the
        database was unreachable (the batch's records stay, to be tried again). A
        batch the database refuses is split until the rows it refuses are alone, and
        those are set aside (module docstring). Records that arrive meanwhile wait
        for the next tick: draining to empty would chase a busy gateway with a write
        every few requests."""
        async with self._flush_lock:
            todo = len(self._buffer)
            while todo > 0 and self._buffer:
                size = min(self.batch_size, todo, len(self._buffer))
                todo -= size
                batch = [self._buffer.popleft() for _ in range(size)]
                if self._unsent_spend:
                    # The batch's spend reaches the counter before it is handed over.
                    unsent, self._unsent_spend = self._unsent_spend, {}
                    await self._add_spend(unsent)
                committed, error = await self._write_splitting(batch)
                if error is None and self._failing:
                    log.warning("usage ledger: writing works again")
                    self._failing = False
                if error is not None:
                    self.flush_failures += 1
                    if not self._failing:
                        log.warning(
                            "usage ledger: writing %d records failed, will retry: %s: %s",
                            len(batch) - len(committed),
                            type(error).__name__,
                            error,
                        )
                    self._failing = True
                    return False
            if self.bodies is not None and self.bodies.pending:
                await write_bodies(self._writer, self.bodies)
            return True

    async def _write_splitting(
        self, batch: list[UsageRecord]
    ) -> tuple[list[UsageRecord], Exception | None]:
        """Write ``batch``, splitting it in halves while the database refuses its
        values: the records committed, and the error that stopped it when the
        database was unreachable (the records not written are back at the head of
        the buffer)."""
        committed: list[UsageRecord] = []
        parts = [batch]  # a stack: its last part comes first in the buffer's order
        while parts:
            part = parts[-1]
            try:
                written = await self._write(part)
            except asyncio.CancelledError:
                self._requeue(parts)  # rolled back: written later
                raise
            except Exception as exc:  # noqa: BLE001 - kept and retried, or set aside
                if not refused(exc):
                    self._requeue(parts)
                    return committed, exc
                parts.pop()
                if len(part) == 1:
                    self._put_aside(part[0], exc)
                else:
                    middle = len(part) // 2
                    parts += [part[middle:], part[:middle]]
                continue
            parts.pop()
            self.written += written
            committed += part
        return committed, None

    def _requeue(self, parts: list[list[UsageRecord]]) -> None:
        """Put the records of ``parts`` (a ``_write_splitting`` stack) back at the head
        of the buffer, in order, dropping the oldest beyond ``max_buffer``."""
        for part in parts:  # the stack's bottom is the latest: pushed back first
            self._buffer.extendleft(reversed(part))
        overflow = len(self._buffer) - self.max_buffer
        for _ in range(max(overflow, 0)):
            self._buffer.popleft()
        if overflow > 0:
            self._dropped(overflow)

    def _put_aside(self, record: UsageRecord, exc: Exception) -> None:
        self.set_aside += 1
        if self._on_set_aside is not None:
            self._on_set_aside(1)
        # Each of the first 100, then one in 1,000: a constraint that refuses every row
        # must not turn the log into a copy of the ledger.
        if self.set_aside > 100 and self.set_aside % 1000:
            return
        log.error(
            "usage ledger: the database refused request %s's record; set aside, not "
            "retried (%d so far): %s: %s",
            record.request_id,
            self.set_aside,
            type(exc).__name__,
            str(exc).splitlines()[0] if str(exc) else "",
        )

    async def _write(self, batch: list[UsageRecord]) -> int:
        """Insert ``batch``, add its cost to the keys' ``spent_usd`` and hand that cost
        over in the shared state, in one transaction, the hand-over last before the
        commit (module docstring); the number of rows inserted."""
        handing = self._spend is not None
        async with self._writer.begin() as conn:
            inserted: set[str] = set()
            for start in range(0, len(batch), ROWS_PER_INSERT):
                inserted.update(await _insert(conn, batch[start : start + ROWS_PER_INSERT]))
            spent: defaultdict[str, float] = defaultdict(float)
            unspent: defaultdict[str, float] = defaultdict(float)
            handed: defaultdict[str, float] = defaultdict(float)
            moved: list[str] = []
            for record in batch:
                key_id, cost = record.key_id, record.cost_usd
                if not key_id or not cost or cost <= 0:
                    continue
                went_in = record.request_id in inserted
                if went_in:
                    spent[key_id] += cost
                if not handing or record.request_id in self._handed:
                    continue  # handed over by a write whose commit was not confirmed
                # Each request's cost leaves the spend counter once; it joins what was
                # handed to spent_usd unless its row was there already (another
                # replica wrote the same request id: spent_usd has it once).
                unspent[key_id] += cost
                if went_in:
                    handed[key_id] += cost
                moved.append(record.request_id)
            totals: dict[str, float] = {}
            for key_id, amount in sorted(spent.items()):
                # Each key's row stays locked to the commit: another replica's write
                # of the same key, and its hand-over, come after this one's (keys in
                # one order everywhere, so two writers never wait on each other).
                total = await conn.scalar(
                    update(API_KEYS)
                    .where(API_KEYS.c.id == key_id)
                    .values(spent_usd=API_KEYS.c.spent_usd + amount)
                    .returning(API_KEYS.c.spent_usd)
                )
                totals[key_id] = 0.0 if total is None else float(total)  # None: key deleted
            moves = [
                SpendHandOver(
                    spend_key(key_id),
                    handed_key(key_id),
                    amount,
                    handed.get(key_id, 0.0),
                    totals.get(key_id, 0.0),
                )
                for key_id, amount in sorted(unspent.items())
            ]
            if moves and self._spend is not None:
                # Inside the transaction, last: if it fails, nothing is committed and
                # the batch is written and handed over again. Once it is done, the
                # commit that follows may fail without saying whether it happened: the
                # requests are marked handed, so a retry does not hand them over twice.
                await self._spend.hand_over(moves)
                self._handed.update(moved)
                if len(self._handed) > self.max_buffer:
                    self._handed.clear()  # records dropped meanwhile: keep it bounded
        self._handed.difference_update(record.request_id for record in batch)
        return len(inserted)

    async def cleanup(self, now: datetime | None = None) -> int:
        """Roll up and delete the rows past the retention, ``cleanup_batch`` rows per
        transaction (accounts/rollups.py), pausing ``cleanup_pause_s`` between
        two; the rows moved. Nothing to do without a retention."""
        if self._bodies_expire:
            await self._delete_bodies(now)
        cutoff = cutoff_for(self.retention_days, now)
        if cutoff is None:
            return 0
        async with self._cleanup_lock:
            self._set_cleanup_pending(await pending_cleanup(self.engine, cutoff))
            moved = 0
            while True:
                count = await roll_up_batch(self._writer, cutoff, self.cleanup_batch)
                if count:
                    moved += count
                    self.rolled_up += count
                    self.cleanup_batches += 1
                    self._set_cleanup_pending(max(self.cleanup_pending - count, 0))
                if count < self.cleanup_batch:
                    break
                await asyncio.sleep(self.cleanup_pause_s)
            self._set_cleanup_pending(0)
        if moved:
            log.info(
                "usage ledger: %d rows older than %s rolled up into usage_daily",
                moved,
                cutoff.date().isoformat(),
            )
        return moved

    async def _delete_bodies(self, now: datetime | None) -> None:
        """Delete the kept bodies past ``body_retention_days``, a batch at a time."""
        cutoff = cutoff_for(self.body_retention_days, now)
        if cutoff is None:
            return
        async with self._cleanup_lock:
            while True:
                count = await delete_bodies_batch(self._writer, cutoff, self.cleanup_batch)
                self.bodies_deleted += count
                if count < self.cleanup_batch:
                    break
                await asyncio.sleep(self.cleanup_pause_s)

    def _set_cleanup_pending(self, count: int) -> None:
        self.cleanup_pending = count
        if self._on_cleanup_pending is not None:
            self._on_cleanup_pending(count)

    async def _run_cleanup(self) -> None:
        """Once at start, then every ``cleanup_interval_s``; a failure is logged and
        tried again at the next run."""
        while not self._closing:
            try:
                await self.cleanup()
            except Exception as exc:  # noqa: BLE001 - the rows wait for the next run
                log.warning(
                    "usage ledger: the cleanup failed, will retry in %.0f s: %s: %s",
                    self.cleanup_interval_s,
                    type(exc).__name__,
                    exc,
                )
            await asyncio.sleep(self.cleanup_interval_s)

    async def aclose(self, *, attempts: int = 3) -> None:
        """Stop the cleanup and the writer and write what is left (tried ``attempts``
        times; what still cannot be written is logged as lost)."""
        if self._cleanup_task is not None:
            # A cleanup batch under way is rolled back: its rows are moved next time.
            # stop_task: the database driver's own wait_for can lose a cancellation
            # on Python 3.11 (core/tasks.py), and the loop would never end.
            await stop_task(self._cleanup_task)
            self._cleanup_task = None
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
        if self._owns_database:
            await self.database.close()

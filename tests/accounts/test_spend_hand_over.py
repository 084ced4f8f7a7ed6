"""A key's spend handed from the shared ``spend:`` counter to the ledger's ``spent_usd``
exactly: whatever the order of the ledger's commit, a process refreshing its cached key
record and the counter's hand-over, the budget check counts each request once, never in
both places and never in neither.

The real pieces: the ledger (accounts/ledger.py) writing to SQLite and to the session's
PostgreSQL, the key store reading records from it, the budget check (``admit``) and the
shared state in process, in the session's Redis, and Redis behind the failover. Each
interleaving is forced, not waited for: the state the ledger hands spend over through
stops at the hand-over (before it, after it) until the test lets it go on, while the
test reads the key's record afresh and checks the budget with every record read so far
(any of them may still be cached somewhere). The flush runs inside the ledger's write
transaction, so "stopped at the hand-over" is the moment the row is updated and not yet
committed.

The case that was seen: a budget of $0.10 and three requests of $0.02. Before, once the
ledger had written them, a process that read the key again counted them twice ($0.12,
403 "budget exhausted") until the counter was lowered six seconds later.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import pytest

from llmbridge.accounts.keys import KeyRecord, KeyStore
from llmbridge.accounts.ledger import UsageLedger, UsageRecord
from llmbridge.accounts.limits import admit
from llmbridge.core.errors import PermissionDeniedError
from llmbridge.store import Database
from tests.state.implementations import KINDS, opened_state
from tests.waiting import HANG_S, scaled

COST = 0.02
BUDGET = 0.10


class HandOverStops:
    """The shared state as the ledger sees it, stopping at its hand-over of spend: once
    before it reaches the state (``before``) and once after (``after``), each until
    ``go()``. Every call goes to the real state underneath; only the hand-over waits.
    ``fail_after``: the hand-over is done and then fails, as a write whose transaction
    dies after it (the batch is rolled back and retried)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.kind = inner.kind
        self.stopped = asyncio.Event()
        self.where = ""
        self._go = asyncio.Event()
        self.fail_after = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def _stop(self, where: str) -> None:
        self.where = where
        self.stopped.set()
        await self._go.wait()
        self._go.clear()

    def go(self) -> None:
        self.stopped.clear()
        self._go.set()

    async def hand_over(self, *args: Any, **kwargs: Any) -> None:
        await self._stop("before")
        await self.inner.hand_over(*args, **kwargs)
        await self._stop("after")
        if self.fail_after:
            self.fail_after = False
            raise ConnectionResetError("the connection to the database was lost")


@pytest.fixture(params=KINDS)
async def state(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    async with opened_state(request) as opened:
        yield opened


async def _seen(state: Any, record: KeyRecord) -> float:
    """What the budget check counts as ``record``'s key's spend: a check against a zero
    budget always refuses, and says the figure."""
    with pytest.raises(PermissionDeniedError) as refused:
        await admit(state, dataclasses.replace(record, budget_usd=0.0), "m")
    found = re.search(r"spent \$([0-9.]+) of", str(refused.value))
    assert found is not None, str(refused.value)
    return float(found.group(1))


async def _seen_by_all(state: Any, records: list[KeyRecord]) -> list[float]:
    return [await _seen(state, record) for record in records]


async def _serve(state: Any, ledger: UsageLedger, record: KeyRecord, request_id: str) -> None:
    """One request as the gateway's Exchange bills it: admitted with its worst case
    reserved, settled with its cost (reservation back, cost added, one step), then its
    row queued for the ledger."""
    admission = await admit(state, record, "m", reserve_usd=COST)
    counted = await admission.finish(10, COST)
    ledger.record(
        UsageRecord(request_id, "m", 200, key_id=record.id, key_name=record.name, cost_usd=COST),
        spend_counted=counted,
    )


async def _next(stops: HandOverStops, flushing: Awaitable[Any]) -> str:
    """Where the flush is now: stopped at the hand-over (``before``, ``after``), or
    ``done``."""
    task = asyncio.ensure_future(flushing)
    stopped = asyncio.ensure_future(stops.stopped.wait())
    done, _ = await asyncio.wait(
        {task, stopped}, timeout=scaled(HANG_S), return_when=asyncio.FIRST_COMPLETED
    )
    assert done, "the flush neither stopped at the hand-over nor finished"
    if stopped in done:
        return stops.where
    stopped.cancel()
    return "done"


async def test_each_request_counts_once_whatever_the_order_of_commit_refresh_and_hand_over(
    state: Any, database: Database
) -> None:
    keys = KeyStore(database)
    record, key = await keys.create("team", budget_usd=BUDGET)
    stops = HandOverStops(state)
    ledger = UsageLedger(database, spend=stops, flush_interval_s=3600)
    records = [record]  # every version of the key's record some process may cache

    async def refreshed() -> None:
        fresh = await keys.find_by_key(key)
        assert fresh is not None
        records.append(fresh)

    for n in range(3):
        await _serve(state, ledger, record, f"req_{n}")
    await refreshed()
    assert await _seen_by_all(state, records) == [0.06, 0.06]

    flushing = asyncio.ensure_future(ledger.flush())
    # The row is updated inside the write's transaction, not yet committed, and the
    # spend not yet handed over: a refresh now reads the committed row.
    assert await _next(stops, flushing) == "before"
    await refreshed()
    assert await _seen_by_all(state, records) == [0.06] * 3
    stops.go()
    # Handed over, not committed yet.
    assert await _next(stops, flushing) == "after"
    await refreshed()
    assert await _seen_by_all(state, records) == [0.06] * 4
    stops.go()
    # Committed: spent_usd holds the three requests.
    assert await _next(stops, flushing) == "done"
    assert await flushing
    await refreshed()
    assert records[-1].spent_usd == pytest.approx(0.06)
    assert await _seen_by_all(state, records) == [0.06] * 5
    # Each record lets a request in at once (before: 403 "spent $0.1200 of $0.1000").
    for each in records:
        await (await admit(state, each, "m", reserve_usd=COST)).finish(0, 0.0)

    # A write whose transaction dies after the hand-over: rolled back, retried later.
    await _serve(state, ledger, record, "req_3")
    stops.fail_after = True
    flushing = asyncio.ensure_future(ledger.flush())
    assert await _next(stops, flushing) == "before"
    stops.go()
    assert await _next(stops, flushing) == "after"
    await refreshed()
    assert await _seen_by_all(state, records) == [0.08] * 6
    stops.go()
    assert await _next(stops, flushing) == "done"
    assert not await flushing  # the batch is kept for the next try
    await refreshed()
    assert records[-1].spent_usd == pytest.approx(0.06)  # nothing committed
    assert await _seen_by_all(state, records) == [0.08] * 7
    # The retry hands the same request over again and commits it: still counted once.
    flushing = asyncio.ensure_future(ledger.flush())
    for where in ("before", "after"):
        assert await _next(stops, flushing) == where
        await refreshed()
        assert await _seen_by_all(state, records) == [0.08] * len(records)
        stops.go()
    assert await _next(stops, flushing) == "done"
    assert await flushing
    await refreshed()
    assert records[-1].spent_usd == pytest.approx(0.08)
    assert await _seen_by_all(state, records) == [0.08] * len(records)
    await ledger.aclose()
    # Closing hands nothing back twice: the key's spend is what its rows cost.
    assert await _seen_by_all(state, records) == [0.08] * len(records)


async def _drop_connections(pg_url: str) -> None:
    """End every other session on the test's database, as a server restart or a cut
    network does: the ledger's transaction, handed over and not yet committed, among
    them."""
    import asyncpg

    host_part, name = pg_url.split("@", 1)[1].rsplit("/", 1)
    host, port = host_part.split(":")
    conn = await asyncpg.connect(host=host, port=int(port), user="postgres", database=name)
    try:
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    finally:
        await conn.close()


async def test_a_commit_lost_after_the_hand_over_is_retried_without_a_second_one(
    state: Any, pg_url: str
) -> None:
    database = await Database.open(pg_url)
    try:
        keys = KeyStore(database)
        record, key = await keys.create("team", budget_usd=BUDGET)
        stops = HandOverStops(state)
        ledger = UsageLedger(database, spend=stops, flush_interval_s=3600)
        for n in range(2):
            await _serve(state, ledger, record, f"req_{n}")
        flushing = asyncio.ensure_future(ledger.flush())
        assert await _next(stops, flushing) == "before"
        stops.go()
        assert await _next(stops, flushing) == "after"
        await _drop_connections(pg_url)  # the commit that follows fails
        stops.go()
        assert await _next(stops, flushing) == "done"
        assert not await flushing
        fresh = await keys.find_by_key(key)
        assert fresh is not None and fresh.spent_usd == 0.0  # nothing was committed
        assert await _seen_by_all(state, [record, fresh]) == [0.04, 0.04]
        # The retry writes the rows; the requests were handed over already.
        retry = asyncio.ensure_future(ledger.flush())
        assert await _next(stops, retry) == "done"
        assert await retry
        written = await keys.find_by_key(key)
        assert written is not None and written.spent_usd == pytest.approx(0.04)
        assert await _seen_by_all(state, [record, fresh, written]) == [0.04] * 3
        await ledger.aclose()
    finally:
        await database.close()

"""A frozen Redis (``SIGSTOP``, then ``SIGCONT``) while requests arrive, against a real
``redis-server``. The calls time out, the replica serves from its
local state, and the commands already written to Redis's sockets run when it
resumes. Those must do nothing (deadlines, state/redis.py), and whatever this replica
holds in Redis must be right again once it answers (state/failover.py's
reconciliation), so a key's parallel slots, its rpm window and the least-busy
in-flight counts are neither leaked nor counted twice.

Each test first warms the replica as traffic would (``_warm``): with its scripts not
yet loaded in Redis, the queued commands would fail with ``NOSCRIPT`` when Redis
resumes and hide the defect; with no pooled connections, most would be sent on
connections Redis had not accepted yet.

The heartbeat TTL here is long (30 s), as in production (6 s) next to a 3 s pause: a
TTL shorter than the pause would hide the leak, the replica's fields dying with its
heartbeat.

``test_a_count_whose_reply_was_lost_is_reconciled`` covers the race a deadline leaves
open (a script that ran in time and whose reply never came) with a real loopback
proxy that forwards the command and drops Redis's answer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from llmbridge.state.base import AdmitChecks
from llmbridge.state.failover import FailoverState
from llmbridge.state.redis import RedisState
from tests.servers import RedisServer
from tests.state.implementations import redis_state

from .conftest import eventually


def _failover(url: str) -> FailoverState:
    redis = RedisState(url, heartbeat_s=0.1, heartbeat_ttl_s=30.0, own_heartbeat=False)
    return FailoverState(url, retry_s=0.1, redis=redis)


async def _warm(state: FailoverState, n: int = 6) -> None:
    """A replica that has served before: every counting script loaded in Redis and
    ``n`` connections in its pool (module docstring)."""
    await state.start()
    full = AdmitChecks(
        spend_key="warm:spend",
        budget=100.0,
        parallel_key="warm:par",
        rpm_key="warm:rpm",
        rpm=10_000,
        tpm_key="warm:tpm",
        tpm=10_000,
    )
    await asyncio.gather(*(state.admit_many(full) for _ in range(n)))
    for _ in range(n):
        await state.settle(parallel_key="warm:par", tpm_key="warm:tpm", tokens=1)
    await asyncio.gather(*(state.take("warm:w", 1, 10_000, 60) for _ in range(n)))
    await asyncio.gather(*(state.acquire("warm:inf", None) for _ in range(n)))
    await asyncio.gather(*(state.release("warm:inf") for _ in range(n)))
    assert not state.degraded


async def _recovered(state: FailoverState) -> None:
    async def back() -> bool:
        return not state.degraded

    assert await eventually(back), "the failover never left its local fallback"


@pytest.fixture
async def observer(redis_url: str) -> AsyncIterator[RedisState]:
    """Another replica's view of the same Redis."""
    state = redis_state(redis_url)
    yield state
    await state.aclose()


async def test_admissions_given_up_during_a_pause_hold_no_slots_after_it(
    redis_server: RedisServer, redis_url: str, observer: RedisState
) -> None:
    """The issue's repro: max_parallel 3, Redis frozen while admissions arrive."""
    state = _failover(redis_url)
    checks = AdmitChecks(parallel_key="par:k", parallel=3)
    try:
        await _warm(state)
        redis_server.pause()
        try:
            verdicts = await asyncio.gather(*(state.admit_many(checks) for _ in range(5)))
        finally:
            redis_server.resume()
        assert state.degraded
        # Served from this process: its limit still holds there.
        assert sorted(v.refused for v in verdicts) == [""] * 3 + ["parallel"] * 2
        await _recovered(state)
        for verdict in verdicts:
            if verdict.holds_slot:
                await state.settle(parallel_key="par:k")
        # The admissions Redis ran after their callers gave up took nothing.
        assert await observer.in_flight(["par:k"]) == {"par:k": 0}
        again = [await state.admit_many(checks) for _ in range(3)]
        assert [v.refused for v in again] == [""] * 3
        assert await observer.in_flight(["par:k"]) == {"par:k": 3}
    finally:
        await state.aclose()


async def test_rpm_windows_are_not_counted_twice_across_a_pause(
    redis_server: RedisServer, redis_url: str, observer: RedisState
) -> None:
    state = _failover(redis_url)
    checks = AdmitChecks(rpm_key="rpm:k", rpm=10, window_s=60)
    try:
        await _warm(state)
        assert (await state.admit_many(checks)).refused == ""  # counted in Redis
        redis_server.pause()
        try:
            during = await asyncio.gather(
                *(state.admit_many(checks) for _ in range(4)),
                *(state.take("rpm:t", 1, 10, 60) for _ in range(4)),
            )
        finally:
            redis_server.resume()
        assert state.degraded
        assert await state.local.used("rpm:k", 60) == 4  # counted here, during the outage
        assert await state.local.used("rpm:t", 60) == 4
        assert len(during) == 8
        await _recovered(state)
        # ... and not again in Redis when it ran the commands it had queued.
        assert await observer.used("rpm:k", 60) == 1
        assert await observer.used("rpm:t", 60) == 0
        after = await state.admit_many(checks)
        assert after.requests is not None and after.requests.used == 2
    finally:
        await state.aclose()


async def test_least_busy_counts_heal_after_a_pause(
    redis_server: RedisServer, redis_url: str, observer: RedisState
) -> None:
    """acquire/release (serving/models.py's per-deployment in-flight counts): a release
    that timed out is neither lost nor applied twice, acquires that timed out count
    nowhere but where they were served."""
    state = _failover(redis_url)
    try:
        await _warm(state)
        assert await state.acquire("inf:gpu", None)
        assert await state.acquire("inf:gpu", None)
        assert await observer.in_flight(["inf:gpu"]) == {"inf:gpu": 2}
        redis_server.pause()
        try:
            await state.release("inf:gpu")  # times out: one of the two Redis-held
            assert state.degraded
            taken = await asyncio.gather(*(state.acquire("inf:gpu", None) for _ in range(3)))
            assert taken == [True] * 3  # served from this process
        finally:
            redis_server.resume()
        await _recovered(state)
        # Redis counts exactly the one this replica still holds there.
        assert await observer.in_flight(["inf:gpu"]) == {"inf:gpu": 1}
        assert await state.local.in_flight(["inf:gpu"]) == {"inf:gpu": 3}
        for _ in range(4):
            await state.release("inf:gpu")
        assert await observer.in_flight(["inf:gpu"]) == {"inf:gpu": 0}
        assert await state.local.in_flight(["inf:gpu"]) == {"inf:gpu": 0}
    finally:
        await state.aclose()


async def test_reservations_heal_after_a_pause(
    redis_server: RedisServer, redis_url: str, observer: RedisState
) -> None:
    state = _failover(redis_url)
    checks = AdmitChecks(
        spend_key="spend:k", budget=1.0, reserve_key="rsv:k", reserve=0.25, parallel_key="par:r"
    )
    try:
        await _warm(state)
        first = await state.admit_many(checks)
        assert first.reserved == 0.25 and first.holds_slot
        assert await observer.reserved("rsv:k") == pytest.approx(0.25)
        redis_server.pause()
        try:
            # Times out: given back in this replica's books, Redis set right later.
            await state.settle(
                parallel_key="par:r",
                reserve_key="rsv:k",
                reserve=0.25,
                spend_key="spend:k",
                spend=0.125,
            )
            assert state.degraded
            during = await asyncio.gather(*(state.admit_many(checks) for _ in range(2)))
            assert [v.reserved for v in during] == [0.25, 0.25]  # held in this process
        finally:
            redis_server.resume()
        await _recovered(state)
        assert await observer.reserved("rsv:k") == 0.0
        assert await observer.in_flight(["par:r"]) == {"par:r": 0}
        assert await observer.get_float("spend:k") == 0.0  # the late settle did nothing
        assert await state.local.get_float("spend:k") == pytest.approx(0.125)
        assert await state.local.reserved("rsv:k") == pytest.approx(0.5)
        for _ in during:
            await state.settle(parallel_key="par:r", reserve_key="rsv:k", reserve=0.25)
        assert await state.local.reserved("rsv:k") == 0.0
        assert await state.local.in_flight(["par:r"]) == {"par:r": 0}
        assert await observer.reserved("rsv:k") == 0.0
    finally:
        await state.aclose()


class ReplyDropper:
    """A loopback TCP proxy to Redis that forwards every command and, while
    ``dropping``, throws Redis's replies away: a script that ran in time whose answer
    never reached the client (what a deadline cannot undo)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.dropping = False
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"redis://127.0.0.1:{port}/0"

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.writers.append(client_w)  # closed by aclose whatever happens below
        try:
            redis_r, redis_w = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            client_w.close()
            return
        self.writers.append(redis_w)
        up = asyncio.ensure_future(self._pipe(client_r, redis_w, drops=False))
        down = asyncio.ensure_future(self._pipe(redis_r, client_w, drops=True))
        self.tasks |= {up, down}
        await asyncio.wait([up, down], return_when=asyncio.FIRST_COMPLETED)
        for writer in (client_w, redis_w):
            writer.close()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, drops: bool
    ) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                if drops and self.dropping:
                    continue
                writer.write(data)
                await writer.drain()

    async def aclose(self) -> None:
        """Every connection closed and every pipe stopped. Not ``Server.wait_closed``:
        it waits for connections the server no longer tracks the same way on every
        Python (3.11.7 waits for each accepted one), a hang this test must not risk."""
        if self.server is not None:
            self.server.close()
        for writer in self.writers:
            writer.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def test_a_count_whose_reply_was_lost_is_reconciled(
    redis_server: RedisServer, redis_url: str, observer: RedisState
) -> None:
    proxy = ReplyDropper(redis_server.port)
    state = _failover(await proxy.start())
    checks = AdmitChecks(parallel_key="par:lost", parallel=10, reserve_key="rsv:lost", reserve=0.5)
    try:
        await _warm(state)
        assert (await state.admit_many(checks)).holds_slot  # in Redis, answered
        proxy.dropping = True
        lost = await state.admit_many(checks)  # ran in Redis; its answer never came
        assert state.degraded and lost.holds_slot  # served from this process
        # It did count (twice, with redis-py's one resend after a timeout).
        assert (await observer.in_flight(["par:lost"]))["par:lost"] >= 2
        assert await observer.reserved("rsv:lost") >= 1.0
        proxy.dropping = False
        await _recovered(state)
        # Set back to what this replica holds in Redis: the first admission's.
        assert await observer.in_flight(["par:lost"]) == {"par:lost": 1}
        assert await observer.reserved("rsv:lost") == pytest.approx(0.5)
        for _ in range(2):
            await state.settle(parallel_key="par:lost", reserve_key="rsv:lost", reserve=0.5)
        assert await observer.in_flight(["par:lost"]) == {"par:lost": 0}
        assert await observer.reserved("rsv:lost") == 0.0
        assert await state.local.in_flight(["par:lost"]) == {"par:lost": 0}
    finally:
        await state.aclose()
        await proxy.aclose()


async def test_counts_held_through_a_redis_restart_are_restored(
    redis_server: RedisServer, redis_url: str, observer: RedisState
) -> None:
    """A Redis that comes back empty (killed, restarted, no persistence) has lost the
    slots and reservations this replica still holds: put back once it answers, so
    other replicas see them until they are given back."""
    state = _failover(redis_url)
    checks = AdmitChecks(parallel_key="par:r", parallel=5, reserve_key="rsv:r", reserve=0.25)
    try:
        await _warm(state)
        held = [await state.admit_many(checks) for _ in range(2)]
        assert all(v.holds_slot for v in held)
        redis_server.stop()
        try:
            assert (await state.take("rpm:r", 1, 10, 60)).allowed  # served here: degraded
            assert state.degraded
        finally:
            redis_server.start()
        await _recovered(state)
        assert await observer.in_flight(["par:r"]) == {"par:r": 2}
        assert await observer.reserved("rsv:r") == pytest.approx(0.5)
        for _ in held:
            await state.settle(parallel_key="par:r", reserve_key="rsv:r", reserve=0.25)
        assert await observer.in_flight(["par:r"]) == {"par:r": 0}
        assert await observer.reserved("rsv:r") == 0.0
    finally:
        await state.aclose()

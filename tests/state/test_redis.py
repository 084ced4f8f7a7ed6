"""What only the Redis-backed state promises: limits exact across processes, in-flight
counts that die with their replica, and serving on when Redis does not answer
(state/redis.py, state/failover.py), against a real ``redis-server``."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator

import pytest

from llmbridge.state.failover import FailoverState
from llmbridge.state.redis import POOL_WAIT_S, RedisState
from tests.servers import RedisServer, free_port
from tests.state.implementations import redis_state
from tests.waiting import scaled

from .conftest import eventually

_RACER = textwrap.dedent(
    """
    import asyncio, sys
    from llmbridge.state.redis import RedisState

    async def main(url: str, limit: int, n: int, timeout: float) -> None:
        state = RedisState(url, socket_timeout_s=timeout, pool_wait_s=timeout)
        await state.ping()
        print("ready", flush=True)
        sys.stdin.readline()  # "go": both processes start together
        takes = await asyncio.gather(*(state.take("rpm:race", 1, limit, 60) for _ in range(n)))
        slots = await asyncio.gather(*(state.acquire("par:race", limit) for _ in range(n)))
        print(sum(v.allowed for v in takes), sum(slots), flush=True)
        sys.stdin.readline()  # hold the slots until both have counted
        await state.aclose()

    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])))
    """
)

_HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    from llmbridge.state.redis import RedisState

    async def main(url: str) -> None:
        state = RedisState(url, heartbeat_s=0.2, heartbeat_ttl_s=0.6)
        for _ in range(3):
            assert await state.acquire("par:held", None)
        print("held", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main(sys.argv[1]))
    """
)


def _python(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
async def observer(redis_url: str) -> AsyncIterator[RedisState]:
    """A second replica's view of the same Redis."""
    state = redis_state(redis_url)
    yield state
    await state.aclose()


async def test_two_processes_racing_get_exactly_the_limit(
    redis_url: str, observer: RedisState
) -> None:
    limit = 37
    # The racers' Redis deadlines scaled like the tests' (tests/state/implementations.py):
    # a hundred calls at once, on a loaded machine, otherwise miss the product's.
    timeout = str(scaled(POOL_WAIT_S))
    racers = [_python(_RACER, redis_url, str(limit), "100", timeout) for _ in range(2)]
    try:
        for racer in racers:
            assert racer.stdout is not None and racer.stdout.readline().strip() == "ready"
        for racer in racers:
            assert racer.stdin is not None
            racer.stdin.write("go\n")
            racer.stdin.flush()
        counts = []
        for racer in racers:
            assert racer.stdout is not None
            taken, slots = racer.stdout.readline().split()
            counts.append((int(taken), int(slots)))
        assert sum(t for t, _ in counts) == limit  # 200 takes, exactly `limit` allowed
        assert sum(s for _, s in counts) == limit  # 200 acquires, exactly `limit` slots
        assert await observer.used("rpm:race", 60) == limit
        assert await observer.in_flight(["par:race"]) == {"par:race": limit}
    finally:
        for racer in racers:
            racer.communicate(timeout=30)  # closes its pipes; it exits on stdin's end
    # Both closed cleanly: their heartbeats are gone, and their slots with them.
    assert await observer.in_flight(["par:race"]) == {"par:race": 0}


async def test_a_killed_replica_leaks_no_slots_beyond_its_heartbeat(redis_url: str) -> None:
    me = RedisState(redis_url, heartbeat_s=0.2, heartbeat_ttl_s=0.6)
    holder = _python(_HOLDER, redis_url)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert await me.acquire("par:held", None)
        assert await me.in_flight(["par:held"]) == {"par:held": 4}
        os.kill(holder.pid, signal.SIGKILL)
        holder.communicate(timeout=10)

        async def only_mine_left() -> bool:
            return await me.in_flight(["par:held"]) == {"par:held": 1}

        # The dead replica's 3 go when its heartbeat expires; this live one's stays.
        assert await eventually(only_mine_left)
        await asyncio.sleep(1.0)  # longer than a TTL: a live replica keeps its count
        assert await only_mine_left()
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate(timeout=10)
        await me.aclose()


def _failover(url: str) -> FailoverState:
    redis = RedisState(url, heartbeat_s=0.1, heartbeat_ttl_s=0.5, own_heartbeat=False)
    return FailoverState(url, retry_s=0.1, redis=redis)


async def test_redis_stopped_and_restarted_mid_run(
    redis_server: RedisServer,
    redis_url: str,
    observer: RedisState,
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = _failover(redis_url)
    caplog.set_level(logging.INFO, logger="llmbridge.state")
    try:
        await state.start()
        assert not state.degraded
        for _ in range(2):
            assert (await state.take("rpm:f", 1, 5, 60)).allowed
        assert await observer.used("rpm:f", 60) == 2  # shared

        redis_server.stop()
        try:
            verdicts = [await state.take("rpm:f", 1, 5, 60) for _ in range(7)]  # no exception
            assert state.degraded
            # Served from this process, counted from zero, its limit still enforced.
            assert [v.allowed for v in verdicts] == [True] * 5 + [False] * 2
            assert await state.used("rpm:f", 60) == 5
            assert await state.acquire("par:f", 1)
            assert not await state.acquire("par:f", 1)
            await state.release("par:f")
        finally:
            redis_server.start()

        async def recovered() -> bool:
            return not state.degraded

        assert await eventually(recovered)
        assert (await state.take("rpm:f", 1, 5, 60)).used == 1  # the restarted Redis's count
        assert await observer.used("rpm:f", 60) == 1
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        infos = [r for r in caplog.records if r.levelno == logging.INFO]
        assert len(warnings) == 1 and "unreachable" in warnings[0].getMessage()
        assert len(infos) == 1 and "answers again" in infos[0].getMessage()
    finally:
        await state.aclose()


async def test_a_frozen_redis_times_out_and_slots_go_back_where_taken(
    redis_server: RedisServer, redis_url: str, observer: RedisState
) -> None:
    state = _failover(redis_url)
    try:
        assert await state.acquire("par:z", None)  # in Redis
        assert await observer.in_flight(["par:z"]) == {"par:z": 1}
        redis_server.pause()
        try:
            await state.release("par:z")  # times out: released in Redis later
            assert state.degraded
            assert await state.acquire("par:z", None)  # in this process
            assert await state.in_flight(["par:z"]) == {"par:z": 1}
        finally:
            redis_server.resume()

        async def recovered() -> bool:
            return not state.degraded

        assert await eventually(recovered)
        # Redis kept its data: the slot released during the outage is gone there too,
        # and the one taken locally is not counted in Redis.
        assert await observer.in_flight(["par:z"]) == {"par:z": 0}
        await state.release("par:z")  # goes back to this process's count
        assert await state.local.in_flight(["par:z"]) == {"par:z": 0}
    finally:
        await state.aclose()


async def test_a_redis_that_never_answered_degrades_from_the_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = _failover(f"redis://:s3cret@127.0.0.1:{free_port()}/0")  # nothing listens there
    try:
        await state.start()
        assert state.degraded
        assert (await state.take("rpm:x", 1, 1, 60)).allowed
        assert not (await state.take("rpm:x", 1, 1, 60)).allowed
        assert await state.next_index("rr:x") == 0
        await state.breaker_failure("gpu", 1)
        assert (await state.breaker("gpu")).state == "open"
    finally:
        await state.aclose()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "s3cret" not in warnings[0] and ":***@127.0.0.1" in warnings[0]  # no password in logs

"""The shared-state contract (state/base.py), one suite run against both
implementations: ``LocalState`` with a clock moved by hand, ``RedisState`` against a
real ``redis-server`` (tests/state/conftest.py) with short windows and real time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from llmbridge.state import open_state
from llmbridge.state.base import EWMA_ALPHA, BreakerView
from llmbridge.state.failover import FailoverState
from llmbridge.state.local import LocalState
from llmbridge.state.redis import RedisState
from tests.state.implementations import redis_state


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.25

    def __call__(self) -> float:
        return self.now


@dataclass
class Harness:
    state: LocalState | RedisState
    clock: FakeClock | None

    async def wait(self, seconds: float) -> None:
        """Let ``seconds`` pass: on the fake clock, or for real (Redis reads its own)."""
        if self.clock is not None:
            self.clock.now += seconds
        else:
            await asyncio.sleep(seconds)


@pytest.fixture(params=["local", "redis"])
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    if request.param == "local":
        clock = FakeClock()
        yield Harness(LocalState(clock=clock), clock)
        return
    url: str = request.getfixturevalue("redis_url")
    state = redis_state(url)
    try:
        yield Harness(state, None)
    finally:
        await state.aclose()


async def test_a_window_admits_exactly_its_limit(harness: Harness) -> None:
    state = harness.state
    verdicts = [await state.take("rpm:k", 1, 10, 60) for _ in range(30)]
    assert [v.allowed for v in verdicts] == [True] * 10 + [False] * 20
    assert [v.used for v in verdicts[:10]] == list(range(1, 11))
    refused = verdicts[-1]
    assert (refused.used, refused.limit) == (10, 10)
    assert 0 < refused.reset_s <= 60
    assert await state.used("rpm:k", 60) == 10
    assert await state.used("rpm:other", 60) == 0


async def test_costs_add_and_used_share_the_window(harness: Harness) -> None:
    state = harness.state
    assert (await state.take("tpm:k", 5, 8, 60)).allowed
    refused = await state.take("tpm:k", 4, 8, 60)
    assert (refused.allowed, refused.used) == (False, 5)
    assert await state.add("tpm:k", 10, 60) == 15  # unconditional: past the limit
    assert await state.used("tpm:k", 60) == 15
    never = await state.take("tpm:other", 9, 8, 60)
    assert (never.allowed, never.used, never.reset_s) == (False, 0, 60.0)  # cannot ever fit


async def test_a_window_forgets_by_time(harness: Harness) -> None:
    state = harness.state
    assert (await state.take("w", 1, 2, 1)).allowed
    assert (await state.take("w", 1, 2, 1)).allowed
    refused = await state.take("w", 1, 2, 1)
    assert not refused.allowed
    assert 0 < refused.reset_s <= 1
    await harness.wait(refused.reset_s + 0.05)  # its second left the window
    assert await state.used("w", 1) == 0
    allowed = await state.take("w", 1, 2, 1)
    assert (allowed.allowed, allowed.used, allowed.reset_s) == (True, 1, 0.0)


async def test_a_window_spread_over_seconds_forgets_its_oldest_first() -> None:
    """LocalState keeps a running total over its buckets: seconds leave it one by one,
    the reset time counts from the oldest, and a clock that steps back loses nothing."""
    clock = FakeClock()
    state = LocalState(clock=clock)
    for cost in (3, 4, 5):  # at t, t+20 s and t+40 s
        assert (await state.take("tpm", cost, 12, 60)).allowed
        clock.now += 20
    clock.now -= 1  # t+59 s: all three are in the window
    refused = await state.take("tpm", 3, 12, 60)  # fits once t's 3 tokens have left
    assert (refused.allowed, refused.used) == (False, 12)
    assert refused.reset_s == pytest.approx(0.75)  # t's second ends the window at t+59.75
    clock.now += 1
    assert await state.used("tpm", 60) == 9
    clock.now += 20
    assert await state.used("tpm", 60) == 5
    clock.now -= 30  # stepped back: the add lands in the newest bucket, still counted
    assert await state.add("tpm", 2, 60) == 7
    clock.now += 30 + 60
    assert await state.used("tpm", 60) == 0


async def test_in_flight_counts_up_to_a_limit_and_never_below_zero(harness: Harness) -> None:
    state = harness.state
    assert [await state.acquire("par:k", 2) for _ in range(3)] == [True, True, False]
    assert await state.in_flight(["par:k", "par:none"]) == {"par:k": 2, "par:none": 0}
    await state.release("par:k")
    assert await state.acquire("par:k", 2)
    for _ in range(5):
        await state.release("par:k")
    assert await state.in_flight(["par:k"]) == {"par:k": 0}
    assert all([await state.acquire("dep:b", None) for _ in range(50)])  # no limit
    assert await state.in_flight(["dep:b"]) == {"dep:b": 50}


async def test_counters_and_floats(harness: Harness) -> None:
    state = harness.state
    assert [await state.next_index("rr:a") for _ in range(3)] == [0, 1, 2]
    assert await state.next_index("rr:b") == 0
    assert await state.get_float("spend:k") == 0.0
    assert await state.add_float("spend:k", 0.25) == pytest.approx(0.25)
    assert await state.add_float("spend:k", -0.125) == pytest.approx(0.125)
    assert await state.get_float("spend:k") == pytest.approx(0.125)


async def test_latency_is_an_ewma(harness: Harness) -> None:
    state = harness.state
    assert await state.latencies(["ttft:a"]) == {"ttft:a": None}
    await state.observe_latency("ttft:a", 1.0)
    await state.observe_latency("ttft:a", 2.0)
    latencies = await state.latencies(["ttft:a", "ttft:b"])
    assert latencies["ttft:a"] == pytest.approx(EWMA_ALPHA * 2.0 + (1 - EWMA_ALPHA) * 1.0)
    assert latencies["ttft:b"] is None


async def test_breaker_transitions(harness: Harness) -> None:
    state = harness.state
    assert await state.breaker("b") == BreakerView("closed", 0, 0.0)
    assert (await state.breaker_failure("b", 3)).state == "closed"
    assert (await state.breaker_failure("b", 3)).failures == 2
    opened = await state.breaker_failure("b", 3)
    assert (opened.state, opened.failures) == ("open", 3)
    assert opened.opened_at > 0
    assert not await state.breaker_claim_probe("b", 3600, 10)  # not due yet
    assert await state.breaker_claim_probe("b", 0, 10)
    assert not await state.breaker_claim_probe("b", 0, 10)  # someone is probing
    assert (await state.breaker_set("b", "half_open")).state == "half_open"
    assert not await state.breaker_claim_probe("b", 0, 10)  # not open
    reopened = await state.breaker_failure("b", 3)  # from half open: at once
    assert reopened.state == "open"
    assert reopened.opened_at >= opened.opened_at
    await harness.wait(0.01)
    again = await state.breaker_set("b", "open")  # a failed probe restamps it
    assert again.opened_at > opened.opened_at
    await state.breaker_success("b")
    assert await state.breaker("b") == BreakerView("closed", 0, again.opened_at)


async def test_a_probe_lease_expires(harness: Harness) -> None:
    """A replica that died while probing holds the probe for its lease only."""
    state = harness.state
    await state.breaker_failure("b", 1)
    assert await state.breaker_claim_probe("b", 0, 0.2)
    await harness.wait(0.3)
    assert await state.breaker_claim_probe("b", 0, 0.2)


async def test_open_state_picks_the_implementation() -> None:
    local = open_state(None)
    assert (local.kind, local.degraded) == ("local", False)
    shared = open_state("redis://127.0.0.1:1/0")
    assert isinstance(shared, FailoverState)
    assert shared.kind == "redis"
    await shared.aclose()

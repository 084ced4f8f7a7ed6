"""The circuit breaker kept in shared state (serving/resilience.py ``share``): one
breaker across replicas, each replica here a ``CircuitBreaker`` with its own
connection to the same real Redis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from llmbridge.backends.base import BackendHealth
from llmbridge.backends.scripted import ScriptedBackend
from llmbridge.core.errors import BackendHTTPError, BackendUnavailableError
from llmbridge.serving.resilience import CircuitBreaker
from llmbridge.state.base import BreakerView
from llmbridge.state.failover import FailoverState
from llmbridge.state.local import LocalState
from tests.waiting import until

# Long enough that "still open" never depends on the machine's speed; "the reset time has
# passed" is told to a breaker by setting its reset_s to 0 (a 0.6 s period was a
# window that a busy machine's Redis round trips outlasted).
RESET_S = 60.0
DOWN = BackendUnavailableError("connection refused", backend="gpu")


class ProbedBackend(ScriptedBackend):
    """Counts its health probes, each taking a moment (as a real one does)."""

    def __init__(self) -> None:
        super().__init__("gpu")
        self.probes = 0
        self.healthy = True

    async def health(self) -> BackendHealth:
        self.probes += 1
        await asyncio.sleep(0.3)
        return BackendHealth(ok=self.healthy, detail="probed")


@pytest.fixture
async def replicas(redis_url: str) -> AsyncIterator[tuple[CircuitBreaker, CircuitBreaker]]:
    backend = ProbedBackend()
    states = [FailoverState(redis_url) for _ in range(2)]
    breakers = []
    for state in states:
        breaker = CircuitBreaker(backend, failures=4, reset_s=RESET_S)
        breaker.share(state)
        breakers.append(breaker)
    yield breakers[0], breakers[1]
    for state in states:
        await state.aclose()


async def _eventually_open(breaker: CircuitBreaker) -> bool:
    # Reading the state refreshes a stale view in the background.
    await until(lambda: breaker.state == "open", f"breaker of {breaker.backend} open")
    return True


async def test_failures_on_every_replica_open_one_breaker(
    replicas: tuple[CircuitBreaker, CircuitBreaker],
) -> None:
    a, b = replicas
    for breaker in (a, b, a):
        breaker.failure(DOWN)
        await breaker.settled()
    assert (a.state, b.state) == ("closed", "closed")  # 3 of 4, counted across both
    busy = BackendHTTPError("busy", backend="gpu", backend_status=429)
    b.failure(busy)  # busy, not broken: not counted
    await b.settled()
    b.failure(DOWN)
    await b.settled()
    assert (b.state, b.failures) == ("open", 4)  # 2 + 2 (the 429 did not count)
    assert await _eventually_open(a)  # the other replica learns it without failing itself
    assert not await a.admit()
    assert "circuit open" in a.open_error().message


async def test_one_probe_at_a_time_across_replicas(
    replicas: tuple[CircuitBreaker, CircuitBreaker],
) -> None:
    a, b = replicas
    backend = a.backend
    assert isinstance(backend, ProbedBackend)
    for _ in range(4):
        a.failure(DOWN)
    await a.settled()
    assert await _eventually_open(b)
    a.reset_s = b.reset_s = 0  # past reset_s: a probe is due
    admitted = await asyncio.gather(a.admit(), b.admit())
    assert sorted(admitted) == [False, True]  # one probed and got through, one waited
    assert backend.probes == 1
    assert await b.admit()  # the probe's result (half open) is everyone's

    prober = a if admitted[0] else b
    prober.success()  # the first success closes it for every replica
    await prober.settled()
    other = b if prober is a else a
    await until(lambda: other.state == "closed", "the other replica's breaker closed")
    assert (other.state, other.failures) == ("closed", 0)


async def test_a_failed_probe_keeps_it_open_for_everyone(
    replicas: tuple[CircuitBreaker, CircuitBreaker],
) -> None:
    a, b = replicas
    backend = a.backend
    assert isinstance(backend, ProbedBackend)
    backend.healthy = False
    for _ in range(4):
        b.failure(DOWN)
    await b.settled()
    assert await _eventually_open(a)
    a.reset_s = 0  # past the reset for a, which probes; b comes right after it
    assert not await a.admit()  # probed: still down, reopened for another period
    assert backend.probes == 1
    assert not await b.admit()  # within the new period: no second probe
    assert backend.probes == 1


class CountingState(LocalState):
    def __init__(self) -> None:
        super().__init__()
        self.successes = 0

    async def breaker_success(self, name: str) -> None:
        self.successes += 1
        await super().breaker_success(name)


async def test_successes_cost_no_round_trip_while_closed() -> None:
    shared = CountingState()
    breaker = CircuitBreaker(ProbedBackend(), failures=3, reset_s=30)
    breaker.share(shared)
    for _ in range(100):
        breaker.success()
    await breaker.settled()
    assert shared.successes == 0
    breaker.failure(DOWN)
    await breaker.settled()
    breaker.success()  # the view had a failure: this one resets the shared count
    breaker.success()
    await breaker.settled()
    assert shared.successes == 1
    assert await shared.breaker("gpu") == BreakerView("closed", 0, 0.0)

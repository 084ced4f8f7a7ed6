"""Each implementation of the shared-state contract, opened for a test: in process,
the session's Redis, and Redis behind the local fallback. Used by the ``state``
fixtures of tests/state/conftest.py and of the modules elsewhere that run against
every implementation (a fixture's parameters are these kinds)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from llmbridge.state.failover import FailoverState
from llmbridge.state.local import LocalState
from llmbridge.state.redis import POOL_WAIT_S, SOCKET_TIMEOUT_S, RedisState
from tests.waiting import scaled

State = LocalState | RedisState | FailoverState
"""Every implementation of the shared-state contract."""
KINDS = ["local", "redis", "failover"]
"""The implementations by name: a ``state`` fixture's parameters."""
TEST_SOCKET_TIMEOUT_S = 1.0
"""The least socket timeout (and so Redis-side deadline) of a test's ``RedisState``,
before scaling (``redis_state``)."""


def redis_state(url: str, **options: Any) -> RedisState:
    """A ``RedisState`` on ``url`` whose own deadlines are scaled like the tests' waits.

    The product's 0.25 s socket timeout and 1 s wait for a pooled connection are
    deadlines the tests would otherwise apply unscaled: beside busy loops a starved
    redis-server ran a script after them (a LateCallError, or the failover serving
    locally), and a burst of a hundred calls waited longer than a second for the pool.
    Even scaled, 0.25 s was too short once on a 2-core CI run: a settle gathered with 20
    admissions ran past it (a LateCallError), so a test gets at least 1 s, scaled. A test
    that is about those deadlines passes its own."""
    options.setdefault("socket_timeout_s", scaled(max(SOCKET_TIMEOUT_S, TEST_SOCKET_TIMEOUT_S)))
    options.setdefault("pool_wait_s", scaled(POOL_WAIT_S))
    return RedisState(url, **options)


@asynccontextmanager
async def opened_state(request: pytest.FixtureRequest) -> AsyncIterator[State]:
    """The implementation ``request.param`` names, closed after; only the Redis ones
    ask for the session's Redis (``redis_url``), so an in-process run starts none."""
    if request.param == "local":
        yield LocalState()
        return
    url: str = request.getfixturevalue("redis_url")
    shared: RedisState | FailoverState = (
        redis_state(url)
        if request.param == "redis"
        else FailoverState(url, redis=redis_state(url, own_heartbeat=False))
    )
    try:
        yield shared
    finally:
        await shared.aclose()

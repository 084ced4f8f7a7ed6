"""Each implementation of the shared-state contract, opened for a test: in process,
the session's Redis, and Redis behind the local fallback. Used by the ``state``
fixtures of tests/state/conftest.py and of the modules elsewhere that run against
every implementation (a fixture's parameters are these kinds)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from llmbridge.state.failover import FailoverState
from llmbridge.state.local import LocalState
from llmbridge.state.redis import SOCKET_TIMEOUT_S, RedisState
from tests.waiting import scaled

State = LocalState | RedisState | FailoverState
"""Every implementation of the shared-state contract."""
KINDS = ["local", "redis", "failover"]
"""The implementations by name: a ``state`` fixture's parameters."""


@asynccontextmanager
async def opened_state(request: pytest.FixtureRequest) -> AsyncIterator[State]:
    """The implementation ``request.param`` names, closed after; only the Redis ones
    ask for the session's Redis (``redis_url``), so an in-process run starts none."""
    if request.param == "local":
        yield LocalState()
        return
    url: str = request.getfixturevalue("redis_url")
    # The product's 0.25 s socket timeout is a deadline the tests would otherwise apply
    # unscaled: beside busy loops a starved redis-server ran a script after it (a
    # LateCallError, or the failover serving locally), failing the contract tests.
    timeout = scaled(SOCKET_TIMEOUT_S)
    shared: RedisState | FailoverState = (
        RedisState(url, socket_timeout_s=timeout)
        if request.param == "redis"
        else FailoverState(
            url, redis=RedisState(url, own_heartbeat=False, socket_timeout_s=timeout)
        )
    )
    try:
        yield shared
    finally:
        await shared.aclose()

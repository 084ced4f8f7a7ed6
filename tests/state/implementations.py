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
from llmbridge.state.redis import RedisState

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
    shared: RedisState | FailoverState = (
        RedisState(url) if request.param == "redis" else FailoverState(url)
    )
    try:
        yield shared
    finally:
        await shared.aclose()

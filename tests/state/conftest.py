"""State fixtures: each implementation of the shared-state contract (``state``), and a
bounded poll (``eventually``). The real Redis (``redis_server``, ``redis_url``: one per
test session, each test that asks starting from an empty database) is in
tests/servers.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from llmbridge.state.failover import FailoverState
from llmbridge.state.local import LocalState
from llmbridge.state.redis import RedisState
from tests.waiting import scaled

State = LocalState | RedisState | FailoverState
"""Every implementation of the shared-state contract."""


@pytest.fixture(params=["local", "redis", "failover"])
async def state(request: pytest.FixtureRequest) -> AsyncIterator[State]:
    """Each implementation in turn: in process, Redis, Redis with the local fallback."""
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


async def eventually(check: Callable[[], Awaitable[bool]], within_s: float = 60.0) -> bool:
    """Poll ``check`` until it holds (a bound on a hang, not a timing assertion; scaled in
    tests/waiting.py)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + scaled(within_s)
    while loop.time() < deadline:
        if await check():
            return True
        await asyncio.sleep(0.05)
    return await check()

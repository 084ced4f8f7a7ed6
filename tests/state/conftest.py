"""State fixtures: each implementation of the shared-state contract (``state``), and a
bounded poll (``eventually``). The real Redis (``redis_server``, ``redis_url``: one per
test session, each test that asks starting from an empty database) is in
tests/servers.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from tests.state.implementations import KINDS, State, opened_state
from tests.waiting import scaled


@pytest.fixture(params=KINDS)
async def state(request: pytest.FixtureRequest) -> AsyncIterator[State]:
    """Each implementation in turn: in process, Redis, Redis with the local fallback."""
    async with opened_state(request) as opened:
        yield opened


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

"""A background task that talks to Redis stops even when it loses a cancellation.

The hang this pins: ``make test`` on a loaded machine sat for ever in
``test_admissions_given_up_during_a_pause_hold_no_slots_after_it`` after every
assertion had passed. The test's ``FailoverState.aclose()`` cancelled the watch task
and awaited it; the cancellation arrived in the instant after redis-py's socket write
(``asyncio.wait_for`` around ``_send_packed_command``) had finished and before the
watch resumed, and Python 3.11's ``wait_for`` then returns the write's result instead
of raising (CPython gh-86296). The watch went on heartbeating (the ``TIME`` polls seen
in Redis) and the close waited on it for ever, holding the replica's slots alive.

The test forces that ordering instead of hoping for it: right after the heartbeat's
write completes, inside the write, it starts the close and lets it run before the
write returns, so the close's cancellation reaches the watch exactly in that instant.
On Python 3.12 and later ``wait_for`` no longer loses it and the test passes either
way; on 3.11 it hung before ``core/tasks.stop_task``.

And the other way a Redis call could wait for ever, or worse, get the wrong answer: a
connection whose reply was given up on (a timeout, a caller cancelled) going back to
the pool and handing that late reply to the next command. redis-py closes such a
connection (``disconnect_on_error``); the last two tests pin it on a pool of one
connection against a frozen Redis, so a redis-py upgrade that changed it would fail
here. Every call is bounded by the client's socket timeouts (0.25 s, state/redis.py)
and its pool's wait (1 s).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import pytest
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import TimeoutError as RedisTimeoutError

from llmbridge.core.tasks import stop_task
from llmbridge.state.failover import FailoverState
from llmbridge.state.redis import RedisState
from tests.servers import RedisServer
from tests.waiting import HANG_S, scaled, until


def _closing_inside_the_next_write(
    monkeypatch: pytest.MonkeyPatch, close: object
) -> list[asyncio.Task[None]]:
    """Arrange for the next write to Redis to start ``close()`` and let it run before
    the write returns; the task it started is appended to the returned list."""
    started: list[asyncio.Task[None]] = []
    write = AbstractConnection._send_packed_command

    async def write_then_close(self: AbstractConnection, command: Iterable[bytes]) -> None:
        await write(self, command)
        if not started:
            started.append(asyncio.get_running_loop().create_task(close()))  # type: ignore[operator]
            await asyncio.sleep(0)  # the close runs now: its cancel lands mid-write

    monkeypatch.setattr(AbstractConnection, "_send_packed_command", write_then_close)
    return started


async def test_the_failover_watch_stops_though_a_write_swallowed_its_cancellation(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    redis = RedisState(redis_url, heartbeat_s=0.05, own_heartbeat=False)
    state = FailoverState(redis_url, retry_s=0.05, redis=redis)
    await state.start()  # the watch task now heartbeats every 0.05 s
    started = _closing_inside_the_next_write(monkeypatch, state.aclose)
    await until(lambda: bool(started), "the watch's next heartbeat")
    done, _ = await asyncio.wait(started, timeout=scaled(HANG_S))
    assert done, "FailoverState.aclose() never returned: the watch lost its cancellation"
    assert started[0].exception() is None


async def test_the_redis_heartbeat_stops_though_a_write_swallowed_its_cancellation(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = RedisState(redis_url, heartbeat_s=0.05)  # owns its heartbeat task
    await state.ping()
    assert await state.acquire("k", None)  # starts the heartbeat task
    started = _closing_inside_the_next_write(monkeypatch, state.aclose)
    await until(lambda: bool(started), "the heartbeat's next beat")
    done, _ = await asyncio.wait(started, timeout=scaled(HANG_S))
    assert done, "RedisState.aclose() never returned: the heartbeat lost its cancellation"
    assert started[0].exception() is None


async def test_stop_task_cancels_again_a_task_that_swallowed_a_cancellation() -> None:
    """The helper itself, on a task that swallows the first cancellation by design."""
    swallowed = asyncio.Event()

    async def stubborn() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            swallowed.set()  # as wait_for did: the cancellation is gone
        await asyncio.Event().wait()  # ... and the loop goes on

    task = asyncio.get_running_loop().create_task(stubborn())
    await asyncio.sleep(0)
    await asyncio.wait_for(stop_task(task), scaled(HANG_S))
    assert swallowed.is_set()
    assert task.cancelled()


# -- a reply given up on is never read as another command's ---------------------------


async def _one_connection(url: str) -> RedisState:
    """A state whose pool has one connection, so the next command reuses it."""
    state = RedisState(url, max_connections=1, own_heartbeat=False)
    await state.client.set("x", "x's value")
    await state.client.set("y", "y's value")
    return state


async def test_a_reply_that_timed_out_is_not_the_next_commands_reply(
    redis_server: RedisServer, redis_url: str
) -> None:
    state = await _one_connection(redis_url)
    try:
        redis_server.pause()
        try:
            with pytest.raises(RedisTimeoutError):
                await state.client.get("x")  # sent; Redis answers it once resumed
        finally:
            redis_server.resume()
        assert await state.client.get("y") == "y's value"
    finally:
        await state.aclose()


async def test_a_reply_whose_caller_was_cancelled_is_not_the_next_commands_reply(
    redis_server: RedisServer, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = await _one_connection(redis_url)
    sent = asyncio.Event()
    write = AbstractConnection._send_packed_command

    async def write_and_say(self: AbstractConnection, command: Iterable[bytes]) -> None:
        await write(self, command)
        sent.set()

    monkeypatch.setattr(AbstractConnection, "_send_packed_command", write_and_say)
    try:
        redis_server.pause()
        try:
            waiting = asyncio.get_running_loop().create_task(state.client.get("x"))
            await asyncio.wait_for(sent.wait(), scaled(HANG_S))
            waiting.cancel()  # the caller leaves while its reply is still to come
            with pytest.raises(asyncio.CancelledError):
                await waiting
        finally:
            redis_server.resume()
        assert await state.client.get("y") == "y's value"
    finally:
        await state.aclose()

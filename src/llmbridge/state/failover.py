"""``FailoverState``: Redis-backed shared state that keeps serving when Redis does not.

No request fails because Redis did. A Redis call that errors or times out (socket
timeouts of 0.25 s, state/redis.py) switches this replica to its in-process
``LocalState``: ``degraded`` becomes True (``/health`` says so) and one warning is
logged. While degraded nothing waits on Redis: a background task pings it every
``retry_s`` and, once it answers, switches back (one info line). While healthy the
same task refreshes this replica's heartbeat (state/redis.py), so a Redis that goes
away is noticed within a heartbeat even with no traffic.

While degraded, limits hold per replica only (each counts its own traffic), the
trade the gateway makes rather than refusing every request.

In-flight slots are released where they were taken: one taken in Redis and released
while degraded is released in Redis after the recovery (so Redis does not keep a
stale count), one taken locally is released locally. Requests that started during
the outage are not counted in Redis until they finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal, TypeVar

from redis.exceptions import RedisError

from llmbridge.state.base import AdmitChecks, AdmitVerdict, BreakerView, WindowVerdict
from llmbridge.state.local import LocalState
from llmbridge.state.redis import RedisState, redacted

__all__ = ["FailoverState"]

log = logging.getLogger("llmbridge.state")

T = TypeVar("T")

REDIS_DOWN: tuple[type[BaseException], ...] = (RedisError, OSError, TimeoutError)
"""What a Redis that is unreachable, restarting or too slow raises."""


class FailoverState:
    """Redis with a local fallback (module docstring)."""

    kind = "redis"

    def __init__(
        self,
        url: str,
        *,
        retry_s: float = 1.0,
        redis: RedisState | None = None,
        local: LocalState | None = None,
    ) -> None:
        self.redis = redis or RedisState(url, own_heartbeat=False)
        self.local = local or LocalState()
        self.retry_s = retry_s
        self._degraded = False
        self._watch: asyncio.Task[None] | None = None
        self._redis_held: Counter[str] = Counter()
        self._local_held: Counter[str] = Counter()
        self._pending_release: Counter[str] = Counter()

    @property
    def degraded(self) -> bool:
        return self._degraded

    async def start(self) -> None:
        """Check Redis now (degraded from the start when it does not answer) and
        start the watch task; otherwise both happen on first use."""
        try:
            await self.redis.ping()
            await self.redis.heartbeat()
        except REDIS_DOWN as exc:
            self._degrade(exc)
        self._start_watch()

    # -- switching -----------------------------------------------------------------

    def _start_watch(self) -> None:
        if self._watch is None:
            self._watch = asyncio.get_running_loop().create_task(self._watch_redis())

    def _degrade(self, exc: BaseException) -> None:
        if not self._degraded:
            self._degraded = True
            log.warning(
                "Redis at %s is unreachable (%s: %s): serving shared state from this "
                "process until it answers again; limits now hold per replica",
                redacted(self.redis.url),
                type(exc).__name__,
                exc,
            )

    async def _watch_redis(self) -> None:
        while True:
            if not self._degraded:
                try:
                    await self.redis.heartbeat()
                except REDIS_DOWN as exc:
                    self._degrade(exc)
                    continue
                await asyncio.sleep(self.redis.heartbeat_s)
                continue
            await asyncio.sleep(self.retry_s)
            try:
                await self.redis.ping()
                await self.redis.heartbeat()
                await self._flush_pending_releases()
            except REDIS_DOWN:
                continue
            self._degraded = False
            log.info(
                "Redis at %s answers again: shared state is back in Redis", redacted(self.redis.url)
            )

    async def _flush_pending_releases(self) -> None:
        for key in list(self._pending_release):
            while self._pending_release[key] > 0:
                await self.redis.release(key)
                self._pending_release[key] -= 1
            del self._pending_release[key]

    async def _call(
        self, remote: Callable[[], Awaitable[T]], local: Callable[[], Awaitable[T]]
    ) -> T:
        self._start_watch()
        if not self._degraded:
            try:
                return await remote()
            except REDIS_DOWN as exc:
                self._degrade(exc)
        return await local()

    # -- sliding windows -----------------------------------------------------------

    async def take(self, key: str, cost: int, limit: int, window_s: float) -> WindowVerdict:
        return await self._call(
            lambda: self.redis.take(key, cost, limit, window_s),
            lambda: self.local.take(key, cost, limit, window_s),
        )

    async def add(self, key: str, amount: int, window_s: float) -> int:
        return await self._call(
            lambda: self.redis.add(key, amount, window_s),
            lambda: self.local.add(key, amount, window_s),
        )

    async def used(self, key: str, window_s: float) -> int:
        return await self._call(
            lambda: self.redis.used(key, window_s), lambda: self.local.used(key, window_s)
        )

    # -- in flight -----------------------------------------------------------------

    async def acquire(self, key: str, limit: int | None) -> bool:
        self._start_watch()
        if not self._degraded:
            try:
                taken = await self.redis.acquire(key, limit)
            except REDIS_DOWN as exc:
                self._degrade(exc)
            else:
                if taken:
                    self._redis_held[key] += 1
                return taken
        taken = await self.local.acquire(key, limit)
        if taken:
            self._local_held[key] += 1
        return taken

    async def release(self, key: str) -> None:
        if self._local_held[key] > 0:
            _take_one(self._local_held, key)
            await self.local.release(key)
            return
        if self._redis_held[key] > 0:
            _take_one(self._redis_held, key)
            if not self._degraded:
                try:
                    await self.redis.release(key)
                    return
                except REDIS_DOWN as exc:
                    self._degrade(exc)
            self._pending_release[key] += 1  # released in Redis once it answers

    async def in_flight(self, keys: Sequence[str]) -> dict[str, int]:
        return await self._call(
            lambda: self.redis.in_flight(keys), lambda: self.local.in_flight(keys)
        )

    # -- one request's checks at once ----------------------------------------------

    async def admit_many(self, checks: AdmitChecks) -> AdmitVerdict:
        """Redis's verdict, or the local one while degraded; a slot held is noted
        where it was taken, as ``acquire`` notes it."""
        self._start_watch()
        for store in (self.redis, self.local):
            if store is self.redis and self._degraded:
                continue
            try:
                verdict = await store.admit_many(checks)
            except REDIS_DOWN as exc:
                if store is not self.redis:
                    raise
                self._degrade(exc)
                continue
            if verdict.holds_slot and checks.parallel_key is not None:
                held = self._redis_held if store is self.redis else self._local_held
                held[checks.parallel_key] += 1
            return verdict
        raise AssertionError("unreachable: the local state always answers")

    async def settle(
        self,
        *,
        parallel_key: str | None = None,
        tpm_key: str | None = None,
        tokens: int = 0,
        window_s: float = 60.0,
    ) -> None:
        """The slot back where it was taken (``release``) and the tokens added where
        windows live now, in one Redis call when both go to Redis."""
        if parallel_key is not None:
            if self._redis_held[parallel_key] > 0:
                _take_one(self._redis_held, parallel_key)
            else:
                await self.release(parallel_key)  # held locally (or not at all)
                parallel_key = None
        if not self._degraded:
            try:
                await self.redis.settle(
                    parallel_key=parallel_key, tpm_key=tpm_key, tokens=tokens, window_s=window_s
                )
                return
            except REDIS_DOWN as exc:
                self._degrade(exc)
        if parallel_key is not None:
            self._pending_release[parallel_key] += 1  # released in Redis once it answers
        await self.local.settle(tpm_key=tpm_key, tokens=tokens, window_s=window_s)

    # -- counters and latency ------------------------------------------------------

    async def next_index(self, key: str) -> int:
        return await self._call(
            lambda: self.redis.next_index(key), lambda: self.local.next_index(key)
        )

    async def observe_latency(self, key: str, seconds: float) -> None:
        await self._call(
            lambda: self.redis.observe_latency(key, seconds),
            lambda: self.local.observe_latency(key, seconds),
        )

    async def latencies(self, keys: Sequence[str]) -> dict[str, float | None]:
        return await self._call(
            lambda: self.redis.latencies(keys), lambda: self.local.latencies(keys)
        )

    # -- circuit breakers ----------------------------------------------------------

    async def breaker(self, name: str) -> BreakerView:
        return await self._call(lambda: self.redis.breaker(name), lambda: self.local.breaker(name))

    async def breaker_failure(self, name: str, threshold: int) -> BreakerView:
        return await self._call(
            lambda: self.redis.breaker_failure(name, threshold),
            lambda: self.local.breaker_failure(name, threshold),
        )

    async def breaker_success(self, name: str) -> None:
        await self._call(
            lambda: self.redis.breaker_success(name), lambda: self.local.breaker_success(name)
        )

    async def breaker_set(self, name: str, state: Literal["open", "half_open"]) -> BreakerView:
        return await self._call(
            lambda: self.redis.breaker_set(name, state),
            lambda: self.local.breaker_set(name, state),
        )

    async def breaker_claim_probe(self, name: str, reset_s: float, lease_s: float) -> bool:
        return await self._call(
            lambda: self.redis.breaker_claim_probe(name, reset_s, lease_s),
            lambda: self.local.breaker_claim_probe(name, reset_s, lease_s),
        )

    # -- spend ---------------------------------------------------------------------

    async def add_float(self, key: str, amount: float) -> float:
        return await self._call(
            lambda: self.redis.add_float(key, amount), lambda: self.local.add_float(key, amount)
        )

    async def get_float(self, key: str) -> float:
        return await self._call(
            lambda: self.redis.get_float(key), lambda: self.local.get_float(key)
        )

    async def aclose(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        await self.redis.aclose()
        await self.local.aclose()


def _take_one(held: Counter[str], key: str) -> None:
    """One slot of ``key`` given back; keys at zero are dropped (they do not pile up)."""
    held[key] -= 1
    if held[key] <= 0:
        del held[key]

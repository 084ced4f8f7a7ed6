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

In-flight slots and budget reservations are given back where they were taken: one
taken in Redis is given back in Redis, one taken locally locally (a key's local ones
first: that keeps Redis's count on the safe side while both exist). Requests that
started during the outage are not counted in Redis until they finish.

What this replica holds in Redis it knows exactly: slots and reserved amounts per
key (``_redis_held``, ``_redis_reserved``), counted from the scripts' answers. A call
whose outcome is unknown (a timeout, a dropped connection, a script that ran too
late) marks its key dirty. Late scripts do nothing (deadlines, state/redis.py), but
one that ran just before its deadline and lost its reply did count; so before
serving from Redis again, once every call sent before the outage has come back or
given up, the watch task sets this replica's fields of every dirty key (and of every
key it holds something under: a Redis restarted empty, or an outage past the
heartbeat's TTL, lost them) to what it holds (``RedisState.reconcile``, one
script). There is no pending-release queue to replay: a release that timed out is a
count lowered here and a dirty key, so a release is never applied twice. Rate
windows and the spend counter are not per replica and cannot be reconciled: a
deadline keeps a late script from counting, and only the lost-reply race can count
one request twice, for one window.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal, TypeVar

from redis.exceptions import RedisError

from llmbridge.core.tasks import stop_task
from llmbridge.state.base import (
    DUST,
    AdmitChecks,
    AdmitVerdict,
    BreakerView,
    SpendHandOver,
    WindowVerdict,
)
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
        self._redis_reserved: dict[str, float] = {}
        self._local_reserved: dict[str, float] = {}
        self._dirty_slots: set[str] = set()
        """In-flight keys whose Redis count (this replica's field) may be wrong."""
        self._dirty_reserves: set[str] = set()
        """Reservation keys whose Redis amount (this replica's field) may be wrong."""
        self._outstanding = 0
        """Redis calls sent and not yet answered or given up on."""

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
            if self._outstanding:
                # A call sent before the outage may still count (its reply was lost
                # in the last instant before its deadline): repair after it has
                # come back or given up, not before.
                continue
            try:
                await self.redis.ping()
                await self.redis.heartbeat()  # and Redis's clock measured again
                await self._reconcile()
            except REDIS_DOWN:
                continue
            self._degraded = False
            log.info(
                "Redis at %s answers again: shared state is back in Redis", redacted(self.redis.url)
            )

    async def _reconcile(self) -> None:
        """This replica's fields of the dirty keys, and of every key it holds
        something under in Redis, set to what it holds there: a Redis that restarted
        empty, or an outage longer than the heartbeat's TTL (other replicas' scripts
        then delete this one's fields), has lost them. Runs while degraded, so no
        other call of this replica reaches Redis; a key dirtied meanwhile (a
        Redis-held slot given back) is repaired on the next turn."""
        self._dirty_slots |= self._redis_held.keys()
        self._dirty_reserves |= self._redis_reserved.keys()
        while self._dirty_slots or self._dirty_reserves:
            slots, reserves = self._dirty_slots, self._dirty_reserves
            self._dirty_slots, self._dirty_reserves = set(), set()
            try:
                await self.redis.reconcile(
                    {key: self._redis_held[key] for key in slots},
                    {key: self._redis_reserved.get(key, 0.0) for key in reserves},
                )
            except BaseException:
                self._dirty_slots |= slots
                self._dirty_reserves |= reserves
                raise

    async def _remote(self, call: Callable[[], Awaitable[T]]) -> T:
        """A Redis call, counted while it is outstanding (``_watch_redis``)."""
        self._outstanding += 1
        try:
            return await call()
        finally:
            self._outstanding -= 1

    async def _call(
        self, remote: Callable[[], Awaitable[T]], local: Callable[[], Awaitable[T]]
    ) -> T:
        self._start_watch()
        if not self._degraded:
            try:
                return await self._remote(remote)
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
                taken = await self._remote(lambda: self.redis.acquire(key, limit))
            except REDIS_DOWN as exc:
                self._dirty_slots.add(key)  # it may have counted after all
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
                    await self._remote(lambda: self.redis.release(key))
                    return
                except REDIS_DOWN as exc:
                    self._degrade(exc)
            self._dirty_slots.add(key)  # Redis's count set to ours once it answers

    async def in_flight(self, keys: Sequence[str]) -> dict[str, int]:
        return await self._call(
            lambda: self.redis.in_flight(keys), lambda: self.local.in_flight(keys)
        )

    # -- one request's checks at once ----------------------------------------------

    async def reserved(self, reserve_key: str) -> float:
        return await self._call(
            lambda: self.redis.reserved(reserve_key), lambda: self.local.reserved(reserve_key)
        )

    async def admit_many(self, checks: AdmitChecks) -> AdmitVerdict:
        """Redis's verdict, or the local one while degraded; a slot and a reservation
        held are noted where they were taken, as ``acquire`` notes a slot."""
        self._start_watch()
        if not self._degraded:
            try:
                verdict = await self._remote(lambda: self.redis.admit_many(checks))
            except REDIS_DOWN as exc:
                # It may have counted after all (a reply lost just before its deadline).
                if checks.parallel_key is not None:
                    self._dirty_slots.add(checks.parallel_key)
                if checks.reserve_key is not None and checks.reserve > 0:
                    self._dirty_reserves.add(checks.reserve_key)
                self._degrade(exc)
            else:
                self._note(verdict, checks, self._redis_held, self._redis_reserved)
                return verdict
        verdict = await self.local.admit_many(checks)
        self._note(verdict, checks, self._local_held, self._local_reserved)
        return verdict

    @staticmethod
    def _note(
        verdict: AdmitVerdict,
        checks: AdmitChecks,
        held: Counter[str],
        reserved: dict[str, float],
    ) -> None:
        if verdict.holds_slot and checks.parallel_key is not None:
            held[checks.parallel_key] += 1
        if verdict.reserved > 0 and checks.reserve_key is not None:
            key = checks.reserve_key
            reserved[key] = reserved.get(key, 0.0) + verdict.reserved

    async def settle(
        self,
        *,
        parallel_key: str | None = None,
        tpm_key: str | None = None,
        tokens: int = 0,
        window_s: float = 60.0,
        reserve_key: str | None = None,
        reserve: float = 0.0,
        spend_key: str | None = None,
        spend: float = 0.0,
    ) -> None:
        """The slot and the reservation back where they were taken (a key's local ones
        first), the tokens and the spend added where windows and counters live now;
        one Redis call for whatever goes to Redis."""
        local_slot = redis_slot = False
        if parallel_key is not None:
            if self._local_held[parallel_key] > 0:
                _take_one(self._local_held, parallel_key)
                local_slot = True
            elif self._redis_held[parallel_key] > 0:
                _take_one(self._redis_held, parallel_key)
                redis_slot = True
        local_back = redis_back = 0.0
        if reserve_key is not None and reserve > 0:
            local_back = _take_amount(self._local_reserved, reserve_key, reserve)
            redis_back = _take_amount(self._redis_reserved, reserve_key, reserve - local_back)
        if local_slot or local_back > 0:
            await self.local.settle(
                parallel_key=parallel_key if local_slot else None,
                reserve_key=reserve_key,
                reserve=local_back,
            )
        if not self._degraded:
            try:
                await self._remote(
                    lambda: self.redis.settle(
                        parallel_key=parallel_key if redis_slot else None,
                        tpm_key=tpm_key,
                        tokens=tokens,
                        window_s=window_s,
                        reserve_key=reserve_key,
                        reserve=redis_back,
                        spend_key=spend_key,
                        spend=spend,
                    )
                )
                return
            except REDIS_DOWN as exc:
                self._degrade(exc)
        # Redis's counts of what was given back here are set right once it answers.
        if redis_slot and parallel_key is not None:
            self._dirty_slots.add(parallel_key)
        if redis_back > 0 and reserve_key is not None:
            self._dirty_reserves.add(reserve_key)
        await self.local.settle(
            tpm_key=tpm_key, tokens=tokens, window_s=window_s, spend_key=spend_key, spend=spend
        )

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

    async def hand_over(self, moves: Sequence[SpendHandOver]) -> None:
        """Where the counters live now, as ``add_float``: a hand-over served locally
        is not made again in Redis (module docstring: spend cannot be reconciled)."""
        await self._call(lambda: self.redis.hand_over(moves), lambda: self.local.hand_over(moves))

    async def aclose(self) -> None:
        # The watch task talks to Redis: a cancel-and-await could wait for ever on
        # one that lost its cancellation (core/tasks.py).
        await stop_task(self._watch)
        self._watch = None
        await self.redis.aclose()
        await self.local.aclose()


def _take_one(held: Counter[str], key: str) -> None:
    """One slot of ``key`` given back; keys at zero are dropped (they do not pile up)."""
    held[key] -= 1
    if held[key] <= 0:
        del held[key]


def _take_amount(reserved: dict[str, float], key: str, amount: float) -> float:
    """Up to ``amount`` of ``key``'s reservation given back; returns what was (all of
    it, or what was held). Keys left with dust are dropped."""
    if amount <= DUST:
        return 0.0
    held = reserved.get(key, 0.0)
    taken = min(amount, held)
    if held - taken <= DUST:
        reserved.pop(key, None)
        return held if held > 0 else 0.0
    reserved[key] = held - taken
    return taken

"""``LocalState``: the shared-state contract (state/base.py) in one process's memory.

The default with no Redis configured (one process: its limits hold for that
process only), and the fallback a Redis-backed state serves from while Redis is
unreachable (state/failover.py). Same semantics as the Redis scripts
(state/redis.py): 1-second buckets, in-flight counts that never go negative, EWMA
with alpha 0.3, the breaker's transitions. Every method runs without awaiting
anything, so each is atomic on the event loop.

``clock`` (unix seconds) is injectable so tests can move time by hand.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from llmbridge.state.base import (
    DUST,
    EWMA_ALPHA,
    AdmitChecks,
    AdmitVerdict,
    BreakerState,
    BreakerView,
    SpendHandOver,
    WindowVerdict,
)

__all__ = ["LocalState", "window_seconds"]


def window_seconds(window_s: float) -> int:
    """A window's length in whole 1-second buckets (at least one)."""
    return max(1, math.ceil(window_s))


@dataclass(slots=True)
class _Breaker:
    state: BreakerState = "closed"
    failures: int = 0
    opened_at: float = 0.0

    def view(self) -> BreakerView:
        return BreakerView(self.state, self.failures, self.opened_at)


class _Window:
    """One sliding window: its 1-second buckets oldest first, and their running total,
    so a check costs the same however many seconds of the window are filled (no scan
    and no sum over up to 60 buckets per request)."""

    __slots__ = ("buckets", "total")

    def __init__(self) -> None:
        self.buckets: deque[list[int]] = deque()  # [second, amount]
        self.total = 0

    def expire(self, oldest: int) -> None:
        """Drop the buckets of seconds before ``oldest``."""
        buckets = self.buckets
        while buckets and buckets[0][0] < oldest:
            self.total -= buckets.popleft()[1]

    def add(self, second: int, amount: int) -> None:
        buckets = self.buckets
        # A clock that stepped back (an injected one, or NTP) adds to the newest bucket,
        # so the buckets stay in order.
        if buckets and buckets[-1][0] >= second:
            buckets[-1][1] += amount
        else:
            buckets.append([second, amount])
        self.total += amount


class LocalState:
    """Shared state held in this process (module docstring)."""

    kind = "local"

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._windows: dict[str, _Window] = {}
        self._in_flight: dict[str, int] = {}
        self._counters: dict[str, int] = {}
        self._latency: dict[str, float] = {}
        self._breakers: dict[str, _Breaker] = {}
        self._probe_leases: dict[str, float] = {}
        self._floats: dict[str, float] = {}
        self._reserved: dict[str, float] = {}

    @property
    def degraded(self) -> bool:
        return False

    # -- sliding windows -----------------------------------------------------------

    def _window(self, key: str, window_s: float) -> tuple[_Window, int, float]:
        """The key's window with its stale buckets dropped, the window in whole
        seconds and now."""
        now = self._clock()
        seconds = math.ceil(window_s) if window_s > 1 else 1  # window_seconds, inline
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = _Window()
        window.expire(math.floor(now) - seconds + 1)
        return window, seconds, now

    async def take(self, key: str, cost: int, limit: int, window_s: float) -> WindowVerdict:
        return self._take(key, cost, limit, window_s)

    def _take(self, key: str, cost: int, limit: int, window_s: float) -> WindowVerdict:
        window, seconds, now = self._window(key, window_s)
        used = window.total
        if used + cost <= limit:
            window.add(math.floor(now), cost)
            return WindowVerdict(True, used + cost, limit, 0.0)
        return WindowVerdict(
            False, used, limit, _reset_after(window.buckets, used, cost, limit, seconds, now)
        )

    async def add(self, key: str, amount: int, window_s: float) -> int:
        return self._add(key, amount, window_s)

    def _add(self, key: str, amount: int, window_s: float) -> int:
        window, _, now = self._window(key, window_s)
        window.add(math.floor(now), amount)
        return window.total

    async def used(self, key: str, window_s: float) -> int:
        window, _, _ = self._window(key, window_s)
        if not window.buckets:
            del self._windows[key]  # keys nobody uses any more do not pile up
        return window.total

    # -- in flight -----------------------------------------------------------------

    async def acquire(self, key: str, limit: int | None) -> bool:
        return self._acquire(key, limit)

    def _acquire(self, key: str, limit: int | None) -> bool:
        current = self._in_flight.get(key, 0)
        if limit is not None and current >= limit:
            return False
        self._in_flight[key] = current + 1
        return True

    async def release(self, key: str) -> None:
        self._release(key)

    def _release(self, key: str) -> None:
        current = self._in_flight.get(key, 0)
        if current <= 1:
            self._in_flight.pop(key, None)
        else:
            self._in_flight[key] = current - 1

    async def in_flight(self, keys: Sequence[str]) -> dict[str, int]:
        return {key: self._in_flight.get(key, 0) for key in keys}

    # -- counters and latency ------------------------------------------------------

    async def next_index(self, key: str) -> int:
        index = self._counters.get(key, 0)
        self._counters[key] = index + 1
        return index

    async def observe_latency(self, key: str, seconds: float) -> None:
        old = self._latency.get(key)
        self._latency[key] = (
            seconds if old is None else EWMA_ALPHA * seconds + (1 - EWMA_ALPHA) * old
        )

    async def latencies(self, keys: Sequence[str]) -> dict[str, float | None]:
        return {key: self._latency.get(key) for key in keys}

    # -- circuit breakers ----------------------------------------------------------

    async def breaker(self, name: str) -> BreakerView:
        return self._breakers.get(name, _Breaker()).view()

    async def breaker_failure(self, name: str, threshold: int) -> BreakerView:
        breaker = self._breakers.setdefault(name, _Breaker())
        breaker.failures += 1
        if breaker.state == "half_open" or breaker.failures >= threshold:
            breaker.state, breaker.opened_at = "open", self._clock()
        return breaker.view()

    async def breaker_success(self, name: str) -> None:
        breaker = self._breakers.setdefault(name, _Breaker())
        breaker.state, breaker.failures = "closed", 0

    async def breaker_set(self, name: str, state: Literal["open", "half_open"]) -> BreakerView:
        breaker = self._breakers.setdefault(name, _Breaker())
        breaker.state = state
        if state == "open":
            breaker.opened_at = self._clock()
        self._probe_leases.pop(name, None)
        return breaker.view()

    async def breaker_claim_probe(self, name: str, reset_s: float, lease_s: float) -> bool:
        """Whether this caller may probe the open breaker now: it has been open for
        ``reset_s`` and nobody holds the probe (a lease of ``lease_s``, ended by
        ``breaker_set``)."""
        breaker = self._breakers.get(name)
        now = self._clock()
        if breaker is None or breaker.state != "open" or now - breaker.opened_at < reset_s:
            return False
        if self._probe_leases.get(name, 0.0) > now:
            return False
        self._probe_leases[name] = now + lease_s
        return True

    # -- spend ---------------------------------------------------------------------

    async def add_float(self, key: str, amount: float) -> float:
        return self.add_float_now(key, amount)

    def add_float_now(self, key: str, amount: float) -> float:
        """``add_float`` without a coroutine: what the usage ledger calls per request
        (accounts/ledger.py), where a task per request would cost more than the add."""
        total = self._floats.get(key, 0.0) + amount
        self._floats[key] = total
        return total

    async def get_float(self, key: str) -> float:
        return self._floats.get(key, 0.0)

    # -- one request's checks at once ----------------------------------------------

    async def admit_many(self, checks: AdmitChecks) -> AdmitVerdict:
        # Nothing awaited in between: atomic on the event loop, as the Redis script is.
        c = checks
        spent = c.spent
        if c.budget is not None:
            if c.handed_key is not None:
                spent = max(spent, self._floats.get(c.handed_key, spent))
            if c.spend_key is not None:
                spent += self._floats.get(c.spend_key, 0.0)
            held_back = 0.0 if c.reserve_key is None else self._reserved.get(c.reserve_key, 0.0)
            if spent + held_back >= c.budget:
                return AdmitVerdict("budget", spent, False, None, None)
        held: str | None = None
        if c.parallel_key is not None:
            if not self._acquire(c.parallel_key, c.parallel):
                return AdmitVerdict("parallel", spent, False, None, None)
            held = c.parallel_key
        requests = tokens = None
        if c.rpm_key is not None:
            requests = self._take(c.rpm_key, 1, c.rpm, c.window_s)
            if not requests.allowed:
                if held is not None:
                    self._release(held)
                return AdmitVerdict("rpm", spent, False, requests, None)
        if c.tpm_key is not None:
            tokens = self._take(c.tpm_key, c.tpm_cost, c.tpm, c.window_s)
            if not tokens.allowed:
                if held is not None:
                    self._release(held)
                return AdmitVerdict("tpm", spent, False, requests, tokens)
        reserved = 0.0
        if c.reserve_key is not None and c.reserve > 0:
            reserved = c.reserve
            self._reserved[c.reserve_key] = self._reserved.get(c.reserve_key, 0.0) + reserved
        return AdmitVerdict("", spent, held is not None, requests, tokens, reserved)

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
        if parallel_key is not None:
            self._release(parallel_key)
        if tpm_key is not None and tokens > 0:
            self._add(tpm_key, tokens, window_s)
        if reserve_key is not None and reserve > 0:
            self.give_back(reserve_key, reserve)
        if spend_key is not None and spend > 0:
            self.add_float_now(spend_key, spend)

    def give_back(self, reserve_key: str, amount: float) -> None:
        """``amount`` of ``reserve_key``'s reservations given back (never below zero;
        dust dropped, so keys nobody reserves on do not pile up)."""
        left = self._reserved.get(reserve_key, 0.0) - amount
        if left <= DUST:
            self._reserved.pop(reserve_key, None)
        else:
            self._reserved[reserve_key] = left

    async def reserved(self, reserve_key: str) -> float:
        return self._reserved.get(reserve_key, 0.0)

    async def hand_over(self, moves: Sequence[SpendHandOver]) -> None:
        # Nothing awaited: atomic on the event loop, as the Redis script is.
        floats = self._floats
        for move in moves:
            floats[move.spend_key] = floats.get(move.spend_key, 0.0) - move.amount
            handed = floats.get(move.handed_key, 0.0) + move.handed
            floats[move.handed_key] = max(handed, move.ledger_total)

    async def aclose(self) -> None:
        pass


def _reset_after(
    buckets: Iterable[list[int]], used: int, cost: int, limit: int, seconds: int, now: float
) -> float:
    """Seconds until enough of the oldest buckets leave the window for ``cost`` to fit;
    the whole window when it never will (``cost > limit``). A bucket for second ``b``
    leaves the window at ``b + seconds``."""
    if cost > limit:
        return float(seconds)
    need, dropped = used + cost - limit, 0
    for second, amount in buckets:  # oldest first
        dropped += amount
        if dropped >= need:
            return max(0.0, second + seconds - now)
    return float(seconds)

"""``RedisState``: the shared-state contract (state/base.py) in Redis, for every replica.

Every update happens server-side, in one Lua script or one atomic command, never as
a read-modify-write from Python: N replicas checking a limit each in their own
memory would allow N times it (LiteLLM's per-deployment limits did,
SCALE_CONTRACT.md). The scripts (state/redis_scripts.py) are registered once per
client (``register_script``: EVALSHA, loaded again by redis-py on ``NOSCRIPT`` after a
Redis restart) and read the time from Redis (``TIME``) so every replica agrees on the
second.

Keys (``prefix`` defaults to ``llmbridge:``):

- ``w:<key>``: a sliding window, a hash of unix second -> amount; stale seconds are
  deleted by the script that finds them, the hash expires one second after the
  window;
- ``inf:<key>``: in-flight counts, a hash of replica id -> count. A replica's
  counts count only while its heartbeat key ``hb:<replica id>`` lives: it is set
  (PX ``heartbeat_ttl_s``) by every ``acquire`` and every ``heartbeat_s``, so a
  replica killed with -9 leaks its slots for at most the TTL; the next script that
  sees a dead replica's field deletes it;
- ``rsv:<key>``: budget reservations, a hash of replica id -> amount
  (``HINCRBYFLOAT``), counted like in-flight counts: only while the replica's
  heartbeat lives, so a replica killed with -9 leaks no budget;
- ``n:<key>`` (``INCR``), ``lat:<key>`` (EWMA), ``f:<key>`` (``INCRBYFLOAT``: a key's
  spend not yet written and the spend handed to the ledger, ``hand_over``);
- ``br:<name>``: a breaker, a hash (state, failures, opened_at);
  ``brp:<name>``: the probe lease (``SET NX PX``), one prober across replicas.

The in-flight scripts build heartbeat key names from replica ids (keys not passed
in ``KEYS``): fine on a single Redis or behind Sentinel, not on Redis Cluster.

Socket and connect timeouts are short (0.25 s) and there is one immediate retry
(for a pooled connection that died with a Redis restart); at most
``max_connections`` (32) connections per process, callers queue for one. The failover wrapper
(state/failover.py) turns a Redis that does not answer into local state rather
than a slow request.

Deadlines. A command a client gave up on is not taken back: it sits in the socket of
a frozen Redis (``SIGSTOP``, a stalled VM, a dropped network) and runs when Redis
resumes, long after the caller timed out and counted the request elsewhere. So every
script that changes a count on behalf of a caller who may give up (``take``,
``add``, ``acquire``, ``release``, ``admit_many``, ``settle``, ``reconcile``,
``hand_over``) carries a deadline in Redis's own time, checked first thing inside the script
against ``TIME``: a script that runs later does nothing and answers ``late``
(``LateCallError``, which the failover counts as Redis being down). The deadline is
this replica's estimate of Redis's clock (``RedisClock``: a ``TIME`` round trip's
midpoint, measured on start and on every heartbeat, on the monotonic clock so a
stepped wall clock changes nothing) plus the socket timeout, minus the estimate's
uncertainty (half the round trip): at or before the moment the client gives up.
It is written when redis-py encodes the command, just before each send (the
retry's resend included), so the wait for a pooled connection does not eat into it.

What a deadline cannot close: a script that ran just before its deadline whose reply
was lost (or came after the client's timeout). Its caller does not know whether it
counted. Windows (rpm, tpm) and the spend counter may then count that request
twice (here and in the fallback) for at most one window; in-flight slots and
budget reservations are per replica, so the failover marks their keys dirty and
``reconcile`` sets this replica's fields to what it really holds once Redis answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import TimeoutError as RedisTimeoutError

from llmbridge.core.tasks import stop_task
from llmbridge.state.base import (
    EWMA_ALPHA,
    AdmitChecks,
    AdmitVerdict,
    BreakerState,
    BreakerView,
    Refusal,
    SpendHandOver,
    WindowVerdict,
)
from llmbridge.state.local import window_seconds
from llmbridge.state.redis_scripts import (
    ACQUIRE,
    ADMIT,
    BREAKER_CLAIM,
    BREAKER_FAILURE,
    BREAKER_SET,
    EWMA,
    HAND_OVER,
    IN_FLIGHT,
    LATE,
    RECONCILE,
    RELEASE,
    RESERVED,
    SETTLE,
    WINDOW,
)

__all__ = ["LateCallError", "RedisClock", "RedisState", "new_replica_id", "redacted"]

log = logging.getLogger("llmbridge.state")

SOCKET_TIMEOUT_S = 0.25
"""A Redis that has not answered by then counts as down (state/failover.py)."""
POOL_WAIT_S = 1.0
"""How long a call waits for one of the pool's connections before Redis counts as down."""

CLOCK_MARGIN_S = 0.002
"""Taken off every deadline beyond the clock estimate's own uncertainty: the drift of
this host's clock against Redis's between two heartbeats, with room to spare."""


def redacted(url: str) -> str:
    """``url`` without its password, for logs (``redis://:secret@host`` is common)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = f"{parts.username}:***" if parts.username else ":***"
    host = parts.hostname or ""
    netloc = f"{user}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def new_replica_id() -> str:
    """``hostname:pid:random``: unique per process, and readable in ``redis-cli``."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


_REFUSALS: dict[Any, Refusal] = {
    "": "",
    "budget": "budget",
    "parallel": "parallel",
    "rpm": "rpm",
    "tpm": "tpm",
}

_STATES: dict[Any, BreakerState] = {"closed": "closed", "open": "open", "half_open": "half_open"}


def _view(state: Any, failures: Any, opened_at: Any) -> BreakerView:
    return BreakerView(_STATES.get(state, "closed"), int(failures or 0), float(opened_at or 0.0))


class LateCallError(RedisTimeoutError):
    """Redis ran a script after its deadline, so the script did nothing (module
    docstring, "Deadlines"). An earlier attempt of the same call whose reply was lost
    may still have counted: the outcome is unknown, as after a timeout."""


def _on_time(reply: Any) -> Any:
    """A script's reply, or ``LateCallError`` when it ran too late to count."""
    if reply == LATE:
        raise LateCallError("Redis ran the call after its deadline: it did nothing")
    return reply


class RedisClock:
    """This replica's estimate of Redis's clock, on the monotonic clock.

    ``measured`` takes one ``TIME`` round trip: Redis read its clock somewhere between
    sending and receiving, so the midpoint is the estimate and half the round trip its
    uncertainty (``error``). A stepped wall clock (NTP) changes nothing here."""

    __slots__ = ("error", "offset")

    def __init__(self) -> None:
        self.offset: float | None = None
        """Redis's time minus ``time.monotonic()``; ``None`` until measured."""
        self.error = 0.0

    def measured(self, sent: float, received: float, redis_s: float) -> None:
        """One round trip: ``sent`` and ``received`` on ``time.monotonic()``, ``redis_s``
        the ``TIME`` Redis answered in it."""
        self.offset = redis_s - (sent + received) / 2
        self.error = (received - sent) / 2

    def deadline(self, budget_s: float) -> str:
        """The Redis time by which a command sent now must have run: surely no later
        than ``budget_s`` after now by Redis's clock, whatever the estimate's error.
        ``"0"`` (already late: the call does nothing) before any measurement."""
        if self.offset is None:
            return "0"
        return f"{time.monotonic() + self.offset - self.error - CLOCK_MARGIN_S + budget_s:.6f}"


class _Deadline(float):
    """A script argument that is the deadline at the moment redis-py encodes it:
    redis-py encodes a ``float`` argument with ``repr`` while packing the command, just
    before each send (and again for a retry's resend), so the wait for a pooled
    connection or a reconnect never counts against the script's time. Were the
    encoding ever done earlier, the deadline would only come earlier: never later than
    the moment the client gives up. One instance serves every call."""

    clock: RedisClock
    budget_s: float

    def __new__(cls, clock: RedisClock, budget_s: float) -> _Deadline:
        deadline = super().__new__(cls, 0.0)
        deadline.clock = clock
        deadline.budget_s = budget_s
        return deadline

    def __repr__(self) -> str:
        return self.clock.deadline(self.budget_s)

    __str__ = __repr__


class RedisState:
    """Shared state in Redis (module docstring).

    ``heartbeat_s``: how often this replica refreshes its heartbeat key, which
    expires after ``heartbeat_ttl_s`` (about 3x). With ``own_heartbeat`` (the
    default) a task started on first use does it; state/failover.py passes False
    and calls ``heartbeat()`` from its own watch loop.
    """

    kind = "redis"

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "llmbridge:",
        heartbeat_s: float = 2.0,
        heartbeat_ttl_s: float = 6.0,
        own_heartbeat: bool = True,
        socket_timeout_s: float = SOCKET_TIMEOUT_S,
        pool_wait_s: float = POOL_WAIT_S,
        max_connections: int = 32,
    ) -> None:
        self.url = url
        self.replica = new_replica_id()
        self.heartbeat_s = heartbeat_s
        self._ttl_ms = str(round(heartbeat_ttl_s * 1000))
        self._prefix = prefix
        self._hb_prefix = f"{prefix}hb:"
        self._hb_key = self._hb_prefix + self.replica
        self._unused = f"{prefix}unused"
        """A key name for a script's unused ``KEYS`` slot (never read or written)."""
        self._own_heartbeat = own_heartbeat
        self._heartbeat_task: asyncio.Task[None] | None = None
        self.clock = RedisClock()
        self._deadline = _Deadline(self.clock, socket_timeout_s)
        self._clock_lock = asyncio.Lock()
        # A bounded pool that makes callers wait for a connection: a burst of requests
        # would otherwise open one connection each, and a hundred connects at once
        # on a busy machine miss the short connect timeout (a false outage).
        pool = BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=pool_wait_s,
            decode_responses=True,
            socket_timeout=socket_timeout_s,
            socket_connect_timeout=socket_timeout_s,
            retry=Retry(NoBackoff(), 1),
        )
        self.client = Redis.from_pool(pool)  # owns it: closed with the client
        register = self.client.register_script
        self._window = register(WINDOW)
        self._acquire = register(ACQUIRE)
        self._release = register(RELEASE)
        self._admit = register(ADMIT)
        self._settle = register(SETTLE)
        self._hand_over = register(HAND_OVER)
        self._reconcile = register(RECONCILE)
        self._reserved = register(RESERVED)
        self._in_flight = register(IN_FLIGHT)
        self._ewma = register(EWMA)
        self._breaker_failure = register(BREAKER_FAILURE)
        self._breaker_set = register(BREAKER_SET)
        self._breaker_claim = register(BREAKER_CLAIM)

    @property
    def degraded(self) -> bool:
        return False

    async def ping(self) -> None:
        """Raises when Redis does not answer."""
        await self.client.ping()

    async def heartbeat(self) -> None:
        """Keep this replica's in-flight counts and reservations alive for another TTL,
        and measure Redis's clock (``RedisClock``) in the same round trip."""
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.set(self._hb_key, "1", px=int(self._ttl_ms))
            pipe.time()
            sent = time.monotonic()
            _, (seconds, micros) = await pipe.execute()
            received = time.monotonic()
        self.clock.measured(sent, received, int(seconds) + int(micros) / 1_000_000)

    async def _clock_known(self) -> None:
        """Measure Redis's clock before the first call that needs a deadline (once:
        callers arriving together share the measurement). Callers test
        ``clock.offset`` first: no coroutine on the hot path. The heartbeat task (when
        this state owns it) measures it again on every beat, so the estimate follows
        Redis's clock however long the process runs."""
        self._start_heartbeat()
        async with self._clock_lock:
            if self.clock.offset is None:
                await self.heartbeat()

    def _start_heartbeat(self) -> None:
        if self._own_heartbeat and self._heartbeat_task is None:
            self._heartbeat_task = asyncio.get_running_loop().create_task(self._beat())

    async def _beat(self) -> None:
        while True:
            try:
                await self.heartbeat()
            except Exception as exc:  # noqa: BLE001 - Redis away: try again next beat
                log.debug("heartbeat to Redis failed: %s", exc)
            await asyncio.sleep(self.heartbeat_s)

    # -- sliding windows -----------------------------------------------------------

    async def _run_window(self, key: str, cost: int, limit: int, window_s: float, mode: str) -> Any:
        keys = [f"{self._prefix}w:{key}"]
        deadline: float | str = ""  # a read changes nothing: no deadline
        if mode != "used":
            if self.clock.offset is None:
                await self._clock_known()
            deadline = self._deadline
        args: list[str | int | float] = [cost, limit, window_seconds(window_s), mode, deadline]
        return _on_time(await self._window(keys, args))

    async def take(self, key: str, cost: int, limit: int, window_s: float) -> WindowVerdict:
        allowed, used, reset = await self._run_window(key, cost, limit, window_s, "take")
        return WindowVerdict(bool(allowed), int(used), limit, float(reset))

    async def add(self, key: str, amount: int, window_s: float) -> int:
        _, used, _ = await self._run_window(key, amount, 0, window_s, "add")
        return int(used)

    async def used(self, key: str, window_s: float) -> int:
        _, used, _ = await self._run_window(key, 0, 0, window_s, "used")
        return int(used)

    # -- in flight -----------------------------------------------------------------

    async def acquire(self, key: str, limit: int | None) -> bool:
        self._start_heartbeat()
        if self.clock.offset is None:
            await self._clock_known()
        keys = [f"{self._prefix}inf:{key}", self._hb_key]
        args = [
            self.replica,
            "" if limit is None else limit,
            self._ttl_ms,
            self._hb_prefix,
            self._deadline,
        ]
        return bool(_on_time(await self._acquire(keys, args)))

    async def release(self, key: str) -> None:
        if self.clock.offset is None:
            await self._clock_known()
        _on_time(await self._release([f"{self._prefix}inf:{key}"], [self.replica, self._deadline]))

    async def in_flight(self, keys: Sequence[str]) -> dict[str, int]:
        if not keys:
            return {}
        counts = await self._in_flight(
            [f"{self._prefix}inf:{k}" for k in keys], [self.replica, self._hb_prefix]
        )
        return {key: int(n) for key, n in zip(keys, counts, strict=True)}

    # -- one request's checks at once ----------------------------------------------

    async def admit_many(self, checks: AdmitChecks) -> AdmitVerdict:
        """One EVALSHA for every check (``ADMIT``), not one round trip each."""
        c, prefix, unused = checks, self._prefix, self._unused
        reserves = c.reserve_key is not None and c.reserve > 0
        if c.parallel_key is not None or reserves:
            self._start_heartbeat()
        if self.clock.offset is None:
            await self._clock_known()
        keys = [
            unused if c.spend_key is None else f"{prefix}f:{c.spend_key}",
            unused if c.parallel_key is None else f"{prefix}inf:{c.parallel_key}",
            self._hb_key,
            unused if c.rpm_key is None else f"{prefix}w:{c.rpm_key}",
            unused if c.tpm_key is None else f"{prefix}w:{c.tpm_key}",
            unused if c.reserve_key is None else f"{prefix}rsv:{c.reserve_key}",
            unused if c.handed_key is None else f"{prefix}f:{c.handed_key}",
        ]
        args = [
            repr(c.spent),
            "" if c.budget is None else repr(c.budget),
            "" if c.parallel_key is None else "-" if c.parallel is None else c.parallel,
            self.replica,
            self._ttl_ms,
            self._hb_prefix,
            "" if c.rpm_key is None else c.rpm,
            "" if c.tpm_key is None else c.tpm,
            c.tpm_cost,
            window_seconds(c.window_s),
            self._deadline,
            "" if c.reserve_key is None else repr(max(c.reserve, 0.0)),
        ]
        reply = _on_time(await self._admit(keys, args))
        refused, total, held, r_ok, r_used, r_reset, t_ok, t_used, t_reset, reserved = reply
        rpm, tpm = c.rpm, c.tpm
        return AdmitVerdict(
            _REFUSALS[refused],
            float(total),
            bool(held),
            None if int(r_ok) < 0 else WindowVerdict(bool(r_ok), int(r_used), rpm, float(r_reset)),
            None if int(t_ok) < 0 else WindowVerdict(bool(t_ok), int(t_used), tpm, float(t_reset)),
            float(reserved),
        )

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
        """One EVALSHA (``SETTLE``); none when there is nothing to do."""
        counts = tpm_key is not None and tokens > 0
        gives_back = reserve_key is not None and reserve > 0
        spends = spend_key is not None and spend > 0
        if parallel_key is None and not counts and not gives_back and not spends:
            return
        if self.clock.offset is None:
            await self._clock_known()
        prefix, unused = self._prefix, self._unused
        keys = [
            unused if parallel_key is None else f"{prefix}inf:{parallel_key}",
            f"{prefix}w:{tpm_key}" if counts else unused,
            f"{prefix}rsv:{reserve_key}" if gives_back else unused,
            f"{prefix}f:{spend_key}" if spends else unused,
        ]
        args = [
            self.replica,
            "0" if parallel_key is None else "1",
            tokens if counts else 0,
            window_seconds(window_s),
            repr(reserve) if gives_back else "0",
            repr(spend) if spends else "0",
            self._deadline,
        ]
        _on_time(await self._settle(keys, args))

    async def reserved(self, reserve_key: str) -> float:
        reply = await self._reserved(
            [f"{self._prefix}rsv:{reserve_key}"], [self.replica, self._hb_prefix]
        )
        return float(reply)

    async def reconcile(self, slots: Mapping[str, int], reserves: Mapping[str, float]) -> None:
        """Set this replica's in-flight count of each key of ``slots`` and its
        reservation of each key of ``reserves`` to the given values (0: the field
        goes), and refresh its heartbeat, in one script: the failover's repair of
        counts a call with an unknown outcome may have left wrong (module docstring,
        "Deadlines")."""
        if not slots and not reserves:
            return
        if self.clock.offset is None:
            await self._clock_known()
        prefix = self._prefix
        keys = [self._hb_key]
        keys += [f"{prefix}inf:{key}" for key in slots]
        keys += [f"{prefix}rsv:{key}" for key in reserves]
        values = [str(n) for n in slots.values()] + [repr(v) for v in reserves.values()]
        _on_time(await self._reconcile(keys, [self.replica, self._ttl_ms, self._deadline, *values]))

    # -- counters and latency ------------------------------------------------------

    async def next_index(self, key: str) -> int:
        return int(await self.client.incr(f"{self._prefix}n:{key}")) - 1

    async def observe_latency(self, key: str, seconds: float) -> None:
        await self._ewma([f"{self._prefix}lat:{key}"], [repr(seconds), repr(EWMA_ALPHA)])

    async def latencies(self, keys: Sequence[str]) -> dict[str, float | None]:
        if not keys:
            return {}
        values = await self.client.mget([f"{self._prefix}lat:{k}" for k in keys])
        return {k: None if v is None else float(v) for k, v in zip(keys, values, strict=True)}

    # -- circuit breakers ----------------------------------------------------------

    async def breaker(self, name: str) -> BreakerView:
        fields = ["state", "failures", "opened_at"]
        return _view(*await self.client.hmget(f"{self._prefix}br:{name}", fields))

    async def breaker_failure(self, name: str, threshold: int) -> BreakerView:
        return _view(*await self._breaker_failure([f"{self._prefix}br:{name}"], [threshold]))

    async def breaker_success(self, name: str) -> None:
        # One HSET: atomic on its own, no script needed.
        await self.client.hset(
            f"{self._prefix}br:{name}", mapping={"state": "closed", "failures": 0}
        )

    async def breaker_set(self, name: str, state: Literal["open", "half_open"]) -> BreakerView:
        keys = [f"{self._prefix}br:{name}", f"{self._prefix}brp:{name}"]
        return _view(*await self._breaker_set(keys, [state]))

    async def breaker_claim_probe(self, name: str, reset_s: float, lease_s: float) -> bool:
        keys = [f"{self._prefix}br:{name}", f"{self._prefix}brp:{name}"]
        return bool(await self._breaker_claim(keys, [repr(reset_s), round(lease_s * 1000)]))

    # -- spend ---------------------------------------------------------------------

    async def add_float(self, key: str, amount: float) -> float:
        return float(await self.client.incrbyfloat(f"{self._prefix}f:{key}", amount))

    async def get_float(self, key: str) -> float:
        value = await self.client.get(f"{self._prefix}f:{key}")
        return 0.0 if value is None else float(cast(str, value))

    async def hand_over(self, moves: Sequence[SpendHandOver]) -> None:
        """One EVALSHA (``HAND_OVER``) for every key of a batch; none for no move."""
        if not moves:
            return
        if self.clock.offset is None:
            await self._clock_known()
        prefix = self._prefix
        keys: list[str] = []
        args: list[str | float] = [self._deadline]
        for move in moves:
            keys += [f"{prefix}f:{move.spend_key}", f"{prefix}f:{move.handed_key}"]
            args += [repr(move.amount), repr(move.handed), repr(move.ledger_total)]
        _on_time(await self._hand_over(keys, args))

    async def aclose(self) -> None:
        # stop_task, not cancel-and-await: a cancellation that lands just as one of
        # redis-py's socket writes finishes is lost on Python 3.11 (core/tasks.py),
        # and the beat would go on while this waited for it for ever.
        await stop_task(self._heartbeat_task)
        self._heartbeat_task = None
        with contextlib.suppress(Exception):
            # A clean shutdown: this replica's in-flight counts stop counting now,
            # not a TTL later.
            await self.client.delete(self._hb_key)
        await self.client.aclose()

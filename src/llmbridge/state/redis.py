"""``RedisState``: the shared-state contract (state/base.py) in Redis, for every replica.

Every update happens server-side, in one Lua script or one atomic command, never as
a read-modify-write from Python: N replicas checking a limit each in their own
memory would allow N times it (LiteLLM's per-deployment limits did,
SCALE_CONTRACT.md). The scripts are registered once per client (``register_script``:
EVALSHA, loaded again by redis-py on ``NOSCRIPT`` after a Redis restart) and read
the time from Redis (``TIME``) so every replica agrees on the second.

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
- ``n:<key>`` (``INCR``), ``lat:<key>`` (EWMA), ``f:<key>`` (``INCRBYFLOAT``);
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
``add``, ``acquire``, ``release``, ``admit_many``, ``settle``, ``reconcile``)
carries a deadline in Redis's own time, checked first thing inside the script
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

from llmbridge.state.base import (
    DUST,
    EWMA_ALPHA,
    AdmitChecks,
    AdmitVerdict,
    BreakerState,
    BreakerView,
    Refusal,
    WindowVerdict,
)
from llmbridge.state.local import window_seconds

__all__ = ["LateCallError", "RedisClock", "RedisState", "new_replica_id", "redacted"]

log = logging.getLogger("llmbridge.state")

SOCKET_TIMEOUT_S = 0.25
"""A Redis that has not answered by then counts as down (state/failover.py)."""
POOL_WAIT_S = 1.0
"""How long a call waits for one of the pool's connections before Redis counts as down."""

CLOCK_MARGIN_S = 0.002
"""Taken off every deadline beyond the clock estimate's own uncertainty: the drift of
this host's clock against Redis's between two heartbeats, with room to spare."""

_LATE = "late"
"""What a script answers when it ran after its deadline (and so did nothing)."""

_NOW = """
local t = redis.call('TIME')
local sec = tonumber(t[1])
local now = sec + tonumber(t[2]) / 1000000
"""

# late(deadline): whether the script runs after its caller gave up (module docstring,
# "Deadlines"); '' is no deadline (reads). Needs _NOW's ``now``.
_LATE_FN = """
local function late(deadline)
  return deadline ~= '' and now > tonumber(deadline)
end
"""

# window(key, cost, limit, window seconds, mode: take | add | used) on a window hash.
# Returns {allowed 0/1, used, reset_s as a string (Lua numbers come back truncated)}.
# Needs _NOW's ``sec`` and ``now``.
_WINDOW_FN = """
local function window(key, cost, limit, w, mode)
  local oldest = sec - w + 1
  local flat = redis.call('HGETALL', key)
  local used, buckets, stale = 0, {}, {}
  for i = 1, #flat, 2 do
    local b, n = tonumber(flat[i]), tonumber(flat[i + 1])
    if b < oldest then stale[#stale + 1] = flat[i] else
      used = used + n
      buckets[#buckets + 1] = {b, n}
    end
  end
  for i = 1, #stale, 500 do
    redis.call('HDEL', key, unpack(stale, i, math.min(i + 499, #stale)))
  end
  if mode == 'used' then return {1, used, '0'} end
  if mode == 'add' or used + cost <= limit then
    redis.call('HINCRBY', key, sec, cost)
    redis.call('EXPIRE', key, w + 1)
    return {1, used + cost, '0'}
  end
  if cost > limit then return {0, used, tostring(w)} end
  table.sort(buckets, function(x, y) return x[1] < y[1] end)
  local need, dropped = used + cost - limit, 0
  for _, bn in ipairs(buckets) do
    dropped = dropped + bn[2]
    if dropped >= need then
      return {0, used, string.format('%.6f', math.max(0, bn[1] + w - now))}
    end
  end
  return {0, used, tostring(w)}
end
"""

# KEYS[1] window hash; ARGV: cost, limit, window seconds, mode (take | add | used),
# deadline ('' none).
_WINDOW = (
    _NOW
    + _LATE_FN
    + _WINDOW_FN
    + """
if late(ARGV[5]) then return 'late' end
return window(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4])
"""
)

# Sums the live replicas' counts of the in-flight hash KEYS[k], deleting dead ones.
_LIVE_TOTAL = """
local function live_total(key, own, hb_prefix)
  local flat = redis.call('HGETALL', key)
  local total = 0
  for i = 1, #flat, 2 do
    local replica = flat[i]
    if replica == own or redis.call('EXISTS', hb_prefix .. replica) == 1 then
      total = total + tonumber(flat[i + 1])
    else
      redis.call('HDEL', key, replica)
    end
  end
  return total
end
"""

# KEYS[1] in-flight hash, KEYS[2] own heartbeat; ARGV: replica, limit ('' none),
# heartbeat TTL ms, heartbeat key prefix, deadline.
_ACQUIRE = (
    _NOW
    + _LATE_FN
    + _LIVE_TOTAL
    + """
if late(ARGV[5]) then return 'late' end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
local total = live_total(KEYS[1], ARGV[1], ARGV[4])
if ARGV[2] ~= '' and total >= tonumber(ARGV[2]) then return 0 end
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
return 1
"""
)

# release(in-flight hash, replica): one slot back, never below zero.
_RELEASE_FN = """
local function release(key, replica)
  local n = tonumber(redis.call('HGET', key, replica) or '0')
  if n <= 1 then redis.call('HDEL', key, replica)
  else redis.call('HINCRBY', key, replica, -1) end
end
"""

# KEYS[1] in-flight hash; ARGV: replica, deadline.
_RELEASE = (
    _NOW
    + _LATE_FN
    + _RELEASE_FN
    + """
if late(ARGV[2]) then return 'late' end
release(KEYS[1], ARGV[1])
return 0
"""
)

# One request's checks (SharedState.admit_many), in order, stopping at the first refusal.
# KEYS: spend float, in-flight hash, own heartbeat, requests window, tokens window,
# reservations hash.
# ARGV: spent, budget ('' none), parallel limit ('' no slot, '-' no limit), replica,
# heartbeat TTL ms, heartbeat key prefix, rpm ('' none), tpm ('' none), tpm cost,
# window seconds, deadline, reserve ('' no reservations key, else the amount to hold).
# Returns 'late', or {refusal ('' none), spent as a string, slot held 0/1, requests
# allowed (-1 unchecked), used, reset_s, tokens allowed (-1), used, reset_s, reserved
# as a string}.
_ADMIT = (
    _NOW
    + _LATE_FN
    + _WINDOW_FN
    + _LIVE_TOTAL
    + _RELEASE_FN
    + """
if late(ARGV[11]) then return 'late' end
local spent = tonumber(ARGV[1])
local out = {'', ARGV[1], 0, -1, 0, '0', -1, 0, '0', '0'}
if ARGV[2] ~= '' then
  spent = spent + tonumber(redis.call('GET', KEYS[1]) or '0')
  out[2] = string.format('%.17g', spent)
  local held = 0
  if ARGV[12] ~= '' then held = live_total(KEYS[6], ARGV[4], ARGV[6]) end
  if spent + held >= tonumber(ARGV[2]) then out[1] = 'budget'; return out end
end
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[5])
  local total = live_total(KEYS[2], ARGV[4], ARGV[6])
  if ARGV[3] ~= '-' and total >= tonumber(ARGV[3]) then out[1] = 'parallel'; return out end
  redis.call('HINCRBY', KEYS[2], ARGV[4], 1)
  out[3] = 1
end
local w = tonumber(ARGV[10])
local checks = {{7, KEYS[4], 1, 4, 'rpm'}, {8, KEYS[5], tonumber(ARGV[9]), 7, 'tpm'}}
for _, c in ipairs(checks) do
  if ARGV[c[1]] ~= '' then
    local r = window(c[2], c[3], tonumber(ARGV[c[1]]), w, 'take')
    out[c[4]], out[c[4] + 1], out[c[4] + 2] = r[1], r[2], r[3]
    if r[1] == 0 then
      if out[3] == 1 then release(KEYS[2], ARGV[4]); out[3] = 0 end
      out[1] = c[5]
      return out
    end
  end
end
if ARGV[12] ~= '' and tonumber(ARGV[12]) > 0 then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[5])
  redis.call('HINCRBYFLOAT', KEYS[6], ARGV[4], ARGV[12])
  out[10] = ARGV[12]
end
return out
"""
)

# A finished request (SharedState.settle). KEYS: in-flight hash, tokens window,
# reservations hash, spend float. ARGV: replica, release 1/0, tokens, window seconds,
# reserve to give back, spend to add, deadline.
_SETTLE = (
    _NOW
    + _LATE_FN
    + _WINDOW_FN
    + _RELEASE_FN
    + f"""
if late(ARGV[7]) then return 'late' end
if ARGV[2] == '1' then release(KEYS[1], ARGV[1]) end
local tokens = tonumber(ARGV[3])
if tokens > 0 then window(KEYS[2], tokens, 0, tonumber(ARGV[4]), 'add') end
if tonumber(ARGV[5]) > 0 then
  local left = tonumber(redis.call('HINCRBYFLOAT', KEYS[3], ARGV[1], '-' .. ARGV[5]))
  if left <= {DUST!r} then redis.call('HDEL', KEYS[3], ARGV[1]) end
end
if tonumber(ARGV[6]) > 0 then redis.call('INCRBYFLOAT', KEYS[4], ARGV[6]) end
return 0
"""
)

# This replica's fields set to what it holds (FailoverState's reconciliation): KEYS:
# own heartbeat, then in-flight and reservation hashes; ARGV: replica, heartbeat TTL
# ms, deadline, then each hash's value (at or below DUST: the field is deleted).
_RECONCILE = (
    _NOW
    + _LATE_FN
    + f"""
if late(ARGV[3]) then return 'late' end
redis.call('SET', KEYS[1], '1', 'PX', ARGV[2])
for i = 2, #KEYS do
  local v = ARGV[i + 2]
  if tonumber(v) <= {DUST!r} then redis.call('HDEL', KEYS[i], ARGV[1])
  else redis.call('HSET', KEYS[i], ARGV[1], v) end
end
return 0
"""
)

# KEYS[1] reservations hash; ARGV: replica, heartbeat key prefix. The live total as a
# string (a Lua number would come back truncated to an integer).
_RESERVED = (
    _LIVE_TOTAL
    + """
return string.format('%.17g', live_total(KEYS[1], ARGV[1], ARGV[2]))
"""
)

# KEYS: in-flight hashes; ARGV: replica, heartbeat key prefix.
_IN_FLIGHT = (
    _LIVE_TOTAL
    + """
local out = {}
for i, key in ipairs(KEYS) do out[i] = live_total(key, ARGV[1], ARGV[2]) end
return out
"""
)

# KEYS[1] latency key; ARGV: sample, alpha.
_EWMA = """
local v = tonumber(ARGV[1])
local old = redis.call('GET', KEYS[1])
if old then v = tonumber(ARGV[2]) * v + (1 - tonumber(ARGV[2])) * tonumber(old) end
redis.call('SET', KEYS[1], string.format('%.17g', v))
return 0
"""

_VIEW = """
local function view(key)
  local v = redis.call('HMGET', key, 'state', 'failures', 'opened_at')
  return {v[1] or 'closed', tonumber(v[2] or '0'), v[3] or '0'}
end
"""

# KEYS[1] breaker hash; ARGV[1] threshold.
_BREAKER_FAILURE = (
    _NOW
    + _VIEW
    + """
local state = redis.call('HGET', KEYS[1], 'state') or 'closed'
local failures = redis.call('HINCRBY', KEYS[1], 'failures', 1)
if state == 'half_open' or failures >= tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'state', 'open', 'opened_at', string.format('%.6f', now))
end
return view(KEYS[1])
"""
)

# KEYS[1] breaker hash, KEYS[2] probe lease; ARGV[1] open | half_open.
_BREAKER_SET = (
    _NOW
    + _VIEW
    + """
if ARGV[1] == 'open' then
  redis.call('HSET', KEYS[1], 'state', 'open', 'opened_at', string.format('%.6f', now))
else
  redis.call('HSET', KEYS[1], 'state', ARGV[1])
end
redis.call('DEL', KEYS[2])
return view(KEYS[1])
"""
)

# KEYS[1] breaker hash, KEYS[2] probe lease; ARGV: reset_s, lease ms.
_BREAKER_CLAIM = (
    _NOW
    + """
local v = redis.call('HMGET', KEYS[1], 'state', 'opened_at')
if v[1] ~= 'open' or now - tonumber(v[2] or '0') < tonumber(ARGV[1]) then return 0 end
if redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2]) then return 1 end
return 0
"""
)


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
    if reply == _LATE:
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
            timeout=POOL_WAIT_S,
            decode_responses=True,
            socket_timeout=socket_timeout_s,
            socket_connect_timeout=socket_timeout_s,
            retry=Retry(NoBackoff(), 1),
        )
        self.client = Redis.from_pool(pool)  # owns it: closed with the client
        register = self.client.register_script
        self._window = register(_WINDOW)
        self._acquire = register(_ACQUIRE)
        self._release = register(_RELEASE)
        self._admit = register(_ADMIT)
        self._settle = register(_SETTLE)
        self._reconcile = register(_RECONCILE)
        self._reserved = register(_RESERVED)
        self._in_flight = register(_IN_FLIGHT)
        self._ewma = register(_EWMA)
        self._breaker_failure = register(_BREAKER_FAILURE)
        self._breaker_set = register(_BREAKER_SET)
        self._breaker_claim = register(_BREAKER_CLAIM)

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
        """One EVALSHA for every check (``_ADMIT``), not one round trip each."""
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
        """One EVALSHA (``_SETTLE``); none when there is nothing to do."""
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

    async def aclose(self) -> None:
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat_task
            self._heartbeat_task = None
        with contextlib.suppress(Exception):
            # A clean shutdown: this replica's in-flight counts stop counting now,
            # not a TTL later.
            await self.client.delete(self._hb_key)
        await self.client.aclose()

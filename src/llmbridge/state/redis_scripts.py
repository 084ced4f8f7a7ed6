"""The Lua scripts behind ``RedisState`` (state/redis.py), one per atomic update.

Each script reads the time from Redis (``TIME``), so every replica agrees on the
second, and every script that changes a count on a caller's behalf first checks the
caller's deadline (``late``) and does nothing past it: state/redis.py's docstring says
why. The pieces shared by several scripts (``_NOW``, ``_LATE_FN``, ``_WINDOW_FN``,
``_RELEASE_FN``, ``_LIVE_TOTAL``, ``_VIEW``) are prepended to the scripts that call them;
Redis caches each whole script by its SHA (EVALSHA), so the repetition costs nothing
per call. The comment above each script names its KEYS and ARGV.
"""

from __future__ import annotations

from llmbridge.state.base import DUST

__all__ = [
    "ACQUIRE",
    "ADMIT",
    "BREAKER_CLAIM",
    "BREAKER_FAILURE",
    "BREAKER_SET",
    "EWMA",
    "HAND_OVER",
    "IN_FLIGHT",
    "LATE",
    "RECONCILE",
    "RELEASE",
    "RESERVED",
    "SETTLE",
    "WINDOW",
]

LATE = "late"
"""What a script answers when it ran after its deadline (and so did nothing)."""

_NOW = """
local t = redis.call('TIME')
local sec = tonumber(t[1])
local now = sec + tonumber(t[2]) / 1000000
"""

# late(deadline): whether the script runs after its caller gave up (state/redis.py,
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
WINDOW = (
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
ACQUIRE = (
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
RELEASE = (
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
# reservations hash, handed float (the spend counted as max(spent, handed) + spend).
# ARGV: spent, budget ('' none), parallel limit ('' no slot, '-' no limit), replica,
# heartbeat TTL ms, heartbeat key prefix, rpm ('' none), tpm ('' none), tpm cost,
# window seconds, deadline, reserve ('' no reservations key, else the amount to hold).
# Returns 'late', or {refusal ('' none), spent as a string, slot held 0/1, requests
# allowed (-1 unchecked), used, reset_s, tokens allowed (-1), used, reset_s, reserved
# as a string}.
ADMIT = (
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
  local handed = redis.call('GET', KEYS[7])
  if handed and tonumber(handed) > spent then spent = tonumber(handed) end
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
SETTLE = (
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

# Spend the ledger wrote (SharedState.hand_over), for every key of a batch at once.
# KEYS: pairs of spend float, handed float; ARGV: deadline, then per pair the amount
# that leaves the first, the amount that joins the second, and the ledger's total, to
# which the second is raised if below it.
HAND_OVER = (
    _NOW
    + _LATE_FN
    + """
if late(ARGV[1]) then return 'late' end
for i = 1, #KEYS, 2 do
  local at = (i - 1) / 2 * 3 + 2
  redis.call('INCRBYFLOAT', KEYS[i], '-' .. ARGV[at])
  local handed = tonumber(redis.call('INCRBYFLOAT', KEYS[i + 1], ARGV[at + 1]))
  if tonumber(ARGV[at + 2]) > handed then redis.call('SET', KEYS[i + 1], ARGV[at + 2]) end
end
return 0
"""
)

# This replica's fields set to what it holds (FailoverState's reconciliation): KEYS:
# own heartbeat, then in-flight and reservation hashes; ARGV: replica, heartbeat TTL
# ms, deadline, then each hash's value (at or below DUST: the field is deleted).
RECONCILE = (
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
RESERVED = (
    _LIVE_TOTAL
    + """
return string.format('%.17g', live_total(KEYS[1], ARGV[1], ARGV[2]))
"""
)

# KEYS: in-flight hashes; ARGV: replica, heartbeat key prefix.
IN_FLIGHT = (
    _LIVE_TOTAL
    + """
local out = {}
for i, key in ipairs(KEYS) do out[i] = live_total(key, ARGV[1], ARGV[2]) end
return out
"""
)

# KEYS[1] latency key; ARGV: sample, alpha.
EWMA = """
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
BREAKER_FAILURE = (
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
BREAKER_SET = (
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
BREAKER_CLAIM = (
    _NOW
    + """
local v = redis.call('HMGET', KEYS[1], 'state', 'opened_at')
if v[1] ~= 'open' or now - tonumber(v[2] or '0') < tonumber(ARGV[1]) then return 0 end
if redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2]) then return 1 end
return 0
"""
)

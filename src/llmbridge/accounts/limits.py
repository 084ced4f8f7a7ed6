"""A key's limits, checked before a request reaches a backend: ``await admit(...)``.

Every count lives in the shared state (``state.SharedState``: this process's memory,
or Redis shared by every worker and replica) and is checked and taken in one atomic
step there, never read here and written back: N replicas allow a key its limit once,
not N times (LiteLLM's per-deployment limits were checked in local memory; upstream bugs:
github.com/BerriAI/litellm/issues/27736, /40291). In order:

1. **models**: the public model name must match one of the key's globs, else 403
   (``PermissionDeniedError`` naming the model).
2. **budget**: what the key has spent (``spent_usd`` as the database had it, or the
   ``handed:<key id>`` counter of what the ledger was handed when that is more: a
   record cached from before the ledger's last write, state/base.py; plus the
   ``spend:<key id>`` counter for what the ledger has not written yet) plus what the
   requests in flight have reserved (``rsv:<key id>``) must be below ``budget_usd``,
   else 403 "budget exhausted". A request let in reserves its worst-case cost
   (``reserve_usd``: its prompt's estimate and its ``max_tokens`` at the model's
   prices, gateway/exchange/admission.py); ``finish`` gives the reservation back and adds the
   actual cost to the spend counter in the same step. So 50 concurrent requests on a
   nearly spent budget cannot all pass: the overspend is bounded by one request.
3. **max_parallel**: one in-flight slot (``par:<key id>``), released by ``finish``.
4. **rpm**: one request in the 60-second sliding window ``rpm:<key id>``.
5. **tpm**: the prompt's estimated tokens taken from ``tpm:<key id>`` (60 s);
   ``finish`` adds what the reply used beyond that estimate. A prompt larger than the
   whole limit takes the whole limit, so it passes once the window is empty instead of
   never.

A tool call through the MCP gateway (mcp/) is admitted by ``admit_tool_call``: one
request in the key's ``rpm`` window and one of its ``max_parallel`` slots, the same
counters its model requests take (a key's requests per minute are its requests,
whatever they ask for). It costs no tokens and no money: neither ``tpm`` nor the budget
is checked (the tools the key may call are ``mcp_tools``, mcp/permissions.py).

Over a limit is ``KeyLimitError`` (429) with ``retry_after`` (when the request would
fit again) and the rate-limit figures, which ``limit_headers`` turns into the caller's
dialect's headers: OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``
(reset as a duration, ``"12s"``), Anthropic's
``anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`` (reset as an RFC 3339
time), and ``Retry-After`` (RFC 9110 10.2.3, whole seconds). A served reply carries the
same figures. A request refused for its tokens has still used its request: the windows
are separate, and refunding across them could not be atomic.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field

from llmbridge.accounts.keys import KeyRecord
from llmbridge.core.errors import PermissionDeniedError, RateLimitError
from llmbridge.state.base import AdmitChecks, SharedState, WindowVerdict
from llmbridge.web.render import Dialect

__all__ = [
    "OPEN",
    "WINDOW_S",
    "Admission",
    "KeyLimitError",
    "Quota",
    "admit",
    "admit_tool_call",
    "limit_headers",
]

WINDOW_S = 60.0
"""The rpm and tpm windows: one minute."""

PARALLEL_RETRY_S = 1.0
"""Retry-After for a key at its ``max_parallel``: nobody knows when a slot frees."""


@dataclass(frozen=True, slots=True)
class Quota:
    """One window's figures for the headers."""

    limit: int
    remaining: int
    reset_s: float
    """Seconds until the refused cost would fit (0 while there is room)."""

    @classmethod
    def of(cls, verdict: WindowVerdict) -> Quota:
        return cls(verdict.limit, max(0, verdict.limit - verdict.used), verdict.reset_s)


class KeyLimitError(RateLimitError):
    """A key over one of its limits (429)."""

    def __init__(
        self,
        message: str,
        *,
        retry_after: float,
        requests: Quota | None = None,
        tokens: Quota | None = None,
    ) -> None:
        super().__init__(message, code="rate_limit_exceeded", retry_after=retry_after)
        self.retry_after: float = retry_after
        self.requests = requests
        self.tokens = tokens


def _duration(seconds: float) -> str:
    """OpenAI's reset duration (``"12s"``, ``"1m0s"``): whole seconds, rounded up."""
    return _whole_duration(max(0, math.ceil(seconds)))


@functools.lru_cache(maxsize=512)
def _whole_duration(whole: int) -> str:
    """Formatted once per value (two per reply otherwise: requests and tokens)."""
    minutes, rest = divmod(whole, 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"


def _instant(seconds: float) -> str:
    """Anthropic's reset time: RFC 3339, UTC, whole seconds."""
    return _rfc3339(int(time.time()) + max(0, math.ceil(seconds)))


@functools.lru_cache(maxsize=256)
def _rfc3339(at: int) -> str:
    """Unix second ``at`` as RFC 3339 in UTC: formatted once per second, not per reply."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def limit_headers(
    dialect: Dialect,
    requests: Quota | None,
    tokens: Quota | None,
    retry_after: float | None = None,
) -> dict[str, str]:
    """The rate-limit headers of a reply in ``dialect`` (module docstring)."""
    headers: dict[str, str] = {}
    for kind, quota in (("requests", requests), ("tokens", tokens)):
        if quota is None:
            continue
        if dialect is Dialect.ANTHROPIC:
            prefix = f"anthropic-ratelimit-{kind}"
            headers[f"{prefix}-limit"] = str(quota.limit)
            headers[f"{prefix}-remaining"] = str(quota.remaining)
            headers[f"{prefix}-reset"] = _instant(quota.reset_s)
        else:
            headers[f"x-ratelimit-limit-{kind}"] = str(quota.limit)
            headers[f"x-ratelimit-remaining-{kind}"] = str(quota.remaining)
            headers[f"x-ratelimit-reset-{kind}"] = _duration(quota.reset_s)
    if retry_after is not None:
        headers["retry-after"] = str(max(1, math.ceil(retry_after)))
    return headers


@dataclass(slots=True)
class Admission:
    """A request let in: its figures for the headers, and ``finish`` to give back its
    parallel slot and count its tokens (call it once the reply has ended or failed)."""

    state: SharedState | None
    record: KeyRecord | None
    requests: Quota | None = None
    tokens: Quota | None = None
    reserved_tokens: int = 0
    holds_slot: bool = False
    used_tokens: int = 0
    """The reply's tokens (prompt and output) once known: what ``finish`` counts."""
    reserved_usd: float = 0.0
    """The budget reservation held (the request's worst-case cost), given back by
    ``finish``."""
    finished: bool = field(default=False)

    @property
    def counts_tokens(self) -> bool:
        return self.record is not None and self.record.tpm is not None

    def headers(self, dialect: Dialect) -> dict[str, str]:
        return limit_headers(dialect, self.requests, self.tokens)

    async def finish(self, used_tokens: int | None = None, cost_usd: float = 0.0) -> bool:
        """Release the slot; add the tokens used (``used_tokens``, else what was noted
        in ``self.used_tokens``) beyond the prompt's estimate; give the budget
        reservation back and add ``cost_usd`` to the key's spend counter in the same
        step. Returns whether the cost was added (the ledger then leaves the counter
        alone: accounts/ledger.py ``spend_counted``). Twice is a no-op."""
        if used_tokens is None:
            used_tokens = self.used_tokens
        if self.finished or self.state is None or self.record is None:
            self.finished = True
            return False
        self.finished = True
        extra = 0
        if self.record.tpm is not None and used_tokens:
            extra = used_tokens - self.reserved_tokens
        reserved = self.reserved_usd
        if not self.holds_slot and extra <= 0 and reserved <= 0:
            return False
        keys = _keys_of(self.record.id)
        # One call (one Redis round trip) for all of it.
        await self.state.settle(
            parallel_key=keys[1] if self.holds_slot else None,
            tpm_key=keys[3] if extra > 0 else None,
            tokens=max(extra, 0),
            window_s=WINDOW_S,
            reserve_key=keys[4] if reserved > 0 else None,
            reserve=reserved,
            spend_key=keys[0] if reserved > 0 else None,
            spend=cost_usd if reserved > 0 else 0.0,
        )
        return reserved > 0


OPEN = Admission(None, None, finished=True)
"""The admission of a request with no database key: nothing to count."""


async def admit(
    state: SharedState,
    record: KeyRecord | None,
    model: str,
    prompt_tokens: int = 0,
    *,
    reserve_usd: float = 0.0,
) -> Admission:
    """Check and take ``record``'s limits for one request to ``model`` (module
    docstring); ``PermissionDeniedError`` or ``KeyLimitError`` when over one. The
    models are checked here; the rest in ONE call to the shared state
    (``admit_many``: one Redis round trip, not one per limit)."""
    if record is None:
        return OPEN
    if not record.allows(model):
        raise PermissionDeniedError(
            f"the key {record.name!r} may not use the model {model!r}", param="model"
        )
    rpm, tpm, budget = record.rpm, record.tpm, record.budget_usd
    if budget is None and record.max_parallel is None and rpm is None and tpm is None:
        return Admission(state, record)
    keys = _keys_of(record.id)
    cost = 0 if tpm is None else max(0, min(prompt_tokens, tpm))
    reserve = reserve_usd if budget is not None and reserve_usd > 0 else 0.0
    verdict = await state.admit_many(
        AdmitChecks(
            spend_key=keys[0],
            spent=record.spent_usd,
            handed_key=keys[5],
            budget=budget,
            parallel_key=None if record.max_parallel is None else keys[1],
            parallel=record.max_parallel,
            rpm_key=None if rpm is None else keys[2],
            rpm=rpm or 0,
            tpm_key=None if tpm is None else keys[3],
            tpm=tpm or 0,
            tpm_cost=cost,
            window_s=WINDOW_S,
            reserve_key=None if budget is None else keys[4],  # others' reservations count
            reserve=reserve,
        )
    )
    requests = None if verdict.requests is None else Quota.of(verdict.requests)
    tokens = None if verdict.tokens is None else Quota.of(verdict.tokens)
    refused = verdict.refused
    if refused == "budget":
        assert budget is not None
        raise PermissionDeniedError(
            f"budget exhausted: spent ${verdict.spent:.4f} of ${budget:.4f}",
            code="budget_exhausted",
        )
    if refused == "parallel":
        raise KeyLimitError(
            f"too many requests in flight for this key (max_parallel {record.max_parallel})",
            retry_after=PARALLEL_RETRY_S,
        )
    if refused == "rpm":
        assert verdict.requests is not None
        raise KeyLimitError(
            f"rate limit reached: {rpm} requests per minute for this key",
            retry_after=verdict.requests.reset_s,
            requests=requests,
        )
    if refused == "tpm":
        assert verdict.tokens is not None
        raise KeyLimitError(
            f"rate limit reached: {tpm} tokens per minute for this key",
            retry_after=verdict.tokens.reset_s,
            requests=requests,
            tokens=tokens,
        )
    return Admission(
        state,
        record,
        requests,
        tokens,
        reserved_tokens=cost if tpm is not None else 0,
        holds_slot=verdict.holds_slot,
        reserved_usd=verdict.reserved,
    )


async def admit_tool_call(state: SharedState, record: KeyRecord | None) -> Admission:
    """Check and take ``record``'s requests per minute and parallel slot for one MCP
    tool call (module docstring), in ONE call to the shared state; ``KeyLimitError``
    when over one. ``finish`` gives the slot back."""
    if record is None:
        return OPEN
    rpm = record.rpm
    if record.max_parallel is None and rpm is None:
        return Admission(state, record)
    keys = _keys_of(record.id)
    verdict = await state.admit_many(
        AdmitChecks(
            parallel_key=None if record.max_parallel is None else keys[1],
            parallel=record.max_parallel,
            rpm_key=None if rpm is None else keys[2],
            rpm=rpm or 0,
            window_s=WINDOW_S,
        )
    )
    requests = None if verdict.requests is None else Quota.of(verdict.requests)
    if verdict.refused == "parallel":
        raise KeyLimitError(
            f"too many requests in flight for this key (max_parallel {record.max_parallel})",
            retry_after=PARALLEL_RETRY_S,
        )
    if verdict.refused == "rpm":
        assert verdict.requests is not None
        raise KeyLimitError(
            f"rate limit reached: {rpm} requests per minute for this key",
            retry_after=verdict.requests.reset_s,
            requests=requests,
        )
    return Admission(state, record, requests, holds_slot=verdict.holds_slot)


_KEYS: dict[str, tuple[str, str, str, str, str, str]] = {}
"""Each key id's state keys (spend, parallel, rpm, tpm, budget reservations, spend
handed to the ledger), built once per process."""


def _keys_of(key_id: str) -> tuple[str, str, str, str, str, str]:
    keys = _KEYS.get(key_id)
    if keys is None:
        if len(_KEYS) >= 10_000:
            _KEYS.clear()  # bounded: ids of deleted keys do not pile up
        keys = _KEYS[key_id] = (
            f"spend:{key_id}",
            f"par:{key_id}",
            f"rpm:{key_id}",
            f"tpm:{key_id}",
            f"rsv:{key_id}",
            f"handed:{key_id}",
        )
    return keys

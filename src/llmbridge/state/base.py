"""The shared-state contract: counters every replica and worker must agree on.

Owns the ``SharedState`` protocol and its two value types. Implementations:
``state.local.LocalState`` (one process) and ``state.redis.RedisState`` (every
replica, atomically in Redis), with ``state.failover`` serving the Redis one
from a local fallback while Redis is unreachable.

Every limit and count here is checked and updated atomically in the store
itself, never read-modify-written by the caller: LiteLLM's per-deployment
limits were checked in each replica's memory, so N replicas allowed N times the
limit (the defect this layer exists to avoid).

Semantics shared by every implementation:

- Windows (``take``/``add``/``used``) are sliding windows of 1-second buckets,
  exact to the second: a call at time ``t`` counts every bucket from
  ``floor(t) - ceil(window_s) + 1`` to ``floor(t)``.
- In-flight counts (``acquire``/``release``) never go below zero; in Redis they
  belong to the replica that took them and vanish with it (heartbeat TTL).
- Budget reservations (``AdmitChecks.reserve``) are held like in-flight slots: per
  replica, counted while its heartbeat lives, given back by ``settle`` in the same
  step that adds the request's actual cost to its spend counter.
- Spend is handed to the ledger exactly (``hand_over``). A key's spend is in one of
  two places: the spend counter (``spend_key``: costs the ledger has not written) or
  the ledger's ``spent`` (the database), which every process reads into a key record
  it caches a while. A second float, ``handed_key``, counts what was handed to the
  ledger, as this state knows it; the ledger's write moves each committed cost from
  the spend counter to it in ONE step, inside its transaction, before the commit. The
  budget check counts ``max(spent, handed) + spend counter``: the move leaves it
  unchanged, so a record read before the commit, or after it, sees each cost once.
  ``handed`` only ever runs ahead of the database (a move whose commit then failed is
  made again when the write is retried, and the sum is still the same), and ``spent``
  counts where ``handed`` is unknown (a Redis restarted empty).
- A call the caller gave up on (a timeout) never takes effect later: in Redis every
  script that changes a count carries a deadline checked against Redis's own clock
  (state/redis.py), and state/failover.py reconciles what the replica holds.
- Latency is an EWMA with alpha 0.3 (the first sample is taken as is).
- A breaker opens when ``failures`` reaches ``threshold`` (or at once from
  ``half_open``); ``breaker_success`` closes it and clears the failures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from llmbridge.core.breaker import BreakerState

__all__ = [
    "DUST",
    "EWMA_ALPHA",
    "AdmitChecks",
    "AdmitVerdict",
    "BreakerState",
    "BreakerView",
    "Refusal",
    "SharedState",
    "SpendHandOver",
    "WindowVerdict",
]

EWMA_ALPHA = 0.3
"""Weight of the newest latency sample in ``observe_latency``."""

DUST = 1e-9
"""A reservation at or below this is none: the float sums of amounts taken and given
back leave dust (0.03 + 0.03 - 0.03 - 0.03 is not always 0.0)."""


@dataclass(frozen=True, slots=True)
class WindowVerdict:
    """The answer of ``SharedState.take``."""

    allowed: bool
    """Whether ``cost`` fitted in the window (and was added)."""
    used: int
    """Total in the window after this call (``cost`` included when allowed)."""
    limit: int
    """The limit the call was checked against."""
    reset_s: float
    """Seconds until ``cost`` would fit (0.0 when allowed)."""


@dataclass(slots=True)
class AdmitChecks:
    """One request's checks for ``SharedState.admit_many``; a ``None`` key skips its
    check."""

    spend_key: str | None = None
    """The float counter of spend not yet in ``spent`` (the ledger's)."""
    spent: float = 0.0
    """The ledger's figure, as the caller's (maybe cached) record has it."""
    handed_key: str | None = None
    """The float counter of spend handed to the ledger (``hand_over``): the budget
    counts ``max(spent, handed)``, whatever the age of ``spent``."""
    budget: float | None = None
    parallel_key: str | None = None
    parallel: int | None = None
    """The in-flight limit; ``None``: a slot is counted but never refused."""
    rpm_key: str | None = None
    rpm: int = 0
    tpm_key: str | None = None
    tpm: int = 0
    tpm_cost: int = 0
    """Tokens taken from the ``tpm`` window now (the prompt's estimate)."""
    window_s: float = 60.0
    reserve_key: str | None = None
    """The key's live budget reservations (a replica -> amount hash in Redis): their
    total counts against ``budget`` with ``spent`` and the spend counter."""
    reserve: float = 0.0
    """Held under ``reserve_key`` for this request once every check passed (its
    worst-case cost); ``settle`` gives it back."""


Refusal = Literal["", "budget", "parallel", "rpm", "tpm"]
"""Which check of ``SharedState.admit_many`` refused a request (``""``: none did)."""


@dataclass(frozen=True, slots=True)
class AdmitVerdict:
    """The answer of ``SharedState.admit_many``: every check of one request at once."""

    refused: Refusal
    """The first check that refused (``""`` when the request was let in)."""
    spent: float
    """``max(spent, handed)`` plus the spend counter, when a budget was checked (else
    0.0)."""
    holds_slot: bool
    """Whether an in-flight slot is held (give it back with ``settle``)."""
    requests: WindowVerdict | None
    """The requests window's verdict, when it was checked."""
    tokens: WindowVerdict | None
    """The tokens window's verdict, when it was checked."""
    reserved: float = 0.0
    """What is now held under ``reserve_key`` for this request (0.0 when none): give
    it back with ``settle(reserve_key=..., reserve=...)``."""


@dataclass(frozen=True, slots=True)
class SpendHandOver:
    """One key's spend written by the ledger, for ``SharedState.hand_over``."""

    spend_key: str
    """The counter of spend the ledger has not written: ``amount`` leaves it."""
    handed_key: str
    """The counter of spend handed to the ledger: ``handed`` joins it."""
    amount: float
    """The cost of the requests the write accounts for: each request's cost was added
    to ``spend_key`` once, and leaves it once."""
    handed: float
    """What the write adds to ``spent``: ``amount``, less the requests whose row was
    already there (another replica wrote the same request id)."""
    ledger_total: float
    """``spent`` as that write leaves it: ``handed`` is raised to it at least (a write
    this state never saw, such as one without shared state, is counted too)."""


@dataclass(frozen=True, slots=True)
class BreakerView:
    """A circuit breaker's shared state."""

    state: BreakerState
    """``closed`` (calls pass), ``open`` (calls refused) or ``half_open`` (one probe)."""
    failures: int
    """Consecutive failures since the last success."""
    opened_at: float
    """Unix seconds when it last opened; 0.0 when never opened."""


class SharedState(Protocol):
    """Counters shared by every worker and replica of a gateway."""

    kind: str
    """``"local"`` or ``"redis"``."""

    @property
    def degraded(self) -> bool:
        """True while a Redis-backed state serves from its local fallback."""
        ...

    async def take(self, key: str, cost: int, limit: int, window_s: float) -> WindowVerdict:
        """Add ``cost`` to the sliding window atomically if ``used + cost <= limit``."""
        ...

    async def add(self, key: str, amount: int, window_s: float) -> int:
        """Add ``amount`` to the window unconditionally; returns the new total."""
        ...

    async def used(self, key: str, window_s: float) -> int:
        """The window's total now."""
        ...

    async def acquire(self, key: str, limit: int | None) -> bool:
        """In-flight +1 unless already at ``limit`` (``None``: no limit)."""
        ...

    async def release(self, key: str) -> None:
        """In-flight -1 (never below zero)."""
        ...

    async def in_flight(self, keys: Sequence[str]) -> dict[str, int]:
        """Current in-flight counts of ``keys`` (0 for unknown keys)."""
        ...

    async def next_index(self, key: str) -> int:
        """A monotonically increasing counter (round robin), starting at 0."""
        ...

    async def observe_latency(self, key: str, seconds: float) -> None:
        """Fold ``seconds`` into the key's EWMA (alpha 0.3)."""
        ...

    async def latencies(self, keys: Sequence[str]) -> dict[str, float | None]:
        """The EWMA of each key, ``None`` when never observed."""
        ...

    async def breaker(self, name: str) -> BreakerView:
        """The breaker's state (closed with no failures when unknown)."""
        ...

    async def breaker_failure(self, name: str, threshold: int) -> BreakerView:
        """Count a failure; opens at ``threshold`` or at once from ``half_open``."""
        ...

    async def breaker_success(self, name: str) -> None:
        """Close the breaker and clear its failures."""
        ...

    async def breaker_set(self, name: str, state: Literal["open", "half_open"]) -> BreakerView:
        """Move the breaker to ``state`` (after a probe); ``open`` restamps ``opened_at``."""
        ...

    async def breaker_claim_probe(self, name: str, reset_s: float, lease_s: float) -> bool:
        """Whether this caller may probe the open breaker now (open for ``reset_s``,
        nobody else probing): one probe at a time across replicas, a lease of
        ``lease_s`` that ``breaker_set`` ends."""
        ...

    async def add_float(self, key: str, amount: float) -> float:
        """Add to a float counter (spend, budget) with no expiry; returns the new total."""
        ...

    async def get_float(self, key: str) -> float:
        """A float counter's value (0.0 when unknown)."""
        ...

    async def reserved(self, reserve_key: str) -> float:
        """The live budget reservations of ``reserve_key``, every replica's (0.0 when
        none)."""
        ...

    async def admit_many(self, checks: AdmitChecks) -> AdmitVerdict:
        """One request's ``checks`` in ONE atomic step, in order, stopping at the first
        refusal: the budget (``max(spent, get_float(handed_key))`` +
        ``get_float(spend_key)`` + the live reservations of ``reserve_key`` must be
        below ``budget``), an in-flight slot
        of ``parallel_key`` (``acquire``), one request in ``rpm_key``'s window
        (``take``), ``tpm_cost`` in ``tpm_key``'s window. A check whose key is
        ``None`` (or budget ``None``) is skipped. A refusal after the slot was taken
        gives the slot back; a request refused for its tokens has still used its
        request (as separate ``take`` calls would). When every check passed and
        ``reserve`` > 0, ``reserve`` is added to this replica's share of
        ``reserve_key`` (``AdmitVerdict.reserved``)."""
        ...

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
        """A finished request in ONE atomic step: ``release(parallel_key)`` (when not
        ``None``), ``add(tpm_key, tokens, window_s)`` (when ``tokens`` > 0),
        ``reserve`` given back from this replica's share of ``reserve_key`` and
        ``add_float(spend_key, spend)`` (when ``spend`` > 0), so there is no moment
        where neither the reservation nor the cost counts. Nothing to do: no call."""
        ...

    async def hand_over(self, moves: Sequence[SpendHandOver]) -> None:
        """The ledger wrote ``moves`` (inside its transaction, before the commit): for
        each, in ONE atomic step for all of them, ``amount`` leaves ``spend_key``,
        ``handed`` joins ``handed_key``, which is then raised to ``ledger_total`` if
        below it (module docstring). Nothing to do: no call."""
        ...

    async def aclose(self) -> None:
        """Release connections and background tasks."""
        ...

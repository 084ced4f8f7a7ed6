"""The statistics behind ``llmbridge profile compare``: intervals and tests that hold at
the small iteration counts agent evaluations run with.

- ``wilson_interval``: the Wilson score interval of one pass rate (Wilson 1927). Unlike
  the textbook normal ("Wald") interval it never collapses to a point at 0/n or n/n and
  stays inside [0, 1], which matters when a scenario runs three times.
- ``rate_difference_interval``: the interval of a difference of two pass rates by
  Newcombe's hybrid score method (Newcombe 1998, "Interval estimation for the difference
  between independent proportions", Statistics in Medicine 17:873-890, method 10),
  built from the two Wilson intervals. Chosen over a bootstrap because it is closed
  form (no resampling noise, the same numbers every time) and keeps its coverage at
  0/n and n/n, where a bootstrap of 0/3 against 0/3 would give the falsely certain
  interval [0, 0].
- ``bootstrap_mean_difference``: the percentile bootstrap interval of a difference of
  means (Efron & Tibshirani 1993, ch. 13), each run resampled on its own, with a seeded
  ``random.Random`` and a fixed number of resamples so a report is reproducible. It
  needs no assumption about the shape of durations or costs (skewed, with timeouts),
  but it is known to be too narrow at very small n (n = 1 gives a zero-width
  interval), which is why a verdict also asks the permutation test.
- ``permutation_p_value``: the two-sided permutation test of a difference of means
  (Fisher; Good 2005): exact, over every rearrangement of the pooled values, when
  there are few enough of them; otherwise Monte Carlo with a seeded RNG and the
  (count + 1) / (resamples + 1) estimate of Phipson & Smyth (2010), which is never 0.
  It is exact whatever the distribution, and honest about tiny samples: with 3
  iterations against 3 the smallest possible two-sided p is 2/20 = 0.1.

The stratified variants (``strata``) serve the overall comparison across scenarios:
each scenario is resampled or rearranged within itself and the statistic is the mean of
the per-scenario differences, so a long scenario does not swamp a short one and no
value ever moves between scenarios.

Plain Python (``random``, ``math``, ``itertools``): the sizes here (tens of iterations,
10 000 resamples) do not need numpy, and the profiler stays installable without it.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist, fmean

__all__ = [
    "CONFIDENCE",
    "EXACT_LIMIT",
    "RESAMPLES",
    "SEED",
    "Interval",
    "Stratum",
    "bootstrap_mean_difference",
    "mean_difference",
    "permutation_p_value",
    "rate_difference_interval",
    "rearrangements",
    "wilson_interval",
]

CONFIDENCE = 0.95
RESAMPLES = 10_000
"""Bootstrap resamples and Monte Carlo rearrangements."""
SEED = 20_260_401
"""The RNG seed every comparison uses, so the same runs always give the same report."""
EXACT_LIMIT = 20_000
"""Up to this many rearrangements the permutation test enumerates them all."""

_TOLERANCE = 1e-9
"""Relative slack when comparing a rearrangement's statistic with the observed one:
means computed in different orders differ in the last bits, and an exact tie must
count as "at least as extreme" (otherwise all-equal samples would give p < 1)."""


@dataclass(frozen=True, slots=True)
class Interval:
    """A closed interval [low, high]."""

    low: float
    high: float

    def covers(self, value: float) -> bool:
        return self.low <= value <= self.high

    def to_list(self) -> list[float]:
        return [self.low, self.high]


Stratum = tuple[Sequence[float], Sequence[float]]
"""One scenario's values: (run A's, run B's)."""


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson_interval(successes: int, n: int, confidence: float = CONFIDENCE) -> Interval:
    """The Wilson score interval of ``successes / n``; [0, 1] when ``n`` is 0 (nothing
    is known)."""
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be within 0..n, got {successes}/{n}")
    if n == 0:
        return Interval(0.0, 1.0)
    z = _z(confidence)
    p = successes / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    scale = 1 + z * z / n
    # At 0/n and n/n the formula's bound is exactly 0 or 1; say so rather than leave
    # the rounding residue (2e-17) in the report.
    low = 0.0 if successes == 0 else max(0.0, (centre - spread) / scale)
    high = 1.0 if successes == n else min(1.0, (centre + spread) / scale)
    return Interval(low, high)


def rate_difference_interval(
    successes_a: int, n_a: int, successes_b: int, n_b: int, confidence: float = CONFIDENCE
) -> Interval:
    """The interval of ``rate_b - rate_a`` by Newcombe's hybrid score method (method 10).

    With l, u each rate's Wilson bounds and d = p_b - p_a:
    low = d - sqrt((p_b - l_b)^2 + (u_a - p_a)^2), high = d + sqrt((u_b - p_b)^2 +
    (p_a - l_a)^2). A run with no iterations contributes its whole [0, 1] range.
    """
    a = wilson_interval(successes_a, n_a, confidence)
    b = wilson_interval(successes_b, n_b, confidence)
    # An empty run has no rate; its Wilson interval [0, 1] around a nominal 0.5 makes
    # the difference's interval as wide as the data allow.
    p_a = successes_a / n_a if n_a else 0.5
    p_b = successes_b / n_b if n_b else 0.5
    d = p_b - p_a
    low = d - math.hypot(p_b - b.low, a.high - p_a)
    high = d + math.hypot(b.high - p_b, p_a - a.low)
    return Interval(max(-1.0, low), min(1.0, high))


def mean_difference(a: Sequence[float], b: Sequence[float]) -> float:
    """``mean(b) - mean(a)``."""
    if not a or not b:
        raise ValueError("both samples need at least one value")
    return fmean(b) - fmean(a)


def _stratified_difference(strata: Sequence[Stratum]) -> float:
    return fmean(mean_difference(a, b) for a, b in strata)


def _percentile(ordered: Sequence[float], q: float) -> float:
    rank = (len(ordered) - 1) * q
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def bootstrap_mean_difference(
    a: Sequence[float] | None = None,
    b: Sequence[float] | None = None,
    *,
    strata: Sequence[Stratum] | None = None,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    confidence: float = CONFIDENCE,
) -> Interval:
    """The percentile bootstrap interval of ``mean(b) - mean(a)``.

    Each sample is resampled with replacement on its own (the runs are independent),
    ``resamples`` times with ``random.Random(seed)``. With ``strata`` each stratum's
    samples are resampled within it and the statistic is the mean of the per-stratum
    differences.
    """
    groups = _strata(a, b, strata)
    rng = random.Random(seed)
    differences = []
    # sum()/len rather than fmean: this loop is the comparison's whole cost.
    sized = [(xs, len(xs), ys, len(ys)) for xs, ys in groups]
    for _ in range(resamples):
        total = 0.0
        for xs, nx, ys, ny in sized:
            total += sum(rng.choices(ys, k=ny)) / ny - sum(rng.choices(xs, k=nx)) / nx
        differences.append(total / len(groups))
    differences.sort()
    tail = (1 - confidence) / 2
    return Interval(_percentile(differences, tail), _percentile(differences, 1 - tail))


def _strata(
    a: Sequence[float] | None, b: Sequence[float] | None, strata: Sequence[Stratum] | None
) -> list[Stratum]:
    if strata is None:
        if a is None or b is None:
            raise ValueError("give two samples, or strata")
        strata = [(a, b)]
    elif a is not None or b is not None:
        raise ValueError("give two samples or strata, not both")
    if not strata or any(not xs or not ys for xs, ys in strata):
        raise ValueError("every sample needs at least one value")
    return [(list(xs), list(ys)) for xs, ys in strata]


def permutation_p_value(
    a: Sequence[float] | None = None,
    b: Sequence[float] | None = None,
    *,
    strata: Sequence[Stratum] | None = None,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    exact_limit: int = EXACT_LIMIT,
) -> float:
    """The two-sided permutation-test p-value of ``mean(b) - mean(a)``.

    Under the null hypothesis the labels A and B are exchangeable, so every way of
    splitting the pooled values into groups of the original sizes is equally likely;
    p is the share of splits whose |difference| is at least the observed one. With
    ``strata``, values are rearranged only within their stratum and the statistic is
    the mean of the per-stratum differences. Exact when the number of splits is at
    most ``exact_limit``; otherwise ``resamples`` random splits, p = (k + 1) / (resamples
    + 1).
    """
    groups = _strata(a, b, strata)
    observed = abs(_stratified_difference(groups))
    threshold = observed - _TOLERANCE * max(1.0, observed)
    pooled = [list(xs) + list(ys) for xs, ys in groups]
    sizes = [len(xs) for xs, _ in groups]
    count = rearrangements(strata=groups)
    if count <= exact_limit:
        extreme = 0
        choices = [
            itertools.combinations(range(len(p)), k) for p, k in zip(pooled, sizes, strict=True)
        ]
        for split in itertools.product(*choices):
            if abs(_split_difference(pooled, split)) >= threshold:
                extreme += 1
        return extreme / count
    rng = random.Random(seed)
    extreme = 0
    for _ in range(resamples):
        total = 0.0
        for values, k in zip(pooled, sizes, strict=True):
            shuffled = rng.sample(values, len(values))
            total += sum(shuffled[k:]) / (len(values) - k) - sum(shuffled[:k]) / k
        if abs(total / len(pooled)) >= threshold:
            extreme += 1
    return (extreme + 1) / (resamples + 1)


def rearrangements(
    a: Sequence[float] | None = None,
    b: Sequence[float] | None = None,
    *,
    strata: Sequence[Stratum] | None = None,
) -> int:
    """How many ways the values can be split into groups of the original sizes (within
    each stratum): the permutation test is exact when this is at most its limit."""
    return math.prod(math.comb(len(xs) + len(ys), len(xs)) for xs, ys in _strata(a, b, strata))


def _split_difference(pooled: Sequence[Sequence[float]], split: Sequence[tuple[int, ...]]) -> float:
    """The statistic when ``split[i]`` are the indices of stratum i that play A."""
    total = 0.0
    for values, chosen in zip(pooled, split, strict=True):
        in_a = set(chosen)
        xs = [v for i, v in enumerate(values) if i in in_a]
        ys = [v for i, v in enumerate(values) if i not in in_a]
        total += fmean(ys) - fmean(xs)
    return total / len(pooled)

"""The comparison statistics against published values and exhaustive enumeration.

Wilson intervals: Newcombe (1998a), "Two-sided confidence intervals for the single
proportion", Statistics in Medicine 17:857-872, Table I, method 3 (score without
continuity correction). Differences: Newcombe (1998b), "Interval estimation for the
difference between independent proportions", Statistics in Medicine 17:873-890,
Table II, method 10 (hybrid score). Permutation p-values: by hand, and against a brute
force over every ordering of the pooled values (a different enumeration from the
module's combinations).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from statistics import fmean

import pytest

from llmbridge.profiler.records.stats import (
    Interval,
    bootstrap_mean_difference,
    mean_difference,
    permutation_p_value,
    rate_difference_interval,
    wilson_interval,
)


def _close(interval: Interval, low: float, high: float, places: int = 4) -> None:
    assert (round(interval.low, places), round(interval.high, places)) == (low, high)


@pytest.mark.parametrize(
    ("successes", "n", "low", "high"),
    [
        (0, 10, 0.0, 0.2775),
        (5, 10, 0.2366, 0.7634),
        (10, 10, 0.7225, 1.0),
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
    ],
)
def test_wilson_interval_matches_newcombe_table_1(
    successes: int, n: int, low: float, high: float
) -> None:
    _close(wilson_interval(successes, n), low, high)


def test_wilson_interval_edges() -> None:
    assert wilson_interval(0, 0) == Interval(0.0, 1.0)  # nothing known
    assert wilson_interval(0, 10).low == 0.0 and wilson_interval(10, 10).high == 1.0
    one = wilson_interval(1, 1)
    assert 0.0 < one.low < 0.5 and one.high == 1.0  # one success says little
    with pytest.raises(ValueError, match=r"within 0\.\.n"):
        wilson_interval(3, 2)


@pytest.mark.parametrize(
    ("a", "m", "b", "n", "low", "high"),
    [
        (56, 70, 48, 80, 0.0524, 0.3339),
        (9, 10, 3, 10, 0.1705, 0.8090),
        (5, 56, 0, 29, -0.0381, 0.1926),
        (0, 10, 0, 20, -0.1611, 0.2775),
        (0, 10, 0, 10, -0.2775, 0.2775),
        (10, 10, 0, 20, 0.6791, 1.0),
        (10, 10, 0, 10, 0.6075, 1.0),
    ],
)
def test_rate_difference_matches_newcombe_table_2(
    a: int, m: int, b: int, n: int, low: float, high: float
) -> None:
    # Newcombe's difference is a/m - b/n; ours is run B minus run A, so a/m plays B.
    _close(rate_difference_interval(b, n, a, m), low, high)


def test_rate_difference_is_antisymmetric_and_handles_empty_runs() -> None:
    forward = rate_difference_interval(3, 10, 9, 10)
    backward = rate_difference_interval(9, 10, 3, 10)
    assert forward.low == pytest.approx(-backward.high)
    assert forward.high == pytest.approx(-backward.low)
    empty = rate_difference_interval(0, 0, 3, 3)
    assert empty.covers(0.0) and empty.high == 1.0
    both_empty = rate_difference_interval(0, 0, 0, 0)
    assert both_empty.covers(0.0) and both_empty.low < -0.5 and both_empty.high > 0.5


def _brute_force_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Every ordering of the pooled values, the first len(a) playing A."""
    pooled = [*a, *b]
    observed = abs(fmean(b) - fmean(a))
    orders = list(itertools.permutations(pooled))
    k = len(a)
    extreme = sum(abs(fmean(o[k:]) - fmean(o[:k])) >= observed - 1e-9 for o in orders)
    return extreme / len(orders)


def test_permutation_p_value_by_hand() -> None:
    # {1,2,3} vs {4,5,6}: 20 splits, only the observed one and its mirror reach |3|.
    assert permutation_p_value([1, 2, 3], [4, 5, 6]) == pytest.approx(2 / 20)
    # {1,2} vs {3,5}: the six splits give B-A = 2.5, 1.5, -0.5, 0.5, -1.5, -2.5.
    assert permutation_p_value([1, 2], [3, 5]) == pytest.approx(2 / 6)
    assert permutation_p_value([3, 5], [1, 2]) == pytest.approx(2 / 6)  # two-sided


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ([1.0, 4.0, 2.0], [6.0, 3.0, 8.0]),
        ([10.0, 10.5], [9.0, 12.0, 30.0]),
        ([0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0]),
        ([5.0], [1.0, 2.0, 3.0, 4.0]),
    ],
)
def test_permutation_p_value_equals_brute_force(a: list[float], b: list[float]) -> None:
    assert permutation_p_value(a, b) == pytest.approx(_brute_force_p(a, b))


def test_permutation_p_value_edges() -> None:
    assert permutation_p_value([1], [2]) == 1.0  # n=1 vs 1: both splits are as extreme
    assert permutation_p_value([7, 7, 7], [7, 7, 7]) == 1.0  # all equal
    assert permutation_p_value([0.1] * 3, [0.1 + 1e-17] * 3) == 1.0  # rounding is a tie
    # Zero variance within each run, different values: still only 2 of 20 splits.
    assert permutation_p_value([1, 1, 1], [2, 2, 2]) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="at least one value"):
        permutation_p_value([], [1.0])


def test_permutation_monte_carlo_is_seeded_and_close_to_exact() -> None:
    a, b = [1.0, 2.0, 4.0, 7.0, 3.0], [3.0, 5.0, 6.0, 8.0, 9.0]
    exact = permutation_p_value(a, b)  # 252 splits, enumerated
    sampled = permutation_p_value(a, b, exact_limit=10)
    assert sampled == permutation_p_value(a, b, exact_limit=10)  # same seed, same p
    assert sampled != exact and abs(sampled - exact) < 0.02
    assert permutation_p_value(a, b, exact_limit=10, seed=1) != sampled
    # 10 vs 10 has 184 756 splits, so it is sampled; p is never 0.
    far = permutation_p_value([float(i) for i in range(10)], [100.0 + i for i in range(10)])
    assert 0 < far <= 3 / 10_001


def _brute_force_stratified_p(strata: Sequence[tuple[list[float], list[float]]]) -> float:
    def stat(parts: Sequence[tuple[Sequence[float], Sequence[float]]]) -> float:
        return fmean(fmean(ys) - fmean(xs) for xs, ys in parts)

    observed = abs(stat(strata))
    per_stratum = [
        [(o[: len(xs)], o[len(xs) :]) for o in itertools.permutations([*xs, *ys])]
        for xs, ys in strata
    ]
    combos = list(itertools.product(*per_stratum))
    return sum(abs(stat(c)) >= observed - 1e-9 for c in combos) / len(combos)


def test_stratified_permutation_rearranges_within_strata_only() -> None:
    strata = [([1.0, 2.0], [3.0, 4.0]), ([100.0, 300.0], [200.0, 200.0, 250.0])]
    assert permutation_p_value(strata=strata) == pytest.approx(_brute_force_stratified_p(strata))
    # One stratum is the plain test.
    assert permutation_p_value(strata=[([1, 2], [3, 5])]) == permutation_p_value([1, 2], [3, 5])
    with pytest.raises(ValueError, match="not both"):
        permutation_p_value([1.0], [2.0], strata=strata)


def test_bootstrap_interval_by_enumeration() -> None:
    # A = [0], B = [0, 1]: resampled mean(B) is 0, 0.5 or 1 with chance 1/4, 1/2, 1/4,
    # so the 2.5th and 97.5th percentiles of B - A are 0 and 1.
    assert bootstrap_mean_difference([0.0], [0.0, 1.0]) == Interval(0.0, 1.0)


def test_bootstrap_interval_is_seeded_and_brackets_the_difference() -> None:
    a, b = [120.3, 90.1, 151.7, 100.2, 133.9], [60.4, 80.8, 70.2, 95.5, 77.7]
    first = bootstrap_mean_difference(a, b)
    assert first == bootstrap_mean_difference(a, b)  # reproducible
    assert bootstrap_mean_difference(a, b, seed=7) != first
    assert first.low <= mean_difference(a, b) <= first.high
    assert first.high < 0  # B is faster in every resample that matters
    narrower = bootstrap_mean_difference(a, b, confidence=0.5)
    assert first.low < narrower.low and narrower.high < first.high


def test_bootstrap_edges() -> None:
    assert bootstrap_mean_difference([3.0], [5.0]) == Interval(2.0, 2.0)  # n=1: no spread
    assert bootstrap_mean_difference([4.0] * 5, [4.0] * 5) == Interval(0.0, 0.0)
    assert bootstrap_mean_difference([0.0] * 3, [1.0] * 3) == Interval(1.0, 1.0)
    with pytest.raises(ValueError, match="at least one value"):
        bootstrap_mean_difference([1.0], [])
    with pytest.raises(ValueError, match="two samples"):
        bootstrap_mean_difference([1.0])


def test_stratified_bootstrap_averages_per_stratum_differences() -> None:
    strata = [([1.0, 1.0], [2.0, 2.0]), ([10.0, 10.0], [40.0, 40.0])]
    # Zero spread in each stratum: the statistic is always (1 + 30) / 2.
    assert bootstrap_mean_difference(strata=strata) == Interval(15.5, 15.5)
    assert math.isclose(fmean([1.0, 30.0]), 15.5)

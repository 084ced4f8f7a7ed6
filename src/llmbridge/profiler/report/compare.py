"""``llmbridge profile compare``: two or more runs, and whether their differences are real.

A run is a directory written by ``profile run``: ``summary.json`` (the run finished)
and ``traces.jsonl`` (one record per iteration, where the per-iteration values come
from: duration, tokens and cost summed over the iteration's prompts exactly as
``runner.summarise`` sums them, failed iterations included, and whether it passed).

The first run is the baseline A; every other run B is compared with it. Groups are
matched by (scenario, model, mode, provider), except for a dimension in which the two
runs differ as a whole (each run has one model, one mode or one provider, and they are
not the same): that dimension is what the comparison is about, so groups are matched
without it and ``differs_in`` names it. A run of several providers (``profile run
--provider opencode --provider codex ...``) is compared provider by provider. Every
difference is B minus A:

- pass rate: Newcombe's hybrid score interval (``stats.rate_difference_interval``);
- duration (ms), tokens and cost (USD): the percentile bootstrap interval of the
  difference of means and a two-sided permutation-test p-value.

A difference is called only when the 95% interval excludes 0 and, for means, p < 0.05
too (the bootstrap is too narrow at a handful of iterations; the permutation test is
exact); otherwise the verdict says "not distinguishable at this many iterations".

Overall, pooled across the matched scenarios: pass rates pool every iteration (so a
scenario weighs by its iterations); a mean's difference is the average of the
per-scenario differences (each scenario weighs the same, so a long scenario does not
swamp a short one), with a stratified bootstrap and a stratified permutation test
(values are resampled and rearranged only within their scenario).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any, Literal

from llmbridge.profiler.records.stats import (
    CONFIDENCE,
    EXACT_LIMIT,
    RESAMPLES,
    SEED,
    Interval,
    Stratum,
    bootstrap_mean_difference,
    permutation_p_value,
    rate_difference_interval,
    rearrangements,
)

__all__ = [
    "ALPHA",
    "CompareError",
    "Comparison",
    "GroupComparison",
    "MeanDifference",
    "RateDifference",
    "Run",
    "compare_runs",
    "load_run",
    "report_dict",
]

ALPHA = 0.05
"""The permutation test's threshold for calling a difference in means."""

Metric = Literal["duration_ms", "tokens", "cost_usd"]
Status = Literal["improved", "regressed", "mixed", "unchanged"]
"""A matched scenario's verdict, B against A (``GroupComparison.status``)."""
METRICS: tuple[Metric, ...] = ("duration_ms", "tokens", "cost_usd")
UNITS: dict[Metric, str] = {"duration_ms": "ms", "tokens": "tokens", "cost_usd": "USD"}
_LOWER_IS: dict[Metric, tuple[str, str]] = {
    # (what the run with the lower mean is, ... than the other)
    "duration_ms": ("faster", "faster than"),
    "tokens": ("uses fewer tokens", "uses fewer tokens than"),
    "cost_usd": ("cheaper", "cheaper than"),
}
_DIMENSIONS = ("model", "mode", "provider")

GroupKey = tuple[str, str, str, str]
"""(scenario, model, mode, provider), as ``summary.json`` groups a run (the provider
is "" for runs written before records named it)."""


class CompareError(ValueError):
    """A run directory cannot be read, or the runs have nothing to compare."""


@dataclass(frozen=True, slots=True)
class Iteration:
    passed: bool
    duration_ms: float
    tokens: float
    cost_usd: float
    provider: str | None


@dataclass(frozen=True, slots=True)
class Run:
    path: Path
    label: str
    groups: dict[GroupKey, list[Iteration]]

    def values(self, dimension: str) -> set[str]:
        index = {"model": 1, "mode": 2, "provider": 3}[dimension]
        return {key[index] for key in self.groups if key[index]}

    def info(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "path": str(self.path),
            "iterations": sum(len(its) for its in self.groups.values()),
            "models": sorted(self.values("model")),
            "modes": sorted(self.values("mode")),
            "providers": sorted(self.values("provider")),
        }


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CompareError(f"cannot read {path}: {exc}") from exc


def _iteration(record: dict[str, Any]) -> Iteration:
    prompts = record.get("prompts") or []
    provider = record.get("provider")
    return Iteration(
        passed=bool(record.get("passed")),
        duration_ms=float(sum(p["timing"]["total_ms"] for p in prompts)),
        tokens=float(sum(p["tokens"]["total"] for p in prompts)),
        cost_usd=float(sum(p["cost"]["total_usd"] for p in prompts)),
        provider=provider if isinstance(provider, str) and provider else None,
    )


def load_run(path: Path, label: str | None = None) -> Run:
    """Read a ``profile run`` output directory."""
    if not path.is_dir():
        raise CompareError(f"{path} is not a directory")
    if not (path / "summary.json").is_file():
        raise CompareError(f"{path} has no summary.json (not a finished `profile run` output)")
    if not (path / "traces.jsonl").is_file():
        raise CompareError(f"{path} has no traces.jsonl (compare needs each iteration)")
    summary = _read_json(path / "summary.json")
    if not isinstance(summary, list):
        raise CompareError(f"{path / 'summary.json'} is not a list of groups")
    groups: dict[GroupKey, list[Iteration]] = {
        (str(s["scenario"]), str(s["model"]), str(s["mode"]), str(s.get("provider") or "")): []
        for s in summary
    }
    lines = (path / "traces.jsonl").read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            iteration = _iteration(record)
            key = (
                str(record["scenario"]),
                str(record["model"]),
                str(record["mode"]),
                iteration.provider or "",
            )
            if iteration.provider and key not in groups:
                # A summary written before it named providers groups without them.
                groups.pop((*key[:3], ""), None)
            groups.setdefault(key, []).append(iteration)
        except (ValueError, KeyError, TypeError) as exc:
            raise CompareError(f"{path / 'traces.jsonl'} line {number}: {exc!r}") from exc
    groups = {key: its for key, its in groups.items() if its}
    return Run(path=path, label=label or path.name, groups=groups)


# -- the comparison values ------------------------------------------------------------


def _not_distinguishable(n_a: int, n_b: int) -> str:
    return f"not distinguishable at this many iterations (n={n_a} vs {n_b})"


def _p_text(p: float) -> str:
    return "p<0.001" if p < 0.001 else f"p={p:.2g}"


@dataclass(frozen=True, slots=True)
class RateDifference:
    """Pass rates and ``rate_b - rate_a`` with its 95% interval (Newcombe)."""

    passed_a: int
    n_a: int
    passed_b: int
    n_b: int
    difference: float
    ci95: Interval
    distinguishable: bool
    verdict: str

    @classmethod
    def of(cls, passed_a: int, n_a: int, passed_b: int, n_b: int, a: str, b: str) -> RateDifference:
        rate_a = passed_a / n_a if n_a else 0.0
        rate_b = passed_b / n_b if n_b else 0.0
        ci = rate_difference_interval(passed_a, n_a, passed_b, n_b, CONFIDENCE)
        distinguishable = not ci.covers(0.0)
        if distinguishable:
            better, worse = (b, a) if rate_b > rate_a else (a, b)
            verdict = (
                f"{better} passes more often than {worse} ({abs(rate_b - rate_a):.0%} more; "
                f"95% CI of B-A {ci.low:+.0%} to {ci.high:+.0%})"
            )
        elif passed_a * n_b == passed_b * n_a and passed_a in (0, n_a) and n_a and n_b:
            verdict = f"same pass rate ({rate_a:.0%}); " + _not_distinguishable(n_a, n_b)
        else:
            verdict = _not_distinguishable(n_a, n_b)
        return cls(passed_a, n_a, passed_b, n_b, rate_b - rate_a, ci, distinguishable, verdict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": {
                "passed": self.passed_a,
                "iterations": self.n_a,
                "rate": _rate(self.passed_a, self.n_a),
            },
            "b": {
                "passed": self.passed_b,
                "iterations": self.n_b,
                "rate": _rate(self.passed_b, self.n_b),
            },
            "difference": self.difference,
            "ci95": self.ci95.to_list(),
            "method": "newcombe-hybrid-wilson",
            "distinguishable": self.distinguishable,
            "verdict": self.verdict,
        }


def _rate(passed: int, n: int) -> float | None:
    return passed / n if n else None


@dataclass(frozen=True, slots=True)
class MeanDifference:
    """Means of one metric and ``mean_b - mean_a`` with its bootstrap 95% interval and
    permutation p-value."""

    metric: Metric
    mean_a: float
    mean_b: float
    n_a: int
    n_b: int
    difference: float
    ci95: Interval
    p_value: float
    exact: bool
    """Whether p came from every rearrangement (else Monte Carlo)."""
    distinguishable: bool
    verdict: str

    @classmethod
    def of(cls, metric: Metric, strata: Sequence[Stratum], a: str, b: str) -> MeanDifference:
        mean_a = fmean(fmean(xs) for xs, _ in strata)
        mean_b = fmean(fmean(ys) for _, ys in strata)
        n_a, n_b = sum(len(xs) for xs, _ in strata), sum(len(ys) for _, ys in strata)
        ci = bootstrap_mean_difference(strata=strata)
        p = permutation_p_value(strata=strata)
        exact = rearrangements(strata=strata) <= EXACT_LIMIT
        distinguishable = not ci.covers(0.0) and p < ALPHA
        # Every iteration of a scenario gave the same value in both runs (no cost
        # recorded, a scripted reply's tokens): nothing to test.
        constant = all(len({*xs, *ys}) == 1 for xs, ys in strata)
        if distinguishable:
            lower, higher = (b, a) if mean_b < mean_a else (a, b)
            verdict = f"{lower} {_LOWER_IS[metric][1]} {higher} ({_p_text(p)})"
        elif constant:
            verdict = f"equal in every iteration (n={n_a} vs {n_b})"
        else:
            verdict = _not_distinguishable(n_a, n_b)
        return cls(
            metric,
            mean_a,
            mean_b,
            n_a,
            n_b,
            mean_b - mean_a,
            ci,
            p,
            exact,
            distinguishable,
            verdict,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "unit": UNITS[self.metric],
            "a": {"mean": self.mean_a, "iterations": self.n_a},
            "b": {"mean": self.mean_b, "iterations": self.n_b},
            "difference": self.difference,
            "ci95": self.ci95.to_list(),
            "ci_method": "percentile-bootstrap",
            "p_value": self.p_value,
            "p_method": "permutation-exact" if self.exact else "permutation-monte-carlo",
            "distinguishable": self.distinguishable,
            "verdict": self.verdict,
        }


@dataclass(frozen=True, slots=True)
class GroupComparison:
    """One matched group (a scenario, or ``overall``), A against B."""

    scenario: str
    group_a: dict[str, str]
    """``{"model", "mode"}`` of A's group (``"*"`` overall)."""
    group_b: dict[str, str]
    pass_rate: RateDifference
    means: dict[Metric, MeanDifference]

    @property
    def status(self) -> Status:
        """B against A: ``improved`` or ``regressed`` when the pass rate's difference is
        real (it decides alone); else when the real differences of the means (duration,
        tokens, cost: lower is better) all go one way; ``mixed`` when they go both ways;
        ``unchanged`` when no difference is real."""
        if self.pass_rate.distinguishable:
            return "improved" if self.pass_rate.difference > 0 else "regressed"
        real = [m.difference for m in self.means.values() if m.distinguishable]
        better, worse = any(d < 0 for d in real), any(d > 0 for d in real)
        if better and worse:
            return "mixed"
        return "improved" if better else "regressed" if worse else "unchanged"

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "status": self.status,
            "a": self.group_a,
            "b": self.group_b,
            "pass_rate": self.pass_rate.to_dict(),
            **{metric: self.means[metric].to_dict() for metric in METRICS},
        }


@dataclass(frozen=True, slots=True)
class Comparison:
    """Run B against the baseline run A, per matched scenario and overall."""

    a: Run
    b: Run
    differs_in: dict[str, list[list[str]]]
    """Each dimension the runs differ in as a whole: ``{"model": [[A's], [B's]]}``."""
    matched_on: list[str]
    description: str
    scenarios: list[GroupComparison]
    overall: GroupComparison
    unmatched_a: list[GroupKey] = field(default_factory=list)
    unmatched_b: list[GroupKey] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.a.info(),
            "b": self.b.info(),
            "differs_in": self.differs_in,
            "matched_on": self.matched_on,
            "description": self.description,
            "scenarios": [s.to_dict() for s in self.scenarios],
            "overall": self.overall.to_dict(),
            "unmatched": {
                "a": [list(key) for key in self.unmatched_a],
                "b": [list(key) for key in self.unmatched_b],
            },
        }


# -- matching and comparing -----------------------------------------------------------


def _describe(a: Run, b: Run, differs: dict[str, list[list[str]]]) -> str:
    if not differs:
        return (
            "same scenarios, models and modes: the runs differ in something the run does "
            "not record (the agent's version, the gateway, the machine, the time)"
        )
    parts = [f"{dim} ({', '.join(va)} vs {', '.join(vb)})" for dim, (va, vb) in differs.items()]
    others = [
        d for d in _DIMENSIONS if d not in differs and a.values(d) and a.values(d) != b.values(d)
    ]
    only = "only " if not others else ""
    text = f"{a.label} and {b.label} differ {only}in " + " and ".join(parts)
    if others:
        text += f"; their {' and '.join(others)}s also differ, matched where equal"
    return text


def _compare_pair(a: Run, b: Run) -> Comparison:
    differs: dict[str, list[list[str]]] = {}
    for dim in _DIMENSIONS:
        va, vb = a.values(dim), b.values(dim)
        if len(va) == 1 and len(vb) == 1 and va != vb:
            differs[dim] = [sorted(va), sorted(vb)]
    # The provider is matched on only where the runs recorded one.
    keep = [
        dim
        for dim in _DIMENSIONS
        if dim not in differs and (dim != "provider" or a.values(dim) or b.values(dim))
    ]
    index = {"model": 1, "mode": 2, "provider": 3}

    def match_key(key: GroupKey) -> tuple[str, ...]:
        return (key[0], *(key[index[d]] for d in keep))

    by_key_b = {match_key(k): k for k in b.groups}
    pairs = [(k, by_key_b[match_key(k)]) for k in a.groups if match_key(k) in by_key_b]
    if not pairs:
        raise CompareError(
            f"{a.label} and {b.label} have no scenario in common "
            f"(matched on {', '.join(['scenario', *keep])})"
        )
    matched_a = {ka for ka, _ in pairs}
    matched_b = {kb for _, kb in pairs}
    groups = [_group(ka[0], a, ka, b, kb) for ka, kb in pairs]
    overall = _overall(a, b, pairs)
    return Comparison(
        a=a,
        b=b,
        differs_in=differs,
        matched_on=["scenario", *keep],
        description=_describe(a, b, differs),
        scenarios=groups,
        overall=overall,
        unmatched_a=[k for k in a.groups if k not in matched_a],
        unmatched_b=[k for k in b.groups if k not in matched_b],
    )


def _values(iterations: Sequence[Iteration], metric: Metric) -> list[float]:
    return [float(getattr(i, metric)) for i in iterations]


def _group(scenario: str, a: Run, ka: GroupKey, b: Run, kb: GroupKey) -> GroupComparison:
    its_a, its_b = a.groups[ka], b.groups[kb]
    rate = RateDifference.of(
        sum(i.passed for i in its_a),
        len(its_a),
        sum(i.passed for i in its_b),
        len(its_b),
        a.label,
        b.label,
    )
    means = {
        metric: MeanDifference.of(
            metric, [(_values(its_a, metric), _values(its_b, metric))], a.label, b.label
        )
        for metric in METRICS
    }
    return GroupComparison(
        scenario=scenario,
        group_a={"model": ka[1], "mode": ka[2], "provider": ka[3]},
        group_b={"model": kb[1], "mode": kb[2], "provider": kb[3]},
        pass_rate=rate,
        means=means,
    )


def _overall(a: Run, b: Run, pairs: Sequence[tuple[GroupKey, GroupKey]]) -> GroupComparison:
    its_a = [i for ka, _ in pairs for i in a.groups[ka]]
    its_b = [i for _, kb in pairs for i in b.groups[kb]]
    rate = RateDifference.of(
        sum(i.passed for i in its_a),
        len(its_a),
        sum(i.passed for i in its_b),
        len(its_b),
        a.label,
        b.label,
    )
    means = {
        metric: MeanDifference.of(
            metric,
            [(_values(a.groups[ka], metric), _values(b.groups[kb], metric)) for ka, kb in pairs],
            a.label,
            b.label,
        )
        for metric in METRICS
    }
    every = {"model": "*", "mode": "*", "provider": "*"}
    return GroupComparison("overall", dict(every), dict(every), rate, means)


def _labels(paths: Sequence[Path]) -> list[str]:
    names = [p.name or str(p) for p in paths]
    if len(set(names)) == len(names):
        return names
    return [str(p) for p in paths]


def compare_runs(paths: Sequence[Path]) -> list[Comparison]:
    """Each run after the first compared with the first."""
    if len(paths) < 2:
        raise CompareError("compare needs at least two run directories")
    runs = [load_run(path, label) for path, label in zip(paths, _labels(paths), strict=True)]
    return [_compare_pair(runs[0], run) for run in runs[1:]]


def report_dict(comparisons: Sequence[Comparison]) -> dict[str, Any]:
    """What ``comparison.json`` holds."""
    return {
        "baseline": comparisons[0].a.label if comparisons else None,
        "settings": {
            "confidence": CONFIDENCE,
            "alpha": ALPHA,
            "bootstrap_resamples": RESAMPLES,
            "permutation_exact_limit": EXACT_LIMIT,
            "permutation_resamples": RESAMPLES,
            "seed": SEED,
            "difference": "B - A",
        },
        "comparisons": [c.to_dict() for c in comparisons],
    }

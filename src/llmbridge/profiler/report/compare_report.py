"""``profile compare``'s reports: a terminal table that fits 80 columns, and Markdown.

Both render the numbers of ``compare.Comparison`` (what ``comparison.json`` holds),
formatted the same way: means and differences in their unit (ms and tokens whole above
10; USD to four decimals, or three significant figures below a cent), pass rates as
passed/iterations and differences in percentage points, each difference B - A
followed by its 95% interval in brackets.
The terminal table is one block per matched scenario (its name on a line of its own,
wrapped, never cut) over five narrow columns; the verdict wraps within its cell.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from llmbridge.profiler.records.stats import Interval
from llmbridge.profiler.report.compare import (
    METRICS,
    Comparison,
    GroupComparison,
    MeanDifference,
    Metric,
    RateDifference,
)

__all__ = ["comparison_markdown", "print_comparison"]

_NAMES: dict[Metric, str] = {"duration_ms": "ms", "tokens": "tokens", "cost_usd": "USD"}


def _number(value: float, metric: Metric, sign: bool = False) -> str:
    plus = "+" if sign else ""
    if metric == "cost_usd":
        # Three significant figures below a cent: a small model's iteration costs
        # micro-dollars, which six fixed decimals would show as 0.000000.
        if value == 0 or abs(value) >= 0.01:
            return f"{value:{plus}.4f}"
        return f"{value:{plus}.3g}"
    return f"{value:{plus},.1f}" if abs(value) < 10 else f"{value:{plus},.0f}"


def _interval(ci: Interval, metric: Metric | None) -> str:
    if metric is None:
        return f"[{ci.low * 100:+.0f}, {ci.high * 100:+.0f}]"
    return f"[{_number(ci.low, metric, True)}, {_number(ci.high, metric, True)}]"


def _p(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.2g}"


def _rate_cells(rate: RateDifference) -> tuple[str, str, str, str]:
    return (
        f"{rate.passed_a}/{rate.n_a}",
        f"{rate.passed_b}/{rate.n_b}",
        f"{rate.difference * 100:+.0f} pts",
        _interval(rate.ci95, None),
    )


def _mean_cells(mean: MeanDifference) -> tuple[str, str, str, str]:
    m = mean.metric
    return (
        _number(mean.mean_a, m),
        _number(mean.mean_b, m),
        _number(mean.difference, m, True),
        _interval(mean.ci95, m),
    )


def _group_title(group: GroupComparison) -> str:
    if group.scenario == "overall":
        return (
            "overall (pass rates pooled; means: average of the scenario differences): "
            + group.status
        )
    a, b = group.group_a, group.group_b

    def names(g: dict[str, str]) -> str:
        provider = f"{g['provider']}, " if g.get("provider") else ""
        return f"{provider}{g['model']}, {g['mode']}"

    if a == b:
        return f"{group.scenario}  ({names(a)}): {group.status}"
    return f"{group.scenario}  (A: {names(a)}; B: {names(b)}): {group.status}"


def _table(group: GroupComparison) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1))
    table.add_column("metric", no_wrap=True, min_width=6)
    table.add_column("A", justify="right", overflow="fold")
    table.add_column("B", justify="right", overflow="fold")
    table.add_column("B-A [95% CI]", justify="right", overflow="fold", max_width=22)
    table.add_column("p", justify="right", no_wrap=True)
    table.add_column("verdict", overflow="fold", ratio=1)
    a, b, diff, ci = _rate_cells(group.pass_rate)
    table.add_row("pass", a, b, f"{diff}\n{ci}", "", group.pass_rate.verdict)
    for metric in METRICS:
        mean = group.means[metric]
        a, b, diff, ci = _mean_cells(mean)
        table.add_row(_NAMES[metric], a, b, f"{diff}\n{ci}", _p(mean.p_value), mean.verdict)
    return table


def print_comparison(comparisons: Sequence[Comparison], console: Console) -> None:
    """Each comparison as a heading and one block per matched scenario, then overall."""
    for comparison in comparisons:
        a, b = comparison.a, comparison.b
        for name, run in (("A", a), ("B", b)):
            where = "" if str(run.path) == run.label else f" ({run.path})"
            console.print(Text(f"{name} = {run.label}{where}", style="bold"))
        console.print(Text(comparison.description))
        for key in comparison.unmatched_a + comparison.unmatched_b:
            console.print(Text(f"not in both runs: {' / '.join(key)}", style="dim"))
        for group in [*comparison.scenarios, comparison.overall]:
            console.print()
            console.print(Text(_group_title(group), style="bold cyan"))
            console.print(_table(group))
        console.print()
    console.print(
        Text(
            "B-A: run B minus run A, with its 95% interval; pass: percentage points "
            "(Newcombe), means: bootstrap interval and permutation p. See "
            "docs/PROFILER.md, Comparing runs.",
            style="dim",
        )
    )


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def comparison_markdown(comparisons: Sequence[Comparison]) -> str:
    """The same numbers as ``comparison.json``, one table per comparison."""
    lines = ["# llmbridge profile compare", ""]
    lines.append(
        "Differences are run B minus run A with their 95% intervals: pass rates in "
        "percentage points (Newcombe's hybrid score interval), means by a percentile "
        "bootstrap (10 000 resamples, seeded) with a two-sided permutation-test p-value."
    )
    for comparison in comparisons:
        a, b = comparison.a, comparison.b
        lines += ["", f"## {b.label} (B) against {a.label} (A)", ""]
        lines += [f"- A: `{a.path}`", f"- B: `{b.path}`", f"- {comparison.description}"]
        unmatched = comparison.unmatched_a + comparison.unmatched_b
        if unmatched:
            lines.append(f"- not in both runs: {', '.join(' / '.join(k) for k in unmatched)}")
        groups = [*comparison.scenarios, comparison.overall]
        lines += ["", "| scenario | B against A |", "|---|---|"]
        lines += [f"| {_cell(g.scenario)} | **{g.status}** |" for g in groups]
        lines += [
            "",
            "| scenario | metric | A | B | B - A | 95% CI | p | verdict |",
            "|---|---|---:|---:|---:|---|---:|---|",
        ]
        for group in groups:
            name = _cell(group.scenario)
            ra, rb, rd, rci = _rate_cells(group.pass_rate)
            lines.append(f"| {name} | pass | {ra} | {rb} | {rd} | {rci} pts |  | ")
            lines[-1] += f"{_cell(group.pass_rate.verdict)} |"
            for metric in METRICS:
                mean = group.means[metric]
                ma, mb, md, mci = _mean_cells(mean)
                lines.append(
                    f"| {name} | {_NAMES[metric]} | {ma} | {mb} | {md} | {mci} | "
                    f"{_p(mean.p_value)} | {_cell(mean.verdict)} |"
                )
    return "\n".join(lines) + "\n"

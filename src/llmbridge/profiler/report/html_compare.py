"""The comparison view of ``comparison.html``: what ``llmbridge profile compare``
found, drawn from its ``comparison.json`` dict (``compare.report_dict``).

For each run compared with the baseline: which dimension the runs differ in, a table
of every matched scenario and the overall row (pass rates, and each difference B - A
with its 95% interval, p-value and verdict), and one interval chart per metric: the
difference as a dot, its 95% interval as whiskers, on an axis symmetric around a
dashed zero. A row whose interval covers zero is grey and says "not distinguishable";
that is a finding, not a missing value. Every string from the runs is escaped.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from llmbridge.profiler.report.svg_charts import (
    Interval,
    format_value,
    interval_chart,
    legend,
)

__all__ = ["comparison_body"]

_METRICS = (
    ("duration_ms", "duration", "ms"),
    ("tokens", "tokens", "tokens"),
    ("cost_usd", "cost", "USD"),
)

_LEGEND = (
    ("dot", "#1f6f3f", "difference B − A, distinguishable from 0"),
    ("dot", "#888", "difference B − A, not distinguishable from 0"),
    ("whisker", "#555", "95% interval of the difference"),
    ("tick", "#111", "0: no difference (dashed)"),
)


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _ci(metric: dict[str, Any], factor: float = 1.0) -> tuple[float | None, float | None]:
    ci = metric.get("ci95")
    if isinstance(ci, list | tuple) and len(ci) == 2:
        low, high = _float(ci[0]), _float(ci[1])
        if low is not None and high is not None:
            return low * factor, high * factor
    return None, None


def _group_label(group: dict[str, Any]) -> str:
    """The scenario, with the provider, model and mode where both runs share them (where they
    differ, the comparison's description already says in what)."""
    scenario = str(group.get("scenario", "?"))
    a, b = group.get("a") or {}, group.get("b") or {}
    if scenario == "overall":
        return "overall (all matched scenarios)"
    label = scenario
    if a.get("provider") and a.get("provider") == b.get("provider"):
        label = f"{a.get('provider')} · {label}"
    if a.get("model") == b.get("model"):
        label += f" · {a.get('model')}"
    if a.get("mode") == b.get("mode") and a.get("mode") not in (None, "default"):
        label += f" · {a.get('mode')}"
    return label


def _groups(comparison: dict[str, Any]) -> list[dict[str, Any]]:
    groups = [g for g in comparison.get("scenarios") or [] if isinstance(g, dict)]
    overall = comparison.get("overall")
    return groups + ([overall] if isinstance(overall, dict) else [])


def _verdict(metric: dict[str, Any]) -> str:
    css = "verdict-yes" if metric.get("distinguishable") else "verdict-none"
    return f'<span class="{css}">{_esc(metric.get("verdict", ""))}</span>'


def _rate_text(side: dict[str, Any]) -> str:
    rate = _float(side.get("rate"))
    shown = "-" if rate is None else f"{rate:.0%}"
    return f"{side.get('passed', 0)}/{side.get('iterations', 0)} ({shown})"


def _signed(value: float, unit: str) -> str:
    return ("+" if value > 0 else "") + format_value(value, unit)


def _difference_text(metric: dict[str, Any], unit: str, factor: float = 1.0) -> str:
    difference = _float(metric.get("difference"))
    low, high = _ci(metric, factor)
    if difference is None:
        return "-"
    text = _signed(difference * factor, unit) + ("" if unit == "USD" else f" {unit}")
    if low is not None and high is not None:
        # Signed, as comparison.md writes them: [+200, +206].
        text += f" [{_signed(low, unit)}, {_signed(high, unit)}]"
    p = _float(metric.get("p_value"))
    if p is not None:
        text += f", p={p:.2g}" if p >= 0.001 else ", p<0.001"
    return text


def _table(groups: Sequence[dict[str, Any]]) -> str:
    head = (
        "<tr><th>scenario</th><th>B against A</th><th>passed A → B</th>"
        "<th>pass rate B − A (pts)<br>"
        "[95% interval]</th>"
        + "".join(
            f"<th>{what} B − A ({unit})<br>[95% interval], p</th>" for _, what, unit in _METRICS
        )
        + "</tr>"
    )
    rows = []
    for group in groups:
        rate = group.get("pass_rate") or {}
        status = str(group.get("status") or "unchanged")
        cells = [
            f'<td class="name">{_esc(_group_label(group))}</td>',
            f'<td class="status status-{_esc(status)}">{_esc(status)}</td>',
            f"<td>{_esc(_rate_text(rate.get('a') or {}))} → "
            f"{_esc(_rate_text(rate.get('b') or {}))}</td>",
            f"<td>{_esc(_difference_text(rate, 'pts', 100.0))}<br>{_verdict(rate)}</td>",
        ]
        for key, _, unit in _METRICS:
            metric = group.get(key) or {}
            cells.append(f"<td>{_esc(_difference_text(metric, unit))}<br>{_verdict(metric)}</td>")
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return f'<table class="comparison-table">{head}{"".join(rows)}</table>'


def _chart(groups: Sequence[dict[str, Any]], key: str, what: str, unit: str) -> str:
    factor = 100.0 if key == "pass_rate" else 1.0
    rows = []
    for group in groups:
        metric = group.get(key) or {}
        low, high = _ci(metric, factor)
        difference = _float(metric.get("difference"))
        rows.append(
            Interval(
                _group_label(group),
                None if difference is None else difference * factor,
                low,
                high,
                note=str(metric.get("verdict", "")),
                distinguishable=bool(metric.get("distinguishable")),
            )
        )
    title = f"{what} difference, B − A ({unit})"
    return f"<h3>{_esc(what.capitalize())}</h3>" + interval_chart(title, rows, unit, title)


def _unmatched(comparison: dict[str, Any]) -> str:
    unmatched = comparison.get("unmatched") or {}
    items = [
        f"<li>only in {side.upper()}: {_esc(' · '.join(str(k) for k in key))}</li>"
        for side in ("a", "b")
        for key in unmatched.get(side) or []
        if isinstance(key, list | tuple)
    ]
    if not items:
        return ""
    note = '<p class="note">Groups not compared (no match in the other run):</p>'
    return f"{note}<ul>{''.join(items)}</ul>"


def _one(comparison: dict[str, Any]) -> str:
    a, b = comparison.get("a") or {}, comparison.get("b") or {}
    groups = _groups(comparison)
    runs = "".join(
        f"<li><strong>{side}</strong> = {_esc(info.get('label', '?'))} "
        f"({_esc(info.get('iterations', '?'))} iterations; "
        f"models {_esc(', '.join(map(str, info.get('models') or [])))}; "
        f"providers {_esc(', '.join(map(str, info.get('providers') or [])) or '-')})</li>"
        for side, info in (("A", a), ("B", b))
    )
    charts = _chart(groups, "pass_rate", "pass rate", "pts") + "".join(
        _chart(groups, key, what, unit) for key, what, unit in _METRICS
    )
    return (
        f'<section class="comparison"><h2>{_esc(b.get("label", "B"))} against '
        f"{_esc(a.get('label', 'A'))}</h2>"
        f"<p>{_esc(comparison.get('description', ''))}</p><ul>{runs}</ul>"
        f"{_table(groups)}{legend(_LEGEND)}{charts}{_unmatched(comparison)}</section>"
    )


def comparison_body(report: dict[str, Any]) -> str:
    """The body of ``comparison.html`` for ``report`` (all of ``comparison.json``)."""
    settings = report.get("settings") or {}
    confidence = _float(settings.get("confidence")) or 0.95
    resamples = settings.get("bootstrap_resamples", "?")
    how = (
        f'<p class="note">Differences are B − A: a negative duration difference means B is '
        f"faster. Intervals are {confidence:.0%}: Newcombe's hybrid Wilson interval for the "
        f"pass-rate difference (in percentage points, pts), a percentile bootstrap "
        f"({_esc(resamples)} resamples, seeded) for the differences of means; p is a two-sided "
        f'permutation test. A grey row, "not distinguishable", means its interval covers 0: '
        f"at this many iterations the runs cannot be told apart on that measure.</p>"
    )
    comparisons = [c for c in report.get("comparisons") or [] if isinstance(c, dict)]
    if not comparisons:
        return f'<div id="comparison">{how}<p>Nothing was compared.</p></div>'
    return f'<div id="comparison">{how}{"".join(_one(c) for c in comparisons)}</div>'

"""The SVG pieces the profiler's HTML pages are drawn with: "nice" axis ticks, an x
axis with its unit, a legend, horizontal bar charts with error whiskers, and interval
(forest) charts around zero.

Everything is returned as a string of inline SVG with every label escaped, so a page
built from these needs no script, no stylesheet and nothing fetched.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "Bar",
    "Interval",
    "Scale",
    "bar_chart",
    "format_value",
    "grid",
    "interval_chart",
    "legend",
    "nice_ticks",
    "with_unit",
    "x_axis",
]

SVG_NS = "http://www.w3.org/2000/svg"
"""The SVG namespace is an identifier, never fetched."""

_LABEL_W = 240
_PLOT_W = 480
_RIGHT_W = 150
_ROW_H = 26
_AXIS_H = 34


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering ``[low, high]``: steps of 1, 2 or 5 times a power of
    ten, so an axis reads 0, 200, 400... rather than 0, 187.3, 374.6..."""
    if not math.isfinite(low) or not math.isfinite(high):
        return [0.0, 1.0]
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(low / step + 1e-9) * step
    count_needed = math.ceil((high - first) / step - 1e-9)
    return [round(first + i * step, 12) for i in range(count_needed + 1)]


def format_value(value: float, unit: str) -> str:
    """A number as a reader wants it on an axis or a label for ``unit``."""
    if unit == "USD":
        if value == 0:
            return "$0"
        digits = max(2, min(8, 2 - math.floor(math.log10(abs(value)))))
        text = f"{abs(value):,.{digits}f}"
        # Three significant digits at most: $0.001, not $0.00100 (but $0.50, not $0.5).
        while text.endswith("0") and len(text.partition(".")[2]) > 2:
            text = text[:-1]
        return f"{'-' if value < 0 else ''}${text}"
    if unit == "pts":  # percentage points of a pass rate, whole as comparison.md has them
        return f"{value:.0f}"
    if abs(value) >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:,.{1 if abs(value) >= 10 else 2}f}"


def with_unit(value: float, unit: str) -> str:
    """``format_value`` followed by the unit, except where the number shows it ($)."""
    text = format_value(value, unit)
    return text if unit == "USD" else f"{text} {unit}"


def _wrap(text: str, width: int = 56, lines: int = 2) -> list[str]:
    """``text`` in at most ``lines`` lines of about ``width`` characters, the last cut
    with an ellipsis if it is still too long."""
    out: list[str] = []
    rest = text
    while rest and len(out) < lines:
        if len(rest) <= width:
            out.append(rest)
            rest = ""
            break
        cut = rest.rfind(" ", 0, width)
        cut = cut if cut > 0 else width
        out.append(rest[:cut])
        rest = rest[cut:].lstrip()
    if rest:
        out[-1] = out[-1][: width - 1] + "…"
    return out


@dataclass(frozen=True, slots=True)
class Scale:
    """A linear map from values in ``[low, high]`` to ``width`` pixels."""

    low: float
    high: float
    width: float = _PLOT_W

    @classmethod
    def covering(cls, values: Sequence[float], *, zero: bool = True) -> tuple[Scale, list[float]]:
        """The scale whose nice ticks cover ``values`` (and 0 when ``zero``)."""
        finite = [v for v in values if math.isfinite(v)] or [0.0]
        low, high = min(finite), max(finite)
        if zero:
            low, high = min(low, 0.0), max(high, 0.0)
        ticks = nice_ticks(low, high)
        return cls(ticks[0], ticks[-1]), ticks

    def __call__(self, value: float) -> float:
        span = self.high - self.low or 1.0
        return (min(max(value, self.low), self.high) - self.low) / span * self.width


def x_axis(scale: Scale, ticks: Sequence[float], unit: str, title: str, x0: float, y: float) -> str:
    """An axis line at ``y`` from ``x0``, tick marks and values, and ``title`` below."""
    parts = [
        f'<line class="axis" x1="{x0}" y1="{y}" x2="{x0 + scale.width}" y2="{y}" stroke="#333"/>'
    ]
    for tick in ticks:
        x = x0 + scale(tick)
        parts.append(
            f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" stroke="#333"/>'
            f'<text class="tick" x="{x:.1f}" y="{y + 15}" font-size="10" '
            f'text-anchor="middle">{_esc(format_value(tick, unit))}</text>'
        )
    parts.append(
        f'<text class="axis-title" x="{x0 + scale.width / 2:.1f}" y="{y + 29}" '
        f'font-size="11" text-anchor="middle" fill="#333">{_esc(title)}</text>'
    )
    return "".join(parts)


def grid(scale: Scale, ticks: Sequence[float], x0: float, y1: float, y2: float) -> str:
    """Faint vertical lines at the ticks, behind the marks."""
    return "".join(
        f'<line x1="{x0 + scale(t):.1f}" y1="{y1}" x2="{x0 + scale(t):.1f}" y2="{y2}" '
        'stroke="#e4e4e4"/>'
        for t in ticks
    )


def legend(items: Sequence[tuple[str, str, str]]) -> str:
    """An HTML legend: (shape, colour, meaning) with shape ``bar``, ``whisker``,
    ``tick``, ``dot`` or ``diamond``."""
    shapes = {
        "bar": '<rect x="1" y="3" width="16" height="10" fill="{c}"/>',
        "whisker": '<line x1="1" y1="8" x2="17" y2="8" stroke="{c}" stroke-width="1.5"/>'
        '<line x1="1" y1="4" x2="1" y2="12" stroke="{c}"/>'
        '<line x1="17" y1="4" x2="17" y2="12" stroke="{c}"/>',
        "tick": '<line x1="9" y1="1" x2="9" y2="15" stroke="{c}" stroke-width="2"/>',
        "dot": '<circle cx="9" cy="8" r="4" fill="{c}"/>',
        "diamond": '<path d="M9 2 l5 6 l-5 6 l-5 -6 z" fill="{c}"/>',
    }
    cells = "".join(
        f'<span class="legend-item"><svg xmlns="{SVG_NS}" width="18" height="16" '
        f'aria-hidden="true">{shapes[shape].format(c=_esc(colour))}</svg>{_esc(meaning)}</span>'
        for shape, colour, meaning in items
    )
    return f'<div class="legend">{cells}</div>'


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    value: float
    error: float | None = None
    """Half-width of a whisker around ``value`` (a standard error), if any."""
    mark: float | None = None
    """A second value marked with a tick (a p95), if any."""


def bar_chart(title: str, bars: Sequence[Bar], unit: str, axis_title: str) -> str:
    """Horizontal bars from 0 on a shared axis with ticks, whiskers and marks; the
    value is written after each bar and the full label is the row's tooltip."""
    ends = [b.value + (b.error or 0.0) for b in bars] + [b.mark for b in bars if b.mark]
    scale, ticks = Scale.covering(ends or [1.0])
    x0 = _LABEL_W
    height = _ROW_H * len(bars) + _AXIS_H + 8
    width = _LABEL_W + _PLOT_W + _RIGHT_W
    parts = [
        f'<svg xmlns="{SVG_NS}" class="chart" width="{width}" height="{height}" role="img" '
        f'aria-label="{_esc(title)}">',
        grid(scale, ticks, x0, 0, _ROW_H * len(bars)),
    ]
    for i, bar in enumerate(bars):
        y = i * _ROW_H
        label = bar.label if len(bar.label) <= 38 else bar.label[:37] + "…"
        parts.append(f'<g class="bar-row"><title>{_esc(bar.label)}</title>')
        parts.append(f'<text x="0" y="{y + 17}" font-size="12">{_esc(label)}</text>')
        parts.append(
            f'<rect class="bar" x="{x0}" y="{y + 5}" width="{scale(bar.value):.1f}" '
            'height="16" fill="#4a7ebb"/>'
        )
        if bar.error:
            x1, x2 = x0 + scale(bar.value - bar.error), x0 + scale(bar.value + bar.error)
            parts.append(
                f'<line x1="{x1:.1f}" y1="{y + 13}" x2="{x2:.1f}" y2="{y + 13}" stroke="#111"/>'
                f'<line x1="{x1:.1f}" y1="{y + 9}" x2="{x1:.1f}" y2="{y + 17}" stroke="#111"/>'
                f'<line x1="{x2:.1f}" y1="{y + 9}" x2="{x2:.1f}" y2="{y + 17}" stroke="#111"/>'
            )
        if bar.mark is not None:
            xm = x0 + scale(bar.mark)
            parts.append(
                f'<line x1="{xm:.1f}" y1="{y + 2}" x2="{xm:.1f}" y2="{y + 24}" '
                'stroke="#d9822b" stroke-width="2"/>'
            )
        parts.append(
            f'<text x="{x0 + _PLOT_W + 8}" y="{y + 17}" font-size="11">'
            f"{_esc(with_unit(bar.value, unit))}</text></g>"
        )
    parts.append(x_axis(scale, ticks, unit, axis_title, x0, _ROW_H * len(bars) + 2))
    parts.append("</svg>")
    return "".join(parts)


@dataclass(frozen=True, slots=True)
class Interval:
    label: str
    estimate: float | None
    low: float | None
    high: float | None
    note: str = ""
    """Written after the row (the verdict)."""
    distinguishable: bool | None = None
    """The comparison's own call; when ``None``, whether the interval excludes 0."""

    @property
    def covers_zero(self) -> bool:
        return self.low is None or self.high is None or self.low <= 0 <= self.high

    @property
    def stands_out(self) -> bool:
        if self.distinguishable is not None:
            return self.distinguishable
        return not self.covers_zero


def interval_chart(title: str, rows: Sequence[Interval], unit: str, axis_title: str) -> str:
    """A forest plot: each row's estimate as a dot with its interval as whiskers, on an
    axis symmetric around a marked zero; rows not distinguishable from zero are grey."""
    values = [abs(v) for r in rows for v in (r.estimate, r.low, r.high) if v is not None]
    reach = max(values or [1.0]) or 1.0
    scale, ticks = Scale.covering([-reach, reach])
    x0 = _LABEL_W
    note_w = 340
    row_h = _ROW_H + 6  # room for a verdict on two lines
    height = row_h * len(rows) + _AXIS_H + 8
    width = _LABEL_W + _PLOT_W + note_w
    parts = [
        f'<svg xmlns="{SVG_NS}" class="chart interval-chart" width="{width}" '
        f'height="{height}" role="img" aria-label="{_esc(title)}">',
        grid(scale, ticks, x0, 0, row_h * len(rows)),
        f'<line class="zero" x1="{x0 + scale(0):.1f}" y1="0" x2="{x0 + scale(0):.1f}" '
        f'y2="{row_h * len(rows)}" stroke="#111" stroke-dasharray="3,2"/>',
    ]
    for i, row in enumerate(rows):
        y = i * row_h + 16
        colour = "#1f6f3f" if row.stands_out else "#888"
        label = row.label if len(row.label) <= 38 else row.label[:37] + "…"
        parts.append(f'<g class="interval-row"><title>{_esc(row.label)}</title>')
        parts.append(f'<text x="0" y="{y + 4}" font-size="12">{_esc(label)}</text>')
        if row.low is not None and row.high is not None:
            x1, x2 = x0 + scale(row.low), x0 + scale(row.high)
            parts.append(
                f'<line x1="{x1:.1f}" y1="{y}" x2="{x2:.1f}" y2="{y}" stroke="{colour}" '
                f'stroke-width="2"/><line x1="{x1:.1f}" y1="{y - 5}" x2="{x1:.1f}" '
                f'y2="{y + 5}" stroke="{colour}"/><line x1="{x2:.1f}" y1="{y - 5}" '
                f'x2="{x2:.1f}" y2="{y + 5}" stroke="{colour}"/>'
            )
        if row.estimate is not None:
            parts.append(
                f'<circle cx="{x0 + scale(row.estimate):.1f}" cy="{y}" r="4" fill="{colour}"/>'
            )
        note = _wrap(row.note)
        spans = "".join(
            f'<tspan x="{x0 + _PLOT_W + 8}" dy="{0 if n == 0 else 12}">{_esc(line)}</tspan>'
            for n, line in enumerate(note)
        )
        first_y = y + 4 - 6 * (len(note) - 1)
        parts.append(
            f'<text class="verdict" x="{x0 + _PLOT_W + 8}" y="{first_y}" font-size="11" '
            f'fill="{colour}"><title>{_esc(row.note)}</title>{spans}</text></g>'
        )
    parts.append(x_axis(scale, ticks, unit, axis_title, x0, row_h * len(rows) + 2))
    parts.append("</svg>")
    return "".join(parts)

"""The console's charts: SVG drawn on the server, with axes and units, no script.

The profiler draws its reports' charts the same way (profiler/report/svg_charts.py), but the
gateway may not import the profiler (docs/ARCHITECTURE.md's layers: the profiler sits
beside the gateway, above serving), so the console has three small drawings of its
own: horizontal bars (a value per label: requests, spend by model, key...), columns
over time (requests per minute, hour or day) and a timeline (the turns of a client
session on a time axis, each a bar from its start to its end). Colours are CSS classes
(console.css), so light and dark themes apply and the
Content-Security-Policy needs no inline style.

Every text is escaped (``markupsafe.escape``): labels are model names, key names and
session ids, which clients choose.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

__all__ = ["Span", "bar_chart", "column_chart", "nice_ticks", "timeline"]

_WIDTH = 640
_LABEL_W = 170
_ROW_H = 22
_AXIS_H = 34


def nice_ticks(top: float, count: int = 4) -> list[float]:
    """Round tick values from 0 to at least ``top`` (1, 2 or 5 times a power of ten)."""
    if top <= 0 or not math.isfinite(top):
        return [0.0, 1.0]
    raw = top / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return [step * i for i in range(math.ceil(top / step - 1e-9) + 1)]


def _number(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.0f}"
    return f"{value:.3g}"


def _cut(text: str, limit: int = 26) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _x_axis(axis_y: int, plot_w: int, ticks: list[float], unit: str) -> str:
    """The horizontal axis of the bars and the timeline under their rows, its ticks,
    and the unit; closes the SVG."""
    top = ticks[-1] or 1.0
    parts = [
        f'<line class="axis" x1="{_LABEL_W}" y1="{axis_y}" x2="{_LABEL_W + plot_w}" y2="{axis_y}"/>'
    ]
    for tick in ticks:
        x = _LABEL_W + plot_w * tick / top
        parts.append(
            f'<line class="axis" x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{axis_y + 4}"/>'
            f'<text class="tick" x="{x:.1f}" y="{axis_y + 16}" text-anchor="middle">'
            f"{escape(_number(tick))}</text>"
        )
    parts.append(
        f'<text class="unit" x="{_LABEL_W + plot_w}" y="{axis_y + 30}" text-anchor="end">'
        f"{escape(unit)}</text></svg>"
    )
    return "".join(parts)


def bar_chart(title: str, rows: Sequence[tuple[str, float]], unit: str) -> Markup:
    """Horizontal bars, one per ``(label, value)``, on an axis in ``unit``."""
    if not rows:
        return Markup('<p class="empty">{} : no data yet</p>').format(title)
    ticks = nice_ticks(max(v for _, v in rows))
    top = ticks[-1] or 1.0
    plot_w = _WIDTH - _LABEL_W - 60
    height = len(rows) * _ROW_H + _AXIS_H + 8
    parts = [
        f'<svg class="chart" viewBox="0 0 {_WIDTH} {height}" role="img" '
        f'aria-label="{escape(title)} ({escape(unit)})">',
        f"<title>{escape(title)} ({escape(unit)})</title>",
    ]
    for i, (label, value) in enumerate(rows):
        y = 4 + i * _ROW_H
        w = max(plot_w * value / top, 1 if value > 0 else 0)
        parts.append(
            f'<text class="label" x="{_LABEL_W - 6}" y="{y + 15}" text-anchor="end">'
            f"{escape(_cut(label))}</text>"
            f'<rect class="bar" x="{_LABEL_W}" y="{y + 3}" width="{w:.1f}" height="{_ROW_H - 6}">'
            f"<title>{escape(label)}: {escape(_number(value))} {escape(unit)}</title></rect>"
            f'<text class="value" x="{_LABEL_W + w + 4:.1f}" y="{y + 15}">'
            f"{escape(_number(value))}</text>"
        )
    parts.append(_x_axis(4 + len(rows) * _ROW_H, plot_w, ticks, unit))
    return Markup("".join(parts))


def column_chart(
    title: str, columns: Sequence[tuple[str, float]], unit: str, every: int = 1
) -> Markup:
    """Vertical columns in time order, one per ``(label, value)``, on a y axis in
    ``unit``; every ``every``-th label is written under the x axis."""
    if not columns:
        return Markup('<p class="empty">{}: no data yet</p>').format(title)
    ticks = nice_ticks(max(v for _, v in columns))
    top = ticks[-1] or 1.0
    left, plot_h, plot_w = 56, 150, _WIDTH - 56 - 12
    height = plot_h + 52
    step = plot_w / len(columns)
    parts = [
        f'<svg class="chart" viewBox="0 0 {_WIDTH} {height}" role="img" '
        f'aria-label="{escape(title)} ({escape(unit)})">',
        f"<title>{escape(title)} ({escape(unit)})</title>",
    ]
    for tick in ticks:
        y = 8 + plot_h - plot_h * tick / top
        parts.append(
            f'<line class="axis" x1="{left - 4}" y1="{y:.1f}" x2="{left}" y2="{y:.1f}"/>'
            f'<text class="tick" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{escape(_number(tick))}</text>"
        )
    for i, (label, value) in enumerate(columns):
        h = plot_h * value / top
        x = left + i * step
        parts.append(
            f'<rect class="bar" x="{x + step * 0.1:.1f}" y="{8 + plot_h - h:.1f}" '
            f'width="{max(step * 0.8, 1):.1f}" height="{h:.1f}">'
            f"<title>{escape(label)}: {escape(_number(value))} {escape(unit)}</title></rect>"
        )
        if i % every == 0:
            parts.append(
                f'<text class="tick" x="{x + step / 2:.1f}" y="{plot_h + 24}" '
                f'text-anchor="middle">{escape(label)}</text>'
            )
    parts.append(
        f'<line class="axis" x1="{left}" y1="8" x2="{left}" y2="{8 + plot_h}"/>'
        f'<line class="axis" x1="{left}" y1="{8 + plot_h}" x2="{left + plot_w}" '
        f'y2="{8 + plot_h}"/>'
        f'<text class="unit" x="{left}" y="{height - 6}">{escape(unit)} · time (UTC)</text></svg>'
    )
    return Markup("".join(parts))


@dataclass(frozen=True, slots=True)
class Span:
    """One bar of a timeline: a turn of a session."""

    label: str
    start_s: float
    """Seconds from the session's first request."""
    duration_s: float
    note: str = ""
    """Shown on hover: tokens, cache hits, cost."""
    failed: bool = False


def timeline(title: str, spans: Sequence[Span]) -> Markup:
    """``spans`` on one time axis in seconds, one row each, in their order."""
    if not spans:
        return Markup('<p class="empty">{}: no requests</p>').format(title)
    end = max(s.start_s + s.duration_s for s in spans)
    ticks = nice_ticks(end)
    top = ticks[-1] or 1.0
    plot_w = _WIDTH - _LABEL_W - 20
    height = len(spans) * _ROW_H + _AXIS_H + 8
    parts = [
        f'<svg class="chart timeline" viewBox="0 0 {_WIDTH} {height}" role="img" '
        f'aria-label="{escape(title)}"><title>{escape(title)}</title>'
    ]
    for i, span in enumerate(spans):
        y = 4 + i * _ROW_H
        x = _LABEL_W + plot_w * span.start_s / top
        w = max(plot_w * span.duration_s / top, 2)
        kind = "bar failed" if span.failed else "bar"
        parts.append(
            f'<text class="label" x="{_LABEL_W - 6}" y="{y + 15}" text-anchor="end">'
            f"{escape(_cut(span.label))}</text>"
            f'<rect class="{kind}" x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{_ROW_H - 6}">'
            f"<title>{escape(span.label)}: {span.duration_s * 1000:.0f} ms"
            f"{' · ' + escape(span.note) if span.note else ''}</title></rect>"
        )
    unit = "seconds since the session's first request"
    parts.append(_x_axis(4 + len(spans) * _ROW_H, plot_w, ticks, unit))
    return Markup("".join(parts))

"""The profiler's HTML pages: a run's report (``report.html``) and a comparison of
runs (``comparison.html``).

Each page is one self-contained file, inline CSS and SVG, no script and nothing
fetched, so it can be attached to an issue or opened offline. Expanding a step or an
iteration uses ``<details>``, which needs no script. Every string that comes from a
run (model output, tool arguments and results, error messages, names) is escaped:
traces hold whatever a model wrote.

The report holds the summary table; charts of each group's duration (ms), tokens and
cost (USD) with axes, ticks and a legend; and, per iteration, a trace timeline: one
row per step (a model call, a tool call with its duration and status, reasoning,
text, an error) as a bar on a time axis shared by the iteration's rows, in ms from
the iteration's first recorded event, with the step's tokens and cost, and its inputs
and outputs behind a click. A step whose trace has no time says so; nothing is
invented.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from llmbridge.profiler.records.records import IterationRecord, findings_by_kind
from llmbridge.profiler.report.html_compare import comparison_body
from llmbridge.profiler.report.html_iterations import ITERATIONS_CSS, iterations_section
from llmbridge.profiler.report.svg_charts import (
    SVG_NS,
    Bar,
    Scale,
    bar_chart,
    format_value,
    grid,
    legend,
    x_axis,
)

__all__ = ["PAGE_CSS", "html_comparison", "html_report", "page", "timeline_steps"]

PAGE_CSS = (
    """
body{font-family:system-ui,sans-serif;margin:2rem;color:#222;max-width:1200px}
table{border-collapse:collapse;margin:1rem 0}td,th{border:1px solid #ccc;padding:.3rem .6rem;
text-align:right;vertical-align:top}td.name,th{text-align:left}.fail{color:#b00}.pass{color:#070}
h2{margin-top:2rem}details{margin:.3rem 0}code{background:#f4f4f4;padding:0 .2rem}
.legend{display:flex;flex-wrap:wrap;gap:1rem;font-size:.85rem;margin:.3rem 0 .6rem}
.legend-item{display:inline-flex;align-items:center;gap:.3rem}
.iteration>summary{cursor:pointer;font-weight:600}
.prompts{font-size:.9rem}.note{color:#555;font-size:.85rem}
.timeline{margin:.5rem 0 1rem}
.tl-head,.tl-row>summary{display:grid;grid-template-columns:15rem 480px 8rem 6rem 6rem;
gap:0 .5rem;align-items:center;font-size:.82rem}
.tl-head{font-weight:600;border-bottom:1px solid #ccc}.tl-head svg{display:block}
.tl-row{margin:0}.tl-row>summary{cursor:pointer;list-style:none;padding:1px 0}
.tl-row>summary::-webkit-details-marker{display:none}
.tl-row>summary:hover{background:#f3f6fa}
.tl-row .name::before{content:"\\25B8  ";color:#777}
.tl-row[open] .name::before{content:"\\25BE  "}
.tl-row .name{white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.tl-row .num{text-align:right;font-variant-numeric:tabular-nums}
.tl-body{margin:.2rem 0 .6rem 1.2rem;font-size:.82rem}
.tl-body pre{background:#f6f6f6;padding:.4rem;max-height:20rem;overflow:auto;
white-space:pre-wrap;word-break:break-word;margin:.2rem 0}
.verdict-none{color:#666}.verdict-yes{color:#1f6f3f;font-weight:600}
.status-improved{color:#1f6f3f;font-weight:600}.status-regressed{color:#b00;font-weight:600}
.status-mixed{color:#9a5b00;font-weight:600}.status-unchanged{color:#555}
"""
    + ITERATIONS_CSS
)

_TEXT_LIMIT = 20_000
"""Characters of one input or output shown in full; longer ones are cut, saying so."""

TIMELINE_ROWS = 2_000
"""Rows of one iteration's timeline drawn: past them, the first and the last half of
that many, and a row saying how many are left out between (a session of 100,000
transcript lines has about 100,000 rows, a page of some 90 MB that no browser opens
well, and writing it took most of an import's time). ``traces.jsonl`` and
``trajectories/`` keep every step."""

_COLOURS = {
    "model call": "#4a7ebb",
    "tool call": "#d9822b",
    "reasoning": "#8e6bbf",
    "text": "#3a9a5b",
    "error": "#b00020",
}

_TL_W = 456
_TL_PAD = 12
"""The time axis is drawn ``_TL_PAD`` px in from each side so its end labels show."""
_TL_ROW_H = 16


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def page(title: str, body: str) -> str:
    """A whole self-contained page."""
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_esc(title)}</title><style>{PAGE_CSS}</style></head>"
        f"<body><h1>{_esc(title)}</h1>{body}</body></html>"
    )


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


# -- summary table and charts --------------------------------------------------------------


def _group_label(item: dict[str, Any]) -> str:
    mode = "" if item["mode"] == "default" else f" {item['mode']}"
    provider = f"{item['provider']} · " if item.get("provider") else ""
    return f"{provider}{item['scenario']} · {item['model']}{mode}"


def _summary_table(summary: Sequence[dict[str, Any]]) -> str:
    # The provider column once any group names one (runs before it was recorded do not).
    keys: tuple[str, ...] = ("provider", "scenario", "model", "mode")
    if not any(item.get("provider") for item in summary):
        keys = keys[1:]
    head = (
        "<tr>" + "".join(f"<th>{k}</th>" for k in keys) + "<th>passed</th>"
        "<th>duration (ms)<br>mean ± se</th><th>duration (ms)<br>p50 / p95</th>"
        "<th>tokens<br>mean ± se</th><th>tokens<br>p50 / p95</th>"
        "<th>TTFT (ms)<br>p50</th><th>cost (USD)<br>total</th></tr>"
    )
    rows = []
    for item in summary:
        d, t, f = item["duration_ms"], item["tokens"], item["ttft_ms"]
        cells = [
            f"{item['passed']}/{item['iterations']} ({item['pass_rate']:.0%})",
            f"{_num(d['mean'])} ± {_num(d['stderr'])}",
            f"{_num(d['p50'])} / {_num(d['p95'])}",
            f"{_num(t['mean'])} ± {_num(t['stderr'])}",
            f"{_num(t['p50'])} / {_num(t['p95'])}",
            _num(f["p50"]),
            f"{item['cost_usd']['total']:.6f}",
        ]
        names = "".join(f'<td class="name">{_esc(item.get(k, ""))}</td>' for k in keys)
        rows.append(f"<tr>{names}{''.join(f'<td>{_esc(c)}</td>' for c in cells)}</tr>")
    return f'<table class="summary">{head}{"".join(rows)}</table>'


_SPREAD_LEGEND = (
    ("bar", "#4a7ebb", "mean per iteration"),
    ("whisker", "#111", "± 1 standard error of the mean"),
    ("tick", "#d9822b", "p95 (95th percentile)"),
)


def _spread_chart(summary: Sequence[dict[str, Any]], key: str, unit: str, what: str) -> str:
    bars = [
        Bar(
            _group_label(s),
            s[key]["mean"] or 0.0,
            error=s[key]["stderr"],
            mark=s[key]["p95"],
        )
        for s in summary
    ]
    title = f"{what} per iteration ({unit})"
    return legend(_SPREAD_LEGEND) + bar_chart(title, bars, unit, title)


def _cost_chart(summary: Sequence[dict[str, Any]]) -> str:
    bars = [Bar(_group_label(s), float(s["cost_usd"]["mean"] or 0.0)) for s in summary]
    if not any(b.value for b in bars):
        return (
            '<p class="note">No cost was recorded: the backend reported none and no price '
            "was configured for these models.</p>"
        )
    title = "cost per iteration (USD)"
    return legend((("bar", "#4a7ebb", "mean cost per iteration"),)) + bar_chart(
        title, bars, "USD", title
    )


# -- the trace timeline -----------------------------------------------------------------------


@dataclass
class Step:
    """One row of an iteration's timeline."""

    kind: str
    """``model call``, ``tool call``, ``reasoning``, ``text`` or ``error``."""
    name: str
    turn: int
    start_ms: float | None = None
    """Unix milliseconds; ``None`` when the trace has no time for the step."""
    duration_ms: float | None = None
    status: str | None = None
    tokens: dict[str, int] | None = None
    cost_usd: float | None = None
    sections: list[tuple[str, str]] = field(default_factory=list)
    """(heading, text) shown when the row is expanded: inputs, outputs, errors."""


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _show(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def timeline_steps(trace: dict[str, Any]) -> list[Step]:
    """The rows of a trace (``SessionTrace.to_dict()``): a tool call and its result or
    error are one row; every other event is a row of its own."""
    events = [e for e in trace.get("events") or [] if isinstance(e, dict)]
    results: dict[str, dict[str, Any]] = {}
    for event in events:
        if event.get("type") in ("tool_result", "error") and event.get("call_id"):
            results.setdefault(str(event["call_id"]), event)
    merged: set[int] = set()
    steps: list[Step] = []
    for event in events:
        kind, turn = event.get("type"), int(event.get("turn") or 0)
        start, took = _number(event.get("timestamp_ms")), _number(event.get("duration_ms"))
        if kind == "turn_boundary":
            steps.append(
                Step(
                    "model call",
                    f"model call · step {turn + 1}",
                    turn,
                    start,
                    took,
                    status=event.get("status"),
                    tokens=event.get("tokens"),
                    cost_usd=_number(event.get("cost_usd")),
                )
            )
        elif kind == "tool_call":
            call_id = str(event.get("call_id") or "")
            result = results.get(call_id)
            step = Step("tool call", f"tool · {event.get('tool') or '?'}", turn, start)
            step.sections.append(("arguments", _show(event.get("arguments"))))
            step.status = event.get("status")
            if result is not None:
                merged.add(id(result))
                step.duration_ms = _number(result.get("duration_ms"))
                step.status = result.get("status") or result.get("type")
                if step.start_ms is None:
                    step.start_ms = _number(result.get("timestamp_ms"))
                if result.get("type") == "error":
                    step.status = f"error ({result.get('status') or 'failed'})"
                    step.sections.append(("error", str(result.get("error") or "")))
                elif result.get("text") is not None:
                    step.sections.append(("output", str(result["text"])))
            else:
                step.sections.append(("output", "no result was recorded for this call"))
            step.sections.append(("call id", call_id))
            steps.append(step)
        elif kind in ("tool_result", "error") and id(event) in merged:
            continue
        elif kind == "reasoning":
            step = Step("reasoning", "reasoning", turn, start, took)
            step.sections.append(("reasoning", str(event.get("text") or "")))
            steps.append(step)
        elif kind == "text_output":
            step = Step("text", "text", turn, start, took)
            step.sections.append(("text", str(event.get("text") or "")))
            steps.append(step)
        else:  # an error of the step, or a tool result whose call is missing
            step = Step(
                "error",
                f"error{' · ' + str(event['tool']) if event.get('tool') else ''}",
                turn,
                start,
                took,
                status=event.get("status"),
            )
            step.sections.append(("error", str(event.get("error") or event.get("text") or "")))
            steps.append(step)
    return steps


def _section(heading: str, text: str) -> str:
    cut = ""
    if len(text) > _TEXT_LIMIT:
        cut = f'<p class="note">… {len(text) - _TEXT_LIMIT:,} more characters not shown</p>'
        text = text[:_TEXT_LIMIT]
    return f"<div><strong>{_esc(heading)}</strong><pre>{_esc(text)}</pre>{cut}</div>"


def _tokens_text(tokens: dict[str, int] | None) -> tuple[str, str]:
    """(cell, tooltip) for a step's tokens."""
    if not tokens:
        return "", ""
    parts = [
        f"{k.replace('_', ' ')} {tokens.get(k, 0):,}"
        for k in ("input", "output", "reasoning", "cache_read", "cache_write")
    ]
    return f"{tokens.get('total', 0):,}", ", ".join(parts)


def _step_bar(step: Step, origin: float, scale: Scale, ticks: Sequence[float]) -> str:
    colour = _COLOURS.get(step.kind, "#555")
    if step.kind == "tool call" and step.status and "error" in step.status:
        colour = _COLOURS["error"]
    inner = grid(scale, ticks, _TL_PAD, 0, _TL_ROW_H)
    if step.start_ms is not None:
        x = _TL_PAD + scale(step.start_ms - origin)
        if step.duration_ms is not None:
            w = max(scale(step.start_ms - origin + step.duration_ms) - x, 1.5)
            inner += (
                f'<rect class="tl-bar" x="{x:.1f}" y="3" width="{w:.1f}" height="10" '
                f'fill="{colour}"/>'
            )
        else:  # a point in time: when the step started, its length unknown
            inner += f'<path class="tl-point" d="M{x:.1f} 2 l5 6 l-5 6 l-5 -6 z" fill="{colour}"/>'
    return (
        f'<svg xmlns="{SVG_NS}" width="{_TL_W + 2 * _TL_PAD}" height="{_TL_ROW_H}" '
        'aria-hidden="true">'
        f"{inner}</svg>"
    )


def _duration_text(step: Step) -> str:
    if step.start_ms is None:
        return "time not recorded"
    if step.duration_ms is None:
        return "start only"
    return f"{step.duration_ms:,.0f} ms"


def _timeline(trace: dict[str, Any] | None) -> str:
    if not trace:
        return '<p class="note">No trace was recorded for this iteration.</p>'
    steps = timeline_steps(trace)
    if not steps:
        return '<p class="note">The trace holds no steps.</p>'
    timed = [s for s in steps if s.start_ms is not None]
    origin = min((s.start_ms for s in timed if s.start_ms is not None), default=0.0)
    ends = [(s.start_ms or 0.0) - origin + (s.duration_ms or 0.0) for s in timed]
    scale, ticks = Scale.covering(ends or [1.0])
    scale = Scale(scale.low, scale.high, _TL_W)
    axis = (
        f'<svg xmlns="{SVG_NS}" width="{_TL_W + 2 * _TL_PAD}" height="38" role="img" '
        f'aria-label="time axis, ms from the iteration\'s first recorded event">'
        f"{x_axis(scale, ticks, 'ms', 'ms from the first recorded event', _TL_PAD, 2)}</svg>"
    )
    note = ""
    if not timed:
        note = '<p class="note">This trace records no times: its steps are listed without bars.</p>'
    if all(s.cost_usd is None for s in steps):
        note += (
            '<p class="note">No step carries a cost: the backend reported none per step '
            "(each prompt's cost, from the backend or the price table, is listed above).</p>"
        )
    head = (
        f'<div class="tl-head"><span>step</span>{axis}<span>duration / status</span>'
        '<span class="num">tokens</span><span class="num">cost (USD)</span></div>'
    )
    rows = []
    shown: list[Step | None] = list(steps)
    if len(steps) > TIMELINE_ROWS:
        half = TIMELINE_ROWS // 2
        shown = [*steps[:half], None, *steps[-half:]]
    for step in shown:
        if step is None:
            rows.append(
                f'<p class="note tl-cut">… {len(steps) - TIMELINE_ROWS:,} of the '
                f"{len(steps):,} steps are not drawn here (the first and last "
                f"{TIMELINE_ROWS // 2:,} are); traces.jsonl and trajectories/ hold them all.</p>"
            )
            continue
        tokens, tokens_tip = _tokens_text(step.tokens)
        status = f" · {step.status}" if step.status else ""
        cost = "" if step.cost_usd is None else format_value(step.cost_usd, "USD")
        body = "".join(_section(h, t) for h, t in step.sections)
        if step.start_ms is None:
            body += '<p class="note">The trace has no time for this step.</p>'
        elif step.duration_ms is None:
            body += (
                '<p class="note">The trace records when this step started, not how long it '
                "took: it is drawn as a point.</p>"
            )
        if step.kind == "model call" and not step.tokens:
            body += (
                '<p class="note">No tokens recorded for this step (a provider that reports '
                "a prompt's usage whole puts it on the prompt's first step).</p>"
            )
        rows.append(
            f'<details class="tl-row" data-kind="{_esc(step.kind)}"><summary>'
            f'<span class="name" title="{_esc(step.name)}">{_esc(step.name)}</span>'
            f"{_step_bar(step, origin, scale, ticks)}"
            f"<span>{_esc(_duration_text(step) + status)}</span>"
            f'<span class="num" title="{_esc(tokens_tip)}">{_esc(tokens)}</span>'
            f'<span class="num">{_esc(cost)}</span></summary>'
            f'<div class="tl-body">{body or "<p class=note>nothing recorded</p>"}</div></details>'
        )
    return f'<div class="timeline">{note}{head}{"".join(rows)}</div>'


_TIMELINE_LEGEND = (
    ("bar", _COLOURS["model call"], "model call (an LLM step)"),
    ("bar", _COLOURS["tool call"], "tool call"),
    ("bar", _COLOURS["reasoning"], "reasoning"),
    ("bar", _COLOURS["text"], "text output"),
    ("bar", _COLOURS["error"], "error / failed tool"),
    ("diamond", "#555", "start known, duration not recorded"),
)


def _iteration(
    record: IterationRecord, opened: bool = False, style: str = "", beside: str = ""
) -> str:
    verdict = (
        '<span class="pass">pass</span>' if record.passed else '<span class="fail">FAIL</span>'
    )
    checks = "".join(
        f"<li>{'✔' if c.passed else '✘'} <code>{_esc(c.name)}</code> {_esc(c.detail)}</li>"
        for c in record.checks
    )
    prompts = "".join(
        f"<li>prompt {n + 1}: {_esc(p.completion_reason)}, "
        f"{p.metrics.timing.total_ms:,.0f} ms, {p.metrics.tokens.total:,} tokens, "
        f"{format_value(p.metrics.cost.total_usd, 'USD')} ({_esc(p.metrics.cost.source)}), "
        f"{len(p.metrics.tool_calls)} tool calls</li>"
        for n, p in enumerate(record.prompts)
    )
    error = f'<p class="fail">{_esc(record.error)}</p>' if record.error else ""
    findings = "".join(
        f'<li class="finding"><code>{_esc(f["kind"])}</code> {_esc(f["message"])}</li>'
        for f in record.findings
    )
    if findings:
        findings = f'<ul class="findings">{findings}</ul>'
    problems = "".join(f"<li>{_esc(p)}</li>" for p in record.invariant_problems)
    if problems:
        problems = f'<p class="fail">trace invariants broken:</p><ul>{problems}</ul>'
    classes = "iteration " + ("passed" if record.passed else "failed")
    classes += " has-findings" if record.findings else ""
    style_attribute = f' style="{_esc(style)}"' if style else ""
    return (
        f'<details class="{classes}"{style_attribute}{" open" if opened else ""}><summary>'
        f"{_esc(record.provider + ' · ' if record.provider else '')}{_esc(record.scenario)} "
        f"[{_esc(record.model)} {_esc(record.mode)}] #{record.iteration} {verdict}</summary>"
        f'{error}{findings}<ul class="prompts">{prompts}</ul><ul>{checks}</ul>{problems}'
        f"{beside}{_timeline(record.trace)}</details>"
    )


def _findings_section(records: Sequence[IterationRecord]) -> str:
    """What the traces show went wrong, grouped by kind across every iteration."""
    grouped = findings_by_kind(records)
    if not grouped:
        return ""
    rows = "".join(
        f"<tr><td><code>{_esc(kind)}</code></td><td>{len(seen)} of {len(records)}</td>"
        f"<td><ul>{''.join(f'<li>{_esc(w)}: {_esc(m)}</li>' for w, m in seen)}</ul></td></tr>"
        for kind, seen in sorted(grouped.items(), key=lambda item: -len(item[1]))
    )
    return (
        "<h2>Findings</h2>"
        '<table class="findings"><thead><tr><th>finding</th><th>iterations</th>'
        f"<th>where</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def html_report(summary: Sequence[dict[str, Any]], records: Sequence[IterationRecord]) -> str:
    """The run's report page (``report.html``)."""
    body = [
        _summary_table(summary),
        "<h2>Duration</h2>",
        _spread_chart(summary, "duration_ms", "ms", "duration"),
        "<h2>Tokens</h2>",
        _spread_chart(summary, "tokens", "tokens", "tokens"),
        "<h2>Cost</h2>",
        _cost_chart(summary),
        _findings_section(records),
        "<h2>Iterations</h2>",
        '<p class="note">Open an iteration for its trace timeline: one row per step on a '
        "time axis shared by the iteration's rows; open a row for its inputs and outputs. "
        "Show and sort the iterations with the buttons; an iteration of a group of several "
        "sets its tool calls beside its group's reference (the first that passed).</p>",
        legend(_TIMELINE_LEGEND),
        # The first iteration starts open, so the page shows a timeline before any click.
        iterations_section(records, _iteration),
    ]
    return page("llmbridge profile", "".join(body))


def html_comparison(comparison: dict[str, Any]) -> str:
    """The comparison page (``comparison.html``) of what ``comparison.json`` holds
    (``compare.report_dict``: the settings and one ``Comparison.to_dict()`` per run
    compared with the first)."""
    return page("llmbridge profile comparison", comparison_body(comparison))

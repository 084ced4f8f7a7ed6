"""Reports of a run's summary: a terminal table, Markdown, and one HTML page.

The HTML page is self-contained (inline CSS and SVG, no script, nothing fetched), so
it can be attached to an issue or opened offline: the summary table, a chart of each
scenario's duration (mean with standard-error bars, and p95), a chart of its tokens,
and every iteration's checks and errors.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from llmbridge.profiler.runner import IterationRecord

__all__ = ["html_report", "markdown_report", "print_summary"]

_COLUMNS = (
    "scenario",
    "model",
    "mode",
    "pass",
    "ms mean ± se",
    "ms p50 / p95",
    "tokens mean ± se",
    "tokens p50 / p95",
    "TTFT ms p50",
    "USD",
)


def _num(value: Any, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _row(item: dict[str, Any]) -> list[str]:
    d, t, f = item["duration_ms"], item["tokens"], item["ttft_ms"]
    return [
        item["scenario"],
        item["model"],
        item["mode"],
        f"{item['passed']}/{item['iterations']} ({item['pass_rate']:.0%})",
        f"{_num(d['mean'])} ± {_num(d['stderr'])}",
        f"{_num(d['p50'])} / {_num(d['p95'])}",
        f"{_num(t['mean'])} ± {_num(t['stderr'])}",
        f"{_num(t['p50'])} / {_num(t['p95'])}",
        _num(f["p50"]),
        f"{item['cost_usd']['total']:.6f}",
    ]


def print_summary(summary: Sequence[dict[str, Any]], console: Console | None = None) -> None:
    table = Table(title="llmbridge profile")
    for column in _COLUMNS:
        table.add_column(
            column, justify="left" if column in ("scenario", "model", "mode") else "right"
        )
    for item in summary:
        table.add_row(*_row(item))
    (console or Console()).print(table)


def markdown_report(summary: Sequence[dict[str, Any]], records: Sequence[IterationRecord]) -> str:
    lines = ["# llmbridge profile", "", "| " + " | ".join(_COLUMNS) + " |"]
    lines.append("|" + "|".join("---" for _ in _COLUMNS) + "|")
    lines += ["| " + " | ".join(_row(item)) + " |" for item in summary]
    failures = [r for r in records if not r.passed]
    if failures:
        lines += ["", "## Failed iterations", ""]
        for r in failures:
            failed = [c.name for c in r.checks if not c.passed]
            why = r.error or f"checks failed: {', '.join(failed)}"
            lines.append(f"- {r.scenario} [{r.model} {r.mode}] #{r.iteration}: {why}")
    return "\n".join(lines) + "\n"


# -- HTML ---------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,sans-serif;margin:2rem;color:#222}
table{border-collapse:collapse;margin:1rem 0}td,th{border:1px solid #ccc;padding:.3rem .6rem;
text-align:right}td:nth-child(-n+3),th{text-align:left}.fail{color:#b00}.pass{color:#070}
h2{margin-top:2rem}details{margin:.3rem 0}code{background:#f4f4f4;padding:0 .2rem}
"""


def _bar_chart(
    title: str,
    labels: list[str],
    means: list[float],
    errors: list[float],
    marks: list[float | None],
    unit: str,
) -> str:
    """Horizontal bars (mean) with standard-error whiskers and a p95 tick."""
    width, row, left = 720, 28, 220
    top = max(
        [m + e for m, e in zip(means, errors, strict=True)]
        + [m for m in marks if m is not None]
        + [1.0]
    )
    scale = (width - left - 40) / top
    height = row * len(labels) + 50
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="{html.escape(title)}">',
        f'<text x="0" y="16" font-size="14" font-weight="bold">{html.escape(title)}</text>',
    ]
    for i, (label, mean, err, mark) in enumerate(zip(labels, means, errors, marks, strict=True)):
        y = 30 + i * row
        parts.append(f'<text x="0" y="{y + 15}" font-size="12">{html.escape(label[:32])}</text>')
        parts.append(
            f'<rect x="{left}" y="{y + 4}" width="{mean * scale:.1f}" height="16" fill="#4a7ebb"/>'
        )
        if err:
            x1, x2 = left + (mean - err) * scale, left + (mean + err) * scale
            parts.append(
                f'<line x1="{x1:.1f}" y1="{y + 12}" x2="{x2:.1f}" y2="{y + 12}" stroke="#111"/>'
            )
        if mark is not None:
            xm = left + mark * scale
            parts.append(
                f'<line x1="{xm:.1f}" y1="{y + 2}" x2="{xm:.1f}" y2="{y + 22}" '
                'stroke="#d9822b" stroke-width="2"/>'
            )
        parts.append(
            f'<text x="{left + mean * scale + 6:.1f}" y="{y + 16}" font-size="11">'
            f"{mean:,.0f} {unit}</text>"
        )
    parts.append(
        f'<text x="{left}" y="{height - 6}" font-size="11" fill="#555">bar: mean; black: ± '
        "standard error; orange: p95</text></svg>"
    )
    return "".join(parts)


def _chart(summary: Sequence[dict[str, Any]], key: str, title: str, unit: str) -> str:
    labels = [f"{s['scenario']} ({s['model']})" for s in summary]
    means = [s[key]["mean"] or 0.0 for s in summary]
    errors = [s[key]["stderr"] or 0.0 for s in summary]
    marks = [s[key]["p95"] for s in summary]
    return _bar_chart(title, labels, means, errors, marks, unit)


def html_report(summary: Sequence[dict[str, Any]], records: Sequence[IterationRecord]) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(c)}</th>" for c in _COLUMNS)
    rows = "".join(
        "<tr>" + "".join(f"<td>{esc(cell)}</td>" for cell in _row(item)) + "</tr>"
        for item in summary
    )
    details = []
    for r in records:
        verdict = '<span class="pass">pass</span>' if r.passed else '<span class="fail">FAIL</span>'
        checks = "".join(
            f"<li>{'✔' if c.passed else '✘'} <code>{esc(c.name)}</code> {esc(c.detail)}</li>"
            for c in r.checks
        )
        prompts = "".join(
            f"<li>{esc(p.completion_reason)}: {p.metrics.timing.total_ms:,.0f} ms, "
            f"{p.metrics.tokens.total} tokens, {len(p.metrics.tool_calls)} tool calls — "
            f"<code>{esc(p.text[:200])}</code></li>"
            for p in r.prompts
        )
        error = f'<p class="fail">{esc(r.error)}</p>' if r.error else ""
        details.append(
            f"<details><summary>{esc(r.scenario)} [{esc(r.model)} {esc(r.mode)}] "
            f"#{r.iteration} {verdict}</summary>{error}<ul>{prompts}</ul><ul>{checks}</ul>"
            "</details>"
        )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>llmbridge profile</title>"
        f"<style>{_CSS}</style></head><body><h1>llmbridge profile</h1>"
        f"<table><tr>{head}</tr>{rows}</table>"
        f"<h2>Duration</h2>{_chart(summary, 'duration_ms', 'Duration per iteration', 'ms')}"
        f"<h2>Tokens</h2>{_chart(summary, 'tokens', 'Tokens per iteration', 'tok')}"
        f"<h2>Iterations</h2>{''.join(details)}</body></html>"
    )

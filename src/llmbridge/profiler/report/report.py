"""Reports of a run's summary: a terminal table and Markdown.

The HTML page lives in ``html_report.py``; ``html_report`` is re-exported here for
the callers that import it from this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from llmbridge.profiler.records.records import IterationRecord, findings_by_kind
from llmbridge.profiler.report.html_report import html_report

__all__ = ["html_report", "markdown_report", "print_summary"]

_COLUMNS = (
    "provider",
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
        item.get("provider") or "-",
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


def _terminal_row(item: dict[str, Any]) -> list[str]:
    """The same figures as ``_row``, stacked so that five columns hold them."""
    d, t, f = item["duration_ms"], item["tokens"], item["ttft_ms"]
    provider = f"{item['provider']}\n" if item.get("provider") else ""
    return [
        f"{provider}{item['scenario']}\n{item['model']}\n{item['mode']}",
        f"{item['passed']}/{item['iterations']}\n{item['pass_rate']:.0%}",
        f"{_num(d['mean'])} ± {_num(d['stderr'])}\n{_num(d['p50'])} / {_num(d['p95'])}\n"
        f"{_num(f['p50'])}",
        f"{_num(t['mean'])} ± {_num(t['stderr'])}\n{_num(t['p50'])} / {_num(t['p95'])}",
        f"{item['cost_usd']['total']:.6f}",
    ]


def print_summary(summary: Sequence[dict[str, Any]], console: Console | None = None) -> None:
    """The summary in an 80-column terminal: one row per group, its scenario, model and
    mode stacked in the first cell and each measure's figures stacked in its own, so
    names wrap (``overflow="fold"``) instead of being cut to ``capi…``."""
    table = Table(title="llmbridge profile", box=box.SIMPLE_HEAD, show_lines=True, pad_edge=False)
    names = "scenario\nmodel\nmode"
    if any(item.get("provider") for item in summary):
        names = "provider\n" + names
    table.add_column(names, overflow="fold", ratio=1)
    table.add_column("pass", justify="right", overflow="fold")
    table.add_column("ms mean ± se\np50 / p95\nTTFT p50", justify="right", overflow="fold")
    table.add_column("tokens mean ± se\np50 / p95", justify="right", overflow="fold")
    table.add_column("USD", justify="right", overflow="fold")
    for item in summary:
        table.add_row(*_terminal_row(item))
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
            who = f"{r.provider} " if r.provider else ""
            lines.append(f"- {who}{r.scenario} [{r.model} {r.mode}] #{r.iteration}: {why}")
    lines += findings_markdown(records)
    return "\n".join(lines) + "\n"


def findings_markdown(records: Sequence[IterationRecord]) -> list[str]:
    grouped = findings_by_kind(records)
    if not grouped:
        return []
    lines = ["", "## Findings", ""]
    for kind, seen in sorted(grouped.items(), key=lambda item: -len(item[1])):
        lines.append(f"### {kind} ({len(seen)} of {len(records)} iterations)")
        lines.append("")
        lines += [f"- {where}: {message}" for where, message in seen]
        lines.append("")
    return lines[:-1]

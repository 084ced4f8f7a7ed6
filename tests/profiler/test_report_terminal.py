"""``profile run``'s terminal table fits an 80-column terminal and cuts no name.

The summary comes from the runner's own ``summarise`` over iterations written like a
real run's (``run_dirs.write_run``), with the long provider/model names real
agents use.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from llmbridge.profiler.report.report import print_summary
from tests.profiler.run_dirs import SLOW, write_run

GROUPS = [
    ("capital", "gw/smollm2", "plain"),
    (
        "refactor-the-parser-and-keep-every-test-green",
        "openrouter/qwen/qwen3-coder-480b-a35b-instruct",
        "build",
    ),
    ("fix", "anthropic/claude-sonnet-4-5-20250929", "plan-with-a-long-mode-name"),
]


def _render(tmp_path: Path) -> list[str]:
    run = write_run(tmp_path / "run", {group: SLOW for group in GROUPS})
    summary = json.loads((run / "summary.json").read_text())
    console = Console(width=80, record=True, file=io.StringIO())
    print_summary(summary, console)
    return console.export_text().splitlines()


def test_the_summary_table_fits_80_columns_and_cuts_nothing(tmp_path: Path) -> None:
    lines = _render(tmp_path)
    assert max(len(line) for line in lines) <= 80
    assert not any("…" in line for line in lines)
    # Each row's first cell, line by line, spells its provider, scenario, model and
    # mode whole (folded where too long, never shortened).
    body = lines[next(i for i, line in enumerate(lines) if "───" in line) + 1 :]
    rows: list[str] = []
    fragments: list[str] = []
    for line in [*body, ""]:
        if line.strip():
            fragments.append(line.split()[0])
        elif fragments:
            rows.append("".join(fragments))
            fragments = []
    assert rows == ["opencode" + "".join(group) for group in GROUPS]


def test_the_summary_table_keeps_every_figure(tmp_path: Path) -> None:
    text = "\n".join(_render(tmp_path))
    # SLOW: 300, 302, ... 310 ms; 60 tokens each; 0.001 USD each (0.006 per group).
    for figure in ("305 ± 2", "305 / 310", "60 ± 0", "60 / 60", "0.006000", "6/6", "100%"):
        assert figure in text
    assert "TTFT p50" in text

"""Run directories as ``profile run`` writes them, with known per-iteration values.

``write_run`` goes through the runner's own ``IterationRecord.to_json`` and
``summarise``, so ``profile compare`` and the reports read exactly what a run leaves.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from llmbridge.profiler.records.records import IterationRecord, summarise
from llmbridge.profiler.records.types import (
    CostMetrics,
    PromptMetrics,
    PromptResult,
    TimingMetrics,
    TokenMetrics,
)

__all__ = ["FAST", "SLOW", "Row", "write_run"]

Row = tuple[bool, float, int, float]
"""One iteration: passed, duration ms, output tokens, cost USD."""


def _record(
    scenario: str, model: str, mode: str, i: int, row: Row, provider: str
) -> IterationRecord:
    passed, ms, tokens, usd = row
    metrics = PromptMetrics(
        tokens=TokenMetrics(input=10, output=tokens),
        timing=TimingMetrics(ttft_ms=ms / 10, total_ms=ms),
        tool_calls=(),
        cost=CostMetrics(total_usd=usd, source="price_table"),
    )
    prompt = PromptResult(text="ok", metrics=metrics, completion_reason="stop")
    return IterationRecord(
        scenario=scenario,
        model=model,
        mode=mode,
        iteration=i,
        session_id=f"s{i}",
        prompts=[prompt],
        checks=[],
        passed=passed,
        provider=provider,
    )


def write_run(
    path: Path,
    groups: Mapping[tuple[str, str, str], Sequence[Row]],
    provider: str = "opencode",
) -> Path:
    """A run directory as ``profile run`` leaves it."""
    records = [
        _record(scenario, model, mode, i, row, provider)
        for (scenario, model, mode), rows in groups.items()
        for i, row in enumerate(rows)
    ]
    path.mkdir(parents=True)
    lines = [json.dumps(r.to_json()) for r in records]
    (path / "traces.jsonl").write_text("\n".join(lines) + "\n")
    (path / "summary.json").write_text(json.dumps(summarise(records)))
    return path


FAST = [(True, 100.0 + i, 50, 0.001) for i in range(6)]
SLOW = [(True, 300.0 + 2 * i, 50, 0.001) for i in range(6)]

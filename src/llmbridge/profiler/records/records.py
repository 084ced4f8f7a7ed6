"""What a profiled run records: one ``IterationRecord`` per iteration (a line of
``traces.jsonl``), and ``summarise``: per provider, scenario, model and mode, the
pass rate, mean +- standard error and p50 / p95 of the duration and the tokens, time
to first token, cost and completion reasons (``summary.json``).

Records and their summary are what the reports read (report/report.py, report/html_report.py),
and none of them imports the runner that makes them (tests/unit/test_profiler_layers.py).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from llmbridge.profiler.records.scenarios import CheckResult
from llmbridge.profiler.records.types import (
    CostMetrics,
    PromptMetrics,
    PromptResult,
    TimingMetrics,
    TokenMetrics,
    ToolCallRecord,
)

__all__ = ["IterationKey", "IterationRecord", "describe", "findings_by_kind", "summarise"]


@dataclass
class IterationRecord:
    scenario: str
    model: str
    mode: str
    iteration: int
    session_id: str
    prompts: list[PromptResult]
    checks: list[CheckResult]
    passed: bool
    error: str | None = None
    trace: dict[str, Any] | None = None
    spans: list[dict[str, Any]] = field(default_factory=list)
    invariant_problems: list[str] = field(default_factory=list)
    workspace: str | None = None
    """The iteration's workspace, when it was kept (``--keep-workspaces``)."""
    provider: str = ""
    """The ``SessionProvider.id`` that ran it (``profile compare`` tells runs apart by it)."""
    started: bool = True
    """``False`` when its provider did not start or its session could not be created:
    nothing ran, and ``--resume`` runs it."""
    findings: list[dict[str, Any]] = field(default_factory=list)
    """What its trace shows went wrong (findings.py ``Finding.to_json``)."""
    inputs: list[str] = field(default_factory=list)
    """The prompts sent, in order (one per result in ``prompts``)."""

    @property
    def key(self) -> IterationKey:
        """Which iteration of the run this is: unique within a run directory."""
        return IterationKey(self.provider, self.scenario, self.model, self.mode, self.iteration)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> IterationRecord:
        """A record as ``to_json`` wrote it (a line of ``traces.jsonl``); ``KeyError``,
        ``TypeError`` or ``ValueError`` for a line that is not one."""
        return cls(
            scenario=str(data["scenario"]),
            model=str(data["model"]),
            mode=str(data["mode"]),
            iteration=int(data["iteration"]),
            session_id=str(data["session_id"]),
            prompts=[_result_from_json(r) for r in data["prompts"]],
            checks=[CheckResult.model_validate(c) for c in data["checks"]],
            passed=bool(data["passed"]),
            error=data.get("error"),
            trace=data.get("trace"),
            spans=list(data.get("spans") or []),
            invariant_problems=list(data.get("invariant_problems") or []),
            workspace=data.get("workspace"),
            provider=str(data.get("provider", "")),
            started=bool(data.get("started", True)),
            findings=list(data.get("findings") or []),
            inputs=[str(text) for text in data.get("inputs") or []],
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "model": self.model,
            "mode": self.mode,
            "provider": self.provider,
            "iteration": self.iteration,
            "session_id": self.session_id,
            "passed": self.passed,
            "error": self.error,
            "prompts": [_result_json(r) for r in self.prompts],
            "checks": [c.model_dump() for c in self.checks],
            "trace": self.trace,
            "invariant_problems": self.invariant_problems,
            "spans": self.spans,
            "workspace": self.workspace,
            "started": self.started,
            "findings": self.findings,
            "inputs": self.inputs,
        }


class IterationKey(NamedTuple):
    """An iteration's place in a run: provider, scenario, model, mode, iteration."""

    provider: str
    scenario: str
    model: str
    mode: str
    iteration: int


def _result_json(result: PromptResult) -> dict[str, Any]:
    m = result.metrics
    return {
        "text": result.text,
        "completion_reason": result.completion_reason,
        "error": result.error,
        "tokens": m.tokens.to_dict(),
        "timing": asdict(m.timing),
        "tool_calls": [asdict(c) for c in m.tool_calls],
        "cost": asdict(m.cost),
    }


def _result_from_json(data: dict[str, Any]) -> PromptResult:
    tokens = {k: int(v) for k, v in data["tokens"].items() if k not in ("total", "active")}
    timing = data["timing"]
    return PromptResult(
        text=str(data["text"]),
        metrics=PromptMetrics(
            tokens=TokenMetrics(**tokens),
            timing=TimingMetrics(
                ttft_ms=timing.get("ttft_ms"),
                total_ms=float(timing["total_ms"]),
                steps_ms=tuple(timing.get("steps_ms") or ()),
                tools_ms=dict(timing.get("tools_ms") or {}),
            ),
            tool_calls=tuple(ToolCallRecord(**c) for c in data["tool_calls"]),
            cost=CostMetrics(**data["cost"]),
        ),
        completion_reason=data["completion_reason"],
        error=data.get("error"),
    )


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def describe(values: list[float]) -> dict[str, float | None]:
    """Mean, its standard error, p50 and p95 (``None`` where there are no values)."""
    if not values:
        return {"mean": None, "stderr": None, "p50": None, "p95": None}
    stderr = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return {
        "mean": statistics.fmean(values),
        "stderr": stderr,
        "p50": _percentile(values, 0.5),
        "p95": _percentile(values, 0.95),
    }


def summarise(records: list[IterationRecord]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str, str, str], list[IterationRecord]] = {}
    for record in records:
        key = (record.provider, record.scenario, record.model, record.mode)
        groups.setdefault(key, []).append(record)
    summary = []
    for (provider, scenario, model, mode), items in groups.items():
        durations = [sum(r.metrics.timing.total_ms for r in i.prompts) for i in items]
        tokens = [float(sum(r.metrics.tokens.total for r in i.prompts)) for i in items]
        ttfts = [
            i.prompts[0].metrics.timing.ttft_ms
            for i in items
            if i.prompts and i.prompts[0].metrics.timing.ttft_ms is not None
        ]
        costs = [sum(r.metrics.cost.total_usd for r in i.prompts) for i in items]
        reasons = Counter(r.completion_reason for i in items for r in i.prompts)
        summary.append(
            {
                "provider": provider,
                "scenario": scenario,
                "model": model,
                "mode": mode,
                "iterations": len(items),
                "passed": sum(i.passed for i in items),
                "pass_rate": sum(i.passed for i in items) / len(items),
                "duration_ms": describe(durations),
                "tokens": describe(tokens),
                "ttft_ms": describe([float(t) for t in ttfts if t is not None]),
                "cost_usd": {"total": sum(costs), "mean": statistics.fmean(costs)},
                "tool_calls": sum(len(r.metrics.tool_calls) for i in items for r in i.prompts),
                "completion_reasons": dict(reasons),
                "invariant_problems": sum(len(i.invariant_problems) for i in items),
                "findings": dict(Counter(f["kind"] for i in items for f in i.findings)),
            }
        )
    return summary


def findings_by_kind(records: Sequence[IterationRecord]) -> dict[str, list[tuple[str, str]]]:
    """Each finding kind seen, with (iteration, message) for every time it was seen,
    across all the records (providers, models, modes)."""
    grouped: dict[str, list[tuple[str, str]]] = {}
    for r in records:
        who = f"{r.provider} " if r.provider else ""
        where = f"{who}{r.scenario} [{r.model} {r.mode}] #{r.iteration}"
        for finding in r.findings:
            grouped.setdefault(str(finding["kind"]), []).append((where, str(finding["message"])))
    return grouped

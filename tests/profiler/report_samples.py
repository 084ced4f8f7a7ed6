"""Iteration records for the HTML report tests: real OpenCode sessions (the captured
fixtures, through the same trace builder and metrics a run uses) and one agent-style
trace written by hand with what the captured ones lack: a step with no times, text
with a start and no duration, and hostile strings a model could produce."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from llmbridge.profiler.records.metrics import Price, prompt_result
from llmbridge.profiler.records.records import IterationRecord, summarise
from llmbridge.profiler.records.scenarios import Check, CheckResult, evaluate
from llmbridge.profiler.records.trace import build_trace
from llmbridge.profiler.records.types import (
    CostMetrics,
    PromptMetrics,
    PromptResult,
    TimingMetrics,
    TokenMetrics,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "opencode-sessions"

HOSTILE = "</script><img src=x onerror=alert(1)><b>&amp;"
"""What a model might write into a trace; the page must show it as text."""

PRICE = Price(input=0.15, output=0.6)


def opencode_record(name: str, iteration: int = 0) -> IterationRecord:
    """An iteration of the captured OpenCode session ``name``."""
    messages: list[dict[str, Any]] = json.loads((FIXTURES / f"{name}.json").read_text())["messages"]
    users = [m["info"]["id"] for m in messages if m["info"]["role"] == "user"]
    results = [prompt_result(messages, u, measured_ms=0.0, price=PRICE) for u in users]
    checks = evaluate((Check(completes=True),), results)
    return IterationRecord(
        scenario=name,
        model="gw/scripted",
        mode="default",
        iteration=iteration,
        session_id=f"ses-{name}-{iteration}",
        prompts=results,
        checks=checks,
        passed=all(c.passed for c in checks),
        trace=build_trace(f"ses-{name}", messages).to_dict(),
    )


AGENT_T0 = 1_800_000_000_000.0


def agent_trace() -> dict[str, Any]:
    """Seven steps the way the agent provider records them: a model call whose tokens
    and cost cover the prompt, a tool call whose result holds hostile text, a failed
    tool, text with a start and no duration, a second model call with no tokens, and an
    error with no time at all."""
    tokens = TokenMetrics(input=120, output=30).to_dict()
    return {
        "session_id": "ses-agent",
        "events": [
            {
                "type": "turn_boundary",
                "turn": 0,
                "timestamp_ms": AGENT_T0,
                "duration_ms": 900.0,
                "tokens": tokens,
                "cost_usd": 0.0000360,
            },
            {
                "type": "tool_call",
                "turn": 0,
                "timestamp_ms": AGENT_T0 + 300,
                "tool": "search",
                "call_id": "c1",
                "status": "called",
                "arguments": {"query": HOSTILE},
            },
            {
                "type": "tool_result",
                "turn": 0,
                "timestamp_ms": AGENT_T0 + 420,
                "duration_ms": 120.0,
                "text": f"result {HOSTILE}",
                "tool": "search",
                "call_id": "c1",
                "status": "completed",
            },
            {
                "type": "tool_call",
                "turn": 0,
                "timestamp_ms": AGENT_T0 + 430,
                "tool": "fetch_page",
                "call_id": "c2",
                "status": "called",
                "arguments": {"url": "https://example.invalid/page"},
            },
            {
                "type": "error",
                "turn": 0,
                "timestamp_ms": AGENT_T0 + 500,
                "duration_ms": 70.0,
                "tool": "fetch_page",
                "call_id": "c2",
                "status": "error",
                "error": "connection refused",
            },
            {
                "type": "turn_boundary",
                "turn": 1,
                "timestamp_ms": AGENT_T0 + 950,
                "duration_ms": 400.0,
            },
            {
                "type": "text_output",
                "turn": 1,
                "timestamp_ms": AGENT_T0 + 1100,
                "text": f"The answer {HOSTILE}",
            },
            {"type": "error", "turn": 1, "error": f"timeout after 30 s {HOSTILE}"},
        ],
        "summary": {},
    }


def agent_record() -> IterationRecord:
    result = PromptResult(
        text=f"The answer {HOSTILE}",
        metrics=PromptMetrics(
            tokens=TokenMetrics(input=120, output=30),
            timing=TimingMetrics(ttft_ms=1100.0, total_ms=1350.0),
            tool_calls=(),
            cost=CostMetrics(total_usd=0.000036, source="price_table"),
        ),
        completion_reason="timeout",
        error=f"the prompt did not finish {HOSTILE}",
    )
    return IterationRecord(
        scenario=f"hostile {HOSTILE}",
        model="smollm2",
        mode="default",
        iteration=0,
        session_id="ses-agent",
        prompts=[result],
        checks=[CheckResult(name=f"contains: {HOSTILE}", passed=False, detail=HOSTILE)],
        passed=False,
        error=f"the prompt did not finish {HOSTILE}",
        trace=agent_trace(),
    )


def sample_records() -> list[IterationRecord]:
    """A small run: two scenarios of two iterations from real sessions, and the agent's."""
    return [
        opencode_record("multi_tool", 0),
        opencode_record("multi_tool", 1),
        opencode_record("tool_error", 0),
        opencode_record("tool_error", 1),
        opencode_record("reasoning_text_boundary", 0),
        agent_record(),
    ]


def _scaled(record: IterationRecord, factor: float, model: str) -> IterationRecord:
    """``record`` with its prompts' durations times ``factor``, run on ``model``."""
    prompts = [
        replace(
            p,
            metrics=replace(
                p.metrics,
                timing=replace(p.metrics.timing, total_ms=p.metrics.timing.total_ms * factor),
            ),
        )
        for p in record.prompts
    ]
    return replace(record, prompts=prompts, model=model)


def write_run(out: Path, records: list[IterationRecord]) -> Path:
    """A ``profile run`` output directory (traces.jsonl and summary.json) of ``records``."""
    out.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r.to_json(), ensure_ascii=False) for r in records]
    (out / "traces.jsonl").write_text("\n".join(lines) + "\n", "utf-8")
    (out / "summary.json").write_text(json.dumps(summarise(records)), "utf-8")
    return out


def sample_runs(root: Path) -> tuple[Path, Path]:
    """Two runs of the same two scenarios, four iterations each, differing only in the
    model: on ``multi_tool`` B takes about twice as long (a real difference), on
    ``tool_error`` the durations overlap (not distinguishable at four iterations)."""
    a: list[IterationRecord] = []
    b: list[IterationRecord] = []
    for i in range(4):
        multi, error = opencode_record("multi_tool", i), opencode_record("tool_error", i)
        a += [
            _scaled(multi, 1.0 + 0.1 * i, "gw/model-a"),
            _scaled(error, 1.0 + 0.1 * i, "gw/model-a"),
        ]
        b += [
            _scaled(multi, 2.0 + 0.1 * i, "gw/model-b"),
            _scaled(error, 1.05 + 0.1 * ((i + 2) % 4), "gw/model-b"),
        ]
    return write_run(root / "run-a", a), write_run(root / "run-b", b)


def main(out: Path) -> None:
    """Write the sample pages behind docs/profiler-report.png into ``out``."""
    from llmbridge.profiler.report.compare import compare_runs, report_dict
    from llmbridge.profiler.report.html_report import html_comparison, html_report

    records = sample_records()[:-1]  # the docs show the real sessions, not the hostile one
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.html").write_text(html_report(summarise(records), records), "utf-8")
    runs = sample_runs(out / "runs")
    (out / "comparison.html").write_text(
        html_comparison(report_dict(compare_runs(list(runs)))), "utf-8"
    )
    print(f"wrote {out / 'report.html'} and {out / 'comparison.html'}")


if __name__ == "__main__":
    import sys

    main(Path(sys.argv[1] if len(sys.argv) > 1 else "profile-sample"))

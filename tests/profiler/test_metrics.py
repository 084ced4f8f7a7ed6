"""Per-prompt metrics from real OpenCode sessions, the scenarios file and its checks,
the statistics, and the reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmbridge.profiler.records.metrics import Price, cost_of, prompt_result
from llmbridge.profiler.records.records import IterationRecord, describe, summarise
from llmbridge.profiler.records.scenarios import (
    Check,
    ScenarioFileError,
    evaluate,
    load_scenarios,
)
from llmbridge.profiler.records.types import TokenMetrics
from llmbridge.profiler.report.report import html_report, markdown_report

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "opencode-sessions"


def _session(name: str) -> tuple[list[dict[str, Any]], list[str]]:
    messages: list[dict[str, Any]] = json.loads((FIXTURES / f"{name}.json").read_text())["messages"]
    users = [m["info"]["id"] for m in messages if m["info"]["role"] == "user"]
    return messages, users


def test_tokens_timing_tools_of_a_multi_tool_prompt() -> None:
    messages, users = _session("multi_tool")
    result = prompt_result(messages, users[0], measured_ms=0.0)
    steps = [m for m in messages if m["info"]["role"] == "assistant"]
    assert result.completion_reason == "stop"
    assert result.text == "notes.txt has 2 lines."
    assert result.metrics.tokens.input == sum(s["info"]["tokens"]["input"] for s in steps)
    assert result.metrics.tokens.output == sum(s["info"]["tokens"]["output"] for s in steps)
    timing = result.metrics.timing
    assert len(timing.steps_ms) == 3
    assert timing.ttft_ms is not None and 0 < timing.ttft_ms <= timing.total_ms
    created = messages[0]["info"]["time"]["created"]
    assert timing.total_ms == steps[-1]["info"]["time"]["completed"] - created
    assert set(timing.tools_ms) == {"read", "bash"}
    assert [(c.name, c.status) for c in result.metrics.tool_calls] == [
        ("read", "completed"),
        ("read", "completed"),
        ("bash", "completed"),
    ]
    assert result.metrics.cost.source == "none"


def test_a_failed_tool_is_recorded_with_its_error() -> None:
    messages, users = _session("tool_error")
    result = prompt_result(messages, users[0], measured_ms=0.0)
    (call,) = result.metrics.tool_calls
    assert call.status == "error" and call.error and "not found" in call.error.lower()
    assert result.completion_reason == "stop"  # the agent recovered


def test_the_second_prompt_of_a_session_is_measured_alone() -> None:
    messages, users = _session("multi_turn")
    first = prompt_result(messages, users[0], measured_ms=0.0)
    second = prompt_result(messages, users[1], measured_ms=0.0)
    assert (first.text, second.text) == ("Hello! How can I help?", "You said hello.")
    assert len(second.metrics.timing.steps_ms) == 1


def test_a_timed_out_prompt() -> None:
    messages, users = _session("timeout")
    result = prompt_result(messages, users[0], measured_ms=3000.0, timed_out=True)
    assert result.completion_reason == "timeout"
    assert result.text == "" and result.metrics.timing.ttft_ms is None


def test_cost_from_the_price_table_when_the_backend_reports_none() -> None:
    messages, users = _session("single_turn")
    price = Price(input=3.0, output=15.0, cache_read=0.3)
    result = prompt_result(messages, users[0], measured_ms=0.0, price=price)
    tokens = result.metrics.tokens
    assert result.metrics.cost.source == "price_table"
    assert result.metrics.cost.total_usd == pytest.approx(
        (tokens.input * 3.0 + tokens.output * 15.0) / 1e6
    )
    for step in messages:
        if step["info"]["role"] == "assistant":
            step["info"]["cost"] = 0.25
    reported = prompt_result(messages, users[0], measured_ms=0.0, price=price)
    assert reported.metrics.cost.total_usd == 0.25 and reported.metrics.cost.source == "backend"


def test_cost_of_prices_reasoning_at_the_output_price_by_default() -> None:
    tokens = TokenMetrics(input=1_000_000, output=500_000, reasoning=500_000, cache_write=1_000_000)
    cost = cost_of(tokens, Price(input=1.0, output=4.0, cache_write=1.25))
    assert (cost.input_usd, cost.output_usd, cost.reasoning_usd, cost.cache_usd) == (
        1.0,
        2.0,
        2.0,
        1.25,
    )
    assert tokens.total == 2_000_000 and tokens.active == 2_000_000


def test_total_counts_reasoning_once_and_active_is_the_total_less_cache_reads() -> None:
    # docs/PROFILER.md: total = input + output + reasoning (seed 004 has input + output,
    # with output never holding the reasoning here); active = total - cache read, >= 0.
    tokens = TokenMetrics(input=100, output=20, reasoning=30, cache_read=40, cache_write=7)
    assert (tokens.total, tokens.active) == (150, 110)
    assert tokens.to_dict() == {
        "input": 100,
        "output": 20,
        "reasoning": 30,
        "cache_read": 40,
        "cache_write": 7,
        "total": 150,
        "active": 110,
    }
    assert TokenMetrics(input=5, output=1, cache_read=50).active == 0


# -- the scenarios file --------------------------------------------------------------


def test_a_scenarios_file_is_validated_with_clear_errors(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(
        "models: [gw/m]\niterations: 2\nprices: {gw/m: {input: 1, output: 2}}\n"
        "scenarios:\n  - id: a\n    prompt: hi\n    checks: [{contains: hello}, {max_tokens: 10}]\n"
    )
    spec = load_scenarios(good)
    assert spec.iterations == 2 and spec.scenarios[0].turns == ("hi",)
    assert spec.prices["gw/m"].output == 2
    bad = tmp_path / "bad.yaml"
    for text, message in (
        ("models: [m]\nscenarios: [{id: a}]", "needs either prompt or prompts"),
        (
            "models: [m]\nscenarios: [{id: a, prompt: x, checks: [{contains: a, regex: b}]}]",
            "exactly one",
        ),
        ("models: [m]\nscenarios: [{id: a, prompt: x}, {id: a, prompt: y}]", "unique"),
        ("models: [m]\nscenarios: [{id: a, prompt: x, checks: [{regex: '('}]}]", "regex"),
        ("models: [m]\nscenario: []", "scenarios"),
        ("{", "not valid YAML"),
    ):
        bad.write_text(text)
        with pytest.raises(ScenarioFileError, match=message):
            load_scenarios(bad)
    with pytest.raises(ScenarioFileError, match="cannot read"):
        load_scenarios(tmp_path / "missing.yaml")


def test_checks_on_an_iteration() -> None:
    messages, users = _session("multi_tool")
    result = prompt_result(messages, users[0], measured_ms=0.0)
    checks = tuple(
        Check.model_validate(c)
        for c in (
            {"contains": "2 lines"},
            {"not_contains": "error"},
            {"regex": r"\d lines"},
            {"tool_called": "bash"},
            {"tool_called": "write"},
            {"max_duration_ms": 1},
            {"max_tokens": 10},
            {"completes": True},
        )
    )
    verdicts = {c.name: c.passed for c in evaluate(checks, [result])}
    assert verdicts == {
        "contains: 2 lines": True,
        "not_contains: error": True,
        "regex: \\d lines": True,
        "tool_called: bash": True,
        "tool_called: write": False,
        "max_duration_ms: 1.0": False,
        "max_tokens: 10": False,
        "completes: True": True,
    }


# -- statistics and reports ----------------------------------------------------------


def test_describe_gives_mean_stderr_and_percentiles() -> None:
    stats = describe([1.0, 2.0, 3.0, 4.0])
    assert stats["mean"] == 2.5
    assert stats["stderr"] == pytest.approx(1.2909944 / 2)
    assert stats["p50"] == 2.5 and stats["p95"] == pytest.approx(3.85)
    assert describe([])["mean"] is None and describe([5.0])["stderr"] == 0.0


def _records() -> list[IterationRecord]:
    records = []
    for name, iteration in (("single_turn", 0), ("tool_error", 0), ("single_turn", 1)):
        messages, users = _session(name)
        result = prompt_result(messages, users[0], measured_ms=0.0)
        checks = evaluate((Check(contains="Paris"),), [result])
        records.append(
            IterationRecord(
                scenario=name,
                model="gw/scripted",
                mode="default",
                iteration=iteration,
                session_id=f"ses{iteration}",
                prompts=[result],
                checks=checks,
                passed=all(c.passed for c in checks),
            )
        )
    return records


def test_summary_and_reports() -> None:
    records = _records()
    summary = summarise(records)
    single = next(s for s in summary if s["scenario"] == "single_turn")
    assert single["iterations"] == 2 and single["pass_rate"] == 1.0
    assert single["duration_ms"]["stderr"] == 0.0  # the same fixture twice
    errors = next(s for s in summary if s["scenario"] == "tool_error")
    assert errors["pass_rate"] == 0.0 and errors["tool_calls"] == 1
    markdown = markdown_report(summary, records)
    assert "| single_turn | gw/scripted | default | 2/2 (100%) |" in markdown
    assert "tool_error [gw/scripted default] #0: checks failed: contains: Paris" in markdown
    page = html_report(summary, records)
    assert page.startswith("<!doctype html>") and page.count('class="chart"') == 2
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # self-contained
    assert "FAIL" in page and "single_turn" in page

"""The HTML report's structure, parsed rather than grepped where it matters: axes with
units and legends on every chart, one timeline row per step with times only where
the trace has them, hostile text escaped, nothing fetched."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from llmbridge.profiler.records.records import summarise
from llmbridge.profiler.records.trace import build_trace
from llmbridge.profiler.report.compare import compare_runs, report_dict
from llmbridge.profiler.report.html_report import html_comparison, html_report, timeline_steps
from llmbridge.profiler.report.svg_charts import format_value, nice_ticks
from tests.profiler.report_samples import (
    FIXTURES,
    HOSTILE,
    agent_record,
    agent_trace,
    opencode_record,
    sample_records,
    sample_runs,
)


class _Page(HTMLParser):
    """The elements of a page: tags with their attributes, text, and the text of
    each element with a given class."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def having(self, tag: str, cls: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag and cls in (a.get("class") or "").split()]


def _parse(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    parser.close()
    return parser


@pytest.fixture(scope="module")
def page() -> str:
    records = sample_records()
    return html_report(summarise(records), records)


def test_every_chart_has_an_axis_with_ticks_and_units_and_a_legend(page: str) -> None:
    parsed = _parse(page)
    charts = parsed.having("svg", "chart")
    assert len(charts) == 3  # duration, tokens, cost
    text = " ".join(parsed.text)
    for title in (
        "duration per iteration (ms)",
        "tokens per iteration (tokens)",
        "cost per iteration (USD)",
    ):
        assert title in text
    # Each chart and each iteration's timeline head has an axis with numbered ticks.
    timelines = len(parsed.having("div", "timeline"))
    assert len(parsed.having("line", "axis")) == len(charts) + timelines
    assert len(parsed.having("text", "tick")) >= 3 * (len(charts) + timelines)
    assert "ms from the first recorded event" in text
    assert len(parsed.having("div", "legend")) == 4  # three charts and the timeline
    for meaning in ("± 1 standard error of the mean", "p95 (95th percentile)", "tool call"):
        assert meaning in text


def test_one_timeline_row_per_step_of_a_real_session() -> None:
    record = opencode_record("multi_tool")
    assert record.trace is not None
    events = record.trace["events"]
    page = html_report(summarise([record]), [record])
    rows = _parse(page).having("details", "tl-row")
    # A tool call and its result are one row; every other event is a row.
    assert len(rows) == len(events) - sum(e["type"] == "tool_result" for e in events)
    kinds = [r["data-kind"] for r in rows]
    assert kinds.count("model call") == sum(e["type"] == "turn_boundary" for e in events)
    assert kinds.count("tool call") == sum(e["type"] == "tool_call" for e in events) == 3
    assert kinds.count("text") == 1


def test_steps_keep_the_traces_times_tokens_and_status() -> None:
    record = opencode_record("multi_tool")
    assert record.trace is not None
    events = record.trace["events"]
    steps = timeline_steps(record.trace)
    calls = [s for s in steps if s.kind == "tool call"]
    results = [e for e in events if e["type"] == "tool_result"]
    assert [c.duration_ms for c in calls] == [r["duration_ms"] for r in results]
    assert all(c.status == "completed" and c.start_ms is not None for c in calls)
    model = [s for s in steps if s.kind == "model call"]
    boundaries = [e for e in events if e["type"] == "turn_boundary"]
    assert [m.tokens for m in model] == [b["tokens"] for b in boundaries]
    assert [m.duration_ms for m in model] == [b["duration_ms"] for b in boundaries]


def test_a_failed_tool_is_one_row_with_its_error() -> None:
    record = opencode_record("tool_error")
    assert record.trace is not None
    (call,) = [s for s in timeline_steps(record.trace) if s.kind == "tool call"]
    assert call.status is not None and call.status.startswith("error")
    assert call.duration_ms is not None
    assert any(h == "error" and "not found" in t.lower() for h, t in call.sections)


def test_missing_times_are_said_not_invented() -> None:
    steps = timeline_steps(agent_trace())
    untimed = [s for s in steps if s.start_ms is None]
    assert [s.kind for s in untimed] == ["error"]
    text = next(s for s in steps if s.kind == "text")
    assert text.start_ms is not None and text.duration_ms is None
    page = html_report(summarise([agent_record()]), [agent_record()])
    assert "time not recorded" in page and "The trace has no time for this step." in page
    assert "start only" in page and 'class="tl-point"' in page
    # The second model call carries no tokens: its cell is empty and the row says why.
    assert "No tokens recorded for this step" in page
    # Bars exist only for steps with a start and a duration.
    timed = sum(s.start_ms is not None and s.duration_ms is not None for s in steps)
    assert page.count('class="tl-bar"') == timed


def test_per_step_cost_is_shown_where_the_trace_has_it() -> None:
    page = html_report(summarise([agent_record()]), [agent_record()])
    assert format_value(0.000036, "USD") == "$0.000036"
    assert ">$0.000036</span>" in page


def test_reported_step_cost_reaches_the_trace() -> None:
    messages = json.loads((FIXTURES / "single_turn.json").read_text())["messages"]
    assistant = next(m for m in messages if m["info"]["role"] == "assistant")
    assistant["info"]["cost"] = 0.0125
    trace = build_trace("s", messages).to_dict()
    (boundary,) = [e for e in trace["events"] if e["type"] == "turn_boundary"]
    assert boundary["cost_usd"] == 0.0125
    # OpenCode reports 0 for a model it has no price for: that is no cost, not $0.
    assistant["info"]["cost"] = 0
    trace = build_trace("s", messages).to_dict()
    assert all("cost_usd" not in e for e in trace["events"])


def test_hostile_strings_are_escaped(page: str) -> None:
    assert HOSTILE not in page
    assert "<img" not in page and "<script" not in page and "<b>" not in page
    assert html_escaped(HOSTILE) in page
    parsed = _parse(page)
    # The parser sees the hostile strings only as text, never as elements or attributes.
    assert not any(tag in ("img", "script", "b") for tag, _ in parsed.tags)
    assert not any(k.startswith("on") for _, attrs in parsed.tags for k in attrs)
    assert any(HOSTILE in chunk for chunk in parsed.text)


def html_escaped(text: str) -> str:
    import html

    return html.escape(text, quote=True)


def test_the_page_fetches_nothing(page: str) -> None:
    parsed = _parse(page)
    # No element that loads anything: no script, stylesheet link, image, frame or font.
    loading = {"script", "link", "img", "iframe", "object", "embed", "source", "video", "audio"}
    assert not [t for t, _ in parsed.tags if t in loading]
    for _, attrs in parsed.tags:
        for key, value in attrs.items():
            if key in ("src", "href", "srcset", "data", "action", "poster"):
                pytest.fail(f"an element loads {value!r}")
    # URLs appear only as the SVG namespace identifier and as escaped trace text
    # (the agent sample's tool argument), never in markup or CSS.
    markup = re.sub(r"<pre>.*?</pre>", "", page, flags=re.S)
    assert set(re.findall(r"https?://[^\"'<> ]+", markup)) == {"http://www.w3.org/2000/svg"}
    assert "url(" not in page and "@import" not in page


def test_an_iteration_without_a_trace_says_so() -> None:
    record = opencode_record("single_turn")
    record.trace = None
    page = html_report(summarise([record]), [record])
    assert "No trace was recorded for this iteration." in page


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (0, 416, [0, 100, 200, 300, 400, 500]),
        (0, 1, [0, 0.2, 0.4, 0.6, 0.8, 1.0]),
        (-30, 30, [-40, -20, 0, 20, 40]),
        (0, 0, [0, 0.2, 0.4, 0.6, 0.8, 1.0]),
    ],
)
def test_nice_ticks(low: float, high: float, expected: list[float]) -> None:
    assert nice_ticks(low, high) == pytest.approx(expected)


def test_format_value() -> None:
    assert format_value(0.001, "USD") == "$0.001"
    assert format_value(0.5, "USD") == "$0.50"
    assert format_value(1234.0, "ms") == "1,234"
    assert format_value(0.25, "tokens") == "0.25"


# -- the comparison page ----------------------------------------------------------------


def test_the_comparison_page_shows_intervals_and_verdicts(tmp_path: Path) -> None:
    a, b = sample_runs(tmp_path)
    name = "run-a " + HOSTILE.replace("/", "")  # a directory name holds no slash
    hostile = a.rename(a.with_name(name))
    report = report_dict(compare_runs([hostile, b]))
    page = html_comparison(report)
    parsed = _parse(page)
    assert len(parsed.having("div", "legend")) == 1
    charts = parsed.having("svg", "interval-chart")
    assert len(charts) == 4  # pass rate, duration, tokens, cost
    (comparison,) = report["comparisons"]
    groups = [*comparison["scenarios"], comparison["overall"]]
    # One row per matched scenario and the overall one, in every chart.
    assert len(parsed.having("g", "interval-row")) == 4 * len(groups)
    assert len(parsed.having("line", "zero")) == 4
    text = " ".join(parsed.text)
    for title in ("pass rate difference, B − A (pts)", "duration difference, B − A (ms)"):
        assert title in text
    # The verdicts, styled by whether the interval lets the runs be told apart.
    duration = {g["scenario"]: g["duration_ms"] for g in groups}
    assert duration["multi_tool"]["distinguishable"] is True
    assert duration["tool_error"]["distinguishable"] is False
    assert "not distinguishable at this many iterations (n=4 vs 4)" in text
    low, high = duration["multi_tool"]["ci95"]
    assert f"[+{low:,.0f}, +{high:,.0f}]" in text
    assert parsed.having("span", "verdict-yes") and parsed.having("span", "verdict-none")
    # The run's name came from a directory and is shown as text only.
    assert name not in page and "<img" not in page and "<script" not in page
    assert not any(tag in ("img", "script", "b") for tag, _ in parsed.tags)
    assert any(name in chunk for chunk in parsed.text)


def test_an_empty_comparison_says_so() -> None:
    page = html_comparison({"settings": {}, "comparisons": []})
    assert 'id="comparison"' in page and "Nothing was compared." in page

"""The report's iteration list in a real browser: filtered and
sorted by its controls (radio buttons read by CSS: the page has no script), and an
iteration's tool calls set beside its group's reference, aligned, differences marked.

Playwright drives Debian's Chromium (``/usr/bin/chromium``, nothing downloaded) on the
report file with the network mapped to nowhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmbridge.profiler.records.records import IterationRecord, summarise
from llmbridge.profiler.records.types import (
    CostMetrics,
    PromptMetrics,
    PromptResult,
    TimingMetrics,
    TokenMetrics,
)
from llmbridge.profiler.report.html_iterations import side_by_side
from llmbridge.profiler.report.html_report import html_report

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="Chromium is not installed (make chromium installs Debian's, as make test does)",
)


def _record(
    iteration: int, passed: bool, ms: float, usd: float, calls: list[str]
) -> IterationRecord:
    events: list[dict[str, Any]] = [{"type": "turn_boundary", "turn": 0}]
    for n, command in enumerate(calls):
        events.append(
            {
                "type": "tool_call",
                "turn": 0,
                "tool": "bash",
                "call_id": f"c{n}",
                "arguments": {"command": command},
            }
        )
        kind = "error" if command.startswith("bad") else "tool_result"
        events.append({"type": kind, "turn": 0, "tool": "bash", "call_id": f"c{n}"})
    events.append({"type": "text_output", "turn": 0, "text": "done"})
    metrics = PromptMetrics(
        TokenMetrics(10, 5), TimingMetrics(50.0, ms), (), CostMetrics(total_usd=usd)
    )
    findings = [] if passed else [{"kind": "loop", "message": "m", "evidence": []}]
    return IterationRecord(
        scenario="task",
        model="m",
        mode="default",
        iteration=iteration,
        session_id=f"s{iteration}",
        prompts=[PromptResult("done", metrics, "stop")],
        checks=[],
        passed=passed,
        trace={"session_id": f"s{iteration}", "events": events},
        provider="agent",
        findings=findings,
    )


RECORDS = [
    _record(0, True, 300.0, 0.002, ["ls", "make", "make test"]),
    _record(1, False, 900.0, 0.001, ["ls", "bad make", "make test"]),
    _record(2, True, 100.0, 0.004, ["ls", "make"]),
    _record(3, False, 500.0, 0.003, ["pwd", "ls", "make", "make test"]),
]


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    report = tmp_path / "report.html"
    report.write_text(html_report(summarise(RECORDS), RECORDS), encoding="utf-8")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-gpu", "--host-resolver-rules=MAP * ~NOTFOUND"],
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(report.as_uri())
            yield page
            assert errors == []
        finally:
            browser.close()


def _shown(page: Any) -> list[int]:
    """The iterations shown, top to bottom: their numbers."""
    items = page.locator(".iterations > .iteration")
    shown = []
    for n in range(items.count()):
        item = items.nth(n)
        box = item.bounding_box()
        if item.is_visible() and box is not None:
            number = int(item.locator("summary").first.inner_text().split("#")[1].split()[0])
            shown.append((box["y"], number))
    return [number for _, number in sorted(shown)]


def test_the_iterations_filter_and_sort_in_the_page(page: Any) -> None:
    assert page.locator("script").count() == 0
    assert _shown(page) == [0, 1, 2, 3]
    page.click("label[for=show-failed]")
    assert _shown(page) == [1, 3]
    page.click("label[for=show-findings]")
    assert _shown(page) == [1, 3]
    page.click("label[for=show-passed]")
    assert _shown(page) == [0, 2]
    page.click("label[for=show-all]")
    page.click("label[for=sort-duration]")
    assert _shown(page) == [1, 3, 0, 2]
    page.click("label[for=sort-cost]")
    assert _shown(page) == [2, 3, 0, 1]
    page.click("label[for=sort-outcome]")
    assert _shown(page) == [1, 3, 0, 2]
    # The keyboard: the radio buttons take focus, the arrow keys move within a group.
    page.focus("#sort-run")
    page.keyboard.press("ArrowRight")
    assert page.is_checked("#sort-outcome")


def test_tool_calls_beside_the_groups_reference(page: Any) -> None:
    # Iteration 0 passed first: the reference; #1 changed its second call; #3 added one.
    iteration = page.locator(".iterations > .iteration").nth(3)
    iteration.locator("summary").first.click()
    beside = iteration.locator("details.beside")
    beside.locator("summary").click()
    rows = beside.locator("tr")
    marks = [rows.nth(n).locator("td").first.inner_text() for n in range(1, rows.count())]
    assert marks == ["only", "same", "same", "same"]
    assert "tool calls beside #0" in beside.locator("summary").inner_text()


def test_side_by_side_marks_what_differs() -> None:
    table = side_by_side(RECORDS[0], RECORDS[1])
    assert table.count('class="same"') == 2 and table.count('class="changed"') == 1
    assert '<span class="fail">failed</span>' in table
    assert table.count('class="only"') == 0
    assert side_by_side(RECORDS[2], RECORDS[0]).count('class="only"') == 1

"""The profiler's layers: settings and record types at the bottom, the CLI
process runner in a module of its own, reports that depend on records only.

Read from the modules' imports (every kind: module level, type-only, lazy), transitively,
so a layer cannot reach a higher one through a third module either.
"""

from __future__ import annotations

from functools import cache

from tests.unit.test_layering import PACKAGE_DIR
from tests.unit.test_module_cycles import import_graph

PROFILER = "llmbridge.profiler."
BOTTOM = (
    "types",
    "settings",
    "scenarios",
    "records",
    "findings",
    "atif",
    "metrics",
    "trace",
    "stats",
)
"""What a scenarios file and a run's records are: no provider, no runner in them."""
REPORTS = (
    *("report", "html_report", "html_iterations", "html_compare", "compare", "compare_report"),
    "svg_charts",
)
PROVIDERS = ("agent", "claude_code", "codex", "gemini_cli", "opencode", "cli_agent")
RUNNING = ("runner", "setup", "workspace", "cli_process")


@cache
def _graph() -> dict[str, set[str]]:
    return import_graph(PACKAGE_DIR)


def reached(module: str) -> set[str]:
    """The profiler modules ``module`` imports, directly or through others."""
    graph = _graph()
    seen: set[str] = set()
    todo = [PROFILER + module]
    while todo:
        for target in graph.get(todo.pop(), set()):
            if target.startswith(PROFILER) and target not in seen:
                seen.add(target)
                todo.append(target)
    return {name.removeprefix(PROFILER) for name in seen}


def test_settings_and_records_import_no_provider_and_no_runner() -> None:
    for module in BOTTOM:
        above = reached(module) & {*PROVIDERS, *RUNNING}
        assert not above, f"profiler/{module}.py reaches {sorted(above)}"


def test_reports_depend_on_records_not_on_the_runner_or_a_provider() -> None:
    for module in REPORTS:
        above = reached(module) & {*PROVIDERS, *RUNNING}
        assert not above, f"profiler/{module}.py reaches {sorted(above)}"


def test_the_cli_process_runner_knows_no_agent() -> None:
    assert reached("cli_process") <= {"trace_builder", "trace", "types"}
    assert "cli_process" in reached("claude_code")

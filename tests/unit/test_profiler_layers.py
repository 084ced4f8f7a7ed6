"""The profiler's layers, one subpackage each: ``records/`` (settings and record types) at
the bottom, ``report/`` that reads records only, ``providers/`` on records (its CLI
process runner knowing no agent), and ``run/`` over the three.

Read from the modules' imports (every kind: module level, type-only, lazy), transitively,
so a layer cannot reach a higher one through a third module either.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from tests.unit.test_layering import PACKAGE_DIR
from tests.unit.test_module_cycles import import_graph

PROFILER = "llmbridge.profiler."
LAYERS = ("records", "report", "providers", "run")
"""The profiler's subpackages, lowest first."""
MAY_REACH = {
    "records": {"records"},
    "report": {"records", "report"},
    "providers": {"records", "providers"},
    "run": {"records", "report", "providers", "run"},
}
"""The layers each layer's modules may reach (its own included)."""


@cache
def _graph() -> dict[str, set[str]]:
    return import_graph(PACKAGE_DIR)


def reached(module: str, graph: dict[str, set[str]] | None = None) -> set[str]:
    """The profiler modules ``module`` (``layer.name``) imports, directly or through
    others, named ``layer.name``."""
    graph = _graph() if graph is None else graph
    seen: set[str] = set()
    todo = [PROFILER + module]
    while todo:
        for target in graph.get(todo.pop(), set()):
            if target.startswith(PROFILER) and target not in seen:
                seen.add(target)
                todo.append(target)
    return {name.removeprefix(PROFILER) for name in seen}


def modules_of(layer: str, graph: dict[str, set[str]] | None = None) -> list[str]:
    """The modules of one layer, named ``layer.name`` (its ``__init__`` left out)."""
    graph = _graph() if graph is None else graph
    prefix = f"{PROFILER}{layer}."
    return sorted(name.removeprefix(PROFILER) for name in graph if name.startswith(prefix))


def layer_of(module: str) -> str:
    return module.split(".", 1)[0]


def crossings(layer: str, graph: dict[str, set[str]] | None = None) -> dict[str, list[str]]:
    """Each module of ``layer`` that reaches a module of a layer it may not, with those."""
    found: dict[str, list[str]] = {}
    for module in modules_of(layer, graph):
        above = sorted(m for m in reached(module, graph) if layer_of(m) not in MAY_REACH[layer])
        if above:
            found[module] = above
    return found


def test_every_profiler_module_sits_in_a_layer() -> None:
    profiler = PACKAGE_DIR / "profiler"
    loose = sorted(p.name for p in profiler.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"profiler/ holds modules outside its layers: {loose}"
    packages = sorted(p.name for p in profiler.iterdir() if (p / "__init__.py").is_file())
    assert packages == sorted(LAYERS)
    for layer in LAYERS:
        assert modules_of(layer), f"profiler/{layer}/ has no module"


def test_each_layer_says_what_it_owns_and_imports_nothing() -> None:
    """A layer's ``__init__`` is its docstring only: importing one module of it loads
    no other module behind the import graph's back."""
    for init in [PACKAGE_DIR / "profiler" / "__init__.py"] + [
        PACKAGE_DIR / "profiler" / layer / "__init__.py" for layer in LAYERS
    ]:
        tree = ast.parse(init.read_text(encoding="utf-8"))
        assert ast.get_docstring(tree), f"{init} has no docstring"
        assert len(tree.body) == 1, f"{init} holds more than its docstring"


def test_settings_and_records_import_no_provider_no_runner_and_no_report() -> None:
    assert not crossings("records")


def test_reports_depend_on_records_not_on_the_runner_or_a_provider() -> None:
    assert not crossings("report")


def test_providers_depend_on_records_not_on_the_runner_or_a_report() -> None:
    assert not crossings("providers")


def test_the_runner_drives_providers_through_their_contract_only() -> None:
    providers = {m for m in reached("run.runner") if layer_of(m) == "providers"}
    assert providers == {"providers.provider"}


def test_the_cli_process_runner_knows_no_agent() -> None:
    assert reached("providers.cli_process") <= {
        "records.trace_builder",
        "records.trace",
        "records.types",
    }
    assert "providers.cli_process" in reached("providers.claude_code")


def test_a_layer_reached_through_a_third_module_is_found(tmp_path: Path) -> None:
    package = tmp_path / "llmbridge"
    for layer in ("", *LAYERS):
        (package / "profiler" / layer).mkdir(parents=True, exist_ok=True)
        (package / "profiler" / layer / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "profiler" / "records" / "types.py").write_text("")
    (package / "profiler" / "records" / "stats.py").write_text(
        "def mean() -> None:\n    from llmbridge.profiler.records import helper\n"
    )
    (package / "profiler" / "records" / "helper.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from llmbridge.profiler.run.runner import Run\n"
    )
    (package / "profiler" / "run" / "runner.py").write_text(
        "from llmbridge.profiler.records.types import Record\n"
    )
    graph = import_graph(package)
    assert crossings("records", graph) == {
        "records.helper": ["run.runner"],
        "records.stats": ["run.runner"],
    }
    assert not crossings("run", graph)

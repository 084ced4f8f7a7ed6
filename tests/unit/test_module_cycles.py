"""No import circle between two modules of src/llmbridge.

``test_layering.py`` checks the packages against docs/ARCHITECTURE.md's table; inside a
package any import is allowed, so two modules could still import each other (the last
such pair was ``gateway/state.py`` <-> ``gateway/server/workers.py``). This test reads every
module's imports the way the layering test does (module level, ``TYPE_CHECKING``, lazy,
relative: a type-only or lazy import is still a circle, only hidden) and fails naming
every group of modules that reach each other.
"""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_layering import PACKAGE_DIR, _module_name, imports_of


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Each module's dotted name and the llmbridge modules (or packages) it imports."""
    source = package_dir.parent
    graph: dict[str, set[str]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        name, _ = _module_name(path, source)
        graph[name] = {imp.target for imp in imports_of(path, package_dir)} - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm,
    iterative: the graph has hundreds of modules)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root] & graph.keys()))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph[nxt] & graph.keys())))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return sorted(found)


def test_no_two_modules_import_each_other() -> None:
    found = circles(import_graph(PACKAGE_DIR))
    assert not found, "these modules import each other (move the shared type down a layer):\n" + (
        "\n".join(" <-> ".join(group) for group in found)
    )


def test_a_type_only_circle_is_found(tmp_path: Path) -> None:
    package = tmp_path / "llmbridge"
    (package / "gateway").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "gateway" / "__init__.py").write_text("")
    (package / "gateway" / "state.py").write_text(
        "from llmbridge.gateway.workers import WorkerBoard\n"
    )
    (package / "gateway" / "workers.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from llmbridge.gateway.state import GatewayState\n"
    )
    (package / "gateway" / "app.py").write_text("from . import state\n")
    assert circles(import_graph(package)) == [
        ["llmbridge.gateway.state", "llmbridge.gateway.workers"]
    ]

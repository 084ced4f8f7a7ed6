"""The package layering written in docs/ARCHITECTURE.md, checked against the code.

The "Layers" table in docs/ARCHITECTURE.md is the specification. Its first column names
a package (`` `core/` ``), its "may import" column (the last) the llmbridge packages that
package's modules may import, each in backticks. This test reads that table, parses every
module under src/llmbridge with `ast`, and fails listing each import the table does not
allow, so the layering cannot drift again. How the table is read:

- `` `pkg` `` in "may import" allows every module of src/llmbridge/pkg/.
- `` `pkg.module` `` allows that one module only (and the modules inside it when it is a
  package): `gateway.config` would let a layer read the configuration without reaching
  into the rest of the gateway. A bare module name after a package, as in
  "`gateway` (`config`)", is not read as a qualifier: it is an unknown package and fails
  the parse with a hint to write `gateway.config`. A qualifier narrows what a layer takes
  from a layer below it; it is no licence to reach upwards (see the cycle rule below).
- A cell with no backticks allows nothing in llmbridge ("the stdlib and orjson"), except
  a cell that says just "everything", which allows every package (`cli/`).
- Imports within a package are always allowed; the stdlib and third-party packages are
  not this test's business.
- Every import counts: at module level, under `if TYPE_CHECKING:` (a type-only import
  couples the two packages all the same: the names, and every change to them, cross the
  boundary), inside functions (a lazy import is still an import, only later), relative
  ones (`from ..gateway import app`), `from llmbridge.pkg import module` (the module, not
  just the package), and `importlib.import_module("llmbridge...")` with a literal name.
- Every package directory under src/llmbridge needs a row, and every name in the table
  must exist, so a new package cannot slip past the check and a renamed one cannot leave
  a stale row. The table must have no cycle, qualifiers counted as their package: two
  packages allowed to import each other are one layer, not two.
- Top-level modules (files directly in src/llmbridge/) have no row. `__init__.py` holds
  the distribution's metadata (`__version__`), which every layer may import, and must
  itself import nothing from llmbridge: every `import llmbridge.x` runs it, so an import
  there would pull a layer into all the others. Any other top-level module
  (`__main__.py`) is an entry point like `cli/`: it may import anything, and nothing may
  import it.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = ROOT / "src" / "llmbridge"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
TOP = "llmbridge"

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_DOTTED = re.compile(rf"{_NAME}(\.{_NAME})*")
_PACKAGE_CELL = re.compile(rf"`({_NAME})/?`")
_CELL_SEPARATOR = re.compile(r"(?<!\\)\|")


class LayersTableError(Exception):
    """docs/ARCHITECTURE.md's Layers table cannot be read, or names what does not exist."""


@dataclass(frozen=True)
class Layer:
    """One row of the Layers table: a package and what its modules may import."""

    package: str
    packages: frozenset[str]
    modules: frozenset[str]  # dotted below llmbridge: "gateway.config"

    def allows(self, target: str) -> bool:
        """Whether this package may import `target`, dotted below llmbridge."""
        head = target.split(".", 1)[0]
        if head == self.package or head in self.packages:
            return True
        return any(target == m or target.startswith(m + ".") for m in self.modules)

    def describe(self) -> str:
        allowed = sorted(self.packages) + sorted(self.modules)
        if not allowed:
            return f"{self.package} may import nothing in llmbridge"
        return f"{self.package} may import {', '.join(allowed)}"


# --- reading the table --------------------------------------------------------------


def package_names(package_dir: Path) -> set[str]:
    """The packages directly under src/llmbridge (namespace packages included)."""
    return {
        d.name
        for d in package_dir.iterdir()
        if d.is_dir() and d.name.isidentifier() and not d.name.startswith("__")
        if any(d.rglob("*.py"))
    }


def _is_module(package_dir: Path, dotted: str) -> bool:
    """Whether `dotted` (below llmbridge) is a module or package on disk."""
    path = package_dir.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or path.is_dir()


def _table_lines(markdown: str) -> list[tuple[int, str]]:
    """The first table under the "## Layers" heading, with 1-based line numbers."""
    lines = markdown.splitlines()
    start = next((i for i, line in enumerate(lines) if re.match(r"##\s+Layers\b", line)), None)
    if start is None:
        raise LayersTableError("docs/ARCHITECTURE.md has no '## Layers' heading")
    rows: list[tuple[int, str]] = []
    for number, line in enumerate(lines[start + 1 :], start + 2):
        if line.startswith("#"):
            break
        if line.lstrip().startswith("|"):
            rows.append((number, line.strip()))
        elif rows:
            break
    separator = _cells(rows[1][1]) if len(rows) > 1 else []
    if len(rows) < 3 or not all(re.fullmatch(r":?-{3,}:?", cell) for cell in separator):
        raise LayersTableError(
            "docs/ARCHITECTURE.md: no table (header, separator, rows) under '## Layers'"
        )
    return rows


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in _CELL_SEPARATOR.split(line.strip().strip("|"))]


def _allowed_names(cell: str, packages: set[str], where: str) -> list[str]:
    """The backticked names of one "may import" cell, "everything" read as every package."""
    names = [name.strip().rstrip("/") for name in re.findall(r"`([^`]+)`", cell)]
    if not names and cell.strip().rstrip(".").lower() == "everything":
        return sorted(packages)
    for name in names:
        if not _DOTTED.fullmatch(name):
            raise LayersTableError(f"{where}: `{name}` is not a package or `pkg.module` name")
    return names


def _check_exists(names: list[str], packages: set[str], package_dir: Path, where: str) -> None:
    for name in names:
        head = name.split(".", 1)[0]
        if head not in packages:
            hint = f" (to allow one module write `pkg.{name}`)" if "." not in name else ""
            raise LayersTableError(
                f"{where}: `{name}` names no package under src/llmbridge{hint}; "
                f"the packages are {', '.join(sorted(packages))}"
            )
        if "." in name and not _is_module(package_dir, name):
            raise LayersTableError(f"{where}: `{name}` names no module under src/llmbridge")


def parse_layers_table(markdown: str, package_dir: Path) -> dict[str, Layer]:
    """The Layers table as one `Layer` per package; `LayersTableError` says what is wrong."""
    header_number, header_line = _table_lines(markdown)[0]
    header = [cell.lower() for cell in _cells(header_line)]
    if "may import" not in header:
        raise LayersTableError(
            f"docs/ARCHITECTURE.md:{header_number}: the Layers table has no 'may import' "
            f"column (columns: {', '.join(header)})"
        )
    column = header.index("may import")
    packages = package_names(package_dir)
    layers: dict[str, Layer] = {}
    for number, line in _table_lines(markdown)[2:]:
        where = f"docs/ARCHITECTURE.md:{number}"
        cells = _cells(line)
        if len(cells) != len(header):
            raise LayersTableError(
                f"{where}: {len(cells)} cells where the header has {len(header)} "
                "(a '|' inside a cell must be written '\\|')"
            )
        match = _PACKAGE_CELL.fullmatch(cells[0])
        if match is None:
            raise LayersTableError(f"{where}: the first cell {cells[0]!r} is not `package/`")
        package = match.group(1)
        _check_exists([package], packages, package_dir, where)
        if package in layers:
            raise LayersTableError(f"{where}: `{package}/` has a second row")
        names = _allowed_names(cells[column], packages, where)
        _check_exists(names, packages, package_dir, where)
        layers[package] = Layer(
            package=package,
            packages=frozenset(n for n in names if "." not in n and n != package),
            modules=frozenset(n for n in names if "." in n and n.split(".")[0] != package),
        )
    missing = packages - layers.keys()
    if missing:
        raise LayersTableError(
            "docs/ARCHITECTURE.md: the Layers table has no row for "
            + ", ".join(f"`{name}/`" for name in sorted(missing))
        )
    return layers


# --- reading the code ---------------------------------------------------------------


@dataclass(frozen=True)
class Import:
    """One import of an llmbridge module, where it is written."""

    path: str  # "llmbridge/agent/llm.py"
    line: int
    target: str  # "llmbridge.gateway.pipeline"


def _module_name(path: Path, source: Path) -> tuple[str, str]:
    """The module's dotted name and the package its relative imports start from."""
    parts = list(path.relative_to(source).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
        return ".".join(parts), ".".join(parts)
    return ".".join(parts), ".".join(parts[:-1])


def _resolve_from(node: ast.ImportFrom, package: str, where: str) -> str:
    if node.level == 0:
        return node.module or ""
    base = package.split(".")
    if node.level - 1 >= len(base):
        raise ImportError(f"{where}: a relative import beyond the top-level package")
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _is_llmbridge(name: str) -> bool:
    return name == TOP or name.startswith(TOP + ".")


def _literal_import_module(node: ast.Call) -> str | None:
    """The name in `importlib.import_module("...")` / `__import__("...")`, if literal."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


def imports_of(path: Path, package_dir: Path) -> list[Import]:
    """Every llmbridge import in one file: module level, TYPE_CHECKING, lazy, relative."""
    source = package_dir.parent
    shown = path.relative_to(source).as_posix()
    _, package = _module_name(path, source)
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=shown)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_from(node, package, f"{shown}:{node.lineno}")
            for alias in node.names:
                # `from llmbridge.gateway import config` imports the module gateway.config;
                # `from llmbridge.gateway import SOMETHING` only the package.
                sub = f"{base}.{alias.name}"
                is_sub = _is_llmbridge(sub) and _is_module(package_dir, sub[len(TOP) + 1 :])
                found.append((node.lineno, sub if is_sub else base))
        elif isinstance(node, ast.Call) and (name := _literal_import_module(node)):
            found.append((node.lineno, name))
    return [Import(shown, line, target) for line, target in found if _is_llmbridge(target)]


def _below_top(target: str) -> str:
    return target[len(TOP) + 1 :] if target != TOP else ""


def _violation(imp: Import, layers: dict[str, Layer], entry_points: set[str]) -> str | None:
    """Why this import breaks the layering, or None when it is allowed."""
    importer = imp.path.split("/")
    target = _below_top(imp.target)
    if importer == [TOP, "__init__.py"]:
        return "llmbridge/__init__.py holds metadata only and imports nothing from llmbridge"
    if target.split(".", 1)[0] in entry_points:
        return f"{TOP}.{target.split('.', 1)[0]} is an entry point, which nothing imports"
    if len(importer) == 2 or not target:
        return None  # an entry point imports anything; everyone may read the metadata
    layer = layers[importer[1]]
    return None if layer.allows(target) else layer.describe()


def find_violations(package_dir: Path, layers: dict[str, Layer]) -> list[str]:
    """One line per (file, imported module) the table does not allow, sorted."""
    entry_points = {p.stem for p in package_dir.glob("*.py") if p.name != "__init__.py"}
    lines: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for path in sorted(package_dir.rglob("*.py")):
        for imp in imports_of(path, package_dir):
            reason = _violation(imp, layers, entry_points)
            if reason is not None:
                lines[(imp.path, imp.target, reason)].append(imp.line)
    return [
        f"{path}:{','.join(map(str, sorted(set(at))))} imports {target}: {reason}"
        for (path, target, reason), at in sorted(lines.items())
    ]


def table_cycle(layers: dict[str, Layer]) -> list[str] | None:
    """A cycle among the packages the table lets import each other, if there is one."""
    graph = {
        name: {*layer.packages, *(m.split(".")[0] for m in layer.modules)}
        for name, layer in layers.items()
    }
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        return list(exc.args[1])
    return None


# --- the project's own table and code -----------------------------------------------


def _project_layers() -> dict[str, Layer]:
    try:
        return parse_layers_table(ARCHITECTURE.read_text(encoding="utf-8"), PACKAGE_DIR)
    except LayersTableError as exc:
        problem = str(exc)
    pytest.fail(problem, pytrace=False)  # outside `except`: no chained traceback to read


def test_the_layers_table_names_every_package_and_has_no_cycle() -> None:
    layers = _project_layers()
    assert layers.keys() == package_names(PACKAGE_DIR)
    cycle = table_cycle(layers)
    assert cycle is None, "the Layers table lets these import each other: " + " -> ".join(cycle)


def test_every_import_follows_the_layers_table() -> None:
    violations = find_violations(PACKAGE_DIR, _project_layers())
    if violations:
        pytest.fail(
            f"{len(violations)} imports break the Layers table in docs/ARCHITECTURE.md "
            "(fix the import, or change the table if the layering itself changed):\n"
            + "\n".join(violations),
            pytrace=False,
        )


# --- the checker itself, on a small tree of its own ---------------------------------

TABLE = """# Architecture

## Layers (`src/llmbridge/`)

| package | owns | may import |
|---|---|---|
| `base/` | values | the stdlib |
| `store/` | storage, `a` \\| `b` | `base` |
| `logic/` | the rules | `base`, `store.config` |
| `cli/` | commands | everything |

## Next section
"""

RULES_MODULE = """
from __future__ import annotations

import importlib
import json
from typing import TYPE_CHECKING

import llmbridge.base.values
import llmbridge.store.config
from llmbridge import __version__, store
from llmbridge.logic import helpers
from llmbridge.store import app, config
from llmbridge.store.config.schema import Schema

from . import helpers as same
from ..store import app as relative_app

if TYPE_CHECKING:
    from llmbridge.store.app import App


def later() -> None:
    from llmbridge.store import server

    importlib.import_module("llmbridge.store.app")
"""


def _small_tree(root: Path, **replaced: str) -> Path:
    files = {
        "__init__.py": '__version__ = "0"\n',
        "__main__.py": "from llmbridge.cli import main\n",
        "base/__init__.py": "",
        "base/values.py": "import orjson\n",
        "store/__init__.py": "",
        "store/app.py": "from llmbridge.base import values\n",
        "store/server.py": "",
        "store/config/__init__.py": "",
        "store/config/schema.py": "",
        "logic/__init__.py": "",
        "logic/helpers.py": "",
        "logic/rules.py": RULES_MODULE,
        "cli/__init__.py": "from llmbridge.logic import rules\nfrom llmbridge.store import app\n",
    }
    package_dir = root / "llmbridge"
    for name, text in {**files, **replaced}.items():
        path = package_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return package_dir


def test_the_checker_reads_qualifiers_everything_and_escaped_bars(tmp_path: Path) -> None:
    layers = parse_layers_table(TABLE, _small_tree(tmp_path))
    assert layers == {
        "base": Layer("base", frozenset(), frozenset()),
        "store": Layer("store", frozenset({"base"}), frozenset()),
        "logic": Layer("logic", frozenset({"base"}), frozenset({"store.config"})),
        "cli": Layer("cli", frozenset({"base", "store", "logic"}), frozenset()),
    }
    assert table_cycle(layers) is None
    assert layers["logic"].describe() == "logic may import base, store.config"
    assert layers["base"].describe() == "base may import nothing in llmbridge"


def test_the_checker_finds_every_kind_of_import(tmp_path: Path) -> None:
    package_dir = _small_tree(tmp_path)
    violations = find_violations(package_dir, parse_layers_table(TABLE, package_dir))
    rule = "logic may import base, store.config"
    # Allowed in rules.py: base, store.config and the modules in it, logic itself, the
    # metadata, the stdlib. cli and __main__ import anything.
    assert violations == [
        f"llmbridge/logic/rules.py:10 imports llmbridge.store: {rule}",
        f"llmbridge/logic/rules.py:12,16,19,25 imports llmbridge.store.app: {rule}",
        f"llmbridge/logic/rules.py:23 imports llmbridge.store.server: {rule}",
    ]


def test_the_root_imports_nothing_and_nothing_imports_an_entry_point(tmp_path: Path) -> None:
    package_dir = _small_tree(
        tmp_path,
        **{
            "__init__.py": "from llmbridge.base import values\n",
            "base/x.py": "import llmbridge.__main__\n",
            "logic/rules.py": "",
        },
    )
    assert find_violations(package_dir, parse_layers_table(TABLE, package_dir)) == [
        "llmbridge/__init__.py:1 imports llmbridge.base.values: "
        "llmbridge/__init__.py holds metadata only and imports nothing from llmbridge",
        "llmbridge/base/x.py:1 imports llmbridge.__main__: "
        "llmbridge.__main__ is an entry point, which nothing imports",
    ]


@pytest.mark.parametrize(
    ("old", "new", "cycle"),
    [
        ("| values | the stdlib |", "| values | `store` |", ["base", "store"]),
        # A `pkg.module` qualifier narrows what a layer takes from a lower one; it is no
        # licence to reach upwards.
        ("| storage, `a` \\| `b` | `base` |", "| storage | `logic.helpers` |", ["logic", "store"]),
    ],
)
def test_a_cycle_in_the_table_is_found(
    tmp_path: Path, old: str, new: str, cycle: list[str]
) -> None:
    assert old in TABLE
    layers = parse_layers_table(TABLE.replace(old, new), _small_tree(tmp_path))
    assert sorted(set(table_cycle(layers) or [])) == cycle


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("## Layers", "## Packages", "no '## Layers' heading"),
        ("| may import |", "| imports |", "has no 'may import' column"),
        ("|---|---|---|\n", "", "no table (header, separator, rows)"),
        ("| `base/` |", "| base |", "the first cell 'base' is not `package/`"),
        ("`base`, `store.config`", "`base`, `store` (`config`)", "`config` names no package"),
        ("`store.config`", "`store.settings`", "`store.settings` names no module"),
        ("`base`, `store.config`", "`basis`", "`basis` names no package under src/llmbridge"),
        ("| `cli/` | commands | everything |\n", "", "has no row for `cli/`"),
        ("| `cli/` |", "| `logic/` |", "`logic/` has a second row"),
        ("storage, `a` \\| `b`", "storage, `a` | `b`", "4 cells where the header has 3"),
        ("`store.config`", "`store config`", "`store config` is not a package or `pkg.module`"),
    ],
)
def test_a_table_that_cannot_be_read_fails_saying_where(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    assert old in TABLE
    with pytest.raises(LayersTableError, match=re.escape(message)):
        parse_layers_table(TABLE.replace(old, new), _small_tree(tmp_path))

"""Nothing outside ``gateway/exchange/`` writes what the request's ``Exchange`` records.

The ledger row, the metrics and the span read the Exchange's fields once, when it
finishes; a route or the pipeline that set one of them by hand (the retries, the
prompt's estimate, the usage, as they used to) could leave the others out of step. So
the Exchange keeps its fields private, read through properties that have no setter,
and takes what it needs through its methods (``served``, ``counted_prompt``,
``agent_usage``...). Two checks: the class has no public field to assign (mypy rejects
an assignment to a read-only property, and so does Python), and no module outside the
package assigns an attribute of an exchange (an AST scan, proved on a sample).
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from llmbridge.gateway.exchange.exchange import Exchange
from tests.unit.test_layering import PACKAGE_DIR

PACKAGE = PACKAGE_DIR / "gateway" / "exchange"


def _public_names() -> list[str]:
    return [name for name in dir(Exchange) if not name.startswith("_")]


def _private_fields() -> set[str]:
    return {slot for slot in Exchange.__slots__ if slot.startswith("_")}


def test_every_field_of_the_exchange_is_private() -> None:
    public_slots = [slot for slot in Exchange.__slots__ if not slot.startswith("_")]
    assert not public_slots, f"public, assignable fields of Exchange: {public_slots}"


def test_what_the_exchange_shows_is_read_only() -> None:
    exchange = Exchange.__new__(Exchange)  # no state needed: nothing is read
    shown = _public_names()
    assert "status" in shown and "retries" in shown  # what the ledger reads is shown
    for name in shown:
        member = inspect.getattr_static(Exchange, name)
        if isinstance(member, property):
            assert member.fset is None, f"Exchange.{name} has a setter"
        else:
            assert callable(member), f"Exchange.{name} is neither a method nor a property"
        with pytest.raises(AttributeError):
            setattr(exchange, name, None)


def _names_an_exchange(node: ast.expr) -> bool:
    """``exchange``, ``ex``, ``self.exchange``, ``pass_.exchange``...: an expression
    that by its name holds an Exchange."""
    if isinstance(node, ast.Name):
        return node.id == "ex" or "exchange" in node.id.lower()
    if isinstance(node, ast.Attribute):
        return "exchange" in node.attr.lower()
    return False


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        found: list[ast.expr] = []
        for target in node.targets:
            found += target.elts if isinstance(target, ast.Tuple | ast.List) else [target]
        return found
    if isinstance(node, ast.AugAssign | ast.AnnAssign):
        return [node.target]
    return []


def exchange_assignments(source: str, shown: str, private: set[str]) -> list[str]:
    """``shown:line: target`` for each assignment in ``source`` to an attribute of an
    Exchange: any attribute of a name that holds one (``exchange.retries = ...``), or
    one of its ``private`` slots on anything but ``self`` (``obj._status = ...``)."""
    found = []
    for node in ast.walk(ast.parse(source, filename=shown)):
        for target in _targets(node):
            if not isinstance(target, ast.Attribute):
                continue
            owner = target.value
            is_self = isinstance(owner, ast.Name) and owner.id in ("self", "cls")
            if _names_an_exchange(owner) or (target.attr in private and not is_self):
                found.append(f"{shown}:{node.lineno}: {ast.unparse(target)}")
    return found


def test_the_scan_finds_an_assignment_to_an_exchange() -> None:
    sample = (
        "exchange.retries, exchange.fallbacks = reply.retries, reply.fallbacks\n"
        "self.exchange.usage = usage\n"
        "ex.prompt_tokens += 1\n"
        "other._status: int = 500\n"
        "self._status = 200\n"  # a class's own field
        "response.status = 404\n"  # not an exchange
        "response._other = 1\n"  # not an Exchange's slot
    )
    assert exchange_assignments(sample, "sample.py", {"_status"}) == [
        "sample.py:1: exchange.retries",
        "sample.py:1: exchange.fallbacks",
        "sample.py:2: self.exchange.usage",
        "sample.py:3: ex.prompt_tokens",
        "sample.py:4: other._status",
    ]


def test_no_module_outside_the_package_assigns_an_exchange_field() -> None:
    private = _private_fields()
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if PACKAGE in path.parents:
            continue
        shown = path.relative_to(PACKAGE_DIR.parent).as_posix()
        found += exchange_assignments(path.read_text(encoding="utf-8"), shown, private)
    assert not found, (
        "these write an Exchange's fields (give the Exchange a method that takes what it "
        "needs):\n" + "\n".join(found)
    )


def test_the_scan_reads_the_package_it_guards() -> None:
    assert (PACKAGE / "exchange.py").is_file()
    assert Path(inspect.getfile(Exchange)).parent == PACKAGE

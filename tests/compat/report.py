"""What ``make compat`` found, as data and as text: pytest's JUnit XML read into one
outcome per test, each client's result from the outcomes of its modules, the table in
docs/COMPATIBILITY.md and the summary printed at the end. Pure: the caller reads and
writes the files.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tests.compat.clients import Client

FAILED = ("failure", "error")


@dataclass(frozen=True)
class Outcome:
    """One test's result, as pytest's JUnit report gives it."""

    test_id: str
    """``path/to/test_module.py::test_name[param]`` (a collection error: the module path)."""
    status: str
    """``passed``, ``failed`` or ``skipped``."""


@dataclass(frozen=True)
class Run:
    """One pytest run: its exit status and what its report said."""

    exit_code: int
    outcomes: tuple[Outcome, ...]
    log: str
    """Where its output was written (the summary points there)."""


@dataclass(frozen=True)
class Result:
    """A client's row."""

    client: Client
    pinned: str
    newest: str
    failed: tuple[str, ...] = ()
    passed: int = 0
    skipped: int = 0
    note: str = ""
    """Why it was not run or the run broke before any test result; empty otherwise."""
    logs: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.failed and not self.note.startswith("FAIL")

    def cell(self, limit: int = 6) -> str:
        """The result column: ``pass``, ``FAIL: <test ids>``, or the note."""
        if self.failed:
            shown = ", ".join(f"`{test_id}`" for test_id in self.failed[:limit])
            more = len(self.failed) - limit
            return f"FAIL: {shown}" + (f" and {more} more" if more > 0 else "")
        if self.note:
            return self.note
        if self.passed == 0:
            return "not run: every test skipped"
        return "pass"


def _module_path(dotted: str) -> tuple[str, list[str]]:
    """``tests.e2e.test_x.TestY`` -> (``tests/e2e/test_x.py``, [``TestY``]): the module
    is everything up to the last part named ``test_*``; what follows are classes."""
    parts = dotted.split(".")
    last = max((i for i, part in enumerate(parts) if part.startswith("test_")), default=-1)
    if last < 0:
        return "/".join(parts) + ".py", []
    return "/".join(parts[: last + 1]) + ".py", parts[last + 1 :]


def node_id_of(classname: str, name: str) -> str:
    """The pytest node id of a JUnit ``testcase`` (``classname`` empty: a collection
    error, whose ``name`` is the dotted module)."""
    if not classname:
        return _module_path(name)[0]
    module, classes = _module_path(classname)
    return "::".join([module, *classes, name])


def parse_junit(xml_text: str) -> tuple[Outcome, ...]:
    """One outcome per test of a JUnit XML report (pytest's ``--junitxml``); a test that
    failed and then errored in teardown is one failed outcome."""
    root = ET.fromstring(xml_text)
    by_id: dict[str, str] = {}
    for case in root.iter("testcase"):
        node_id = node_id_of(case.get("classname", ""), case.get("name", ""))
        tags = {child.tag for child in case}
        if tags & set(FAILED):
            status = "failed"
        elif "skipped" in tags:
            status = "skipped"
        else:
            status = "passed"
        if by_id.get(node_id) != "failed":
            by_id[node_id] = status
    return tuple(Outcome(node_id, status) for node_id, status in by_id.items())


def result_of(client: Client, pinned: str, newest: str, runs: Iterable[Run]) -> Result:
    """``client``'s result from the runs that included its modules: its failed tests, or
    a broken run (an exit status pytest gives when it could not run the tests), or pass."""
    modules = set(client.modules)
    failed: list[str] = []
    passed = skipped = 0
    logs: list[str] = []
    note = ""
    for run in runs:
        mine = [o for o in run.outcomes if o.test_id.partition("::")[0] in modules]
        logs.append(run.log)
        failed += [o.test_id for o in mine if o.status == "failed"]
        passed += sum(o.status == "passed" for o in mine)
        skipped += sum(o.status == "skipped" for o in mine)
        if run.exit_code not in (0, 1, 5) and not any(o.status == "failed" for o in mine):
            # 2: interrupted, 3: internal error, 4: usage error; no test of ours failed,
            # so the run itself broke and its results cannot be trusted.
            note = f"FAIL: pytest exited {run.exit_code} (see {run.log})"
    return Result(client, pinned, newest, tuple(failed), passed, skipped, note, tuple(logs))


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def table(rows: Sequence[Result], extra: Sequence[Sequence[str]] = ()) -> str:
    """The Markdown table: ``client | pinned | newest | dialect | result``; ``extra``
    rows (five cells each) go last, as they are."""
    lines = [
        "| client | pinned | newest | dialect | result |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        cells = [row.client.name, row.pinned, row.newest, row.client.dialect, row.cell()]
        lines.append("| " + " | ".join(_escape(c) for c in cells) + " |")
    for cells in extra:
        lines.append("| " + " | ".join(_escape(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def document(
    rows: Sequence[Result],
    *,
    date: str,
    commit: str,
    pytest_args: str,
    runtime: str = "",
    extra: Sequence[Sequence[str]] = (),
) -> str:
    """docs/COMPATIBILITY.md: what it is, how to run it, when and on what it ran
    (``runtime``: Node's and Python's versions, say), the table, and how many tests
    each client ran."""
    broke = [row.client.name for row in rows if not row.ok]
    verdict = (
        "Every newest release passed."
        if not broke
        else "Broke with the newest release: " + ", ".join(broke) + "."
    )
    return (
        "# Compatibility with the newest client releases\n\n"
        "`make test` drives pinned clients (tests/e2e/package.json for Claude Code, Codex,\n"
        "the Gemini CLI, OpenCode, ollama-js and @google/genai; pyproject.toml's `dev` extra\n"
        "for the `openai`, `anthropic`, `google-genai` and `ollama` Python SDKs). `make\n"
        "compat` is the canary for their next releases: it installs the newest published\n"
        "version of each in `.compat/` (npm `@latest`; a virtualenv with the project and\n"
        "`pip install -U` of the four SDKs), runs each Node client's end-to-end tests and\n"
        "the gateway tests that use the Python SDKs against them, and writes this page. It\n"
        "is not part of `make test`, and it changes no pin. It prints which client broke\n"
        "in which test, and exits non-zero when one did.\n\n"
        "```sh\n"
        "make compat                                  # everything (installs, then runs)\n"
        'make compat COMPAT_ARGS="--no-install"       # again, on what .compat/ holds\n'
        "```\n\n"
        f"Last run: {date}, on commit `{commit}`"
        + (f", {runtime}" if runtime else "")
        + f", pytest arguments `{pytest_args}`. {verdict}\n\n"
        "A result is `pass`, or `FAIL:` with the tests that failed. A Python SDK's\n"
        "result counts the tests of every gateway module that imports it, so a module that\n"
        "uses two SDKs counts for both.\n\n"
        f"{table(rows, extra)}\n"
        f"Tests run: {counts(rows)}.\n"
    )


def counts(rows: Sequence[Result]) -> str:
    """``name N passed`` (and ``, M skipped`` where some were) for each client."""
    return "; ".join(
        f"{row.client.name} {row.passed} passed"
        + (f", {len(row.failed)} failed" if row.failed else "")
        + (f", {row.skipped} skipped" if row.skipped else "")
        for row in rows
    )


def summary(rows: Sequence[Result]) -> str:
    """The lines printed at the end: each client, its versions and what happened;
    every failed test of a client that broke, and where its log is."""
    lines = []
    for row in rows:
        state = "ok" if row.ok else "BROKE"
        counts = f"{row.passed} passed, {len(row.failed)} failed, {row.skipped} skipped"
        lines.append(
            f"{state:5} {row.client.name} {row.newest} (pinned {row.pinned}): {counts}"
            + (f"; {row.note}" if row.note else "")
        )
        for failed in row.failed:
            lines.append(f"        failed: {failed}")
        if not row.ok:
            lines.append(f"        log: {', '.join(sorted(set(row.logs)))}")
    return "\n".join(lines) + "\n"


def versions_line(versions: Mapping[str, str]) -> str:
    """``name version, ...``, for the progress output."""
    return ", ".join(f"{name} {version}" for name, version in versions.items())

"""``llmbridge profile import``: sessions the profiler did not run, as a profiled run
(the sessions a developer actually had, read from their CLIs' files).

Each file given (or each ``*.json`` and ``*.jsonl`` under a directory given, such as a
run's ``trajectories/``) is read as what it is: an ATIF trajectory (``.json``, records/atif.py),
or a session file a CLI kept (``.jsonl``: Claude Code's transcript, Codex's rollout or
Gemini CLI's session, told apart by their lines; records/transcripts.py turns each into an
ATIF trajectory). Every trajectory is validated against ATIF's schema first, so a file
that is not one is named with what is wrong, never half read.
Each becomes an ``IterationRecord``; its findings are scanned (records/findings.py) when the
file carried none, and the records are written as a run directory: ``traces.jsonl``,
``summary.json``, ``report.md``, ``report.html`` and ``trajectories/``, which
``profile compare`` and the reports read like any run's.

The gateway's own spans (OTLP/JSON, as a collector's file exporter writes them: one
``ExportTraceServiceRequest`` per line or per file) become one record per client
session, its requests as steps with their models, tokens and times (the spans hold no
prompt or reply).

What it reads is bounded (records/input_files.py): regular files only (a FIFO, a device, a
symlink to one is skipped with a warning), a ``.jsonl`` file a line at a time, no
line over ``InputLimits.max_line_bytes`` and no more than ``max_bytes`` in all; the
work grows with the input, line by line. Anything no report can use (a value JSON
allows but the reports cannot take, a time out of range, a field of the wrong type)
stops the import with a ``TrajectoryImportError`` naming the file and the line (or,
in a trajectory, the path to the value), before anything is written; and the run
directory is written whole or not at all (``write_run``).
"""

from __future__ import annotations

import gc
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from itertools import chain, islice
from pathlib import Path
from typing import Any

import jsonschema

from llmbridge.profiler.records.atif import ATIF_SCHEMA, from_atif, timestamp_ms
from llmbridge.profiler.records.findings import scan
from llmbridge.profiler.records.input_files import (
    ByteBudget,
    InputError,
    InputLimits,
    InputValueError,
    JsonLines,
    NotRegularFile,
    not_regular,
    read_document,
    unexpected_shape,
)
from llmbridge.profiler.records.record_checks import check_record
from llmbridge.profiler.records.records import IterationRecord, summarise
from llmbridge.profiler.records.transcripts import (
    TranscriptLineError,
    claude_code_to_atif,
    codex_rollout_to_atif,
    gemini_session_to_atif,
    otlp_lines_to_atif,
    otlp_to_atif,
    sniff,
)
from llmbridge.profiler.report.report import html_report, markdown_report
from llmbridge.profiler.run.runner import write_trajectories

__all__ = ["TrajectoryImportError", "import_paths", "write_run"]

_SHAPE_ERRORS = (KeyError, TypeError, AttributeError, ValueError, ArithmeticError)
"""What converting a trajectory with a field of the wrong shape raises: an error
naming the file, never a traceback."""

Warn = Callable[[str], None]
"""Told of each file passed over (``import_paths``'s ``skipped``)."""


class TrajectoryImportError(Exception):
    """A file ``profile import`` cannot read, with the file and the reason."""


def _files(paths: Sequence[Path], skipped: Warn) -> Iterator[Path]:
    """Each file to read: the ones given, and each ``*.json`` and ``*.jsonl`` under the
    directories given. What is not a regular file is ``skipped``, said why."""
    for path in paths:
        if path.is_dir():
            yield from sorted([*path.rglob("*.json"), *path.rglob("*.jsonl")])
        elif path.is_file():
            yield path
        elif path.exists():  # a FIFO, a device, a socket, or a symlink to one
            skipped(f"{path}: {not_regular(path, path.stat().st_mode)}: skipped")
        else:
            raise TrajectoryImportError(f"{path}: no such file or directory")


def _trajectories(path: Path, limits: InputLimits, budget: ByteBudget) -> tuple[list[Any], bool]:
    """``path`` as ATIF trajectories: one read as it is, one converted from a CLI's
    session file, or one per client session of the gateway's spans (OTLP/JSON); and
    whether they were read as they are (so ATIF's schema has to say they are ATIF: the
    converters' own output is, by their construction and their tests)."""
    if path.suffix != ".jsonl":
        try:
            data = read_document(path, budget)
        except (InputError, TrajectoryImportError):
            raise
        except ValueError as exc:
            raise TrajectoryImportError(f"{path}: not a JSON file: {exc}") from exc
        if not _is_otlp(data):
            return [data], True
        try:
            return otlp_to_atif([data]), False
        except _SHAPE_ERRORS as exc:
            raise TrajectoryImportError(f"{path}: {unexpected_shape(exc, 'a field')}") from exc
    lines = JsonLines(path, limits, budget)
    stream = iter(lines)
    head = list(islice(stream, 20))
    kind = sniff(head)
    every = chain(head, stream)
    if kind == "claude-code":
        return [claude_code_to_atif(every)], False
    if kind == "codex":
        return [codex_rollout_to_atif(every)], False
    if kind == "gemini-cli":
        return [gemini_session_to_atif(every)], False
    if kind == "otlp":
        return otlp_lines_to_atif(every), False
    raise TrajectoryImportError(
        f"{path}: not a Claude Code transcript, a Codex rollout, a Gemini CLI session or "
        "OTLP/JSON spans (no sessionId, session_meta, projectHash or resourceSpans)"
    )


def _is_otlp(data: Any) -> bool:
    return isinstance(data, dict) and "resourceSpans" in data


def _record(
    path: Path, data: Any, validator: jsonschema.Draft202012Validator | None
) -> IterationRecord:
    """One trajectory as a record, every value checked (module docstring); against
    ATIF's schema first when there is a ``validator``."""
    errors = validator.iter_errors(data) if validator is not None else iter(())
    problem = jsonschema.exceptions.best_match(errors)
    if problem is not None:
        where = "/".join(map(str, problem.absolute_path)) or "the top level"
        raise TrajectoryImportError(
            f"{path}: not an ATIF trajectory: at {where}: {problem.message}"
        )
    for n, step in enumerate(data["steps"]):
        try:
            timestamp_ms(step.get("timestamp"))
        except InputValueError as exc:
            raise TrajectoryImportError(f"{path}: at steps/{n}/timestamp: {exc.reason}") from exc
    try:
        record = from_atif(data)
    except _SHAPE_ERRORS as exc:
        raise TrajectoryImportError(
            f"{path}: not a trajectory llmbridge can read: {unexpected_shape(exc, 'a field')}"
        ) from exc
    if not record.findings:
        record.findings = [f.to_json() for f in scan(record, record.inputs)]
    if validator is None:  # a converter's: every value it holds was checked as read
        return record
    try:
        check_record(record.to_json())
    except InputValueError as exc:
        raise TrajectoryImportError(
            f"{path}: not a trajectory llmbridge can report: {exc.reason}"
        ) from exc
    return record


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off for a while: what an import builds is one
    record per session, millions of objects for a long one and no cycles, and the
    collector traversed them again each time allocations passed its threshold (40% of
    a 100,000-line import's time). Objects no longer used are still freed at once."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def import_paths(
    paths: Sequence[Path],
    limits: InputLimits | None = None,
    skipped: Warn | None = None,
) -> list[IterationRecord]:
    """The records of every trajectory in ``paths`` (module docstring); ``skipped`` is
    told of each file passed over (by default they pass silently)."""
    with _collector_paused():
        return _import(paths, limits or InputLimits(), skipped or (lambda _: None))


def _import(paths: Sequence[Path], limits: InputLimits, warn: Warn) -> list[IterationRecord]:
    budget = ByteBudget(limits)
    validator = jsonschema.Draft202012Validator(ATIF_SCHEMA)
    records: list[IterationRecord] = []
    read = 0
    for path in _files(paths, warn):
        try:
            trajectories, as_they_are = _trajectories(path, limits, budget)
        except NotRegularFile as exc:
            warn(f"{exc}: skipped")
            continue
        except InputError as exc:
            raise TrajectoryImportError(str(exc)) from exc
        except TranscriptLineError as exc:
            raise TrajectoryImportError(f"{path} line {exc.line}: {exc.reason}") from exc
        read += 1
        while trajectories:  # each let go once it is a record
            records.append(_record(path, trajectories.pop(0), validator if as_they_are else None))
    if not read:
        raise TrajectoryImportError("no trajectory files found in " + ", ".join(map(str, paths)))
    return records


def write_run(out: Path, records: Sequence[IterationRecord]) -> None:
    """``records`` as a run directory in ``out`` (module docstring): written in a new
    directory beside it and moved in place when every file is, so a failure half-way
    leaves ``out`` as it was."""
    out.parent.mkdir(parents=True, exist_ok=True)
    # mkdir, not tempfile.mkdtemp: the directory becomes ``out``, so it takes the
    # user's umask (mkdtemp's is 0700).
    staging = out.parent / f".{out.name}.partial-{secrets.token_hex(6)}"
    staging.mkdir()
    try:
        with _collector_paused():
            _write_files(staging, records)
        _move_into(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write_files(out: Path, records: Sequence[IterationRecord]) -> None:
    with (out / "traces.jsonl").open("w", encoding="utf-8") as sink:
        for record in records:  # a line at a time: no string of the whole file
            sink.write(json.dumps(record.to_json(), ensure_ascii=False) + "\n")
    summary = summarise(list(records))
    (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    (out / "report.md").write_text(markdown_report(summary, records), encoding="utf-8")
    (out / "report.html").write_text(html_report(summary, records), encoding="utf-8")
    write_trajectories(out, records)


def _move_into(staging: Path, out: Path) -> None:
    """The run written in ``staging`` as ``out``: the whole directory when ``out`` is
    new, else each file over its old one and ``trajectories/`` for the old one."""
    if not out.exists():
        staging.rename(out)
        return
    for name in ("traces.jsonl", "summary.json", "report.md", "report.html"):
        os.replace(staging / name, out / name)
    old = out / "trajectories"
    if old.exists():
        old.rename(staging / "trajectories-replaced")
    (staging / "trajectories").rename(old)

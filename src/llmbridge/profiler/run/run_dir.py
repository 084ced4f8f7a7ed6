"""Reading back the ``traces.jsonl`` of a run that was interrupted, for ``profile run
--resume`` (``load_finished``).

The file may come from a machine that was killed, or from anyone who edited or copied
it, so it is read as records/input_files.py reads what the profiler did not write: a regular
file, a line at a time (none over ``InputLimits.max_line_bytes``), each line UTF-8 and
JSON the reports can use (``parse_json``), each record checked field by field
(records/record_checks.py) before it is kept. What is wrong stops the resume with a
``RunDirError`` naming the file and the line, before the file is rewritten and before
anything runs, so no report is written from half of it. The work grows with the file,
line by line; what it holds is the records it keeps (``--resume`` reports them with
the new ones).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable
from pathlib import Path

from llmbridge.profiler.records.input_files import (
    InputError,
    InputLimits,
    InputValueError,
    JsonLines,
    parse_json,
)
from llmbridge.profiler.records.record_checks import check_record
from llmbridge.profiler.records.records import IterationKey, IterationRecord

__all__ = ["RunDirError", "load_finished"]


class RunDirError(Exception):
    """A run directory ``--resume`` cannot continue (a damaged ``traces.jsonl``)."""


def load_finished(
    traces: Path, limits: InputLimits | None = None
) -> dict[IterationKey, IterationRecord]:
    """The iterations an interrupted run finished, from its ``traces.jsonl``, which is
    rewritten to hold just them (so nothing is counted twice):

    - a last line cut short (the run was killed while writing it) is dropped;
    - a record that did not start (its provider did not, or its session could not be
      created) is dropped, to be run again;
    - of two records of the same iteration, the later is kept.

    A missing file is a run that finished nothing. Any other line that is not a record
    raises ``RunDirError`` naming it (module docstring)."""
    if not traces.exists():
        return {}
    lines = JsonLines(traces, limits or InputLimits())
    finished: dict[IterationKey, IterationRecord] = {}
    try:
        for text in lines:
            if not text.strip():
                continue
            try:
                data = parse_json(text)
                check_record(data)
                record = IterationRecord.from_json(data)
            except (ValueError, KeyError, TypeError, ArithmeticError) as exc:
                if not lines.ended:  # no newline after it: the last line, cut short
                    continue
                reason = exc.reason if isinstance(exc, InputValueError) else str(exc)
                raise RunDirError(
                    f"{traces} line {lines.line} is not an iteration record: {reason}"
                ) from exc
            if record.started:
                finished[record.key] = record
            else:
                finished.pop(record.key, None)
    except InputError as exc:
        raise RunDirError(
            f"{traces} line {exc.line} is not an iteration record: {exc.reason}"
        ) from exc
    _rewrite(traces, finished.values())
    return finished


def _rewrite(traces: Path, records: Iterable[IterationRecord]) -> None:
    """``traces`` replaced by ``records``, a line each, written beside it first."""
    partial = traces.with_name(f"{traces.name}.partial-{secrets.token_hex(4)}")
    try:
        with partial.open("w", encoding="utf-8") as sink:
            for record in records:
                sink.write(json.dumps(record.to_json(), ensure_ascii=False) + "\n")
        partial.replace(traces)
    finally:
        partial.unlink(missing_ok=True)

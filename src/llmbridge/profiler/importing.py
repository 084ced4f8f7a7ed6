"""``llmbridge profile import``: sessions the profiler did not run, as a profiled run
(the sessions a developer actually had, read from their CLIs' files).

Each file given (or each ``*.json`` and ``*.jsonl`` under a directory given, such as a
run's ``trajectories/``) is read as what it is: an ATIF trajectory (``.json``, atif.py),
or a session file a CLI kept (``.jsonl``: Claude Code's transcript, Codex's rollout or
Gemini CLI's session, told apart by their lines; transcripts.py turns each into an
ATIF trajectory). Every trajectory is validated against ATIF's schema first, so a file
that is not one is named with what is wrong, never half read.
Each becomes an ``IterationRecord``; its findings are scanned (findings.py) when the
file carried none, and the records are written as a run directory: ``traces.jsonl``,
``summary.json``, ``report.md``, ``report.html`` and ``trajectories/``, which
``profile compare`` and the reports read like any run's.

The gateway's own spans (OTLP/JSON, as a collector's file exporter writes them: one
``ExportTraceServiceRequest`` per line or per file) become one record per client
session, its requests as steps with their models, tokens and times (the spans hold no
prompt or reply).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsonschema

from llmbridge.profiler.atif import ATIF_SCHEMA, from_atif
from llmbridge.profiler.findings import scan
from llmbridge.profiler.records import IterationRecord, summarise
from llmbridge.profiler.report import html_report, markdown_report
from llmbridge.profiler.runner import write_trajectories
from llmbridge.profiler.transcripts import (
    claude_code_to_atif,
    codex_rollout_to_atif,
    gemini_session_to_atif,
    otlp_to_atif,
    sniff,
)

__all__ = ["TrajectoryImportError", "import_paths", "write_run"]


class TrajectoryImportError(Exception):
    """A file ``profile import`` cannot read, with the file and the reason."""


def _files(paths: Sequence[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted([*path.rglob("*.json"), *path.rglob("*.jsonl")])
        elif path.is_file():
            found.append(path)
        else:
            raise TrajectoryImportError(f"{path}: no such file or directory")
    if not found:
        raise TrajectoryImportError("no trajectory files found in " + ", ".join(map(str, paths)))
    return found


def _trajectories(path: Path) -> list[Any]:
    """``path`` as ATIF trajectories: one read as it is, one converted from a CLI's
    session file, or one per client session of the gateway's spans (OTLP/JSON)."""
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix != ".jsonl":
            data = json.loads(text)
            return otlp_to_atif([data]) if _is_otlp(data) else [data]
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise TrajectoryImportError(f"{path}: not a JSON file: {exc}") from exc
    lines = text.splitlines()
    kind = sniff(lines)
    if kind == "claude-code":
        return [claude_code_to_atif(lines)]
    if kind == "codex":
        return [codex_rollout_to_atif(lines)]
    if kind == "gemini-cli":
        return [gemini_session_to_atif(lines)]
    exports = [json.loads(line) for line in lines if line.strip().startswith("{")]
    if exports and all(_is_otlp(e) for e in exports):
        return otlp_to_atif(exports)
    raise TrajectoryImportError(
        f"{path}: not a Claude Code transcript, a Codex rollout, a Gemini CLI session or "
        "OTLP/JSON spans (no sessionId, session_meta, projectHash or resourceSpans)"
    )


def _is_otlp(data: Any) -> bool:
    return isinstance(data, dict) and "resourceSpans" in data


def import_paths(paths: Sequence[Path]) -> list[IterationRecord]:
    """The records of every trajectory in ``paths`` (module docstring)."""
    validator = jsonschema.Draft202012Validator(ATIF_SCHEMA)
    records = []
    for path in _files(paths):
        for data in _trajectories(path):
            problem = jsonschema.exceptions.best_match(validator.iter_errors(data))
            if problem is not None:
                where = "/".join(map(str, problem.absolute_path)) or "the top level"
                raise TrajectoryImportError(
                    f"{path}: not an ATIF trajectory: at {where}: {problem.message}"
                )
            record = from_atif(data)
            if not record.findings:
                record.findings = [f.to_json() for f in scan(record, record.inputs)]
            records.append(record)
    return records


def write_run(out: Path, records: Sequence[IterationRecord]) -> None:
    """``records`` as a run directory in ``out`` (module docstring)."""
    out.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in records)
    (out / "traces.jsonl").write_text(lines, encoding="utf-8")
    summary = summarise(list(records))
    (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    (out / "report.md").write_text(markdown_report(summary, records), encoding="utf-8")
    (out / "report.html").write_text(html_report(summary, records), encoding="utf-8")
    write_trajectories(out, records)

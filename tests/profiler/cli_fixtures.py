"""Captured CLI runs (tests/profiler/fixtures, written by capture_cli_agents.py) as
the ``OutputLine``s a provider maps, each line given a known arrival time, so the
times the mapping derives can be checked exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmbridge.profiler.cli_agent import OutputLine, TraceBuilder
from llmbridge.profiler.trace import build_summary, group_turns
from llmbridge.profiler.types import SessionTrace

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FIRST_LINE_MS = 1_000_000.0
"""When the first line of a replayed run arrives."""
LINE_GAP_MS = 10.0
"""Between two lines."""
STARTUP_MS = 500.0
"""From the run's start to its first line."""


class Replay:
    """One fixture run: its lines, stamped ``LINE_GAP_MS`` apart."""

    def __init__(self, name: str, *, offset_ms: float = 0.0, stop_after: tuple[str, ...] = ()):
        texts = (FIXTURES / name).read_text(encoding="utf-8").splitlines()
        if stop_after:  # the run was cut short (a deadline) after the line with these
            cut = next(i for i, t in enumerate(texts) if all(p in t for p in stop_after))
            texts = texts[: cut + 1]
        first = FIRST_LINE_MS + offset_ms
        self.lines = [OutputLine.parse(first + LINE_GAP_MS * i, t) for i, t in enumerate(texts)]
        self.started_ms = first - STARTUP_MS
        self.ended_ms = first + LINE_GAP_MS * len(texts)

    def at(self, *parts: str) -> float:
        """The arrival time of the first line containing every one of ``parts``."""
        return next(line.at_ms for line in self.lines if all(p in line.text for p in parts))

    def data(self, kind: str) -> list[dict[str, Any]]:
        """The lines whose ``type`` is ``kind``."""
        return [line.data for line in self.lines if line.data and line.data.get("type") == kind]

    def result(self) -> dict[str, Any]:
        (result,) = self.data("result")
        return result


def trace_of(builder: TraceBuilder, session_id: str = "s") -> SessionTrace:
    events = tuple(builder.events)
    turns = group_turns(events)
    return SessionTrace(session_id, events, turns, build_summary(events, turns))


def types_of(trace: SessionTrace) -> list[str]:
    return [e.type for e in trace.events]

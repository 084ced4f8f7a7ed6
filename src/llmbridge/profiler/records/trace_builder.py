"""A session's trace, built as a provider watches its agent work: ``TraceBuilder``
appends ``TraceEvent``s as they happen (a step's boundary opened and closed, text or
reasoning merged while nothing comes between, a tool call timed from its call to its
result) and numbers the steps (turns) across the session's prompts. Events are
stamped with ``now_ms``, Unix milliseconds read from the monotonic clock. The
command-line agent providers (providers/cli_agent.py) feed it from a CLI's output lines, the
agent-service provider (providers/agent.py) from the agent's events."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

from llmbridge.profiler.records.trace import build_summary, group_turns
from llmbridge.profiler.records.types import SessionTrace, TokenMetrics, ToolCallRecord, TraceEvent

__all__ = ["TraceBuilder", "now_ms"]

_ANCHOR_UNIX_MS = time.time() * 1000
_ANCHOR_PERF = time.perf_counter()


def now_ms() -> float:
    """Unix milliseconds read from the monotonic clock: differences between two
    readings are exact even if the wall clock is adjusted meanwhile."""
    return _ANCHOR_UNIX_MS + (time.perf_counter() - _ANCHOR_PERF) * 1000


# -- the trace ------------------------------------------------------------------------


@dataclass
class TraceBuilder:
    """A session's ``TraceEvent``s, appended as its agent works. Turns (LLM steps)
    are numbered across the session's prompts."""

    events: list[TraceEvent] = field(default_factory=list)
    turn: int = -1
    _boundary: int | None = None
    _calls: dict[str, tuple[str, float]] = field(default_factory=dict)

    def session_trace(self, session_id: str) -> SessionTrace:
        """The session's trace as exported: its events, grouped into turns, summed up."""
        events = tuple(self.events)
        turns = group_turns(events)
        return SessionTrace(session_id, events, turns, build_summary(events, turns))

    def open_step(self, at_ms: float) -> None:
        self.turn += 1
        self._boundary = len(self.events)
        self.events.append(TraceEvent("turn_boundary", self.turn, at_ms))

    @property
    def open_boundary(self) -> int | None:
        """The index of the open step's boundary, if a step is open."""
        return self._boundary

    def close_step(
        self,
        end_ms: float,
        *,
        tokens: TokenMetrics | None = None,
        status: str | None = None,
    ) -> None:
        """End the open step at ``end_ms`` with its tokens and finish reason."""
        if self._boundary is None:
            return
        old = self.events[self._boundary]
        assert old.timestamp_ms is not None
        self.events[self._boundary] = TraceEvent(
            "turn_boundary",
            old.turn,
            old.timestamp_ms,
            max(end_ms - old.timestamp_ms, 0.0),
            status=status or old.status,
            tokens=tokens if tokens is not None else old.tokens,
        )
        self._boundary = None

    def set_step_usage(self, index: int, tokens: TokenMetrics, cost_usd: float | None) -> None:
        """Put ``tokens`` and ``cost_usd`` on the boundary at ``index``."""
        old = self.events[index]
        self.events[index] = TraceEvent(
            "turn_boundary",
            old.turn,
            old.timestamp_ms,
            old.duration_ms,
            status=old.status,
            tokens=tokens,
            cost_usd=cost_usd,
        )

    def content(self, kind: Literal["text_output", "reasoning"], at_ms: float, text: str) -> None:
        """A piece of text or reasoning: merged into the step's previous event of the
        same kind when nothing came between them."""
        if not text:
            return
        last = self.events[-1] if self.events else None
        if last is not None and last.type == kind and last.turn == self.turn:
            start = last.timestamp_ms if last.timestamp_ms is not None else at_ms
            self.events[-1] = TraceEvent(
                kind, last.turn, start, at_ms - start, text=(last.text or "") + text
            )
        else:
            self.events.append(TraceEvent(kind, self.turn, at_ms, 0.0, text=text))

    def tool_call(self, at_ms: float, tool: str, call_id: str, arguments: Any) -> None:
        self._calls[call_id] = (tool, at_ms)
        self.events.append(
            TraceEvent(
                "tool_call",
                self.turn,
                at_ms,
                tool=tool,
                call_id=call_id,
                status="called",
                arguments=arguments,
            )
        )

    def tool_result(
        self, at_ms: float, call_id: str, output: str | None, error: str | None
    ) -> ToolCallRecord:
        """The call's result (``error``: it failed), timed from the call's arrival."""
        tool, began = self._calls.pop(call_id, ("?", at_ms))
        took = max(at_ms - began, 0.0)
        status: Literal["completed", "error"] = "error" if error is not None else "completed"
        self.events.append(
            TraceEvent(
                "error" if error is not None else "tool_result",
                self.turn,
                at_ms,
                duration_ms=took,
                text=output,
                tool=tool,
                call_id=call_id,
                status=status,
                error=error,
            )
        )
        return ToolCallRecord(tool, call_id, status, took, error)

    def unfinished_tools(self, at_ms: float, reason: str) -> list[ToolCallRecord]:
        """Every call still waiting for its result ends as an error (the run ended)."""
        return [self.tool_result(at_ms, call_id, None, reason) for call_id in list(self._calls)]

    def end_tools(self, at_ms: float, *, timed_out: bool) -> list[ToolCallRecord]:
        """At a run's end, every call still waiting for its result fails, saying why."""
        ending = "timeout" if timed_out else "the run ended"
        return self.unfinished_tools(at_ms, f"the tool never finished ({ending})")

    def error(self, at_ms: float, message: str) -> None:
        self.events.append(TraceEvent("error", max(self.turn, 0), at_ms, error=message))

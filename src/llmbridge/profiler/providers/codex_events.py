"""Codex's ``codex exec --json`` events as the profiler's ``TraceEvent``s and metrics.

``codex exec --json`` (Codex CLI 0.169.0) prints one JSON object per line:
``thread.started`` (the thread id, which ``codex exec resume`` takes), ``turn.started``,
``item.started`` / ``item.updated`` / ``item.completed`` for each item of the turn,
then ``turn.completed`` (with ``usage``) or ``turn.failed`` (with ``error``); a
top-level ``error`` reports a stream error (a retry, or the failure itself). Items:
``agent_message`` (text), ``reasoning`` (text), ``command_execution`` (command,
aggregated output, exit code, status ``in_progress`` / ``completed`` / ``failed`` /
``declined``), ``file_change`` (changes, status), ``mcp_tool_call`` (server, tool,
arguments, result or error, status), ``web_search`` (query), ``todo_list`` (a plan,
not recorded) and ``error`` (a non-fatal warning such as "Model metadata for `m` not
found"); an item of any other kind is recorded as a tool call named by its type.

The lines carry no clock, so every event is stamped when it arrives (Unix ms, the
reader's clock): a tool's duration runs from its ``item.started`` to its
``item.completed``; an item printed only on completion (messages, reasoning) is a
point in time. One prompt is one Codex turn, and one trace turn: its
``turn_boundary`` spans ``turn.started`` to the turn's end and carries the turn's
tokens (exec --json reports usage per turn, not per model call).

Token usage: ``turn.completed``'s ``usage`` counts the whole thread so far, not the
turn (a resumed thread's first turn reports the earlier turns' tokens too; seen
with 0.169.0 against a scripted gateway, whose per-response usage sums to the
difference), so a prompt's tokens are its usage less the previous prompt's.
``input_tokens`` includes the cached ones (OpenAI's convention, and
``TokenMetrics.active`` subtracts them); ``output_tokens`` includes the reasoning
ones, which are kept apart here so ``TokenMetrics.total`` counts them once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmbridge.profiler.records.metrics import Price, cost_of
from llmbridge.profiler.records.types import (
    CompletionReason,
    CostMetrics,
    PromptMetrics,
    PromptResult,
    TimingMetrics,
    TokenMetrics,
    ToolCallRecord,
    TraceEvent,
)

__all__ = ["CodexTurn", "Usage", "usage_tokens"]

Event = dict[str, Any]

_TOOL_ITEMS = ("command_execution", "file_change", "mcp_tool_call", "web_search")
_OTHER_ITEMS = ("agent_message", "reasoning", "error", "todo_list")
"""Items that are not a tool's work; any other kind (one a later Codex adds) is
recorded as a tool call named by its type, so nothing Codex did is dropped."""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(frozen=True, slots=True)
class Usage:
    """A ``turn.completed`` usage: the thread's tokens so far."""

    input: int = 0
    cached: int = 0
    cache_write: int = 0
    output: int = 0
    reasoning: int = 0

    @classmethod
    def of(cls, usage: Any) -> Usage:
        u = _dict(usage)
        return cls(
            _int(u.get("input_tokens")),
            _int(u.get("cached_input_tokens")),
            _int(u.get("cache_write_input_tokens")),
            _int(u.get("output_tokens")),
            _int(u.get("reasoning_output_tokens")),
        )

    def since(self, earlier: Usage) -> Usage:
        return Usage(
            self.input - earlier.input,
            self.cached - earlier.cached,
            self.cache_write - earlier.cache_write,
            self.output - earlier.output,
            self.reasoning - earlier.reasoning,
        )


def usage_tokens(usage: Usage) -> TokenMetrics:
    # Negative figures are kept (check_invariants reports them), never clamped.
    return TokenMetrics(
        input=usage.input,
        output=usage.output - usage.reasoning,
        reasoning=usage.reasoning,
        cache_read=usage.cached,
        cache_write=usage.cache_write,
    )


def tool_name(item: dict[str, Any]) -> str:
    """A tool item's name: Codex's item type, or ``server/tool`` for an MCP call."""
    kind = str(item.get("type"))
    if kind == "mcp_tool_call":
        return f"{item.get('server') or '?'}/{item.get('tool') or '?'}"
    return kind


def _arguments(item: dict[str, Any]) -> Any:
    kind = item.get("type")
    if kind == "command_execution":
        return {"command": item.get("command")}
    if kind == "file_change":
        return {"changes": item.get("changes")}
    if kind == "mcp_tool_call":
        return item.get("arguments")
    if kind == "web_search":
        return {"query": item.get("query")}
    return {k: v for k, v in item.items() if k not in ("id", "type", "status")}


def _output(item: dict[str, Any]) -> str | None:
    kind = item.get("type")
    if kind == "command_execution":
        output = item.get("aggregated_output")
        return output if isinstance(output, str) else None
    if kind == "file_change":
        changes = item.get("changes") or []
        return "\n".join(f"{_dict(c).get('kind')} {_dict(c).get('path')}" for c in changes)
    if kind == "mcp_tool_call" and item.get("result") is not None:
        return str(item.get("result"))
    return None


def _failure(item: dict[str, Any]) -> str | None:
    """Why a finished tool item failed, or ``None`` when it succeeded."""
    status = item.get("status")
    kind = item.get("type")
    if kind == "command_execution":
        code = item.get("exit_code")
        if status == "declined":
            return "declined"
        if status == "failed" or (isinstance(code, int) and code != 0):
            return f"exit code {code}" if code is not None else "failed"
        return None
    if kind == "mcp_tool_call" and item.get("error"):
        return str(_dict(item.get("error")).get("message") or item.get("error"))
    if status == "failed":
        return "failed"
    return None


@dataclass
class _Open:
    name: str
    started_ms: float


@dataclass
class CodexTurn:
    """One prompt's events, mapped as they arrive (``feed``), then its result.

    ``turn`` is the trace turn (the prompt's index in the session); ``started_ms``
    when the prompt was sent (the process started); ``before`` the thread's usage
    after the previous prompt."""

    turn: int
    started_ms: float
    before: Usage = field(default_factory=Usage)
    thread_id: str | None = None
    body: list[TraceEvent] = field(default_factory=list)
    """The turn's events after its boundary, in arrival order."""
    tools: list[ToolCallRecord] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    turn_started_ms: float | None = None
    ended_ms: float | None = None
    first_output_ms: float | None = None
    usage: Usage | None = None
    """The thread's usage at the end of this turn (``turn.completed``)."""
    failure: str | None = None
    """``turn.failed``'s message."""
    errors: list[str] = field(default_factory=list)
    """Top-level ``error`` events' messages."""
    _open: dict[str, _Open] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.ended_ms is not None

    def feed(self, at_ms: float, event: Event) -> bool:
        """Take one event that arrived at ``at_ms``; ``True`` when it ends the turn."""
        kind = event.get("type")
        if kind == "thread.started":
            self.thread_id = str(event.get("thread_id"))
        elif kind == "turn.started":
            self.turn_started_ms = at_ms
        elif kind in ("item.started", "item.updated", "item.completed"):
            self._item(at_ms, str(kind), _dict(event.get("item")))
        elif kind == "turn.completed":
            self.usage = Usage.of(event.get("usage"))
            self.ended_ms = at_ms
            return True
        elif kind == "turn.failed":
            self.failure = str(_dict(event.get("error")).get("message") or "turn.failed")
            self.body.append(TraceEvent("error", self.turn, at_ms, error=self.failure))
            self.ended_ms = at_ms
            return True
        elif kind == "error":
            message = str(event.get("message") or "error")
            self.errors.append(message)
            self.body.append(TraceEvent("error", self.turn, at_ms, error=message))
        return False

    def _item(self, at_ms: float, phase: str, item: dict[str, Any]) -> None:
        kind, item_id = item.get("type"), str(item.get("id"))
        if kind not in _OTHER_ITEMS:
            # Opened by item.started, or by its completion when that is all Codex printed.
            if item_id not in self._open:
                self._open[item_id] = _Open(tool_name(item), at_ms)
                self.body.append(
                    TraceEvent(
                        "tool_call",
                        self.turn,
                        at_ms,
                        tool=tool_name(item),
                        call_id=item_id,
                        status=str(item.get("status") or "in_progress"),
                        arguments=_arguments(item),
                    )
                )
            if phase == "item.completed":
                self._tool_done(at_ms, item)
            return
        if phase != "item.completed":
            return  # messages and reasoning are printed whole on completion
        text = item.get("text")
        if kind == "agent_message" and isinstance(text, str):
            self._first(at_ms)
            self.texts.append(text)
            if text:
                self.body.append(TraceEvent("text_output", self.turn, at_ms, text=text))
        elif kind == "reasoning" and isinstance(text, str):
            self._first(at_ms)
            self.body.append(TraceEvent("reasoning", self.turn, at_ms, text=text))
        elif kind == "error":
            # A warning Codex prints as an item (the turn goes on): kept, as Codex says it.
            message = str(item.get("message") or "error")
            self.body.append(TraceEvent("error", self.turn, at_ms, status="warning", error=message))

    def _first(self, at_ms: float) -> None:
        if self.first_output_ms is None:
            self.first_output_ms = at_ms

    def _tool_done(self, at_ms: float, item: dict[str, Any]) -> None:
        item_id = str(item.get("id"))
        opened = self._open.pop(item_id)
        duration = at_ms - opened.started_ms
        failure = _failure(item)
        status = str(item.get("status") or ("failed" if failure else "completed"))
        output = _output(item)
        if failure is None:
            event = TraceEvent(
                "tool_result",
                self.turn,
                at_ms,
                duration,
                text=output,
                tool=opened.name,
                call_id=item_id,
                status=status,
            )
        else:
            event = TraceEvent(
                "error",
                self.turn,
                at_ms,
                duration,
                text=output,
                tool=opened.name,
                call_id=item_id,
                status=status,
                error=failure,
            )
        self.body.append(event)
        self.tools.append(
            ToolCallRecord(
                name=opened.name,
                call_id=item_id,
                status="completed" if failure is None else "error",
                duration_ms=duration,
                error=failure,
            )
        )

    # -- the end of the prompt ---------------------------------------------------------

    def close(self, at_ms: float, reason: str) -> None:
        """End a turn that ended without its terminal event (a timeout, an exit):
        each tool still running gets an ``error`` and a record."""
        for item_id, opened in list(self._open.items()):
            self.body.append(
                TraceEvent(
                    "error",
                    self.turn,
                    at_ms,
                    at_ms - opened.started_ms,
                    tool=opened.name,
                    call_id=item_id,
                    status="in_progress",
                    error=f"the tool never finished ({reason})",
                )
            )
            self.tools.append(
                ToolCallRecord(opened.name, item_id, "running", at_ms - opened.started_ms)
            )
        self._open.clear()
        if self.ended_ms is None:
            self.ended_ms = at_ms

    def tokens(self) -> TokenMetrics:
        return usage_tokens(self.usage.since(self.before)) if self.usage else TokenMetrics()

    def events(self, price: Price | None) -> list[TraceEvent]:
        """The turn's trace: its boundary (time, tokens, cost, status), then the body."""
        start = self.turn_started_ms if self.turn_started_ms is not None else self.started_ms
        end = self.ended_ms
        tokens = self.tokens()
        cost = cost_of(tokens, price).total_usd if price is not None and self.usage else None
        status = "completed" if self.usage else "failed" if self.failure else None
        boundary = TraceEvent(
            "turn_boundary",
            self.turn,
            start,
            None if end is None else end - start,
            status=status,
            tokens=tokens,
            cost_usd=cost,
        )
        return [boundary, *self.body]

    def result(self, *, timed_out: bool, error: str | None, price: Price | None) -> PromptResult:
        """The prompt's result. ``error``: why the process failed, when the events do
        not say (it exited without a terminal event, say)."""
        end = self.ended_ms if self.ended_ms is not None else self.started_ms
        tokens = self.tokens()
        if price is not None and self.usage is not None:
            cost = cost_of(tokens, price)
        else:
            cost = CostMetrics()
        reason: CompletionReason
        message: str | None = None
        if timed_out:
            reason = "timeout"
        elif self.failure is not None or self.usage is None:
            reason = "error"
            message = self.failure or error or (self.errors[-1] if self.errors else None)
            message = message or "codex exec ended without turn.completed"
        else:
            reason = "stop"
        tools_ms: dict[str, float] = {}
        for record in self.tools:
            tools_ms[record.name] = tools_ms.get(record.name, 0.0) + (record.duration_ms or 0.0)
        turn_start = self.turn_started_ms
        steps = () if turn_start is None or self.ended_ms is None else (self.ended_ms - turn_start,)
        timing = TimingMetrics(
            ttft_ms=None
            if self.first_output_ms is None
            else self.first_output_ms - self.started_ms,
            total_ms=end - self.started_ms,
            steps_ms=steps,
            tools_ms=tools_ms,
        )
        return PromptResult(
            text="\n\n".join(t for t in self.texts if t),
            metrics=PromptMetrics(tokens, timing, tuple(self.tools), cost),
            completion_reason=reason,
            error=message,
        )

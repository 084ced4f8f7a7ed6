"""The profiler's values: what a provider returns and what the runner records.

The shapes follow seed 004 (agent-profiler's ``SessionProvider`` contract):
``PromptResult`` for one prompt with its metrics and completion reason,
``SessionTrace`` for a whole session as ``TraceEvent``s grouped into turns. Token
fields follow Inspect's ``ModelUsage`` (input, output, reasoning, cache read, cache
write); names on export follow the OpenTelemetry GenAI conventions (``otel.py``).
Times are milliseconds; timestamps are Unix milliseconds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = [
    "CompletionReason",
    "CostMetrics",
    "PromptMetrics",
    "PromptResult",
    "ProviderConfig",
    "SessionHandle",
    "SessionTrace",
    "TimingMetrics",
    "TokenMetrics",
    "ToolCallRecord",
    "TraceEvent",
    "TraceEventType",
    "TraceSummary",
    "TraceTurn",
]

CompletionReason = Literal["stop", "length", "timeout", "error", "tool_limit"]
TraceEventType = Literal[
    "reasoning", "tool_call", "tool_result", "text_output", "turn_boundary", "error"
]


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    """What a provider is initialised with: one (mode, model) group of a run."""

    model: str
    """``PROVIDER/MODEL`` for OpenCode; a gateway model name for the agent service."""
    mode: str = "default"
    system_instructions: str | None = None
    """The mode's instructions (``modes.ModeResolver``), before each scenario's own."""
    agent: str | None = None
    """The OpenCode agent the mode's prompts go to; ``None``: OpenCode's default."""
    environment: dict[str, str] = field(default_factory=dict)
    """Mode-specific variables added to a clean environment."""
    permission: Literal["allow", "deny", "ask-reject"] = "deny"
    """How tool permission requests are answered (OpenCode ``permission.asked``)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Provider-specific settings (the OpenCode binary, the model endpoint...)."""


@dataclass(frozen=True, slots=True)
class SessionHandle:
    session_id: str
    provider: str
    created_at: float
    """Unix seconds."""
    scenario_id: str = ""
    iteration: int = 0


@dataclass(frozen=True, slots=True)
class TokenMetrics:
    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0

    @property
    def total(self) -> int:
        """Input, output and reasoning: every token counted once. Seed 004 sums input and
        output only, but where an agent reports reasoning apart, ``output`` leaves it
        out (OpenCode; Codex's is taken out into ``reasoning``), so that sum would
        leave the thinking out (docs/PROFILER.md, "What is measured")."""
        return self.input + self.output + self.reasoning

    @property
    def active(self) -> int:
        """Tokens actually processed: the total less what was read from the cache
        (seed 004's definition), never below 0."""
        return max(self.total - self.cache_read, 0)

    def __add__(self, other: TokenMetrics) -> TokenMetrics:
        return TokenMetrics(
            self.input + other.input,
            self.output + other.output,
            self.reasoning + other.reasoning,
            self.cache_read + other.cache_read,
            self.cache_write + other.cache_write,
        )

    def to_dict(self) -> dict[str, int]:
        return {**asdict(self), "total": self.total, "active": self.active}


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    name: str
    call_id: str
    status: Literal["completed", "error", "pending", "running"]
    duration_ms: float | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class TimingMetrics:
    ttft_ms: float | None
    """From the prompt to the first text or reasoning the model produced."""
    total_ms: float
    """From the prompt to the end of the turn."""
    steps_ms: tuple[float, ...] = ()
    """Each LLM step (OpenCode: each assistant message), in order."""
    tools_ms: dict[str, float] = field(default_factory=dict)
    """Total time per tool name."""


@dataclass(frozen=True, slots=True)
class CostMetrics:
    total_usd: float = 0.0
    input_usd: float = 0.0
    output_usd: float = 0.0
    reasoning_usd: float = 0.0
    cache_usd: float = 0.0
    source: Literal["backend", "price_table", "none"] = "none"


@dataclass(frozen=True, slots=True)
class PromptMetrics:
    tokens: TokenMetrics
    timing: TimingMetrics
    tool_calls: tuple[ToolCallRecord, ...]
    cost: CostMetrics


@dataclass(frozen=True, slots=True)
class PromptResult:
    text: str
    metrics: PromptMetrics
    completion_reason: CompletionReason
    error: str | None = None


@dataclass(frozen=True, slots=True)
class TraceEvent:
    type: TraceEventType
    turn: int
    """The index of the turn (LLM step) the event belongs to."""
    timestamp_ms: float | None = None
    duration_ms: float | None = None
    text: str | None = None
    tool: str | None = None
    call_id: str | None = None
    status: str | None = None
    arguments: Any = None
    tokens: TokenMetrics | None = None
    """On ``turn_boundary``: the step's tokens."""
    error: str | None = None
    cost_usd: float | None = None
    """On ``turn_boundary``: the step's cost in US dollars, where it is known."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "turn": self.turn}
        for key in ("timestamp_ms", "duration_ms", "text", "tool", "call_id", "status"):
            if (value := getattr(self, key)) is not None:
                out[key] = value
        if self.arguments is not None:
            out["arguments"] = self.arguments
        if self.tokens is not None:
            out["tokens"] = self.tokens.to_dict()
        if self.error is not None:
            out["error"] = self.error
        if self.cost_usd is not None:
            out["cost_usd"] = self.cost_usd
        return out


@dataclass(frozen=True, slots=True)
class TraceTurn:
    index: int
    events: tuple[TraceEvent, ...]
    tokens: TokenMetrics


@dataclass(frozen=True, slots=True)
class TraceSummary:
    turns: int
    tool_calls: int
    tool_errors: int
    errors: int
    tokens: TokenMetrics
    duration_ms: float | None


@dataclass(frozen=True, slots=True)
class SessionTrace:
    session_id: str
    events: tuple[TraceEvent, ...]
    turns: tuple[TraceTurn, ...]
    summary: TraceSummary

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "events": [e.to_dict() for e in self.events],
            "summary": {
                "turns": self.summary.turns,
                "tool_calls": self.summary.tool_calls,
                "tool_errors": self.summary.tool_errors,
                "errors": self.summary.errors,
                "tokens": self.summary.tokens.to_dict(),
                "duration_ms": self.summary.duration_ms,
            },
        }

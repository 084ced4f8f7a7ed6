"""The Claude Code ``SessionProvider``: the real ``claude`` CLI, one run per prompt.

Each prompt is ``claude -p PROMPT --output-format stream-json --verbose
--include-partial-messages --model MODEL`` in the iteration's workspace (or an empty
directory), with a fresh HOME per session (cli_agent.py), ``ANTHROPIC_BASE_URL`` at the
gateway and every model alias Claude Code might pick for side work (Haiku, Sonnet,
Opus, subagents) set to the profiled model, so one model serves the whole session.
The first prompt names the session (``--session-id``); the next ones continue it
(``--resume``), which Claude Code reads back from its HOME. The mode's and the
scenario's instructions go after Claude Code's own system prompt
(``--append-system-prompt``); the section's ``instructions`` replace that prompt
(``--system-prompt``), as ``args: [--tools, Bash]`` trims its tools: the two ways to
fit Claude Code into a small model's context. The permission policy: ``allow`` is
``--dangerously-skip-permissions`` (``IS_SANDBOX=1`` when running as root, which
Claude Code otherwise refuses), ``deny`` is ``--permission-mode dontAsk`` (what is not
pre-approved is refused), ``ask-reject`` is ``--permission-prompts none`` (a request
that would prompt is refused).

The trace comes from the run's lines (``map_claude_run``): each model request is a
step (a turn) from its ``status: requesting`` line to its ``message_stop`` (with
partial messages), its usage from ``message_start`` completed by ``message_delta``
(a failed request's step ends at the ``result`` line); text and thinking deltas become
``text_output`` / ``reasoning``; a whole ``tool_use`` block arrives as an ``assistant``
line and its ``tool_result`` in the next ``user`` line; the ``result`` line ends the
run with its totals (checked against the steps' sum by the tests), ``is_error`` and
``subtype``. Cost: the scenarios file's price for the model when it has one (per
step), else what Claude Code reports (its own price list; on ``--resume``
``total_cost_usd`` is the session's running total, so a prompt's share is
``model_usage_since_last_result``), on the prompt's first step.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Literal

from llmbridge.profiler.providers.cli_agent import (
    CliSession,
    CliSessionProvider,
    OutputLine,
    RunEnd,
    RunMapping,
    TraceBuilder,
    as_count,
    as_object,
    conversation_args,
)
from llmbridge.profiler.records.metrics import Price, cost_of
from llmbridge.profiler.records.settings import ClaudeCodeSettings
from llmbridge.profiler.records.types import (
    CompletionReason,
    CostMetrics,
    PromptResult,
    TokenMetrics,
)

__all__ = [
    "ClaudeCodeSessionProvider",
    "ClaudeCodeSettings",
    "ClaudeRunMapping",
    "map_claude_run",
]


_PERMISSIONS: dict[str, list[str]] = {
    "allow": ["--dangerously-skip-permissions"],
    "deny": ["--permission-mode", "dontAsk"],
    "ask-reject": ["--permission-mode", "default", "--permission-prompts", "none"],
}
_MODEL_VARIABLES = (
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "CLAUDE_CODE_SUBAGENT_MODEL",
)


def _usage(usage: dict[str, Any]) -> TokenMetrics:
    """Anthropic usage: ``input_tokens`` leaves out what was read from or written to
    the cache; thinking is counted in ``output_tokens``."""
    return TokenMetrics(
        input=as_count(usage.get("input_tokens")),
        output=as_count(usage.get("output_tokens")),
        cache_read=as_count(usage.get("cache_read_input_tokens")),
        cache_write=as_count(usage.get("cache_creation_input_tokens")),
    )


def _tool_output(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(as_object(b).get("text") or "") for b in content)
    return ""


class ClaudeRunMapping(RunMapping):
    """One run's lines as events on the session's trace, and what they add up to;
    ``running``, Claude Code's running cost total after the run (``reported_before``
    before it)."""

    name = "Claude Code"

    def __init__(self, builder: TraceBuilder, reported_before: float = 0.0) -> None:
        super().__init__(builder)
        self.reported_before = self.running = reported_before
        self.steps: list[tuple[int, TokenMetrics]] = []
        """Each step's boundary index and tokens."""
        self.step_usage: dict[str, Any] = {}
        self.stop_reason: str | None = None
        self.synthetic: list[str] = []
        """Text of messages Claude Code made up itself (an API error, say)."""

    def feed(self, line: OutputLine) -> None:
        data = line.data
        if data is None:
            return
        kind = data.get("type")
        if isinstance(data.get("session_id"), str):
            self.session_id = data["session_id"]
        if kind == "system" and data.get("subtype") == "status":
            if data.get("status") == "requesting":  # a model request goes out: a step
                self.open_step(line.at_ms)
        elif kind == "stream_event":
            self._stream_event(line.at_ms, as_object(data.get("event")))
        elif kind == "assistant":
            self._assistant(line.at_ms, as_object(data.get("message")))
        elif kind == "user":
            self._user(line.at_ms, as_object(data.get("message")))
        elif kind == "result":
            self.close_step(line.at_ms)
            self.result, self.result_at = data, line.at_ms

    def open_step(self, at: float) -> None:
        self.close_step(at)  # a step that never finished (an interrupted stream)
        self.builder.open_step(at)
        self.step_usage, self.stop_reason = {}, None

    def _stream_event(self, at: float, event: dict[str, Any]) -> None:
        kind = event.get("type")
        builder = self.builder
        if kind == "message_start":
            if builder.open_boundary is None:  # no status line announced the request
                self.open_step(at)
            self.step_usage.update(as_object(as_object(event.get("message")).get("usage")))
        elif kind == "content_block_delta":
            delta = as_object(event.get("delta"))
            if delta.get("type") == "text_delta":
                text = str(delta.get("text") or "")
                self.pieces.append(text)
                self._content("text_output", at, text)
            elif delta.get("type") == "thinking_delta":
                self._content("reasoning", at, str(delta.get("thinking") or ""))
        elif kind == "message_delta":
            # The final usage: output tokens (and, from some servers, input) complete.
            self.step_usage.update(
                {k: v for k, v in as_object(event.get("usage")).items() if v is not None}
            )
            reason = as_object(event.get("delta")).get("stop_reason")
            self.stop_reason = reason if isinstance(reason, str) else self.stop_reason
        elif kind == "message_stop":
            self.close_step(at)

    def _content(self, kind: Literal["text_output", "reasoning"], at: float, text: str) -> None:
        if text and self.first_content is None:
            self.first_content = at
        self.builder.content(kind, at, text)

    def close_step(self, at: float) -> None:
        index = self.builder.open_boundary
        if index is None:
            return
        tokens = _usage(self.step_usage)
        self.steps.append((index, tokens))
        self.builder.close_step(at, tokens=tokens, status=self.stop_reason)

    def _assistant(self, at: float, message: dict[str, Any]) -> None:
        synthetic = message.get("model") == "<synthetic>"
        for block in message.get("content") or []:
            block = as_object(block)
            if block.get("type") == "tool_use" and not synthetic:
                self.builder.tool_call(
                    at, str(block.get("name") or "?"), str(block.get("id")), block.get("input")
                )
            elif block.get("type") == "text" and synthetic:
                self.synthetic.append(str(block.get("text") or ""))

    def _user(self, at: float, message: dict[str, Any]) -> None:
        for block in message.get("content") or []:
            block = as_object(block)
            if block.get("type") != "tool_result":
                continue
            output = _tool_output(block.get("content"))
            error = (output or "the tool failed") if block.get("is_error") else None
            self.records.append(
                self.builder.tool_result(at, str(block.get("tool_use_id")), output, error)
            )

    def finish(self, end: RunEnd) -> PromptResult:
        """The prompt's result (and ``running``, Claude Code's cost total after it)."""
        result = self.end_run(end)
        tokens = TokenMetrics()
        for _, step in self.steps:
            tokens = tokens + step
        if not self.steps and result.get("usage"):
            tokens = _usage(as_object(result.get("usage")))
        total_reported = result.get("total_cost_usd")
        if isinstance(total_reported, int | float):
            self.running = float(total_reported)
        cost = self._cost(tokens, end.price, result, self.running - self.reported_before)
        reason, error = self._reason(result, end)
        if error is not None:
            self.builder.error(end.ended_ms, error)
        steps = [i for i, _ in self.steps]
        return self.prompt(end, tokens=tokens, cost=cost, steps=steps, reason=reason, error=error)

    def _cost(
        self,
        tokens: TokenMetrics,
        price: Price | None,
        result: dict[str, Any],
        difference: float,
    ) -> CostMetrics:
        if price is not None:
            for index, step in self.steps:
                self.builder.set_step_usage(index, step, cost_of(step, price).total_usd)
            return cost_of(tokens, price)
        since = as_object(result.get("model_usage_since_last_result"))
        costs = [as_object(m).get("costUSD") for m in since.values()]
        reported = (
            sum(float(c) for c in costs if isinstance(c, int | float)) if since else difference
        )
        if reported <= 0:
            return CostMetrics()
        if self.steps:
            index, step = self.steps[0]
            self.builder.set_step_usage(index, step, reported)
        return CostMetrics(total_usd=reported, source="backend")

    def _reason(self, result: dict[str, Any], end: RunEnd) -> tuple[CompletionReason, str | None]:
        ended_badly = self.ended_badly(result, end)
        if ended_badly is not None:
            return ended_badly
        subtype = str(result.get("subtype") or "")
        if result.get("is_error") or subtype != "success":
            message = result.get("result") or "; ".join(self.synthetic) or subtype or "error"
            status = result.get("api_error_status")
            detail = f"{subtype}: {message}" if subtype and subtype != "success" else str(message)
            if status:
                detail += f" (HTTP {status})"
            return ("tool_limit" if subtype == "error_max_turns" else "error"), detail
        last = self.builder.events[self.steps[-1][0]].status if self.steps else None
        if last == "max_tokens" or result.get("stop_reason") == "max_tokens":
            return "length", None
        return "stop", None


def map_claude_run(
    lines: Sequence[OutputLine],
    builder: TraceBuilder,
    *,
    started_ms: float,
    ended_ms: float,
    timed_out: bool = False,
    timeout: float = 0.0,
    failure: str | None = None,
    price: Price | None = None,
    reported_before: float = 0.0,
) -> tuple[PromptResult, float, str | None]:
    """A run's ``PromptResult`` (its events appended to ``builder``), Claude Code's
    running cost total, and the session id the run reported."""
    mapping = ClaudeRunMapping(builder, reported_before)
    result = mapping.map(lines, RunEnd(started_ms, ended_ms, timed_out, timeout, failure, price))
    return result, mapping.running, mapping.session_id


class ClaudeCodeSessionProvider(CliSessionProvider):
    id = "claude-code"
    default_command = "claude"
    settings_type = ClaudeCodeSettings
    settings: ClaudeCodeSettings

    def command_line(self, session: CliSession, text: str) -> list[str]:
        assert self.config is not None
        argv = [
            self.command,
            "-p",
            text,
            "--output-format",
            "stream-json",
            "--verbose",
            "--include-partial-messages",
            "--model",
            self.config.model,
            *_PERMISSIONS[self.config.permission],
            *conversation_args(session),
        ]
        if self.settings.instructions is not None:
            argv += ["--system-prompt", self.settings.instructions]
        if session.system:
            argv += ["--append-system-prompt", session.system]
        return [*argv, *self.settings.args]

    def environment(self, session: CliSession) -> dict[str, str]:
        assert self.config is not None
        environment = {
            "ANTHROPIC_BASE_URL": self.endpoint,
            "ANTHROPIC_API_KEY": self.settings.api_key,
            "CLAUDE_CODE_TMPDIR": str(session.home / "tmp"),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            **dict.fromkeys(_MODEL_VARIABLES, self.config.model),
        }
        if self.config.permission == "allow" and os.geteuid() == 0:
            environment["IS_SANDBOX"] = "1"  # or Claude Code refuses to skip permissions
        return environment

    def run_mapping(self, session: CliSession) -> ClaudeRunMapping:
        return ClaudeRunMapping(session.builder, session.reported_cost)

    def mapped(self, session: CliSession, mapping: RunMapping) -> None:
        super().mapped(session, mapping)
        assert isinstance(mapping, ClaudeRunMapping)
        session.reported_cost = mapping.running

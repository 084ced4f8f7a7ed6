"""The Gemini CLI ``SessionProvider``: the real ``gemini`` CLI, one run per prompt.

Each prompt is ``gemini -p PROMPT --output-format stream-json --model MODEL`` in the
iteration's workspace (or an empty directory), with a fresh HOME per session
(cli_agent.py) holding the settings docs/GEMINI.md gives for llmbridge: API-key
auth (which makes ``GOOGLE_GEMINI_BASE_URL``, the gateway, apply), and usage
statistics, telemetry, update checks, the IDE and the sandbox off, so the gateway is
the only host the CLI reaches. The first prompt names the session (``--session-id``);
the next ones continue it (``--resume ID``: 0.61.0 stores the conversation under the
HOME, per project directory, and sends it back as history). The mode's and the
scenario's instructions are the HOME's ``~/.gemini/GEMINI.md``, the user-level context
file the CLI adds to its own system prompt, so the workspace is left as the scenario
made it; the section's ``instructions`` replace the CLI's own system prompt
(``GEMINI_SYSTEM_MD``) and its ``settings`` are merged into ``settings.json`` (fewer
tools: ``tools.core``), the two ways to fit the CLI into a small model's context.
The permission policy: ``allow`` is ``--approval-mode yolo``; ``deny`` and
``ask-reject`` are the default mode, in which a headless run has no one to ask, so
the tools that need approval (shell, edits) are not offered at all.

The trace comes from the run's lines (``map_gemini_run``). 0.61.0's stream-json has
``init``, the user's ``message``, the answer's ``message`` deltas, ``tool_use`` /
``tool_result`` (``status`` success or error), ``error`` (a warning or a failed turn)
and a closing ``result`` with the run's token totals: no reasoning, no per-request
usage and no request boundaries. So a step opens at the prompt (and again when the
tool results go back) and ends at the step's last output or the result line, and
the run's tokens, which are only reported whole, sit on the prompt's first step (as
the agent service's do). Reasoning tokens are what the totals leave over
(``total_tokens`` minus input and output: Gemini counts thoughts in the total only).
Gemini CLI reports no cost: the scenarios file's price table, when it has the model.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

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
    merge_settings,
)
from llmbridge.profiler.records.metrics import Price, cost_of
from llmbridge.profiler.records.settings import GeminiCliSettings
from llmbridge.profiler.records.types import (
    CompletionReason,
    CostMetrics,
    PromptResult,
    TokenMetrics,
)

__all__ = [
    "GeminiCliSessionProvider",
    "GeminiCliSettings",
    "gemini_settings",
    "map_gemini_run",
]

_TRUNCATED = "Model response was truncated"
"""How 0.61.0's error event for a reply cut at the token limit begins
(``MAX_TOKENS_EXCEEDED_SUGGESTION``)."""


def gemini_settings() -> dict[str, Any]:
    """``~/.gemini/settings.json``: as tests/e2e/test_gemini_cli.py runs the CLI."""
    return {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},  # play.googleapis.com
        "telemetry": {"enabled": False},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        "ide": {"enabled": False},
        "tools": {"sandbox": False},
    }


def stats_tokens(stats: dict[str, Any]) -> TokenMetrics:
    """A ``result`` line's totals: ``input`` excludes the ``cached`` prompt tokens,
    which are the cache reads."""
    prompt, output = as_count(stats.get("input_tokens")), as_count(stats.get("output_tokens"))
    cached = as_count(stats.get("cached"))
    return TokenMetrics(
        input=as_count(stats.get("input")) if "input" in stats else prompt - cached,
        output=output,
        reasoning=max(as_count(stats.get("total_tokens")) - prompt - output, 0),
        cache_read=cached,
    )


class _Mapping(RunMapping):
    """One run's lines as events on the session's trace, and what they add up to."""

    name = "Gemini CLI"

    def __init__(self, builder: TraceBuilder) -> None:
        super().__init__(builder)
        self.first_boundary: int | None = None
        self.steps: list[int] = []
        self.errors: list[str] = []
        self.last_output: float | None = None
        self.reopen_at: float | None = None
        """Tool results went back at this time: the next output is a new step's."""

    def open_step(self, at: float) -> None:
        self.builder.open_step(at)
        index = self.builder.open_boundary
        assert index is not None
        self.steps.append(index)
        if self.first_boundary is None:
            self.first_boundary = index
        self.last_output = None

    def close_step(self, at: float) -> None:
        if self.builder.open_boundary is not None:
            self.builder.close_step(at)

    def _model_output(self, at: float) -> None:
        """Output of the model: opens the step that follows tool results."""
        if self.reopen_at is not None:
            self.open_step(self.reopen_at)
            self.reopen_at = None
        elif self.builder.open_boundary is None:
            self.open_step(at)
        self.last_output = at

    def feed(self, line: OutputLine) -> None:
        data = line.data
        if data is None:
            return
        at, kind = line.at_ms, data.get("type")
        if kind == "init":
            if isinstance(data.get("session_id"), str):
                self.session_id = data["session_id"]
        elif kind == "message" and data.get("role") == "user":
            self.open_step(at)
        elif kind == "message" and data.get("role") == "assistant":
            self._model_output(at)
            text = str(data.get("content") or "")
            if text:
                self.first_content = self.first_content or at
                self.pieces.append(text)
                self.builder.content("text_output", at, text)
        elif kind == "tool_use":
            self._model_output(at)
            self.builder.tool_call(
                at,
                str(data.get("tool_name") or "?"),
                str(data.get("tool_id")),
                data.get("parameters"),
            )
        elif kind == "tool_result":
            if self.builder.open_boundary is not None:
                self.close_step(self.last_output or at)
            failed = data.get("status") == "error"
            error = as_object(data.get("error"))
            message = str(error.get("message") or "the tool failed") if failed else None
            output = data.get("output")
            self.records.append(
                self.builder.tool_result(
                    at,
                    str(data.get("tool_id")),
                    output if isinstance(output, str) else None,
                    message,
                )
            )
            self.reopen_at = at
        elif kind == "error":
            message = str(data.get("message") or "error")
            self.builder.error(at, message)
            if data.get("severity") == "error":
                self.errors.append(message)
        elif kind == "result":
            if self.reopen_at is not None:  # the tool results' reply ended at once
                self.open_step(self.reopen_at)
                self.reopen_at = None
            self.close_step(at)
            self.result, self.result_at = data, at

    def finish(self, end: RunEnd) -> PromptResult:
        result = self.end_run(end)
        price = end.price
        tokens = stats_tokens(as_object(result.get("stats")))
        cost = cost_of(tokens, price) if price is not None else CostMetrics()
        if self.first_boundary is not None:
            self.builder.set_step_usage(
                self.first_boundary, tokens, cost.total_usd if price is not None else None
            )
        reason, error = self._reason(result, end)
        if error is not None and (end.timed_out or not result or result.get("error")):
            self.builder.error(end.ended_ms, error)
        return self.prompt(
            end, tokens=tokens, cost=cost, steps=self.steps, reason=reason, error=error
        )

    def _reason(self, result: dict[str, Any], end: RunEnd) -> tuple[CompletionReason, str | None]:
        ended_badly = self.ended_badly(result, end)
        if ended_badly is not None:
            return ended_badly
        if result.get("status") != "success":
            error = as_object(result.get("error"))
            message = error.get("message") or "; ".join(self.errors) or "error"
            if any(e.startswith(_TRUNCATED) for e in self.errors):
                return "length", str(message)
            kind = error.get("type")
            return "error", f"{kind}: {message}" if kind else str(message)
        return "stop", None


def map_gemini_run(
    lines: Sequence[OutputLine],
    builder: TraceBuilder,
    *,
    started_ms: float,
    ended_ms: float,
    timed_out: bool = False,
    timeout: float = 0.0,
    failure: str | None = None,
    price: Price | None = None,
) -> tuple[PromptResult, str | None]:
    """A run's ``PromptResult`` (its events appended to ``builder``) and the session
    id the run reported."""
    mapping = _Mapping(builder)
    result = mapping.map(lines, RunEnd(started_ms, ended_ms, timed_out, timeout, failure, price))
    return result, mapping.session_id


class GeminiCliSessionProvider(CliSessionProvider):
    id = "gemini-cli"
    default_command = "gemini"
    settings_type = GeminiCliSettings
    settings: GeminiCliSettings

    def prepare_home(self, session: CliSession) -> None:
        config = session.home / ".gemini"
        config.mkdir()
        settings = merge_settings(gemini_settings(), self.settings.settings)
        (config / "settings.json").write_text(json.dumps(settings, indent=2), encoding="utf-8")
        if self.settings.instructions is not None:
            (config / "system.md").write_text(self.settings.instructions, encoding="utf-8")
        if session.system:
            (config / "GEMINI.md").write_text(session.system + "\n", encoding="utf-8")

    def command_line(self, session: CliSession, text: str) -> list[str]:
        assert self.config is not None
        approval = "yolo" if self.config.permission == "allow" else "default"
        return [
            self.command,
            "-p",
            text,
            "--output-format",
            "stream-json",
            "--model",
            self.config.model,
            "--approval-mode",
            approval,
            *conversation_args(session),
            *self.settings.args,
        ]

    def environment(self, session: CliSession) -> dict[str, str]:
        environment = {
            "GOOGLE_GEMINI_BASE_URL": self.endpoint,
            "GEMINI_API_KEY": self.settings.api_key,
            "GEMINI_CLI_TRUST_WORKSPACE": "true",  # headless: no folder trust prompt
            "GEMINI_SANDBOX": "false",  # tools run here, not in a Docker sandbox
        }
        if self.settings.instructions is not None:
            environment["GEMINI_SYSTEM_MD"] = str(session.home / ".gemini" / "system.md")
        return environment

    def run_mapping(self, session: CliSession) -> RunMapping:
        return _Mapping(session.builder)

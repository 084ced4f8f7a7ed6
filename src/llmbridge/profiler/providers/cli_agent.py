"""What the profiler's command-line agent providers share (Claude Code, Gemini CLI,
Codex): their settings (each CLI's section, records/settings.py, read as its own
``settings_type``, and merged into the CLI's own files: ``merge_settings``), a fresh
HOME per session and one CLI run with the arrival time of each output line (both in
cli_process.py), the conversation named then
resumed (``conversation_args``), and a trace built from those lines as they are
mapped (``RunMapping``: what every mapping keeps, and how a run ends: ``RunEnd``,
``end_run``; ``run_failure``: a run cut at its deadline or ended without a result
line).

A CLI agent runs once per prompt (``claude -p``, ``gemini -p``, ``codex exec``),
printing JSON lines as it works; a later prompt of the same session resumes the
conversation the CLI stored under its HOME. Each run is a child process in its own
process group, stdin closed (``-p`` would read it as more prompt), its group killed
at the deadline and after every run (cli_process.py).

These CLIs print no per-step clock of their own (Gemini CLI's lines carry a
wall-clock timestamp, Claude Code's only some of them), so every line is stamped
on arrival with this process's monotonic clock, expressed as Unix milliseconds
(``now_ms``); a tool's duration is its call's arrival to its result's arrival, which
includes the CLI's own work around the tool and the pipe's latency.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from llmbridge.profiler.providers.cli_process import (
    CliRun,
    OutputLine,
    base_environment,
    make_home,
    remove_home,
    run_cli,
)
from llmbridge.profiler.providers.provider import PromptTimeoutError, ProviderError
from llmbridge.profiler.records.metrics import Price
from llmbridge.profiler.records.modes import combine_instructions
from llmbridge.profiler.records.settings import CliAgentSettings
from llmbridge.profiler.records.trace_builder import TraceBuilder, now_ms
from llmbridge.profiler.records.types import (
    CompletionReason,
    CostMetrics,
    PromptMetrics,
    PromptResult,
    ProviderConfig,
    SessionHandle,
    SessionTrace,
    TimingMetrics,
    TokenMetrics,
    ToolCallRecord,
)

__all__ = [
    "CliAgentSettings",
    "CliRun",
    "CliSession",
    "CliSessionProvider",
    "OutputLine",
    "RunEnd",
    "RunMapping",
    "TraceBuilder",
    "as_count",
    "as_object",
    "base_environment",
    "conversation_args",
    "make_home",
    "merge_settings",
    "now_ms",
    "prompt_result",
    "remove_home",
    "run_cli",
    "run_failure",
]


def as_object(value: Any) -> dict[str, Any]:
    """``value`` when a JSON line's field is an object, else ``{}``."""
    return value if isinstance(value, dict) else {}


def as_count(value: Any) -> int:
    """``value`` when a JSON line's field is a whole number (not a boolean), else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def merge_settings(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` merged in, mappings key by key: a section's ``settings``
    (Gemini CLI's ``settings.json``) or ``config`` (Codex's ``config.toml``) over the
    profiler's own."""
    merged = dict(base)
    for key, value in extra.items():
        old = merged.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            merged[key] = merge_settings(old, value)
        else:
            merged[key] = value
    return merged


def prompt_result(
    *,
    text: str,
    tokens: TokenMetrics,
    cost: CostMetrics,
    started_ms: float,
    ended_ms: float,
    first_content_ms: float | None,
    steps_ms: Sequence[float],
    tool_calls: Sequence[ToolCallRecord],
    reason: CompletionReason,
    error: str | None,
) -> PromptResult:
    """One prompt's result from what a run's mapping measured: time to first token
    is from the CLI's start to its first text or reasoning, the total from its start
    to ``ended_ms`` (the CLI's closing line, where it printed one)."""
    tools: dict[str, float] = {}
    for call in tool_calls:
        tools[call.name] = tools.get(call.name, 0.0) + (call.duration_ms or 0.0)
    timing = TimingMetrics(
        ttft_ms=None if first_content_ms is None else first_content_ms - started_ms,
        total_ms=ended_ms - started_ms,
        steps_ms=tuple(steps_ms),
        tools_ms=tools,
    )
    return PromptResult(
        text=text,
        metrics=PromptMetrics(tokens, timing, tuple(tool_calls), cost),
        completion_reason=reason,
        error=error,
    )


def run_failure(
    name: str, result: Mapping[str, Any], timed_out: bool, timeout: float, failure: str | None
) -> tuple[CompletionReason, str] | None:
    """Why a run ended badly before its ``result`` line could say (a timeout, or no
    result line at all: ``failure``, what the process itself reported); ``None`` when
    the result line is there to be read."""
    if timed_out:
        return "timeout", f"timeout after {timeout:g} s"
    if not result:
        return "error", failure or f"{name} ended without a result"
    return None


@dataclass(frozen=True, slots=True)
class RunEnd:
    """How a run went, as its mapping sums it up."""

    started_ms: float
    ended_ms: float
    timed_out: bool = False
    timeout: float = 0.0
    """The prompt's deadline, in seconds."""
    failure: str | None = None
    """What the process itself reported (``CliRun.failure``)."""
    price: Price | None = None
    """The scenarios file's price for the model, if it has one."""

    @classmethod
    def of(cls, run: CliRun, timeout: float, price: Price | None) -> RunEnd:
        return cls(run.started_ms, run.ended_ms, run.timed_out, timeout, run.failure(), price)


class RunMapping:
    """What mapping one run's lines onto the session's trace gathers, whichever CLI
    printed them: the answer's text, its first content, the tool calls, the closing
    ``result`` line and the session id the run reported. A CLI's mapping reads its
    own lines (``feed``), opens and closes its steps (``open_step``, ``close_step``)
    and sums the run up (``finish``, through ``end_run`` and ``prompt``)."""

    name = "the CLI"
    """The CLI, as a run that ended without a result line names it."""

    def __init__(self, builder: TraceBuilder) -> None:
        self.builder = builder
        self._first_event = len(builder.events)
        self.pieces: list[str] = []
        self.first_content: float | None = None
        self.records: list[ToolCallRecord] = []
        self.result: dict[str, Any] | None = None
        self.result_at: float | None = None
        """The result line's arrival: the end of the turn (the CLI then shuts down)."""
        self.session_id: str | None = None

    # -- what a CLI's mapping provides ------------------------------------------------

    def feed(self, line: OutputLine) -> None:
        """Map one output line onto the trace."""
        raise NotImplementedError

    def open_step(self, at: float) -> None:
        raise NotImplementedError

    def close_step(self, at: float) -> None:
        """End the open step, if one is open, at ``at``."""
        raise NotImplementedError

    def finish(self, end: RunEnd) -> PromptResult:
        raise NotImplementedError

    # -- shared ---------------------------------------------------------------------

    def map(self, lines: Sequence[OutputLine], end: RunEnd) -> PromptResult:
        """The run's ``PromptResult``, its events appended to the session's trace."""
        for line in lines:
            self.feed(line)
        return self.finish(end)

    def end_run(self, end: RunEnd) -> dict[str, Any]:
        """End the run's trace: a run that failed before a request still made an
        attempt, which is its step; the open step ends with the run, and every tool
        call still waiting fails. The ``result`` line (``{}`` when none came)."""
        events = self.builder.events[self._first_event :]
        if not any(event.type == "turn_boundary" for event in events):
            self.open_step(end.started_ms)
        self.close_step(end.ended_ms)
        self.records += self.builder.end_tools(end.ended_ms, timed_out=end.timed_out)
        return self.result or {}

    def ended_badly(
        self, result: Mapping[str, Any], end: RunEnd
    ) -> tuple[CompletionReason, str] | None:
        """``run_failure`` for this CLI's run."""
        return run_failure(self.name, result, end.timed_out, end.timeout, end.failure)

    def prompt(
        self,
        end: RunEnd,
        *,
        tokens: TokenMetrics,
        cost: CostMetrics,
        steps: Sequence[int],
        reason: CompletionReason,
        error: str | None,
    ) -> PromptResult:
        """The prompt's result; ``steps`` are the indices of its steps' boundaries."""
        return prompt_result(
            text="".join(self.pieces),
            tokens=tokens,
            cost=cost,
            started_ms=end.started_ms,
            ended_ms=self.result_at or end.ended_ms,
            first_content_ms=self.first_content,
            steps_ms=[self.builder.events[i].duration_ms or 0.0 for i in steps],
            tool_calls=self.records,
            reason=reason,
            error=None if end.timed_out else error,  # the timeout is the prompt's error
        )


# -- the provider -----------------------------------------------------------------------


@dataclass
class CliSession:
    """One profiled session: its HOME, where the agent works, and what it did."""

    key: str
    """The session's id: passed to the CLI (``--session-id``) where it takes one."""
    home: Path
    cwd: Path
    system: str | None
    """The mode's instructions, then the scenario's."""
    builder: TraceBuilder = field(default_factory=TraceBuilder)
    resume_id: str | None = None
    """The CLI's id of the conversation, once a run has reported it."""
    runs: list[CliRun] = field(default_factory=list)
    """Every run's output (the fixture capture saves it)."""
    reported_cost: float = 0.0
    """The CLI's running total of cost, where it reports one across runs."""


def conversation_args(session: CliSession) -> list[str]:
    """The first prompt names the conversation (``--session-id``), the next ones
    continue it (``--resume``): Claude Code and Gemini CLI take the same flags."""
    if session.resume_id is None:
        return ["--session-id", session.key]
    return ["--resume", session.resume_id]


def _absolute(path: str) -> str:
    """``path`` made absolute against the current directory (no I/O: ``getcwd``)."""
    return os.path.abspath(path)


class CliSessionProvider:
    """A ``SessionProvider`` running a command-line agent once per prompt.

    Subclasses say how the CLI is called (``command_line``, ``environment``, what
    ``prepare_home`` writes) and how a run's lines map to a ``PromptResult``
    (``run_mapping``, whose mapping appends the run's events to the session's trace;
    or ``map_run`` itself)."""

    id = "cli"
    default_command = ""
    settings_type: ClassVar[type[CliAgentSettings]] = CliAgentSettings
    """The CLI's section of the scenarios file; plain settings are read as it."""
    settings: CliAgentSettings

    def __init__(
        self,
        settings: CliAgentSettings | None = None,
        *,
        gateway_url: str | None = None,
        prices: Mapping[str, Price] | None = None,
    ) -> None:
        if not isinstance(settings, self.settings_type):
            settings = self.settings_type(**(settings.model_dump() if settings else {}))
        self.settings = settings
        self.gateway_url = gateway_url
        self.prices = dict(prices or {})
        self.config: ProviderConfig | None = None
        self.command = ""
        self.endpoint = ""
        self.sessions: dict[str, CliSession] = {}

    # -- what a subclass provides -------------------------------------------------------

    def command_line(self, session: CliSession, text: str) -> list[str]:
        raise NotImplementedError

    def environment(self, session: CliSession) -> dict[str, str]:
        """The CLI's own variables (``base_environment`` adds the rest)."""
        raise NotImplementedError

    def prepare_home(self, session: CliSession) -> None:
        """Write the CLI's settings under ``session.home`` (nothing by default)."""

    def run_mapping(self, session: CliSession) -> RunMapping:
        """What maps a run's lines onto ``session``'s trace (``map_run`` uses it)."""
        raise NotImplementedError

    def mapped(self, session: CliSession, mapping: RunMapping) -> None:
        """After a run is mapped: once it reported the conversation's id, the
        conversation exists, and later prompts resume it."""
        if mapping.session_id is not None:
            session.resume_id = mapping.session_id

    def map_run(self, session: CliSession, run: CliRun, timeout: float) -> PromptResult:
        """The run's ``PromptResult``, its events appended to the session's trace."""
        mapping = self.run_mapping(session)
        result = mapping.map(run.lines, RunEnd.of(run, timeout, self.price))
        self.mapped(session, mapping)
        return result

    # -- the contract -----------------------------------------------------------------

    @property
    def price(self) -> Price | None:
        return self.prices.get(self.config.model) if self.config is not None else None

    async def init(self, config: ProviderConfig) -> None:
        command = self.settings.command or self.default_command
        found = shutil.which(command)
        if found is None:
            raise ProviderError(f"{self.id}: the command {command!r} was not found")
        endpoint = self.settings.endpoint or self.gateway_url
        if not endpoint:
            raise ProviderError(
                f"{self.id}: no model endpoint (set {self.id}.endpoint in the scenarios "
                "file or pass --gateway-url)"
            )
        # Absolute: the CLI runs in the iteration's workspace, where a relative path
        # (``command: ./node_modules/.bin/claude``, relative to where the profiler
        # runs) would name nothing.
        absolute = _absolute(found)
        self.config, self.command, self.endpoint = config, absolute, endpoint.rstrip("/")

    async def create_session(
        self,
        *,
        system_instructions: str | None,
        scenario_id: str,
        iteration: int,
        workspace: Path | None = None,
    ) -> SessionHandle:
        if self.config is None:
            raise ProviderError("init() first")
        home = make_home(f"llmbridge-profile-{self.id}-")
        cwd = workspace
        if cwd is None:
            cwd = home / "work"
            cwd.mkdir()
        system = combine_instructions(self.config.system_instructions, system_instructions)
        session = CliSession(str(uuid.uuid4()), home, cwd, system)
        try:
            self.prepare_home(session)
        except OSError as exc:
            await remove_home(home)
            raise ProviderError(f"{self.id}: could not prepare its HOME: {exc}") from exc
        self.sessions[session.key] = session
        return SessionHandle(session.key, self.id, time.time(), scenario_id, iteration)

    def _session(self, handle: SessionHandle) -> CliSession:
        session = self.sessions.get(handle.session_id)
        if session is None:
            raise ProviderError(f"unknown session {handle.session_id}")
        return session

    async def prompt(
        self,
        handle: SessionHandle,
        text: str,
        timeout: float,  # noqa: ASYNC109 - seed 004's signature
    ) -> PromptResult:
        if self.config is None:
            raise ProviderError("init() first")
        session = self._session(handle)
        number = len(session.runs)
        environment = base_environment(
            session.home,
            self.environment(session),
            self.settings.environment,
            self.config.environment,
        )
        try:
            run = await run_cli(
                self.command_line(session, text),
                env=environment,
                cwd=session.cwd,
                timeout=timeout,
                stderr_path=session.home / f"stderr-{number}.log",
            )
        except OSError as exc:
            raise ProviderError(f"{self.id} did not start: {exc}") from exc
        session.runs.append(run)
        result = self.map_run(session, run, timeout)
        if run.timed_out:
            raise PromptTimeoutError(f"the prompt did not finish within {timeout:g} s", result)
        return result

    async def export_session(self, handle: SessionHandle) -> SessionTrace:
        return self._session(handle).builder.session_trace(handle.session_id)

    async def destroy_session(self, handle: SessionHandle) -> None:
        session = self.sessions.pop(handle.session_id, None)
        if session is not None:
            await remove_home(session.home)

    async def shutdown(self) -> None:
        for key in list(self.sessions):
            await remove_home(self.sessions.pop(key).home)

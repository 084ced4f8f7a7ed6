"""Captured CLI runs (tests/profiler/fixtures, written by capture_cli_agents.py) as
the ``OutputLine``s a provider maps, each line given a known arrival time, so the
times the mapping derives can be checked exactly; a CLI provider's session set up and
shut down around a test (``cli_session``; ``live_cli_session`` with the real CLI on a
scripted gateway); and ``profile run`` end to end with a CLI agent on a scripted
gateway, with what every CLI's run must show."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from llmbridge.backends.scripted import ScriptedBackend
from llmbridge.cli import cli
from llmbridge.profiler.providers.cli_agent import (
    CliAgentSettings,
    CliSession,
    CliSessionProvider,
    OutputLine,
    TraceBuilder,
)
from llmbridge.profiler.records.trace import build_summary, check_invariants, group_turns
from llmbridge.profiler.records.types import (
    PromptResult,
    ProviderConfig,
    SessionHandle,
    SessionTrace,
)
from tests.conftest import running_gateway
from tests.profiler.capture_cli_agents import ToolLoop

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


def check_cut_at_deadline(result: PromptResult, trace: SessionTrace, timeout: float) -> None:
    """A run cut at its ``timeout`` while a tool call was open (cli_agent's
    ``end_tools`` and ``run_failure``, whichever CLI): a valid trace ending in the
    timeout's error, the prompt a timeout (its error is the exception's, not the
    result's), the open call failed saying so."""
    assert check_invariants(trace) == []  # the open call ends as an error
    assert result.completion_reason == "timeout" and result.error is None
    (call,) = result.metrics.tool_calls
    assert call.status == "error" and "never finished (timeout)" in (call.error or "")
    assert trace.events[-1].type == "error"
    assert trace.events[-1].error == f"timeout after {timeout:g} s"


# -- one session of a CLI provider ------------------------------------------------------------

EVERY_MODEL = [{"name": "*", "backend": "scripted", "model": "scripted"}]
"""Gateway routes: whatever model the CLI asks for is the scripted backend's."""


@dataclass
class Session:
    """A started session of ``provider``."""

    provider: CliSessionProvider
    handle: SessionHandle

    @property
    def state(self) -> CliSession:
        """The provider's record of it: HOME, working directory, conversation id."""
        return self.provider.sessions[self.handle.session_id]

    async def prompt(self, text: str, timeout: float = 120) -> PromptResult:  # noqa: ASYNC109
        return await self.provider.prompt(self.handle, text, timeout)


@asynccontextmanager
async def cli_session(
    provider: CliSessionProvider, config: ProviderConfig, *, system_instructions: str | None
) -> AsyncIterator[Session]:
    """``provider`` initialised with ``config`` and one session created (scenario "s",
    iteration 0); the provider shut down (the session's HOME removed) on leaving."""
    await provider.init(config)
    handle = await provider.create_session(
        system_instructions=system_instructions, scenario_id="s", iteration=0
    )
    try:
        yield Session(provider, handle)
    finally:
        await provider.shutdown()


@asynccontextmanager
async def live_cli_session(
    provider_type: type[CliSessionProvider],
    settings: CliAgentSettings,
    model: ScriptedBackend,
    config: ProviderConfig,
    *,
    system_instructions: str | None = None,
) -> AsyncIterator[Session]:
    """``cli_session`` of the real CLI (``provider_type`` with ``settings``) on a
    loopback gateway serving ``model`` under every model name."""
    with running_gateway({"scripted": model}, models=EVERY_MODEL) as gateway:
        provider = provider_type(settings, gateway_url=gateway.url)
        async with cli_session(provider, config, system_instructions=system_instructions) as live:
            yield live


# -- profile run, end to end ------------------------------------------------------------------


def profile_run(
    tmp_path: Path, spec: dict[str, Any], *, provider: str, gateway_url: str
) -> list[dict[str, Any]]:
    """``llmbridge profile run`` of ``spec`` with ``provider`` against the gateway at
    ``gateway_url`` (its report in ``tmp_path / "out"``): the trace records."""
    scenarios = tmp_path / "s.yaml"
    scenarios.write_text(json.dumps(spec))
    out = tmp_path / "out"
    args = ["profile", "run", str(scenarios), "--provider", provider, "--quiet"]
    args += ["--gateway-url", gateway_url, "--out", str(out)]
    run = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert run.exit_code == 0, run.output
    return [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]


def write_and_resume_spec(section: str, settings: dict[str, Any], tool: str) -> dict[str, Any]:
    """A scenarios file for one CLI (its ``section``, priced): the scripted model
    (``ToolLoop``) has the CLI's ``tool`` write out.txt in the workspace, then a second
    prompt resumes the session; the ``terse`` mode's instructions, then the scenario's,
    go with both."""
    return {
        "models": ["scripted"],
        "modes": [{"name": "terse", "system": "Be terse."}],
        "timeout": 120,
        section: settings,
        "prices": {"scripted": {"input": 1.0, "output": 2.0}},
        "scenarios": [
            {
                "id": "write",
                "system": "Scenario.",
                "prompts": ["Write hi to out.txt", "Say it again"],
                "checks": [
                    {"file_contains": {"path": "out.txt", "text": "HI"}},
                    {"tool_called": tool},
                    {"completes": True},
                ],
            }
        ],
    }


def run_write_and_resume(
    tmp_path: Path,
    model: ToolLoop,
    *,
    section: str,
    settings: dict[str, Any],
    provider: str,
    tool: str,
) -> dict[str, Any]:
    """``write_and_resume_spec`` run with ``provider`` on a gateway serving ``model``;
    what holds whichever CLI ran it is checked here: the workspace check passed, the
    first prompt's one call completed and is the trace's, the second prompt resumed
    with no call, three steps, the mode's instructions and then the scenario's in every
    request's system prompt, and the prompts' tokens are the trace's, priced by the
    price table. The record."""
    spec = write_and_resume_spec(section, settings, tool)
    with running_gateway({"scripted": model}, models=EVERY_MODEL) as gateway:
        (record,) = profile_run(tmp_path, spec, provider=provider, gateway_url=gateway.url)
    assert record["provider"] == provider
    assert record["passed"], record
    assert record["invariant_problems"] == []
    assert all(c["passed"] for c in record["checks"])
    first, second = record["prompts"]
    (call,) = first["tool_calls"]
    assert call["name"] == tool and call["status"] == "completed"
    assert second["text"] == "Once again." and second["tool_calls"] == []
    events = record["trace"]["events"]
    tool_call = next(e for e in events if e["type"] == "tool_call")
    assert tool_call["call_id"] == call["call_id"]
    assert [e["turn"] for e in events if e["type"] == "turn_boundary"] == [0, 1, 2]
    for request in model.requests:
        system = request.messages[0].text
        assert "Be terse." in system and system.index("Be terse.") < system.index("Scenario.")
    total = sum(p["tokens"]["total"] for p in record["prompts"])
    assert record["trace"]["summary"]["tokens"]["total"] == total > 0
    assert all(p["cost"]["source"] == "price_table" for p in record["prompts"])
    return record

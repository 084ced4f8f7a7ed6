"""The Gemini CLI provider: captured ``gemini -p --output-format stream-json`` runs
mapped into traces and prompt results (fixtures from capture_cli_agents.py, replayed
with known arrival times), how the CLI is called, and ``profile run --provider
gemini-cli`` end to end with the pinned CLI on a scripted gateway."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmbridge.profiler.providers.cli_agent import CliAgentSettings, TraceBuilder
from llmbridge.profiler.providers.gemini_cli import (
    GeminiCliSessionProvider,
    GeminiCliSettings,
    gemini_settings,
    map_gemini_run,
)
from llmbridge.profiler.records.metrics import Price, cost_of
from llmbridge.profiler.records.trace import check_invariants
from llmbridge.profiler.records.types import PromptResult, ProviderConfig, TokenMetrics
from tests.profiler.capture_cli_agents import ToolLoop
from tests.profiler.cli_fixtures import (
    Replay,
    check_cut_at_deadline,
    cli_session,
    live_cli_session,
    run_write_and_resume,
    trace_of,
    types_of,
)

GEMINI = Path(__file__).resolve().parent.parent / "e2e" / "node_modules" / ".bin" / "gemini"


def _map(
    replay: Replay, builder: TraceBuilder, *, price: Price | None = None
) -> tuple[PromptResult, str | None]:
    return map_gemini_run(
        replay.lines,
        builder,
        started_ms=replay.started_ms,
        ended_ms=replay.ended_ms,
        price=price,
    )


def _stats(replay: Replay) -> dict[str, Any]:
    stats: dict[str, Any] = replay.result()["stats"]
    return stats


# -- the captured runs ------------------------------------------------------------------


def test_a_tool_turn_maps_to_two_steps_with_the_shell_call_between() -> None:
    replay = Replay("gemini_cli_tool_1.jsonl")
    builder = TraceBuilder()
    result, session_id = _map(replay, builder)
    trace = trace_of(builder)

    assert check_invariants(trace) == []
    assert types_of(trace) == [
        "turn_boundary",
        "text_output",
        "tool_call",
        "tool_result",
        "turn_boundary",
        "text_output",
    ]
    (init,) = replay.data("init")
    assert session_id == init["session_id"]
    assert result.completion_reason == "stop" and result.error is None
    assert result.text == "Running.The command ran."

    # Step one: the prompt to the call; step two: the results going back to the result line.
    boundaries = [e for e in trace.events if e.type == "turn_boundary"]
    user, called = replay.at('"role":"user"'), replay.at('"type":"tool_use"')
    answered, finished = replay.at('"type":"tool_result"'), replay.at('"type":"result"')
    assert [(b.timestamp_ms, b.duration_ms) for b in boundaries] == [
        (user, called - user),
        (answered, finished - answered),
    ]
    assert list(result.metrics.timing.steps_ms) == [called - user, finished - answered]

    (call,) = result.metrics.tool_calls
    assert call.name == "run_shell_command" and call.status == "completed"
    assert call.duration_ms == answered - called
    tool_call = next(e for e in trace.events if e.type == "tool_call")
    assert tool_call.arguments == {
        "command": "echo hi | tr a-z A-Z > out.txt",
        "description": "Run it",
    }
    assert (
        tool_call.turn == 0 and next(e for e in trace.events if e.type == "tool_result").turn == 0
    )

    assert result.metrics.timing.ttft_ms == replay.at('"role":"assistant"') - replay.started_ms
    # The turn ends with the result line (the CLI's shutdown after it is not the turn's).
    assert result.metrics.timing.total_ms == replay.at('"type":"result"') - replay.started_ms

    # The run's totals, on its first step; cached prompt tokens are the cache reads.
    stats = _stats(replay)
    tokens = result.metrics.tokens
    assert tokens.input + tokens.cache_read == stats["input_tokens"]
    assert tokens.output == stats["output_tokens"]
    assert tokens.total + tokens.cache_read == stats["total_tokens"]
    assert boundaries[0].tokens == tokens and boundaries[1].tokens is None
    assert trace.summary.tokens == tokens
    assert result.metrics.cost.source == "none"  # Gemini CLI reports no cost


def test_a_resumed_prompt_continues_the_turns() -> None:
    first = Replay("gemini_cli_tool_1.jsonl")
    second = Replay("gemini_cli_tool_2.jsonl", offset_ms=60_000)
    builder = TraceBuilder()
    one, session_id = _map(first, builder)
    two, resumed_id = _map(second, builder)
    trace = trace_of(builder)

    assert check_invariants(trace) == []
    assert resumed_id == session_id  # --resume keeps the session
    assert [t.index for t in trace.turns] == [0, 1, 2]
    assert two.text == "Once again." and two.completion_reason == "stop"
    assert two.metrics.tokens.input == _stats(second)["input"]
    assert trace.summary.tokens == one.metrics.tokens + two.metrics.tokens


def test_a_price_table_prices_the_run() -> None:
    replay = Replay("gemini_cli_tool_1.jsonl")
    builder = TraceBuilder()
    price = Price(input=0.3, output=2.5)
    result, _ = _map(replay, builder, price=price)

    assert result.metrics.cost == cost_of(result.metrics.tokens, price)
    boundaries = [e for e in builder.events if e.type == "turn_boundary"]
    assert [b.cost_usd for b in boundaries] == [result.metrics.cost.total_usd, None]


def test_a_failed_tool_is_a_tool_error() -> None:
    replay = Replay("gemini_cli_tool_error_1.jsonl")
    builder = TraceBuilder()
    result, _ = _map(replay, builder)
    trace = trace_of(builder)

    assert check_invariants(trace) == []
    (call,) = result.metrics.tool_calls
    assert call.name == "read_file" and call.status == "error"
    assert call.error is not None and "File not found" in call.error
    error = next(e for e in trace.events if e.type == "error")
    assert error.tool == "read_file" and error.call_id == call.call_id
    assert result.completion_reason == "stop"  # the model answered after the failure


def test_a_backend_error_ends_the_prompt_as_an_error() -> None:
    replay = Replay("gemini_cli_backend_error_1.jsonl")
    builder = TraceBuilder()
    result, _ = _map(replay, builder)
    trace = trace_of(builder)

    assert check_invariants(trace) == []
    assert result.completion_reason == "error"
    assert result.error is not None and "the scripted backend refuses" in result.error
    assert types_of(trace) == ["turn_boundary", "error"]
    assert result.metrics.tokens == TokenMetrics() and result.metrics.tool_calls == ()


def test_a_run_cut_at_its_deadline_keeps_what_it_measured() -> None:
    replay = Replay("gemini_cli_tool_1.jsonl", stop_after=('"type":"tool_use"',))
    builder = TraceBuilder()
    result, _ = map_gemini_run(
        replay.lines,
        builder,
        started_ms=replay.started_ms,
        ended_ms=replay.ended_ms,
        timed_out=True,
        timeout=3,
    )
    check_cut_at_deadline(result, trace_of(builder), 3)
    assert result.metrics.tokens == TokenMetrics()  # totals come only with the result line


# -- how the CLI is called ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("permission", "approval"), [("allow", "yolo"), ("deny", "default"), ("ask-reject", "default")]
)
async def test_the_command_line_home_and_environment(permission: Any, approval: str) -> None:
    settings = CliAgentSettings(command=str(GEMINI), api_key="k")
    provider = GeminiCliSessionProvider(settings, gateway_url="http://127.0.0.1:9")
    config = ProviderConfig(model="m", system_instructions="Mode.", permission=permission)
    async with cli_session(provider, config, system_instructions="Scenario.") as live:
        session = live.state
        first = provider.command_line(session, "Hi")
        assert first[:3] == [str(GEMINI), "-p", "Hi"]
        joined = " ".join(first)
        assert "--output-format stream-json" in joined and "--model m" in joined
        assert f"--approval-mode {approval}" in joined
        assert f"--session-id {live.handle.session_id}" in joined
        session.resume_id = "the-session"
        assert "--resume the-session" in " ".join(provider.command_line(session, "More"))

        config = session.home / ".gemini"
        assert json.loads((config / "settings.json").read_text()) == gemini_settings()
        assert (config / "GEMINI.md").read_text() == "Mode.\n\nScenario.\n"
        environment = provider.environment(session)
        assert environment["GOOGLE_GEMINI_BASE_URL"] == "http://127.0.0.1:9"
        assert environment["GEMINI_API_KEY"] == "k"
    assert not session.home.exists()


async def test_the_sections_settings_are_merged_into_settings_json() -> None:
    """The section's ``settings`` are merged into the HOME's settings.json: what keeps
    the CLI offline and headless stays (gemini_settings), the section adds to it."""
    settings = GeminiCliSettings(
        command=str(GEMINI), settings={"tools": {"core": ["run_shell_command"]}}
    )
    provider = GeminiCliSessionProvider(settings, gateway_url="http://127.0.0.1:9")
    async with cli_session(provider, ProviderConfig(model="m"), system_instructions=None) as live:
        written = json.loads((live.state.home / ".gemini" / "settings.json").read_text())
    assert written["tools"] == {"sandbox": False, "core": ["run_shell_command"]}
    assert written["security"] == gemini_settings()["security"]


# -- profile run, end to end ------------------------------------------------------------------


def test_profile_run_with_gemini_cli_in_a_workspace(tmp_path: Path) -> None:
    """The scripted model has Gemini CLI's shell tool write a file in the iteration's
    workspace, then answers; a second prompt resumes the session. The workspace
    check passes and the trace holds the call. The section's ``instructions`` replace
    the CLI's system prompt, the mode's and scenario's following them (the HOME's
    GEMINI.md), and its ``settings`` (merged into settings.json) leave only the shell
    tool offered."""
    model = ToolLoop("scripted", models=("scripted",))
    settings = {
        "command": str(GEMINI),
        "permission": "allow",
        "instructions": "You are a coding agent.",
        "settings": {"tools": {"core": ["run_shell_command"]}},
    }
    run_write_and_resume(
        tmp_path,
        model,
        section="gemini_cli",
        settings=settings,
        provider="gemini-cli",
        tool="run_shell_command",
    )
    # The resumed prompt carried the conversation: the first prompt is in its request.
    assert any("Write hi to out.txt" in m.text for m in model.requests[-1].messages)
    for request in model.requests:
        assert [tool.name for tool in request.tools] == ["run_shell_command"]
        assert request.messages[0].text.startswith("You are a coding agent.")


async def test_without_allow_the_shell_is_not_offered() -> None:
    """Headless, the default approval mode has no one to ask: the real CLI leaves the
    tools that need approval out of the request, so the model cannot call them."""
    model = ToolLoop("scripted", models=("scripted",))
    settings = CliAgentSettings(command=str(GEMINI))
    config = ProviderConfig(model="scripted", permission="deny")
    async with live_cli_session(GeminiCliSessionProvider, settings, model, config) as live:
        result = await live.prompt("Write hi to out.txt")
    offered = {tool.name for request in model.requests for tool in request.tools}
    assert "read_file" in offered and "run_shell_command" not in offered
    assert result.metrics.tool_calls == () and result.completion_reason == "stop"

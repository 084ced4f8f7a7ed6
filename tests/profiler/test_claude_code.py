"""The Claude Code provider: captured ``claude -p --output-format stream-json`` runs
mapped into traces and prompt results (fixtures from capture_cli_agents.py, replayed
with known arrival times), how the CLI is called, and ``profile run --provider
claude-code`` end to end with the pinned CLI on a scripted gateway."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.profiler.providers.claude_code import ClaudeCodeSessionProvider, map_claude_run
from llmbridge.profiler.providers.cli_agent import CliAgentSettings, TraceBuilder
from llmbridge.profiler.providers.provider import PromptTimeoutError, ProviderError
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

CLAUDE = Path(__file__).resolve().parent.parent / "e2e" / "node_modules" / ".bin" / "claude"


def _map(
    replay: Replay, builder: TraceBuilder, *, price: Price | None = None, before: float = 0.0
) -> tuple[PromptResult, float, str | None]:
    return map_claude_run(
        replay.lines,
        builder,
        started_ms=replay.started_ms,
        ended_ms=replay.ended_ms,
        price=price,
        reported_before=before,
    )


def _usage(result: dict[str, Any]) -> TokenMetrics:
    usage = result["usage"]
    return TokenMetrics(
        input=usage["input_tokens"],
        output=usage["output_tokens"],
        cache_read=usage["cache_read_input_tokens"],
        cache_write=usage["cache_creation_input_tokens"],
    )


# -- the captured runs ------------------------------------------------------------------


def test_a_tool_turn_maps_to_two_steps_with_the_bash_call_between() -> None:
    replay = Replay("claude_code_tool_1.jsonl")
    builder = TraceBuilder()
    result, running, session_id = _map(replay, builder)
    trace = trace_of(builder)

    assert check_invariants(trace) == []
    assert types_of(trace) == [
        "turn_boundary",
        "reasoning",
        "text_output",
        "tool_call",
        "tool_result",
        "turn_boundary",
        "reasoning",
        "text_output",
    ]
    reported = replay.result()
    assert session_id == reported["session_id"]
    assert result.completion_reason == "stop" and result.error is None
    assert result.text == "Running.The command ran."

    # Each step runs from its request going out to message_stop, with message_delta's usage.
    starts = [line.at_ms for line in replay.lines if '"status":"requesting"' in line.text]
    stops = [line.at_ms for line in replay.lines if '"type":"message_stop"' in line.text]
    boundaries = [e for e in trace.events if e.type == "turn_boundary"]
    assert [b.timestamp_ms for b in boundaries] == starts
    assert [b.duration_ms for b in boundaries] == [
        b - a for a, b in zip(starts, stops, strict=True)
    ]
    assert list(result.metrics.timing.steps_ms) == [
        b - a for a, b in zip(starts, stops, strict=True)
    ]
    assert [b.status for b in boundaries] == ["tool_use", "end_turn"]
    assert len(boundaries) == reported["num_turns"]
    deltas = [e["event"]["usage"] for e in replay.data("stream_event") if "usage" in e["event"]]
    assert [b.tokens.output for b in boundaries if b.tokens] == [u["output_tokens"] for u in deltas]

    # The steps' tokens add up to what the result line reports for the run.
    assert result.metrics.tokens == _usage(reported)
    assert trace.summary.tokens == _usage(reported)

    # The call, timed from its tool_use line to its tool_result line.
    (call,) = result.metrics.tool_calls
    assert call.name == "Bash" and call.status == "completed" and call.error is None
    # (the assistant line with the whole tool_use block: its input is complete)
    called = replay.at('"type":"assistant"', '"type":"tool_use"')
    assert call.duration_ms == replay.at('"type":"tool_result"') - called
    tool_call = next(e for e in trace.events if e.type == "tool_call")
    assert tool_call.arguments["command"] == "echo hi | tr a-z A-Z > out.txt"
    assert tool_call.call_id == call.call_id
    assert result.metrics.timing.tools_ms == {"Bash": call.duration_ms}

    # Time to first token: from the CLI's start to the first thinking delta.
    assert result.metrics.timing.ttft_ms == replay.at("thinking_delta") - replay.started_ms
    # The turn ends with the result line (the CLI's shutdown after it is not the turn's).
    assert result.metrics.timing.total_ms == replay.at('"type":"result"') - replay.started_ms

    # No price: Claude Code's own figure, on the prompt's first step.
    assert result.metrics.cost.source == "backend"
    assert result.metrics.cost.total_usd == reported["total_cost_usd"] == running
    assert [b.cost_usd for b in boundaries] == [reported["total_cost_usd"], None]


def test_a_resumed_prompt_continues_the_turns_and_costs_only_its_own_run() -> None:
    first, second = (
        Replay("claude_code_tool_1.jsonl"),
        Replay("claude_code_tool_2.jsonl", offset_ms=60_000),
    )
    builder = TraceBuilder()
    one, running, session_id = _map(first, builder)
    two, total, resumed_id = _map(second, builder, before=running)
    trace = trace_of(builder)

    assert check_invariants(trace) == []
    assert resumed_id == session_id  # --resume keeps the session
    assert [t.index for t in trace.turns] == [0, 1, 2]
    assert types_of(trace)[-2:] == ["turn_boundary", "text_output"]
    assert two.text == "Once again." and two.completion_reason == "stop"
    assert two.metrics.tokens == _usage(second.result())
    assert trace.summary.tokens == one.metrics.tokens + two.metrics.tokens

    # total_cost_usd runs across the session; the prompt's share is its own run's.
    reported = second.result()
    assert total == reported["total_cost_usd"]
    own = reported["model_usage_since_last_result"]["scripted"]["costUSD"]
    assert two.metrics.cost.total_usd == own
    assert own == pytest.approx(total - running)


def test_a_price_table_prices_each_step() -> None:
    replay = Replay("claude_code_tool_1.jsonl")
    builder = TraceBuilder()
    price = Price(input=3.0, output=15.0)
    result, _, _ = _map(replay, builder, price=price)

    assert result.metrics.cost == cost_of(_usage(replay.result()), price)
    boundaries = [e for e in builder.events if e.type == "turn_boundary"]
    assert all(b.tokens is not None for b in boundaries)
    steps = [cost_of(b.tokens, price).total_usd for b in boundaries if b.tokens is not None]
    assert [b.cost_usd for b in boundaries] == steps
    assert sum(steps) == pytest.approx(result.metrics.cost.total_usd)


def test_a_failed_command_is_a_tool_error() -> None:
    replay = Replay("claude_code_tool_error_1.jsonl")
    builder = TraceBuilder()
    result, _, _ = _map(replay, builder)
    trace = trace_of(builder)

    assert check_invariants(trace) == []
    (call,) = result.metrics.tool_calls
    assert call.status == "error" and "does-not-exist" in (call.error or "")
    error = next(e for e in trace.events if e.type == "error")
    assert error.tool == "Bash" and error.call_id == call.call_id
    assert trace.summary.tool_errors == 1
    assert result.completion_reason == "stop"  # the model answered after the failure
    assert result.metrics.tokens == _usage(replay.result())


def test_a_backend_error_ends_the_prompt_as_an_error() -> None:
    replay = Replay("claude_code_backend_error_1.jsonl")
    builder = TraceBuilder()
    result, running, _ = _map(replay, builder)
    trace = trace_of(builder)

    assert check_invariants(trace) == []
    assert replay.result()["is_error"] is True
    assert result.completion_reason == "error"
    assert result.error is not None and "the scripted backend refuses" in result.error
    assert "400" in result.error
    # The request's step (no tokens), ended by the result line, then the error.
    assert types_of(trace) == ["turn_boundary", "error"]
    assert trace.events[0].timestamp_ms == replay.at('"status":"requesting"')
    assert trace.events[0].duration_ms == replay.at('"type":"result"') - replay.at("requesting")
    assert result.metrics.tokens == TokenMetrics() and result.metrics.tool_calls == ()
    assert result.metrics.cost.source == "none" and running == 0


def test_a_run_cut_at_its_deadline_keeps_what_it_measured() -> None:
    replay = Replay(
        "claude_code_tool_1.jsonl", stop_after=('"type":"assistant"', '"type":"tool_use"')
    )
    builder = TraceBuilder()
    result, _, _ = map_claude_run(
        replay.lines,
        builder,
        started_ms=replay.started_ms,
        ended_ms=replay.ended_ms,
        timed_out=True,
        timeout=3,
    )
    check_cut_at_deadline(result, trace_of(builder), 3)
    # The step's stream stopped before its message_delta: its input tokens are known.
    assert result.metrics.tokens.input > 0 and result.metrics.tokens.output == 0
    assert result.text == "Running."


# -- how the CLI is called ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("permission", "expected"),
    [
        ("allow", ["--dangerously-skip-permissions"]),
        ("deny", ["--permission-mode", "dontAsk"]),
        ("ask-reject", ["--permission-mode", "default", "--permission-prompts", "none"]),
    ],
)
async def test_the_command_line_follows_the_session_and_the_policy(
    permission: Any, expected: list[str]
) -> None:
    settings = CliAgentSettings(command=str(CLAUDE), args=("--tools", "Bash"))
    provider = ClaudeCodeSessionProvider(settings, gateway_url="http://127.0.0.1:9/")
    config = ProviderConfig(model="m", system_instructions="Mode.", permission=permission)
    async with cli_session(provider, config, system_instructions="Scenario.") as live:
        session = live.state
        first = provider.command_line(session, "Hi")
        assert first[:3] == [str(CLAUDE), "-p", "Hi"]
        model = first.index("--model")
        assert first[model : model + 2] == ["--model", "m"]
        assert first[-2:] == ["--tools", "Bash"]  # the settings' args come last
        joined = " ".join(first)
        assert " ".join(expected) in joined
        assert f"--session-id {live.handle.session_id}" in joined
        assert first[first.index("--append-system-prompt") + 1] == "Mode.\n\nScenario."
        session.resume_id = "the-session"
        assert "--resume the-session" in " ".join(provider.command_line(session, "More"))

        environment = provider.environment(session)
        assert environment["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9"
        assert environment["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "m"
        assert environment["CLAUDE_CODE_SUBAGENT_MODEL"] == "m"
        assert session.cwd == session.home / "work" and session.cwd.is_dir()
    assert not session.home.exists()


async def test_init_names_what_is_missing() -> None:
    missing = ClaudeCodeSessionProvider(CliAgentSettings(command="no-such-claude-binary"))
    with pytest.raises(ProviderError, match="no-such-claude-binary"):
        await missing.init(ProviderConfig(model="m"))
    endless = ClaudeCodeSessionProvider(CliAgentSettings(command=str(CLAUDE)))
    with pytest.raises(ProviderError, match="--gateway-url"):
        await endless.init(ProviderConfig(model="m"))


# -- profile run, end to end ------------------------------------------------------------------


def test_profile_run_with_claude_code_in_a_workspace(tmp_path: Path) -> None:
    """The scripted model has Claude Code's Bash tool write a file in the iteration's
    workspace, then answers; a second prompt resumes the session. The workspace
    check passes and the trace holds the call. The section's ``instructions`` are the
    system prompt (``--system-prompt``), the mode's and scenario's following them."""
    model = ToolLoop("scripted", models=("scripted",))
    settings = {
        "command": str(CLAUDE),
        "permission": "allow",
        "instructions": "You are a coding agent.",
        "args": ["--tools", "Bash"],
    }
    record = run_write_and_resume(
        tmp_path,
        model,
        section="claude_code",
        settings=settings,
        provider="claude-code",
        tool="Bash",
    )
    tool_call = next(e for e in record["trace"]["events"] if e["type"] == "tool_call")
    assert tool_call["arguments"]["command"] == "echo hi | tr a-z A-Z > out.txt"
    for request in model.requests:
        # Claude Code keeps two lines of its own first (a billing header, who it is);
        # its default prompt (thousands of characters) is gone.
        system = request.messages[0].text
        assert system.endswith("\n\nYou are a coding agent.\n\nBe terse.\n\nScenario.")
        assert len(system) < 500, system


@pytest.mark.parametrize(
    ("permission", "refusal"),
    [("deny", "don't ask mode"), ("ask-reject", "nobody can answer a permission prompt")],
)
async def test_a_policy_that_refuses_makes_the_call_a_tool_error(
    permission: Any, refusal: str
) -> None:
    """The real CLI refuses the model's Bash call: the call is a tool error with
    Claude Code's reason, and nothing is written."""
    model = ToolLoop("scripted", models=("scripted",))
    settings = CliAgentSettings(command=str(CLAUDE), args=("--tools", "Bash"))
    config = ProviderConfig(model="scripted", permission=permission)
    async with live_cli_session(ClaudeCodeSessionProvider, settings, model, config) as live:
        result = await live.prompt("Write hi to out.txt")
        assert list(live.state.cwd.iterdir()) == []
    (call,) = result.metrics.tool_calls
    assert call.name == "Bash" and call.status == "error"
    assert refusal in (call.error or "")
    assert result.completion_reason == "stop"


async def test_a_prompt_past_its_deadline_is_a_timeout_with_what_was_measured() -> None:
    """The model streams for longer than the prompt may take: the CLI is killed at the
    deadline and the prompt recorded as a timeout, its step and the text so far kept."""
    model = ScriptedBackend(
        "scripted", models=("scripted",), default=Script(text=["slow "] * 300, chunk_delay=0.1)
    )
    settings = CliAgentSettings(command=str(CLAUDE), args=("--tools", ""))
    config = ProviderConfig(model="scripted")
    async with live_cli_session(ClaudeCodeSessionProvider, settings, model, config) as live:
        # 5 s: Claude Code sends its request within about a second of starting.
        with pytest.raises(PromptTimeoutError, match="within 5 s") as caught:
            await live.prompt("Take your time", 5)
        trace = await live.provider.export_session(live.handle)
    result = caught.value.result
    assert result.completion_reason == "timeout"
    assert result.text.startswith("slow slow")
    assert check_invariants(trace) == []
    assert types_of(trace) == ["turn_boundary", "text_output", "error"]
    assert trace.events[-1].error == "timeout after 5 s"
    assert result.metrics.tokens.input > 0  # message_start's usage arrived

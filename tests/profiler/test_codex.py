"""The Codex provider's mapping, on output captured from the real CLI.

The fixtures (``tests/profiler/fixtures/codex_*.jsonl``, ``python -m
tests.profiler.capture_codex``) are what ``codex exec --json`` printed when a
scripted model drove it down each path. They are replayed here through the
provider's own ``map_run`` with arrival times the test chooses (line ``i`` of a
run arrives at ``START + 10 * i`` ms), so every duration checked is exact, and each
trace is checked against the profiler's invariants.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from llmbridge.profiler.providers.cli_agent import CliRun, CliSession, OutputLine
from llmbridge.profiler.providers.codex import CodexSessionProvider, CodexSettings, toml_value
from llmbridge.profiler.providers.codex_events import CodexTurn, Usage
from llmbridge.profiler.records.metrics import Price
from llmbridge.profiler.records.trace import check_invariants
from llmbridge.profiler.records.types import (
    PromptResult,
    ProviderConfig,
    SessionHandle,
    SessionTrace,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures"
START = 1_000_000.0
STEP = 10.0
PRICE = Price(input=1.0, output=2.0)


def _runs(name: str) -> list[list[str]]:
    """The fixture's runs: each starts with its ``thread.started`` line."""
    runs: list[list[str]] = []
    for line in (FIXTURES / f"codex_{name}.jsonl").read_text(encoding="utf-8").splitlines():
        if json.loads(line)["type"] == "thread.started":
            runs.append([])
        runs[-1].append(line)
    return runs


def _run(lines: list[str], start: float, returncode: int | None = 0) -> CliRun:
    run = CliRun(["codex"], start)
    run.lines = [OutputLine.parse(start + STEP * (i + 1), text) for i, text in enumerate(lines)]
    run.ended_ms = start + STEP * (len(lines) + 1)
    run.returncode = returncode
    run.timed_out = returncode is None
    return run


async def _replay(
    name: str, tmp_path: Path, *, timed_out: bool = False, cut: int | None = None
) -> tuple[list[PromptResult], SessionTrace, CodexSessionProvider]:
    """The fixture's runs through ``map_run`` of a session, then its exported trace."""
    provider = CodexSessionProvider(CodexSettings(command="codex"), prices={"m": PRICE})
    provider.config = ProviderConfig(model="m")
    session = CliSession("s1", tmp_path, tmp_path, None)
    provider.sessions["s1"] = session
    results = []
    start = START
    for lines in _runs(name):
        lines = lines[:cut] if cut is not None else lines
        run = _run(lines, start, None if timed_out else 0)
        session.runs.append(run)
        results.append(provider.map_run(session, run, 60))
        start = run.ended_ms + 1000
    trace = await provider.export_session(SessionHandle("s1", "codex", 0.0))
    return results, trace, provider


def _types(trace: SessionTrace) -> list[str]:
    return [e.type for e in trace.events]


async def test_text_reply(tmp_path: Path) -> None:
    (result,), trace, _ = await _replay("text", tmp_path)
    assert check_invariants(trace) == []
    assert result.completion_reason == "stop" and result.error is None
    assert result.text == "Hello from llmbridge."
    # thread.started, the warning item, turn.started, the message, turn.completed.
    assert _types(trace) == ["turn_boundary", "error", "text_output"]
    boundary, warning, text = trace.events
    assert boundary.timestamp_ms == START + 3 * STEP  # turn.started's arrival
    assert boundary.duration_ms == 2 * STEP  # to turn.completed's
    assert warning.status == "warning" and "Model metadata" in (warning.error or "")
    assert text.timestamp_ms == START + 4 * STEP
    tokens = result.metrics.tokens
    assert (tokens.input, tokens.output, tokens.reasoning) == (1946, 6, 0)
    assert boundary.tokens == tokens and trace.summary.tokens == tokens
    assert result.metrics.cost.source == "price_table"
    assert result.metrics.cost.total_usd == pytest.approx((1946 * 1.0 + 6 * 2.0) / 1e6)
    assert boundary.cost_usd == pytest.approx(result.metrics.cost.total_usd)
    timing = result.metrics.timing
    assert timing.ttft_ms == 4 * STEP and timing.total_ms == 5 * STEP
    assert timing.steps_ms == (2 * STEP,)
    assert trace.summary.turns == 1 and trace.summary.tool_calls == 0


async def test_shell_command_is_a_timed_tool_call(tmp_path: Path) -> None:
    (result,), trace, _ = await _replay("shell", tmp_path)
    assert check_invariants(trace) == []
    assert _types(trace) == ["turn_boundary", "error", "tool_call", "tool_result", "text_output"]
    call, done = trace.events[2], trace.events[3]
    assert call.tool == "command_execution" and call.call_id == done.call_id == "item_1"
    assert call.arguments == {"command": "/bin/bash -lc 'echo hello > hello.txt'"}
    assert call.timestamp_ms == START + 4 * STEP  # item.started
    assert done.duration_ms == STEP  # item.started -> item.completed
    assert done.status == "completed"
    (record,) = result.metrics.tool_calls
    assert (record.name, record.status, record.duration_ms) == (
        "command_execution",
        "completed",
        STEP,
    )
    assert result.metrics.timing.tools_ms == {"command_execution": STEP}
    assert result.text == "Wrote hello.txt." and result.completion_reason == "stop"
    assert trace.summary.tool_calls == 1 and trace.summary.tool_errors == 0


async def test_failed_command_is_a_tool_error_with_its_output(tmp_path: Path) -> None:
    (result,), trace, _ = await _replay("shell_failed", tmp_path)
    assert check_invariants(trace) == []
    assert _types(trace) == ["turn_boundary", "error", "tool_call", "error", "text_output"]
    failed = trace.events[3]
    assert failed.tool == "command_execution" and failed.status == "failed"
    assert failed.error == "exit code 3" and failed.text == "before\n"
    assert failed.duration_ms == STEP
    (record,) = result.metrics.tool_calls
    assert record.status == "error" and record.error == "exit code 3"
    # The command failed, the turn did not: the model answered.
    assert result.completion_reason == "stop"
    assert trace.summary.tool_errors == 1


async def test_reasoning_item(tmp_path: Path) -> None:
    (result,), trace, _ = await _replay("reasoning", tmp_path)
    assert check_invariants(trace) == []
    assert _types(trace) == ["turn_boundary", "error", "reasoning", "text_output"]
    assert trace.events[2].text == "Let me think. Done."
    assert result.text == "The answer."
    assert result.metrics.timing.ttft_ms == 4 * STEP  # the reasoning's arrival


async def test_file_change_is_a_tool_call(tmp_path: Path) -> None:
    (result,), trace, _ = await _replay("file_change", tmp_path)
    assert check_invariants(trace) == []
    assert _types(trace) == ["turn_boundary", "error", "tool_call", "tool_result", "text_output"]
    call, done = trace.events[2], trace.events[3]
    assert call.tool == "file_change"
    (change,) = call.arguments["changes"]
    assert change["kind"] == "add" and change["path"].endswith("/hello.py")
    assert done.text is not None and done.text.startswith("add ") and done.duration_ms == STEP
    assert [c.name for c in result.metrics.tool_calls] == ["file_change"]


async def test_failed_turn_is_an_error(tmp_path: Path) -> None:
    (result,), trace, _ = await _replay("turn_failed", tmp_path)
    assert check_invariants(trace) == []
    assert result.completion_reason == "error"
    assert result.error is not None and "502" in result.error
    assert _types(trace) == ["turn_boundary", "error", "error", "error"]
    assert trace.events[0].status == "failed"
    assert trace.events[0].duration_ms == 2 * STEP  # turn.started -> turn.failed
    assert result.metrics.tokens.total == 0 and result.metrics.cost.source == "none"


async def test_resumed_thread_reports_each_prompts_own_tokens(tmp_path: Path) -> None:
    """turn.completed counts the whole thread: the second prompt's tokens are its
    usage less the first's (5927 - 3933 input, 9 - 5 output)."""
    (first, second), trace, _ = await _replay("resume", tmp_path)
    assert check_invariants(trace) == []
    assert (first.metrics.tokens.input, first.metrics.tokens.output) == (3933, 5)
    assert (second.metrics.tokens.input, second.metrics.tokens.output) == (5927 - 3933, 4)
    assert trace.summary.turns == 2
    assert [t.index for t in trace.turns] == [0, 1]
    assert trace.summary.tokens == first.metrics.tokens + second.metrics.tokens
    assert first.text == "First answer." and second.text == "Second answer."
    second_boundary = trace.turns[1].events[0]
    assert second_boundary.turn == 1 and second_boundary.tokens == second.metrics.tokens


async def test_resume_runs_codex_exec_resume_with_the_thread(tmp_path: Path) -> None:
    _, _, provider = await _replay("resume", tmp_path)
    session = provider.sessions["s1"]
    thread = json.loads(_runs("resume")[0][0])["thread_id"]
    assert session.resume_id == thread
    provider.command = "codex"
    argv = provider.command_line(session, "-next")
    assert argv[:3] == ["codex", "exec", "--json"]
    assert argv[argv.index("--cd") + 1] == str(tmp_path)
    assert argv[argv.index("--model") + 1] == "m"
    assert argv[-4:] == ["resume", thread, "--", "-next"]


async def test_a_timed_out_run_closes_its_open_tool(tmp_path: Path) -> None:
    """Cut after item.started: the command never finished; the run hit its deadline."""
    (result,), trace, _ = await _replay("shell", tmp_path, timed_out=True, cut=4)
    assert check_invariants(trace) == []
    assert result.completion_reason == "timeout"
    assert _types(trace) == ["turn_boundary", "error", "tool_call", "error"]
    unfinished = trace.events[3]
    assert unfinished.error == "the tool never finished (timeout)"
    assert unfinished.duration_ms == STEP  # item.started (line 4) to the run's end (5)
    (record,) = result.metrics.tool_calls
    assert record.status == "running"
    assert result.metrics.timing.total_ms == 5 * STEP


async def test_an_exit_without_a_terminal_event_is_an_error(tmp_path: Path) -> None:
    provider = CodexSessionProvider(CodexSettings(command="codex"))
    provider.config = ProviderConfig(model="m")
    session = CliSession("s1", tmp_path, tmp_path, None)
    provider.sessions["s1"] = session
    run = _run(_runs("text")[0][:3], START, returncode=1)
    run.stderr = "Error: no such model\n"
    session.runs.append(run)
    result = provider.map_run(session, run, 60)
    assert result.completion_reason == "error"
    assert result.error == "exit status 1: Error: no such model"
    trace = await provider.export_session(SessionHandle("s1", "codex", 0.0))
    assert check_invariants(trace) == []
    assert trace.events[-1].error == "codex exec: exit status 1: Error: no such model"


def test_mcp_and_web_search_items() -> None:
    """Item kinds no fixture has (no MCP server, no hosted search offline), in the
    shapes Codex's exec event types give them."""
    turn = CodexTurn(turn=0, started_ms=0.0)
    events: list[dict[str, Any]] = [
        {"type": "turn.started"},
        {
            "type": "item.started",
            "item": {
                "id": "i1",
                "type": "mcp_tool_call",
                "server": "fs",
                "tool": "read",
                "arguments": {"path": "a"},
                "status": "in_progress",
            },
        },
        {
            "type": "item.completed",
            "item": {
                "id": "i1",
                "type": "mcp_tool_call",
                "server": "fs",
                "tool": "read",
                "arguments": {"path": "a"},
                "error": {"message": "no such file"},
                "status": "failed",
            },
        },
        {"type": "item.completed", "item": {"id": "i2", "type": "web_search", "query": "q"}},
        {
            "type": "turn.completed",
            "usage": {"input_tokens": 5, "output_tokens": 3, "reasoning_output_tokens": 1},
        },
    ]
    for i, event in enumerate(events):
        assert turn.feed(10.0 * (i + 1), event) is (i == len(events) - 1)
    kinds = [(e.type, e.tool) for e in turn.events(None)]
    assert kinds == [
        ("turn_boundary", None),
        ("tool_call", "fs/read"),
        ("error", "fs/read"),
        ("tool_call", "web_search"),
        ("tool_result", "web_search"),
    ]
    result = turn.result(timed_out=False, error=None, price=None)
    assert [(c.name, c.status, c.error) for c in result.metrics.tool_calls] == [
        ("fs/read", "error", "no such file"),
        ("web_search", "completed", None),
    ]
    assert result.metrics.tool_calls[1].duration_ms == 0.0  # printed only on completion
    tokens = result.metrics.tokens  # output_tokens includes the reasoning ones
    assert (tokens.output, tokens.reasoning, tokens.total) == (2, 1, 8)


def test_an_item_of_another_kind_is_a_tool_call() -> None:
    """A kind this mapping does not name (a later Codex's) is not dropped."""
    turn = CodexTurn(turn=0, started_ms=0.0)
    item = {"id": "i1", "type": "image_view", "path": "a.png", "status": "in_progress"}
    turn.feed(10.0, {"type": "item.started", "item": item})
    turn.feed(30.0, {"type": "item.completed", "item": {**item, "status": "completed"}})
    call, done = turn.events(None)[1:]
    assert (call.type, call.tool, call.arguments) == ("tool_call", "image_view", {"path": "a.png"})
    assert (done.type, done.duration_ms) == ("tool_result", 20.0)
    turn.feed(40.0, {"type": "item.completed", "item": {"id": "t", "type": "todo_list"}})
    assert len(turn.events(None)) == 3  # a plan is not a tool call


def test_usage_since() -> None:
    before = Usage(input=10, cached=4, output=3, reasoning=1)
    now = Usage(input=25, cached=9, output=8, reasoning=1)
    assert now.since(before) == Usage(input=15, cached=5, output=5, reasoning=0)


def test_config_toml_round_trips(tmp_path: Path) -> None:
    settings = CodexSettings(
        command="codex",
        instructions="Be brief.",
        config={"features": {"goals": False}, "model_verbosity": "low"},
    )
    provider = CodexSessionProvider(settings, gateway_url="http://127.0.0.1:9/")
    provider.config = ProviderConfig(model="smollm2", permission="allow")
    provider.endpoint = "http://127.0.0.1:9"
    session = CliSession("s1", tmp_path, tmp_path, 'Say "hi"\n\tü')
    provider.prepare_home(session)
    config = tomllib.loads((tmp_path / "codex" / "config.toml").read_text(encoding="utf-8"))
    assert config["model"] == "smollm2" and config["sandbox_mode"] == "workspace-write"
    assert config["developer_instructions"] == 'Say "hi"\n\tü'
    assert config["model_providers"]["llmbridge"]["base_url"] == "http://127.0.0.1:9/v1"
    assert config["features"] == {"plugins": False, "goals": False}  # merged
    assert config["model_verbosity"] == "low"
    assert Path(config["model_instructions_file"]).read_text(encoding="utf-8") == "Be brief."
    assert tomllib.loads("x = " + toml_value({"a": [1, 2.5, True], "b": {}})) == {
        "x": {"a": [1, 2.5, True], "b": {}}
    }


@pytest.mark.parametrize(
    ("permission", "sandbox"), [("deny", "read-only"), ("ask-reject", "read-only")]
)
def test_refusing_permissions_are_the_read_only_sandbox(
    tmp_path: Path, permission: Any, sandbox: str
) -> None:
    provider = CodexSessionProvider(CodexSettings(command="codex"))
    provider.config = ProviderConfig(model="m", permission=permission)
    provider.endpoint = "http://127.0.0.1:9"
    provider.prepare_home(CliSession("s1", tmp_path, tmp_path, None))
    config = tomllib.loads((tmp_path / "codex" / "config.toml").read_text(encoding="utf-8"))
    assert config["sandbox_mode"] == sandbox and config["approval_policy"] == "never"

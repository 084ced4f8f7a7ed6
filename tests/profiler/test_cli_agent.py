"""cli_agent.run_cli: a CLI agent's run as the providers see it: each stdout line
parsed and stamped on arrival, stderr kept, and the whole process group gone
afterwards, at the deadline or not (real ``sh`` processes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmbridge.profiler.providers.cli_agent import base_environment, make_home, remove_home, run_cli
from tests.waiting import until


def _gone(pid: int) -> bool:
    """The process no longer runs (reaped, or a zombie nobody has reaped yet)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


async def _dies(pid: int) -> bool:
    """Whether ``pid`` is gone (a bounded wait, tests/waiting.py). SIGKILL is delivered
    at once, but a killed process closes its files (so the run's stdout reaches its end)
    a moment before it becomes a zombie: checked once, right after the run, it can
    still read "running"."""
    await until(lambda: _gone(pid), f"process {pid} gone")
    return True


async def test_lines_are_parsed_and_stamped_in_order(tmp_path: Path) -> None:
    script = 'echo \'{"type": "a"}\'; echo not json; echo; echo \'{"type": "b"}\''
    run = await run_cli(
        ["sh", "-c", script],
        env=base_environment(tmp_path),
        cwd=tmp_path,
        timeout=30,
        stderr_path=tmp_path / "err",
    )
    assert run.returncode == 0 and not run.timed_out and run.failure() is None
    assert [line.text for line in run.lines] == ['{"type": "a"}', "not json", '{"type": "b"}']
    assert [line.data for line in run.lines] == [{"type": "a"}, None, {"type": "b"}]
    stamps = [line.at_ms for line in run.lines]
    assert run.started_ms <= stamps[0] <= stamps[1] <= stamps[2] <= run.ended_ms


async def test_a_failed_run_reports_its_status_and_stderr(tmp_path: Path) -> None:
    run = await run_cli(
        ["sh", "-c", "echo oops >&2; exit 3"],
        env=base_environment(tmp_path),
        cwd=tmp_path,
        timeout=30,
        stderr_path=tmp_path / "err",
    )
    assert run.returncode == 3 and run.stderr == "oops\n"
    assert run.failure() == "exit status 3: oops"


async def test_the_deadline_kills_the_whole_group(tmp_path: Path) -> None:
    script = "sleep 60 & echo $! > child; echo '{\"started\": true}'; sleep 60"
    run = await run_cli(
        ["sh", "-c", script],
        env=base_environment(tmp_path),
        cwd=tmp_path,
        timeout=1,
        stderr_path=tmp_path / "err",
    )
    assert run.timed_out and run.returncode is None and run.failure() is None
    assert [line.data for line in run.lines] == [{"started": True}]
    assert await _dies(int((tmp_path / "child").read_text()))


async def test_a_background_child_holding_stdout_does_not_hold_the_run(tmp_path: Path) -> None:
    """The CLI exits while a child its tool started still has stdout open: the run
    ends (after a bounded drain) and the child is killed with the group."""
    run = await run_cli(
        ["sh", "-c", "sleep 60 & echo $! > child; echo done"],
        env=base_environment(tmp_path),
        cwd=tmp_path,
        timeout=30,
        stderr_path=tmp_path / "err",
    )
    assert not run.timed_out and run.returncode == 0
    assert [line.text for line in run.lines] == ["done"]
    assert await _dies(int((tmp_path / "child").read_text()))


async def test_a_home_is_fresh_and_the_environment_minimal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LLMBRIDGE_SECRET_FOR_TEST", "x")
    home = make_home("llmbridge-test-")
    environment = base_environment(home, {"A": "1"}, {"A": "2", "B": "3"})
    assert (home / "tmp").is_dir() and list(home.iterdir()) == [home / "tmp"]
    assert environment["HOME"] == str(home) and environment["TMPDIR"] == str(home / "tmp")
    assert environment["A"] == "2" and environment["B"] == "3"  # later layers win
    assert "LLMBRIDGE_SECRET_FOR_TEST" not in environment
    await remove_home(home)
    assert not home.exists()


async def test_a_relative_command_is_made_absolute_for_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI runs in the iteration's workspace: a ``command`` relative to where the
    profiler runs must still name the binary there."""
    from llmbridge.profiler.providers.claude_code import ClaudeCodeSessionProvider
    from llmbridge.profiler.providers.cli_agent import CliAgentSettings
    from llmbridge.profiler.records.types import ProviderConfig

    binary = tmp_path / "bin" / "agent"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    provider = ClaudeCodeSessionProvider(
        CliAgentSettings(command="./bin/agent"), gateway_url="http://127.0.0.1:9"
    )
    await provider.init(ProviderConfig(model="m"))
    assert provider.command == str(binary)

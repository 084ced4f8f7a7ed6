"""Scenario workspaces: a fresh directory per iteration, and the checks run on it.

Coding agents are judged by what they leave behind (Inspect AI's sandboxes,
Terminal-Bench's tests), not by what they say. A scenario's ``workspace`` is made
anew for each iteration in the system's temporary directory (never under the output
directory: inside a git checkout OpenCode would take the whole repository for its
project), filled with the declared files, and its ``setup`` command run in it
within its time limit; a setup that fails or overruns fails the iteration with the
command's exit status and output. After the session the workspace checks look at
it: ``file_exists``, ``file_contains``, ``file_matches``, and ``command`` (exit
status 0 passes; its output's tail is kept in the result). Every command runs in
its own process group, killed whole when the command ends or at its deadline, so a
stray background child neither hangs the run nor outlives it. A path that resolves
outside the workspace (through a symbolic link the agent made, say) fails its check.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from llmbridge.profiler.records.scenarios import (
    Check,
    CheckResult,
    FileSource,
    Workspace,
    evaluate,
)
from llmbridge.profiler.records.types import PromptResult

__all__ = [
    "CommandOutcome",
    "WorkspaceError",
    "evaluate_all",
    "prepare_workspace",
    "remove_workspace",
    "run_command",
]

OUTPUT_TAIL = 4000
"""Characters of a command's output kept (its end, where failures are reported)."""
_MAX_READ = 1 << 20
"""Bytes of a file the content checks read."""


class WorkspaceError(Exception):
    """The workspace could not be made ready; ``path`` is where it was."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


@dataclass(frozen=True, slots=True)
class CommandOutcome:
    exit_code: int | None
    """``None`` when the command was killed at its deadline."""
    output: str
    """Its stdout and stderr, interleaved, the last ``OUTPUT_TAIL`` characters."""

    @property
    def timed_out(self) -> bool:
        return self.exit_code is None


def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


async def run_command(command: str, cwd: Path, timeout: float) -> CommandOutcome:  # noqa: ASYNC109
    """Run ``command`` with ``sh`` in ``cwd``, killed (its whole group) after ``timeout`` s.

    The output goes to a temporary file, not a pipe: asyncio's ``wait()`` waits for
    the pipes to close too, which a background child (``server &``) would hold open
    past the command's own exit. Whatever the command left running is killed with it.
    """
    with tempfile.TemporaryFile() as sink:
        process = await asyncio.create_subprocess_shell(
            command,
            cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=sink,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        exit_code: int | None = None
        try:
            async with asyncio.timeout(timeout):
                exit_code = await process.wait()
        except TimeoutError:
            pass
        finally:
            _kill_group(process)
        if exit_code is None:
            await process.wait()
        text = await asyncio.to_thread(_tail, sink)
    return CommandOutcome(exit_code, text)


def _tail(sink: IO[bytes]) -> str:
    size = sink.seek(0, os.SEEK_END)
    # Four bytes per character at most in UTF-8: enough bytes for OUTPUT_TAIL of them.
    sink.seek(max(size - OUTPUT_TAIL * 4, 0))
    return sink.read().decode("utf-8", errors="replace")[-OUTPUT_TAIL:]


def _write_files(workspace: Path, spec: Workspace) -> None:
    for relative, content in spec.files.items():
        target = workspace / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, FileSource):
            source = Path(content.source)
            if source.is_dir():
                shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
            else:
                shutil.copyfile(source, target)
        else:
            target.write_text(content, encoding="utf-8")


async def prepare_workspace(spec: Workspace | None, *, label: str = "") -> Path:
    """A new temporary directory with ``spec``'s files, its setup run in it.

    ``WorkspaceError`` when a file cannot be written or the setup fails or overruns
    (the directory is left for ``remove_workspace``: the error names it)."""
    prefix = "llmbridge-ws-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", label)[:40] + "-"
    workspace = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix=prefix))
    if spec is None:
        return workspace
    try:
        await asyncio.to_thread(_write_files, workspace, spec)
    except OSError as exc:
        raise WorkspaceError(f"could not write the workspace's files: {exc}", workspace) from exc
    if spec.setup:
        outcome = await run_command(spec.setup, workspace, spec.setup_timeout)
        if outcome.timed_out:
            raise WorkspaceError(
                f"the setup command {spec.setup!r} did not finish within "
                f"{spec.setup_timeout:g} s; output: {outcome.output[-500:]!r}",
                workspace,
            )
        if outcome.exit_code != 0:
            raise WorkspaceError(
                f"the setup command {spec.setup!r} exited with status {outcome.exit_code}; "
                f"output: {outcome.output[-500:]!r}",
                workspace,
            )
    return workspace


async def remove_workspace(workspace: Path) -> None:
    await asyncio.to_thread(shutil.rmtree, workspace, True)


def _inside(workspace: Path, relative: str) -> Path | None:
    """The file ``relative`` names, or ``None`` when it resolves outside the workspace."""
    root = workspace.resolve()
    found = (root / relative).resolve()
    return found if found == root or found.is_relative_to(root) else None


def _read(path: Path) -> str:
    with path.open("rb") as handle:
        return handle.read(_MAX_READ).decode("utf-8", errors="replace")


async def _file_check(check: Check, workspace: Path) -> CheckResult:
    relative = (
        check.file_exists
        if check.file_exists is not None
        else check.file_contains.path
        if check.file_contains is not None
        else check.file_matches.path
        if check.file_matches is not None
        else ""
    )
    path = _inside(workspace, relative)
    if path is None:
        return CheckResult(name=check.name, passed=False, detail=f"{relative} leaves the workspace")
    if not path.is_file():
        what = "a directory" if path.is_dir() else "missing"
        return CheckResult(name=check.name, passed=False, detail=f"{relative}: {what}")
    if check.file_exists is not None:
        return CheckResult(name=check.name, passed=True, detail=f"{relative} exists")
    try:
        text = await asyncio.to_thread(_read, path)
    except OSError as exc:
        return CheckResult(name=check.name, passed=False, detail=f"{relative}: {exc.strerror}")
    if check.file_contains is not None:
        ok = check.file_contains.text in text
    else:
        assert check.file_matches is not None
        ok = re.search(check.file_matches.regex, text) is not None
    return CheckResult(name=check.name, passed=ok, detail=f"{relative}: {text[:80]!r}")


async def _command_check(check: Check, workspace: Path) -> CheckResult:
    assert check.command is not None
    spec = check.command
    outcome = await run_command(spec.run, workspace, spec.timeout)
    if outcome.timed_out:
        ok, detail = False, f"killed after {spec.timeout:g} s"
    else:
        ok, detail = outcome.exit_code == 0, f"exit status {outcome.exit_code}"
        if ok and spec.output_contains is not None and spec.output_contains not in outcome.output:
            ok, detail = False, f"exit status 0, output lacks {spec.output_contains!r}"
    return CheckResult(name=check.name, passed=ok, detail=detail, output=outcome.output)


async def evaluate_all(
    checks: tuple[Check, ...], results: list[PromptResult], workspace: Path | None
) -> list[CheckResult]:
    """Every check in the file's order: on the replies, or on the workspace."""
    out: list[CheckResult] = []
    for check in checks:
        if not check.on_workspace:
            out.extend(evaluate((check,), results))
        elif workspace is None:
            out.append(CheckResult(name=check.name, passed=False, detail="no workspace"))
        elif check.command is not None:
            out.append(await _command_check(check, workspace))
        else:
            out.append(await _file_check(check, workspace))
    return out

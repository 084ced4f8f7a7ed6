"""One command-line agent run as a child process, and the HOME it runs under.

``run_cli`` starts the CLI in its own process group with a minimal environment
(``base_environment``: no key, proxy or setting of the caller's shell reaches it),
stdin closed and stderr in a file (a tool's background child holding a pipe cannot
stall the run); it stamps every output line on arrival (``OutputLine``, ``now_ms``),
and at the deadline, and after every run, kills the whole group: the CLI and whatever
its shell tool left behind. ``make_home`` / ``remove_home``: a fresh temporary HOME per
profiled session. The providers' shared logic is in cli_agent.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmbridge.profiler.records.trace_builder import now_ms

__all__ = [
    "STDERR_TAIL",
    "CliRun",
    "OutputLine",
    "base_environment",
    "make_home",
    "remove_home",
    "run_cli",
]

_STDOUT_LIMIT = 64 * 1024 * 1024
"""Bytes in one output line: Claude Code's init line lists every tool and skill."""
_DRAIN_SECONDS = 2.0
"""After the CLI exits, how long its remaining output may take to arrive."""
_POLL_SECONDS = 0.005
"""Where there is no pidfd: how often the process's exit is looked for."""
_TERM_GRACE_SECONDS = 3.0
"""At the deadline: SIGTERM, then SIGKILL after this long."""
STDERR_TAIL = 4000
"""Characters of a run's stderr kept (its end, where failures are reported)."""


# -- a run ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OutputLine:
    at_ms: float
    """When the line arrived (``now_ms``)."""
    text: str
    data: dict[str, Any] | None
    """The line as a JSON object, ``None`` when it is not one."""

    @classmethod
    def parse(cls, at_ms: float, text: str) -> OutputLine:
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        return cls(at_ms, text, value if isinstance(value, dict) else None)


@dataclass
class CliRun:
    argv: list[str]
    started_ms: float
    ended_ms: float = 0.0
    lines: list[OutputLine] = field(default_factory=list)
    returncode: int | None = None
    """``None`` when the run was killed at its deadline."""
    stderr: str = ""
    """Its last ``STDERR_TAIL`` characters."""
    timed_out: bool = False

    def failure(self) -> str | None:
        """What went wrong with the process itself, if anything."""
        if self.timed_out:
            return None
        if self.returncode not in (0, None):
            tail = self.stderr.strip()[-500:]
            return f"exit status {self.returncode}" + (f": {tail}" if tail else "")
        return None


def _kill_group(process: asyncio.subprocess.Process, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


async def _exited(process: asyncio.subprocess.Process) -> None:
    """Until the process itself exits. (``Process.wait`` also waits for its pipes to
    close, which a background child of the CLI's shell tool can put off for ever.)"""
    if process.returncode is not None:
        return
    try:  # Linux: a pidfd becomes readable when the process exits
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):
        while process.returncode is None:  # noqa: ASYNC110 - no pidfd here: look now and then
            await asyncio.sleep(_POLL_SECONDS)
        return
    loop = asyncio.get_running_loop()
    exited = asyncio.Event()
    loop.add_reader(pidfd, exited.set)
    try:
        await exited.wait()
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)


async def _read_lines(stream: asyncio.StreamReader, run: CliRun) -> None:
    while line := await stream.readline():
        text = line.decode("utf-8", errors="replace").rstrip("\r\n")
        if text.strip():
            run.lines.append(OutputLine.parse(now_ms(), text))


async def run_cli(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    timeout: float,  # noqa: ASYNC109 - the prompt's deadline, passed down
    stderr_path: Path,
) -> CliRun:
    """Run ``argv`` in ``cwd`` until it exits or ``timeout`` seconds pass; every stdout
    line with its arrival time. The process group is killed afterwards either way."""
    run = CliRun(list(argv), now_ms())
    with stderr_path.open("wb") as sink:
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=sink,
            start_new_session=True,
            limit=_STDOUT_LIMIT,
        )
    assert process.stdout is not None
    reader = asyncio.create_task(_read_lines(process.stdout, run))
    try:
        async with asyncio.timeout(timeout):
            await _exited(process)
        run.ended_ms = now_ms()
    except TimeoutError:
        run.timed_out = True
        run.ended_ms = now_ms()
        _kill_group(process, signal.SIGTERM)
        try:
            async with asyncio.timeout(_TERM_GRACE_SECONDS):
                await _exited(process)
        except TimeoutError:
            pass
    finally:
        # Whatever the CLI's tools started in the background goes with it (and lets go
        # of stdout, so the output left in the pipe can be read to its end).
        # (Not ``process.kill()``: Popen polls first, reaping the child under asyncio's
        # watcher, which then reports exit status 255.)
        _kill_group(process, signal.SIGKILL)
        try:
            async with asyncio.timeout(_DRAIN_SECONDS):
                await asyncio.shield(reader)
        except TimeoutError:
            reader.cancel()
        except ValueError:  # a line over the limit: what came before it is kept
            pass
        await asyncio.shield(process.wait())
    if run.lines:  # the run ends when its output has all arrived, too
        run.ended_ms = max(run.ended_ms, run.lines[-1].at_ms)
    run.returncode = None if run.timed_out else process.returncode
    run.stderr = _tail(stderr_path)
    return run


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as source:
            source.seek(0, os.SEEK_END)
            size = source.tell()
            source.seek(max(size - STDERR_TAIL * 4, 0))
            return source.read().decode("utf-8", errors="replace")[-STDERR_TAIL:]
    except OSError:
        return ""


# -- a session's home -------------------------------------------------------------------


def make_home(prefix: str) -> Path:
    """A fresh temporary HOME (with its own ``tmp``): the CLI's settings, credentials
    and stored sessions live there and go with it."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    (home / "tmp").mkdir()
    return home


async def remove_home(home: Path) -> None:
    await asyncio.to_thread(shutil.rmtree, home, ignore_errors=True)


def base_environment(home: Path, *layers: Mapping[str, str]) -> dict[str, str]:
    """A minimal environment for a CLI run under ``home``, then ``layers`` in order
    (the CLI's own variables, the settings', the mode's)."""
    environment = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(home),
        "TMPDIR": str(home / "tmp"),
        "LANG": "C.UTF-8",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    for layer in layers:
        environment.update(layer)
    return environment

"""What the end-to-end tests of the real command-line agents share (Claude Code, Codex,
Gemini CLI: tests/e2e/test_claude_code.py, test_codex.py, test_gemini_cli.py): the
pins in ``tests/e2e/package.json`` (tests/e2e/clients.py says where the clients are
and which versions to expect), a clean environment under a fresh HOME, the check that
the expected CLI is installed, one CLI run with a deadline, the gateway over
a scripted backend with every HTTP exchange kept, a backend that drives one tool
round, and the checks and reports on what the backend received.

Each CLI's own flags, configuration files and wire format stay in its test module.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.events import StreamEvent
from llmbridge.core.messages import ToolCallPart, ToolResultPart
from llmbridge.core.request import ChatRequest
from llmbridge.gateway.app import create_app, http_protocol
from llmbridge.gateway.config import GatewayConfig
from tests.conftest import RunningServer
from tests.e2e.clients import COMPAT
from tests.e2e.clients import E2E_DIR as E2E_DIR  # re-exported: the tests' directory
from tests.e2e.clients import PINS as PINS  # re-exported: tests/e2e/package.json's pins
from tests.e2e.recording import Recorder
from tests.waiting import scaled

TIMEOUT = scaled(120)  # seconds per CLI run; each takes a few seconds
SETUP = (
    "`make compat` installs the newest clients in .compat/; run it again."
    if COMPAT
    else "Run `make test` (or `make install`), which installs tests/e2e/package-lock.json."
)
UNSCRIPTED = "(nothing scripted for this request)"


# -- the CLI --------------------------------------------------------------------------


def clean_environment(home: Path, **variables: str) -> dict[str, str]:
    """A minimal environment, so nothing from the caller's shell (keys, proxies, the
    CLI's own settings) reaches the CLI; everything it writes stays under ``home``.
    ``variables`` are the CLI's own (where the gateway is, its key, what to switch off)."""
    tmp = home / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "NO_PROXY": "127.0.0.1,localhost",
        **variables,
    }


@dataclass
class CliRun:
    """One finished (or, with ``returncode`` -1, timed out) run of a CLI."""

    name: str
    """The command as the report prints it (``claude``, ``codex``, ``gemini``)."""
    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def report(self) -> str:
        return (
            f"{self.name} {' '.join(repr(a) for a in self.args)}\n"
            f"exit code {self.returncode}\n"
            f"--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"
        )


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


def _run(
    binary: Path, args: list[str], *, env: Mapping[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary), *args],
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def run_cli(
    title: str, binary: Path, args: list[str], *, env: Mapping[str, str], cwd: Path
) -> CliRun:
    """``binary <args>`` in ``cwd`` with the environment ``env``, within ``TIMEOUT``
    seconds (past it the test fails with what the CLI printed so far). stdin is closed:
    with ``-p`` (``exec`` for Codex) an open or piped stdin is read as more prompt."""
    name = binary.stem  # claude.exe (the previous pin) reports as claude
    try:
        done = _run(binary, args, env=env, cwd=cwd)
    except subprocess.TimeoutExpired as exc:
        partial = CliRun(name, args, -1, _text(exc.stdout), _text(exc.stderr))
        pytest.fail(f"{title} did not finish within {TIMEOUT} s\n{partial.report()}")
    return CliRun(name, args, done.returncode, done.stdout, done.stderr)


def check_installed(
    title: str,
    binary: Path,
    *,
    pinned: str,
    accepts: Callable[[str], bool],
    env: Mapping[str, str],
    cwd: Path,
) -> None:
    """Fail (never skip) when the pinned CLI is missing or stale: the suite was not set
    up. ``accepts`` says whether what ``binary --version`` printed is the pin."""
    if not os.access(binary, os.X_OK):
        pytest.fail(f"{title} is not installed at {binary}.\n{SETUP}", pytrace=False)
    done = _run(binary, ["--version"], env=env, cwd=cwd)
    if not accepts(done.stdout):
        pytest.fail(
            f"{binary} is {title} {done.stdout.strip()!r} (exit code {done.returncode}), "
            f"but {'npm installed' if COMPAT else 'tests/e2e/package.json pins'} {pinned}."
            f"\n{SETUP}\n{done.stderr}",
            pytrace=False,
        )


# -- the gateway ----------------------------------------------------------------------


@contextmanager
def recorded_gateway(
    backend: ScriptedBackend, model: str, backend_model: str = "scripted", **settings: Any
) -> Iterator[tuple[RunningServer, Recorder]]:
    """The gateway over ``backend``, with the CLI's model name ``model`` (a pattern,
    ``claude-*``, say) routed to it as ``backend_model``, served as ``llmbridge serve``
    serves it and every HTTP exchange kept. ``settings`` are more configuration
    (``server``) or replace the model routes (``models``)."""
    config = {
        "backends": {"scripted": {"type": "scripted"}},
        "default_backend": "scripted",
        "models": [{"name": model, "backend": "scripted", "model": backend_model}],
        **settings,
    }
    app = create_app(GatewayConfig.model_validate(config), {"scripted": backend})
    recorder = Recorder(app)
    with RunningServer(recorder, http=http_protocol(app)) as server:
        yield server, recorder


class ToolLoopBackend(ScriptedBackend):
    """Replies by what the request holds, so extra requests a CLI might make (titles,
    summaries) cannot take the scripted turns: a request offering ``tool`` gets the
    call of ``tool`` with ``arguments``, then ``final`` once it carries the tool's
    result; anything else gets a harmless text."""

    def __init__(self, tool: str, arguments: dict[str, Any], final: Sequence[str]) -> None:
        super().__init__("scripted", default=Script(text=[UNSCRIPTED]))
        self.tool, self.arguments, self.final = tool, arguments, list(final)

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        if any(tool.name == self.tool for tool in request.tools):
            if any(message.role == "tool" for message in request.messages):
                self.enqueue(Script(text=list(self.final)))
            else:
                self.enqueue(Script(text=[], tool_calls=[(self.tool, dict(self.arguments))]))
        async for event in super().chat(request):
            yield event


# -- what the backend received --------------------------------------------------------


def describe(requests: Sequence[ChatRequest]) -> str:
    """The requests a backend received, one line each and one per message."""
    lines = []
    for number, request in enumerate(requests):
        tools = [tool.name for tool in request.tools]
        lines.append(f"request {number}: model={request.model!r} tools={tools}")
        for message in request.messages:
            lines.append(f"    {message.role}: {message.parts!r:.300}")
    return "\n".join(lines)


def failure_report(
    *runs: CliRun,
    exchanges: object = None,
    received: Sequence[ChatRequest] | None = None,
    receiver: str = "the backend",
) -> str:
    """What a failed assertion shows: the runs, then (where given) the HTTP exchanges
    and the requests ``receiver`` got."""
    parts = [run.report() for run in runs]
    if exchanges is not None:
        parts.append(f"--- exchanges ---\n{exchanges}")
    if received is not None:
        parts.append(f"--- what {receiver} received ---\n{describe(received)}")
    return "\n".join(parts)


def tool_round(request: ChatRequest, report: str) -> tuple[ToolCallPart, ToolResultPart]:
    """The request after a tool call: the assistant's one call, then the tool's one
    result, which answers that call."""
    messages = list(request.messages)
    index = next(i for i, m in enumerate(messages) if m.role == "tool")
    assert index > 0 and messages[index - 1].role == "assistant", report
    calls = [p for p in messages[index - 1].parts if isinstance(p, ToolCallPart)]
    results = [p for p in messages[index].parts if isinstance(p, ToolResultPart)]
    assert len(calls) == 1 and len(results) == 1, report
    assert results[0].tool_call_id == calls[0].id, report
    return calls[0], results[0]

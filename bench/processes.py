"""The benchmark's processes: the fast backend, the gateway, and an optional profiler.

Each runs as its own process on a free loopback port, dies with the benchmark (the
kernel's parent-death signal covers SIGKILL), and is ready once it answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from fast_backend import DEFAULT_MODEL
from http_clients import BenchClient
from proc_tree import ProcessTree

T = TypeVar("T")

CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(message: str) -> None:
    print(f"[overhead {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """Child-side: get SIGTERM if the benchmark itself dies (Linux), so nothing lingers."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Server:
    """A subprocess listening on a loopback port, with its output in a log file."""

    name: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    @classmethod
    def start(
        cls,
        name: str,
        port: int,
        argv: list[str],
        log_dir: Path,
        env: Mapping[str, str] | None = None,
    ) -> Server:
        """``env``: variables set on top of this process's environment."""
        log_path = log_dir / f"{name}.log"
        with log_path.open("wb") as out:
            process = subprocess.Popen(
                argv,
                env={**os.environ, **env} if env else None,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches the benchmark only; it stops us
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        return cls(name, port, process, log_path)

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def cpu_seconds(self) -> float:
        """User + system CPU time so far of the process and every process it forked
        (``--workers N``, a server that runs its app in worker processes), from /proc
        (0 where there is none)."""
        return ProcessTree(self.pid).cpu_seconds()

    def stop(self) -> None:
        """SIGINT (uvicorn's graceful stop; lets cProfile write its file), then harder."""
        for sig, wait in ((signal.SIGINT, 10.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            if self.process.poll() is not None:
                return
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(wait)


async def wait_ready(
    client: BenchClient, server: Server, path: str, patience: float = 60.0
) -> None:
    """Poll ``path`` until it answers 200; fail early if the process died."""
    deadline = time.monotonic() + patience
    last = "no answer"
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"{server.name} exited with code {server.process.returncode}:\n{server.log_tail()}"
            )
        try:
            status, text = await client.get(f"http://127.0.0.1:{server.port}{path}")
            if status == 200:
                return
            last = f"HTTP {status}: {text[:300]}"
        except Exception as exc:  # noqa: BLE001 - not up yet, whatever the reason
            last = f"{type(exc).__name__}: {exc}"
        await asyncio.sleep(0.1)
    raise RuntimeError(
        f"{server.name} not ready after {patience:.0f}s ({last})\n{server.log_tail()}"
    )


def backend_type(dialect: str) -> str:
    """The gateway's backend type for a benchmarked front ``dialect``: the same dialect,
    except behind the Responses front, where the backend is the fast backend's chat
    completions (``openai``), the type every OpenAI-compatible server is reached by."""
    return "openai" if dialect == "responses" else dialect


def gateway_config(dialect: str, backend_port: int, backend: str | None = None) -> str:
    """A gateway config with one backend, the fast backend on ``backend_port``, of type
    ``backend`` (default ``backend_type(dialect)``), and the bench model routed to it."""
    kind = backend or backend_type(dialect)
    url = f"http://127.0.0.1:{backend_port}" + ("" if kind == "ollama" else "/v1")
    return (
        "server:\n"
        "  host: 127.0.0.1\n"
        "  log_level: warning\n"
        "backends:\n"
        f"  bench: {{type: {kind}, url: '{url}'}}\n"
        "models:\n"
        f"  - {{name: {DEFAULT_MODEL}, backend: bench}}\n"
        "default_backend: bench\n"
    )


def start_fast_backend(workdir: Path, *options: str, name: str = "backend") -> Server:
    """``fast_backend.py`` on a free loopback port, with ``options`` (--chunks...)."""
    port = free_port()
    script = Path(__file__).resolve().parent / "fast_backend.py"
    argv = [sys.executable, str(script), "--port", str(port), *options]
    return Server.start(name, port, argv, workdir)


def start_gateway(
    workdir: Path,
    config_text: str,
    *,
    name: str = "gateway",
    profile: Path | None = None,
    launcher: Path | None = None,
    env: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
) -> Server:
    """``llmbridge serve`` on a free loopback port with ``config_text`` as its config;
    ``env`` adds to its environment (``PYTHONPATH`` for a baseline checkout);
    ``extra_args`` go after ``serve``'s own (``--workers 2``)."""
    port = free_port()
    config = workdir / f"{name}.yaml"
    config.write_text(config_text)
    argv = [*gateway_argv(config, port, profile, launcher), *extra_args]
    return Server.start(name, port, argv, workdir, env)


def gateway_argv(
    config: Path, port: int, profile: Path | None, launcher: Path | None = None
) -> list[str]:
    serve = ["serve", "--config", str(config), "--port", str(port), "--log-level", "warning"]
    if launcher is not None:
        return [sys.executable, str(launcher), *serve]
    if profile is not None:
        return [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "llmbridge", *serve]
    script = Path(sys.executable).parent / "llmbridge"
    if script.exists():
        return [str(script), *serve]
    return [sys.executable, "-m", "llmbridge", *serve]


def start_py_spy(out: Path, pid: int) -> subprocess.Popen[bytes]:
    """A sampling profiler attached to ``pid`` until ``stop_py_spy`` (native frames show
    where C and the kernel take the time, e.g. the socket ``write``)."""
    binary = os.environ.get("PY_SPY") or shutil.which("py-spy")
    if binary is None:
        raise RuntimeError("--py-spy: no py-spy on PATH and $PY_SPY is not set")
    argv = [binary, "record", "-p", str(pid), "-r", "250", "--native", "-f", "raw"]
    log(f"sampling the gateway with py-spy into {out}")
    return subprocess.Popen(
        [*argv, "-o", str(out.resolve())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop_py_spy(sampler: subprocess.Popen[bytes]) -> None:
    if sampler.poll() is None:
        sampler.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
    try:
        sampler.wait(30)
    except subprocess.TimeoutExpired:
        sampler.kill()


# -- requests and their checks ------------------------------------------------------------


def raise_interrupt(signum: int, frame: object) -> None:
    """A signal handler (``signal.signal(SIGTERM, raise_interrupt)``): stop a benchmark as
    Ctrl-C does, so its servers are stopped on the way out."""
    raise KeyboardInterrupt(f"signal {signum}")


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """``main`` on uvloop (as the servers run) where it is installed, else asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def load_average() -> list[float]:
    """The 1, 5 and 15-minute load averages, rounded, as result files record them."""
    return [round(x, 2) for x in os.getloadavg()]


class RunStart(NamedTuple):
    """What a benchmark's results document opens with (``start_run``)."""

    command: str
    """The command line that ran it, to run it again."""
    started: float
    """``time.time()`` at the start."""
    load_at_start: list[float]
    """``load_average()`` at the start: a loaded machine's figures are not a quiet one's."""


def start_run(script: str, argv: Sequence[str] | None) -> RunStart:
    """What every benchmark's ``main`` does first: a SIGTERM stops it as Ctrl-C does
    (``raise_interrupt``: its servers are stopped on the way out), and the facts its
    results document records. ``script`` is its path, e.g. ``bench/overhead.py``."""
    signal.signal(signal.SIGTERM, raise_interrupt)
    words = argv if argv is not None else sys.argv[1:]
    return RunStart(f"python {script} " + " ".join(words), time.time(), load_average())


def git_output(*argv: str) -> str:
    """``git argv...`` in this checkout: its output, or "" when git is missing or fails
    (the commit a result file records)."""
    try:
        done = subprocess.run(
            ["git", *argv],
            cwd=Path(__file__).resolve().parent.parent,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""

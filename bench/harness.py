"""What every scenario of the benchmark harness shares: its processes, their cost, the
``--baseline-src`` checkout, the command line's common options and the results format.

- Processes: the stub backend (``fast_backend.py``), ``llmbridge serve`` (this tree's,
  or a baseline checkout's), the peer proxies (``peers.py``: LiteLLM, Portkey) and Redis,
  each on a free loopback port with its output in a log file and the path that says it
  is ready (``wait_ready``). Each dies with the benchmark (the kernel's parent-death
  signal covers SIGKILL) and ``Server.stop`` stops it and every process it forked for
  certain (its own session, SIGKILLed last); ``workspace()`` stops all a scenario
  started, in reverse, however the scenario ends.
- Their cost: ``ProcessTree`` sums CPU time and peak RSS over a process and what it
  forked, from /proc (0 where there is none); ``system_busy_seconds`` the machine's.
- The baseline: ``prepare_baseline(DIR)`` checks that ``PYTHONPATH=DIR`` really makes
  ``import llmbridge`` find DIR's package (it precedes the editable install's path
  entry), and records DIR's commit; ``check_process_env`` proves a running gateway got
  it.
- The command line: ``arguments`` (a parser with ``--quick``, ``--json``, ``--no-save``
  and ``--baseline-src`` where a scenario takes them) and ``quick_defaults``.
- Results: ``start_run`` (the command, start time and load), ``results_header`` (the
  fields every results document opens with), ``save_results``
  (``bench/results/NAME-<time>.json``, git-ignored), and ``entry_point``, which turns a
  failure to start (2) or the hard time cap (3) into the exit status.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import peers
from fast_backend import DEFAULT_MODEL
from http_clients import BenchClient, make_client

T = TypeVar("T")

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
OPENCODE = BENCH_DIR.parent / "tests" / "e2e" / "node_modules" / ".bin" / "opencode"
"""The pinned OpenCode binary ``make test`` installs."""
CLK_TCK = os.sysconf("SC_CLK_TCK")
CPUS = os.cpu_count() or 1
_PROC = Path("/proc")
_scenario = "bench"


def log(message: str) -> None:
    print(f"[{_scenario} {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """Child-side: get SIGTERM if the benchmark itself dies (Linux), so nothing lingers."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def child_setup(cpus: Sequence[int] | None = None) -> Callable[[], None] | None:
    """The ``preexec_fn`` of a server or load process: it dies with the benchmark and,
    with ``cpus``, runs on those CPUs only, as does every process it forks (Linux)."""
    if sys.platform != "linux":
        return None

    def setup() -> None:
        _die_with_parent()
        if cpus:
            os.sched_setaffinity(0, cpus)

    return setup


# -- the cost of a process and what it forked ------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` from field 3 (state) on; the command name may hold spaces."""
    try:
        return (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _status_kib(pid: int, field: str) -> int:
    """A ``/proc/PID/status`` field in KiB (``VmRSS``, ``VmHWM``); 0 for a gone process."""
    with contextlib.suppress(OSError, ValueError):
        for line in (_PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class ProcessTree:
    """A root process id and, on every reading, its descendants at that moment (a proxy
    may fork workers, so a server's cost is the sum over its whole tree)."""

    def __init__(self, root: int) -> None:
        self.root = root

    def pids(self) -> list[int]:
        """The root and all its descendants (a scan of /proc: a few ms, never timed)."""
        children: dict[int, list[int]] = {}
        for entry in _PROC.iterdir():
            if entry.name.isdigit() and (fields := _stat_fields(int(entry.name))) is not None:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
        found, todo = [], [self.root]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(children.get(pid, ()))
        return found

    def cpu_seconds(self) -> float:
        """User + system CPU time of the tree so far, with the root's reaped children."""
        fields = _stat_fields(self.root)
        reaped = (int(fields[13]) + int(fields[14])) / CLK_TCK if fields else 0.0  # cutime, cstime
        return sum(self.cpu_by_process().values()) + reaped

    def cpu_by_process(self) -> dict[int, float]:
        """Each process's own user + system CPU seconds so far (reaped children not
        counted): how evenly a server's workers share its load."""
        out = {}
        for pid in self.pids():
            if (fields := _stat_fields(pid)) is not None:
                out[pid] = (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime
        return out

    def rss_kib(self) -> int:
        """The tree's resident set size now (VmRSS summed), in KiB."""
        return sum(_status_kib(pid, "VmRSS") for pid in self.pids())

    def peak_rss_mb(self) -> float:
        """Sum of the tree's peak resident set sizes (VmHWM), in MB (10^6 bytes)."""
        return sum(_status_kib(pid, "VmHWM") for pid in self.pids()) * 1024 / 1e6

    def reset_peak(self) -> None:
        """A new peak-RSS window for every process of the tree (``5`` to ``clear_refs``,
        Linux >= 4.0, our own processes only; refused silently elsewhere)."""
        for pid in self.pids():
            with contextlib.suppress(OSError):
                (_PROC / str(pid) / "clear_refs").write_text("5")


def system_busy_seconds() -> float:
    """CPU time all CPUs spent not idle since boot (/proc/stat), in seconds."""
    try:
        with open("/proc/stat") as stat:
            values = [int(v) for v in stat.readline().split()[1:]]
    except OSError:
        return 0.0
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / CLK_TCK


# -- servers ---------------------------------------------------------------------------------


@dataclass
class Server:
    """A subprocess listening on a loopback port, with its output in a log file."""

    name: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    health: str | None = None
    """The path that answers 200 once it serves (None: nothing to wait for)."""
    patience: float = 60.0
    """Seconds ``wait_ready`` gives it to start."""

    @classmethod
    def start(
        cls,
        name: str,
        port: int,
        argv: list[str],
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        health: str | None = None,
        patience: float = 60.0,
        cpus: Sequence[int] | None = None,
    ) -> Server:
        """``env``: variables set on top of this process's environment; ``cpus``: the
        CPUs it and every process it forks may run on (None: any)."""
        log_path = log_dir / f"{name}.log"
        with log_path.open("wb") as out:
            process = subprocess.Popen(
                argv,
                env={**os.environ, **env} if env else None,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches the benchmark only; it stops us
                preexec_fn=child_setup(cpus),
            )
        return cls(name, port, process, log_path, health, patience)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def tree(self) -> ProcessTree:
        return ProcessTree(self.pid)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def cpu_seconds(self) -> float:
        """User + system CPU time so far of the process and every process it forked."""
        return self.tree.cpu_seconds()

    def stop(self) -> None:
        """SIGINT (uvicorn's graceful stop; lets cProfile write its file), then harder;
        last, SIGKILL to its session, so no worker it forked outlives it."""
        for sig, wait in ((signal.SIGINT, 10.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            if self.process.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(wait)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)


class Started(list[Server]):
    """The servers a scenario started, stopped in reverse when its ``workspace`` ends."""

    def add(self, server: Server) -> Server:
        self.append(server)
        return server


@contextlib.contextmanager
def workspace(prefix: str) -> Iterator[tuple[Path, Started]]:
    """A temporary directory for configs and logs, and the list of servers to stop."""
    started = Started()
    with tempfile.TemporaryDirectory(prefix=f"llmbridge-{prefix}-") as tmp:
        try:
            yield Path(tmp), started
        finally:
            for server in reversed(started):
                server.stop()
            if started:
                log("servers stopped")


async def wait_ready(client: BenchClient | None, *servers: Server) -> None:
    """Poll each server's ``health`` path until it answers 200; fail early if the
    process died. ``client`` None: a client of its own for the wait."""
    if client is None:
        own = make_client(4)
        try:
            return await wait_ready(own, *servers)
        finally:
            await own.aclose()
    for server in servers:
        if server.health is None:
            continue
        deadline, last = time.monotonic() + server.patience, "no answer"
        while True:
            if server.process.poll() is not None:
                code = server.process.returncode
                raise RuntimeError(f"{server.name} exited with code {code}:\n{server.log_tail()}")
            try:
                status, text = await client.get(server.url + server.health)
                if status == 200:
                    break
                last = f"HTTP {status}: {text[:300]}"
            except Exception as exc:  # noqa: BLE001 - not up yet, whatever the reason
                last = f"{type(exc).__name__}: {exc}"
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{server.name} not ready after {server.patience:.0f}s ({last})\n"
                    + server.log_tail()
                )
            await asyncio.sleep(0.1)


_ROOT_URL_TYPES = frozenset(("ollama", "anthropic", "gemini"))


def gateway_config(
    backend_port: int,
    kind: str = "openai",
    more: Mapping[str, tuple[str, int]] | None = None,
    tools: bool = False,
) -> str:
    """A gateway config whose backend ``bench``, of type ``kind``, is the fast backend on
    ``backend_port``, with the bench model routed to it; ``more``: further backends (name:
    type and port), each with a route ``bench-NAME`` to the bench model; ``tools``: every
    route says its model calls tools (no probe, no emulation)."""
    flag = ", tools: true" if tools else ""
    lines = ["server:", "  host: 127.0.0.1", "  log_level: warning", "backends:"]
    routes = [f"  - {{name: {DEFAULT_MODEL}, backend: bench{flag}}}"]
    for name, (backend, port) in {"bench": (kind, backend_port), **(more or {})}.items():
        # Anthropic's and Gemini's backends take the server's root, as Ollama's does.
        url = f"http://127.0.0.1:{port}" + ("" if backend in _ROOT_URL_TYPES else "/v1")
        lines.append(f"  {name}: {{type: {backend}, url: '{url}'}}")
        if name != "bench":
            routes.append(
                f"  - {{name: bench-{name}, backend: {name}, model: {DEFAULT_MODEL}{flag}}}"
            )
    return "\n".join([*lines, "models:", *routes, "default_backend: bench", ""])


def start_fast_backend(
    workdir: Path, *options: str, name: str = "backend", cpus: Sequence[int] | None = None
) -> Server:
    """``fast_backend.py`` on a free loopback port, with ``options`` (--chunks...), on
    ``cpus`` where given."""
    port = free_port()
    argv = [sys.executable, str(BENCH_DIR / "fast_backend.py"), "--port", str(port), *options]
    return Server.start(name, port, argv, workdir, health="/v1/models", cpus=cpus)


def start_gateway(
    workdir: Path,
    config_text: str,
    *,
    name: str = "gateway",
    profile: Path | None = None,
    launcher: Path | None = None,
    env: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
    baseline: Baseline | None = None,
    cpus: Sequence[int] | None = None,
) -> Server:
    """``llmbridge serve`` on a free loopback port with ``config_text`` as its config;
    ``env`` adds to its environment; ``baseline`` makes it serve that checkout (checked
    on the running process); ``extra_args`` go after ``serve``'s own (``--workers 2``);
    ``profile``: under cProfile, its stats to that file; ``launcher``: started as
    ``python SCRIPT serve ...`` instead (a patched llmbridge, or ``floor_proxy.py``);
    ``cpus``: the CPUs it and its workers may run on."""
    port = free_port()
    config = workdir / f"{name}.yaml"
    config.write_text(config_text)
    serve = ["serve", "--config", str(config), "--port", str(port), "--log-level", "warning"]
    script = Path(sys.executable).parent / "llmbridge"
    if launcher is not None:
        argv = [sys.executable, str(launcher), *serve]
    elif profile is not None:
        argv = [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "llmbridge", *serve]
    elif script.exists():
        argv = [str(script), *serve]
    else:
        argv = [sys.executable, "-m", "llmbridge", *serve]
    env = {**(env or {}), **(baseline.env if baseline else {})}
    argv = [*argv, *extra_args]
    server = Server.start(name, port, argv, workdir, env, health="/health", cpus=cpus)
    if baseline is not None:
        check_process_env(server.pid, baseline.env)
    return server


def start_peer(name: str, workdir: Path, backend_port: int, workers: int = 1) -> Server:
    """A peer proxy in front of the fast backend on ``backend_port``, installed first if
    need be: ``litellm`` (the LiteLLM proxy, its own virtualenv) or ``portkey``."""
    port = free_port()
    if name == "litellm":
        peers.ensure_litellm(log)
        config = workdir / "litellm.yaml"
        config.write_text(peers.litellm_config(backend_port))
        argv = peers.litellm_argv(config, port, workers)
        return Server.start(name, port, argv, workdir, health="/health/liveliness", patience=180)
    if name == "portkey":
        peers.ensure_portkey(log)
        return Server.start(name, port, peers.portkey_argv(port), workdir, health="/")
    raise ValueError(f"no peer {name!r} (litellm, portkey)")


def start_redis(workdir: Path) -> Server:
    """``redis-server`` on a free loopback port, no persistence."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("--redis: no redis-server on PATH (apt-get install redis-server)")
    port = free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly"]
    return Server.start("redis", port, [*argv, "no", "--dir", str(workdir)], workdir)


@contextlib.contextmanager
def py_spy(out: Path | None, pid: int) -> Iterator[None]:
    """With ``out``, a sampling profiler attached to ``pid`` for the block (native
    frames show where C and the kernel take the time, e.g. the socket ``write``)."""
    if out is None:
        yield
        return
    binary = os.environ.get("PY_SPY") or shutil.which("py-spy")
    if binary is None:
        raise RuntimeError("--py-spy: no py-spy on PATH and $PY_SPY is not set")
    argv = [binary, "record", "-p", str(pid), "-r", "250", "--native", "-f", "raw"]
    log(f"sampling pid {pid} with py-spy into {out}")
    sampler = subprocess.Popen(
        [*argv, "-o", str(out.resolve())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        if sampler.poll() is None:
            sampler.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
        try:
            sampler.wait(30)
        except subprocess.TimeoutExpired:
            sampler.kill()


# -- the baseline checkout -------------------------------------------------------------------


class BaselineError(Exception):
    """A ``--baseline-src`` that cannot be served, or is not what gets imported."""


@dataclass(frozen=True)
class Baseline:
    src: Path
    module: str
    """``llmbridge.__file__`` as the baseline gateway's interpreter resolves it."""
    commit: str
    src_dirty: bool | None

    @property
    def env(self) -> dict[str, str]:
        """The variables the baseline gateway gets on top of the benchmark's own."""
        return python_path_env(self.src)

    def label(self) -> str:
        commit = self.commit[:9] if self.commit else "not a git checkout"
        return f"{self.src} @ {commit}" + (" (uncommitted changes)" if self.src_dirty else "")

    def describe(self) -> dict[str, object]:
        """What the JSON result records about the baseline."""
        return vars(self) | {"src": str(self.src), "pythonpath": self.env["PYTHONPATH"]}


def python_path_env(src: Path) -> dict[str, str]:
    inherited = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": str(src) + (os.pathsep + inherited if inherited else "")}


def prepare_baseline(src: Path | None) -> Baseline | None:
    """Check that ``src`` holds an llmbridge package that really gets imported: this
    interpreter with ``PYTHONPATH=src`` and ``-P`` (no script directory on the path)
    must import it from under ``src``. None stays None (no ``--baseline-src``)."""
    if src is None:
        return None
    src = src.resolve()
    if not (src / "llmbridge" / "__init__.py").is_file():
        raise BaselineError(
            f"--baseline-src {src}: no llmbridge/__init__.py there "
            "(give the src/ directory of a checkout, e.g. made by git worktree add)"
        )
    probe = [sys.executable, "-P", "-c", "import llmbridge; print(llmbridge.__file__)"]
    env = python_path_env(src)
    try:
        done = subprocess.run(
            probe, env={**os.environ, **env}, capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise BaselineError(f"cannot run {sys.executable}: {exc}") from exc
    if done.returncode != 0:
        raise BaselineError(f"import llmbridge failed with {env}:\n{done.stderr[-800:]}")
    module = done.stdout.strip()
    if not Path(module).resolve().is_relative_to(src):
        raise BaselineError(
            f"--baseline-src {src}: with PYTHONPATH set, llmbridge is still imported from {module}"
        )
    commit = git_output("-C", str(src), "rev-parse", "HEAD")
    dirty = bool(git_output("-C", str(src), "status", "--porcelain", ".")) if commit else None
    return Baseline(src, module, commit, dirty)


def check_process_env(pid: int, env: dict[str, str]) -> None:
    """Raise unless the running process ``pid`` got ``env`` (Linux; elsewhere a no-op)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return
    found = dict(
        entry.decode(errors="replace").split("=", 1) for entry in raw.split(b"\0") if b"=" in entry
    )
    for name, value in env.items():
        if found.get(name) != value:
            raise BaselineError(f"process {pid} has {name}={found.get(name)!r}, not {value!r}")


# -- the command line ------------------------------------------------------------------------


def arguments(
    doc: str | None, *, quick: str | None = None, save: bool = True, baseline: str | None = None
) -> argparse.ArgumentParser:
    """A scenario's parser, described by its docstring's first paragraph, with the
    options most share: ``--quick`` (its help ``quick``), ``--json OUT`` and
    ``--no-save`` (``save``), ``--baseline-src DIR`` (its help ``baseline``)."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    if quick is not None:
        parser.add_argument("--quick", action="store_true", help=quick)
    if save:
        parser.add_argument("--json", type=Path, metavar="OUT", help="also here")
        parser.add_argument("--no-save", action="store_true", help="no bench/results/ JSON")
    if baseline is not None:
        parser.add_argument("--baseline-src", type=Path, metavar="DIR", help=baseline)
    return parser


def quick_defaults(args: argparse.Namespace, **values: tuple[Any, Any]) -> argparse.Namespace:
    """Each option left unset (None) gets its ``(default, with --quick)`` value."""
    for name, (normal, quick) in values.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if getattr(args, "quick", False) else normal)
    return args


# -- running a scenario and its results ------------------------------------------------------


def raise_interrupt(signum: int, frame: object) -> None:
    """A SIGTERM handler: stop a benchmark as Ctrl-C does, so its servers are stopped."""
    raise KeyboardInterrupt(f"signal {signum}")


def run_async(main: Coroutine[Any, Any, T], cap_s: float | None = None) -> T:
    """``main`` on uvloop (as the servers run) where it is installed, else asyncio's
    loop; with ``cap_s``, a ``TimeoutError`` once it has run that long."""
    if cap_s is not None:
        main = asyncio.wait_for(main, cap_s)
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class RunStart(NamedTuple):
    """What a benchmark's results document opens with (``start_run``)."""

    command: str
    started: float
    load_at_start: list[float]


def start_run(scenario: str, argv: Sequence[str] | None) -> RunStart:
    """What every scenario's ``main`` does first: names its log lines, makes SIGTERM stop
    it as Ctrl-C does, and notes the facts its results document records."""
    global _scenario
    _scenario = scenario
    signal.signal(signal.SIGTERM, raise_interrupt)
    words = argv if argv is not None else sys.argv[1:]
    return RunStart(f"python -m bench {scenario} " + " ".join(words), time.time(), load_average())


def git_output(*argv: str) -> str:
    """``git argv...`` in this checkout: its output, or "" when git is missing or fails."""
    try:
        done = subprocess.run(
            ["git", *argv], cwd=BENCH_DIR.parent, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def results_header(run: RunStart, settings: object = None) -> dict[str, Any]:
    """The fields every results document opens with: the scenario and its command line,
    when and how long, the settings, the commit measured and the machine."""
    options = vars(settings) if settings is not None else {}
    return {
        "benchmark": _scenario,
        "command": run.command.strip(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(run.started)),
        "duration_s": round(time.time() - run.started, 1),
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in options.items()},
        "code": {
            "commit": git_output("rev-parse", "HEAD"),
            "src_dirty": bool(git_output("status", "--porcelain", "src")),
        },
        "machine": {
            "cpus": CPUS,
            "load_average_at_start": run.load_at_start,
            "load_average_at_end": load_average(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
    }


def save_results(
    name: str, document: Mapping[str, Any], started: float, args: argparse.Namespace | None = None
) -> list[Path]:
    """``document`` as ``bench/results/NAME-<start time>.json``, and at ``args.json``;
    nothing with ``args.no_save`` but that."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(started))
    also = getattr(args, "json", None)
    saved = [] if getattr(args, "no_save", False) else [RESULTS_DIR / f"{name}-{stamp}.json"]
    paths = [*saved, *([also] if also else [])]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document, indent=2, default=str) + "\n")
        print(f"results: {path}")
    return paths


def entry_point(main: Callable[[list[str] | None], int | None]) -> None:
    """``sys.exit(main())`` for a scenario run as a script: Ctrl-C exits 130 quietly, a
    server that would not start or a baseline that cannot be served 2, the hard time
    cap 3."""
    try:
        sys.exit(main(None))
    except KeyboardInterrupt:
        log("interrupted")
        sys.exit(130)
    except (RuntimeError, BaselineError) as exc:
        log(str(exc))
        sys.exit(2)
    except TimeoutError:
        log("hard time cap reached; stopping")
        sys.exit(3)

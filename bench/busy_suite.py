"""Run the test suite beside a CPU burner: the suite must pass on a busy machine.

This script owns the "busy machine" check: it starts N busy-loop processes at normal
priority (N = the machine's core count by default), runs pytest (or the whole
``make test``) beside them, kills them, and prints the pytest result and the wall time.
A test that depends on the machine being fast (a fixed window, a bounded poll that a
loaded machine misses) fails here, where it would otherwise fail only now and then.

    .venv/bin/python bench/busy_suite.py                      # pytest, every core busy
    .venv/bin/python bench/busy_suite.py --make               # the whole `make test`
    .venv/bin/python bench/busy_suite.py --burners 2 -- tests/gateway/test_x.py::test_y -x

Everything after ``--`` goes to pytest as it is (with ``--make``, as ``PYTEST_ARGS``,
which replaces the Makefile's ``-n auto --maxprocesses=8``; without ``--make`` pytest
runs in one process unless the arguments say ``-n``).
The burners are bounded twice: this script kills them (by their own process ids) when
the suite ends, and each one stops by itself after ``--burn-limit`` seconds, so none
outlives a run that was killed.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_SUMMARY = re.compile(r"\b(passed|failed|errors?|no tests ran)\b.* in [0-9.]+s")

# One core's worth of work per process: a pure-Python loop never sleeps and never
# allocates, and stops by itself at its deadline (argv[1], seconds).
_BURN = (
    "import sys, time\n"
    "end = time.monotonic() + float(sys.argv[1])\n"
    "while time.monotonic() < end:\n"
    "    for _ in range(100000):\n"
    "        pass\n"
)


def start_burners(count: int, limit_s: float) -> list[subprocess.Popen[bytes]]:
    """``count`` busy-loop processes at normal priority, each its own session (so a
    Ctrl-C in the terminal reaches the suite, and this script ends the burners)."""
    return [
        subprocess.Popen(
            [sys.executable, "-c", _BURN, str(limit_s)],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        for _ in range(count)
    ]


def stop_burners(burners: list[subprocess.Popen[bytes]]) -> None:
    for burner in burners:
        if burner.poll() is None:
            burner.send_signal(signal.SIGKILL)
    for burner in burners:
        burner.wait()


def suite_command(use_make: bool, pytest_args: list[str]) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ)
    if use_make:
        if pytest_args:
            env["PYTEST_ARGS"] = shlex.join(pytest_args)
        return ["make", "test"], env
    pytest = ROOT / ".venv" / "bin" / "pytest"
    program = [str(pytest)] if pytest.exists() else [sys.executable, "-m", "pytest"]
    return [*program, *pytest_args], env


def run(command: list[str], env: dict[str, str]) -> tuple[int, list[str]]:
    """Run ``command`` in the repository root, its output passed through as it comes;
    the return code and the last lines (where pytest puts its summary)."""
    tail: deque[str] = deque(maxlen=40)
    with subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        bufsize=1,
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            tail.append(line.rstrip("\n"))
        return process.wait(), list(tail)


def summary_line(tail: list[str]) -> str:
    """pytest's summary (``3 passed, 1 failed in 12.34s``), or the last line of output."""
    for line in reversed(tail):
        if _SUMMARY.search(line):
            return line.strip("= ")
    return tail[-1] if tail else "(no output)"


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Run the test suite beside N busy-loop processes.",
        epilog="Arguments after -- go to pytest (with --make, as PYTEST_ARGS).",
    )
    parser.add_argument(
        "--burners",
        type=int,
        default=os.cpu_count() or 2,
        help="busy-loop processes beside the suite (default: one per core, %(default)s)",
    )
    parser.add_argument(
        "--make",
        action="store_true",
        help="run the whole `make test` (ruff, mypy, pytest) instead of pytest alone",
    )
    parser.add_argument(
        "--burn-limit",
        type=float,
        default=4 * 3600.0,
        help="seconds after which a burner stops by itself (default %(default)s)",
    )
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    pytest_args = list(args.pytest_args)
    if pytest_args[:1] == ["--"]:
        pytest_args = pytest_args[1:]
    command, env = suite_command(args.make, pytest_args)

    print(f"==> {args.burners} burner(s) beside: {shlex.join(command)}", flush=True)
    # A SIGTERM (a CI job cancelled, ``kill``) must still end the burners: by default it
    # ends Python without running ``finally``.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    burners = start_burners(max(args.burners, 0), args.burn_limit)
    started = time.monotonic()
    try:
        code, tail = run(command, env)
    finally:
        wall = time.monotonic() - started
        stop_burners(burners)
    print(
        f"==> busy suite: exit {code}, {summary_line(tail)}; wall {wall / 60:.1f} min "
        f"({wall:.0f} s) beside {args.burners} burner(s) on {os.cpu_count()} core(s)",
        flush=True,
    )
    return code


if __name__ == "__main__":
    sys.exit(main())

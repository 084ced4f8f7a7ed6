"""The suite's guard against a test that never ends: one failure with the stacks, and
the run goes on.

Every wait in a test is bounded (tests/waiting.py), but a bug can still make a test
wait on something no bound covers: a background task that ignores its cancellation, a
lock never released, a subprocess that never answers. Without a guard the worker sits
idle until CI's limit and nothing says where. So each test (setup, call and teardown
together) runs under a watchdog thread with two stages:

1. After ``GUARD_S`` (scaled like every bound, tests/waiting.py) it interrupts the main
   thread with ``SIGALRM``, whose handler writes the stack of every thread and of every
   asyncio task of the running event loop into the test's report (a section named
   "hang guard") and raises ``HangGuardTimeout`` there: the test fails where it hung and
   the worker goes on with the next one.
2. If the test has still not ended ``GRACE_S`` later (the main thread is stuck where a
   signal cannot reach Python code, or the failure's own teardown hangs too), the
   watchdog writes the threads' stacks to ``hang-guard/`` under the pytest cache and
   ends the worker process. pytest-xdist reports that test failed ("worker crashed"),
   ``tests/parallel.py`` hands the worker's remaining modules to the others, and the
   controller adds the stacks the worker left to that report. Without xdist there is
   no one to carry on, so the stacks go to stderr before the process ends.

``LLMBRIDGE_TEST_HANG_GUARD_S`` sets stage 1's bound in seconds before scaling (0 turns
the guard off: a debugger session, say), ``LLMBRIDGE_TEST_HANG_GRACE_S`` stage 2's.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import signal
import sys
import threading
import traceback
from collections.abc import Generator
from pathlib import Path
from types import FrameType

import pytest

from tests.waiting import TIMEOUT_SCALE, load_per_core, scaled

GUARD_S = float(os.environ.get("LLMBRIDGE_TEST_HANG_GUARD_S", "300"))
"""Stage 1's bound before scaling: well past the slowest test on a loaded machine (the
embedded model's longest tests take about a minute there), well short of CI's limit."""
GRACE_S = float(os.environ.get("LLMBRIDGE_TEST_HANG_GRACE_S", "60"))
"""How long after stage 1 (before scaling) a test may take to end before its worker is
ended (``LLMBRIDGE_TEST_HANG_GRACE_S``)."""
EXIT_CODE = 70
"""The worker's exit status when stage 2 ends it (EX_SOFTWARE)."""

_SECTION = "hang guard"
_DUMPS = "hang-guard"


class HangGuardTimeout(Exception):
    """A test ran past the hang guard's bound (module docstring)."""


def _dump_dir(config: pytest.Config) -> Path:
    return config.rootpath / ".pytest_cache" / _DUMPS


def _dump_file(config: pytest.Config, nodeid: str) -> Path:
    return _dump_dir(config) / (re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid)[-150:] + ".txt")


def thread_stacks(skip: int | None = None) -> str:
    """Every thread's stack but ``skip``'s (the watchdog's own), newest call last."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    out = io.StringIO()
    for ident, frame in sys._current_frames().items():
        if ident == skip:
            continue
        out.write(f"--- thread {names.get(ident, '?')} ({ident})\n")
        out.write("".join(traceback.format_stack(frame)))
    return out.getvalue()


def task_stacks() -> str:
    """Every task of the event loop running in this thread, with where each awaits
    (empty outside a loop). A hung coroutine shows here, not in the threads' stacks,
    where the loop only waits in ``select``."""
    loop = asyncio._get_running_loop()
    if loop is None:
        return ""
    out = io.StringIO()
    for task in asyncio.all_tasks(loop):
        out.write(f"--- {task!r}\n")
        task.print_stack(file=out)
    return out.getvalue()


class _Watchdog:
    """One test's two stages (module docstring)."""

    def __init__(self, item: pytest.Item, guard_s: float) -> None:
        self.item = item
        self.guard_s = guard_s
        self.finished = threading.Event()
        self.report = ""
        self._previous: object = None
        self._thread = threading.Thread(target=self._watch, name="hang guard", daemon=True)

    def start(self) -> None:
        self._previous = signal.signal(signal.SIGALRM, self._interrupted)
        self._thread.start()

    def stop(self) -> None:
        self.finished.set()
        self._thread.join()
        signal.signal(signal.SIGALRM, self._previous)  # type: ignore[arg-type]

    def _interrupted(self, signum: int, frame: FrameType | None) -> None:
        stacks = thread_stacks(skip=self._thread.ident)
        self.report = (
            f"the test ran past the hang guard's {self.guard_s:.0f} s "
            f"(tests/hang_guard.py)\n\n{stacks}\n{task_stacks()}"
        )
        raise HangGuardTimeout(f"the test did not end within {self.guard_s:.0f} s")

    def _watch(self) -> None:
        if self.finished.wait(self.guard_s):
            return
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGALRM)
        if self.finished.wait(scaled(GRACE_S)):
            return
        stacks = thread_stacks(skip=threading.get_ident())
        text = (
            f"{self.item.nodeid} did not end {scaled(GRACE_S):.0f} s after the hang guard "
            f"interrupted it at {self.guard_s:.0f} s; its worker was ended.\n\n{stacks}"
        )
        if os.environ.get("PYTEST_XDIST_WORKER"):
            path = _dump_file(self.item.config, self.item.nodeid)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        else:
            sys.__stderr__.write(text)
            sys.__stderr__.flush()
        os._exit(EXIT_CODE)


def pytest_report_header(config: pytest.Config) -> str:
    guard = f"{scaled(GUARD_S):.0f} s a test" if GUARD_S > 0 else "off"
    return (
        f"bounds on waits: x{TIMEOUT_SCALE:g} (load {load_per_core():.1f} per core now); "
        f"hang guard: {guard} (tests/waiting.py, tests/hang_guard.py)"
    )


_WATCHDOG = pytest.StashKey[_Watchdog]()
"""Each running test's watchdog, for its report."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    if GUARD_S <= 0 or threading.current_thread() is not threading.main_thread():
        return (yield)
    watchdog = _Watchdog(item, scaled(GUARD_S))
    item.stash[_WATCHDOG] = watchdog
    watchdog.start()
    try:
        return (yield)
    finally:
        watchdog.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    watchdog = item.stash.get(_WATCHDOG, None)
    if watchdog is not None and watchdog.report:
        report.sections.append((_SECTION, watchdog.report))
        watchdog.report = ""
    return report


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report: pytest.TestReport, sched: object) -> None:
    """In the xdist controller: a worker ended by stage 2 left its stacks in a file."""
    config: pytest.Config = getattr(sched, "config")  # noqa: B009 - xdist's schedulers keep it
    path = _dump_file(config, crashitem)
    if path.is_file():
        report.sections.append((_SECTION, path.read_text(encoding="utf-8")))
        path.unlink()

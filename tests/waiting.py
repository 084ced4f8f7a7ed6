"""Bounded waits for the tests, all scaled from one place.

A test waits on an event (a counter moving, a process gone, a line printed), never on a
wall-clock window, and the bound on that wait only stops a hang: it must hold on a
machine whose cores something else keeps busy (``bench/busy_suite.py`` checks that).
Every such bound is ``scaled(seconds)``: ``LLMBRIDGE_TEST_TIMEOUT_SCALE`` multiplies
them all. Unset, the factor is measured from the machine: at least 3 (what CI's shared
runners need, and what a person's laptop running other work needs as much), more when
the load average per core is already high when the run starts (1.5 times it, at most
10). A larger bound costs nothing on a passing test: it only decides how long a real
hang takes to fail.

The factor is settled once, when this module is first imported (in pytest-xdist's
controller, before the workers start), and exported in ``LLMBRIDGE_TEST_TIMEOUT_SCALE``
so every worker uses the same one; the autouse fixture that clears ``LLMBRIDGE_*``
from each test's environment cannot change it afterwards.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx

T = TypeVar("T")

__all__ = [
    "HANG_S",
    "TIMEOUT_SCALE",
    "scaled",
    "serving",
    "until",
    "value_until",
    "wait_until",
]


SCALE_VARIABLE = "LLMBRIDGE_TEST_TIMEOUT_SCALE"
MIN_SCALE = 3.0
MAX_MEASURED_SCALE = 10.0


def load_per_core() -> float:
    """The one-minute load average over the cores this process may use (0 where the
    platform has no load average)."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return 0.0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return load / max(cores or 1, 1)


def measured_scale(load: float) -> float:
    """The factor for a machine whose load per core is ``load`` (module docstring)."""
    return min(max(MIN_SCALE, 1.5 * load), MAX_MEASURED_SCALE)


def _scale() -> float:
    raw = os.environ.get(SCALE_VARIABLE, "").strip()
    if raw:
        return max(float(raw), 0.1)
    scale = measured_scale(load_per_core())
    os.environ[SCALE_VARIABLE] = f"{scale:.2f}"
    return scale


TIMEOUT_SCALE = _scale()

HANG_S = 120.0
"""The default bound on a wait for an event: long enough for a busy 2-core machine
(a group of embeddings there can take tens of seconds), short enough that a real hang
fails the test instead of the run."""


def scaled(seconds: float) -> float:
    """``seconds`` times the suite's timeout factor."""
    return seconds * TIMEOUT_SCALE


def wait_until(condition: Callable[[], bool], what: str, within: float = HANG_S) -> None:
    """Return once ``condition()`` holds; fail (naming ``what``) after ``scaled(within)``
    seconds. A bound on a hang, not a timing assertion."""
    deadline = time.monotonic() + scaled(within)
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened within {scaled(within):.0f} s: {what}")
        time.sleep(0.01)


def value_until(get: Callable[[], T], what: str, within: float = HANG_S, step: float = 0.01) -> T:
    """The first truthy ``get()``, tried every ``step`` seconds; fail (naming ``what``)
    after ``scaled(within)`` seconds. For a poll that needs what it found (a reply, a
    body), where ``wait_until`` would need a variable outside the lambda."""
    deadline = time.monotonic() + scaled(within)
    while True:
        value = get()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened within {scaled(within):.0f} s: {what}")
        time.sleep(step)


def serving(
    url: str,
    process: subprocess.Popen[Any],
    output: Callable[[], str] | None = None,
    within: float = HANG_S,
) -> None:
    """Return once the server ``process`` started answers ``url``'s ``/health`` with
    200; fail with ``output()`` (its log; by default what it wrote to its pipes, once
    it has exited) if it exits first or never does."""
    if output is None:

        def output() -> str:
            if process.poll() is None:
                return ""
            out, err = process.communicate()
            return "".join(part if isinstance(part, str) else "" for part in (out, err))

    def answers() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"the server at {url} exited:\n{output()[-3000:]}")
        try:
            return httpx.get(url + "/health", timeout=scaled(5)).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(answers, f"{url}/health answering 200", within)
    except AssertionError as failed:
        raise AssertionError(f"{failed}\n{output()[-3000:]}") from None


async def until(
    condition: Callable[[], bool | Awaitable[bool]], what: str, within: float = HANG_S
) -> None:
    """``wait_until`` for a test on an event loop; ``condition`` may be async."""
    deadline = time.monotonic() + scaled(within)
    while True:
        held = condition()
        if not isinstance(held, bool):
            held = await held
        if held:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened within {scaled(within):.0f} s: {what}")
        await asyncio.sleep(0.01)

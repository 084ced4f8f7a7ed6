"""Bounded waits for the tests, all scaled from one place (issue 26).

A test waits on an event (a counter moving, a process gone, a line printed), never on a
wall-clock window, and the bound on that wait only stops a hang: it must hold on a
machine whose cores something else keeps busy (``bench/busy_suite.py`` checks that).
Every such bound is ``scaled(seconds)``: ``LLMBRIDGE_TEST_TIMEOUT_SCALE`` multiplies
them all (default 1, or 3 where ``CI=true``: shared runners are slower and noisier).

The factor is read once, when this module is imported: the autouse fixture that clears
``LLMBRIDGE_*`` from each test's environment cannot turn it off.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable

__all__ = ["HANG_S", "TIMEOUT_SCALE", "scaled", "until", "wait_until"]


def _scale() -> float:
    raw = os.environ.get("LLMBRIDGE_TEST_TIMEOUT_SCALE", "").strip()
    if raw:
        return max(float(raw), 0.1)
    return 3.0 if os.environ.get("CI", "").lower() == "true" else 1.0


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

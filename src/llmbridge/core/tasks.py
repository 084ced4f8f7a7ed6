"""Stopping a background task for certain, even one that swallowed its cancellation.

``task.cancel()`` followed by ``await task`` is how a long-running loop (a heartbeat, a
watch, a flush) is usually stopped, and it waits forever when the task lets the
cancellation go by and keeps looping. On Python 3.11 that is not only a bug in the
task's own code: ``asyncio.wait_for`` returns the inner result instead of raising when
the cancellation arrives in the instant after its inner awaitable finished and before
the waiting task resumed (CPython gh-86296, fixed in 3.12 by rewriting ``wait_for`` on
``asyncio.timeout``). redis-py wraps every socket write in ``wait_for``, so a loop that
talks to Redis loses a cancellation whenever it lands in that instant, which a loaded
machine (many ready events in one turn of the event loop) makes common: the loop goes
on beating and whoever awaited it waits for ever.

``stop_task`` cancels, waits for the task to end, and cancels again each time the task
is still running after ``recheck_s`` (a task that lost one cancellation takes the next
one at its next ``await``). It never gives up on the task: a task that swallows every
cancellation is a bug to see, so after ``warn_after_s`` it says so in the log, naming
the task, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

__all__ = ["stop_task"]

log = logging.getLogger("llmbridge.tasks")

RECHECK_S = 0.05
"""How long a cancelled task may take to end before it is cancelled again."""


async def stop_task(
    task: asyncio.Task[object] | None,
    *,
    recheck_s: float = RECHECK_S,
    warn_after_s: float = 5.0,
) -> None:
    """Cancel ``task`` and return once it has ended, cancelling it again while it keeps
    running (module docstring). ``None`` and a finished task are no-ops; what the task
    raised is not re-raised (it is being stopped, its outcome no longer matters)."""
    if task is None:
        return
    loop = asyncio.get_running_loop()
    started = loop.time()
    warned = False
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=recheck_s)
        if not warned and not task.done() and loop.time() - started > warn_after_s:
            warned = True
            log.warning("background task %s ignores cancellation; still cancelling it", task)
    with contextlib.suppress(BaseException):
        task.result()

"""``run_until_disconnect`` (web/streaming.py): the work runs in the caller's own task,
a client's departure cancels it as ``ClientDisconnected``, and nothing of the watcher's
cancellation is left on the task (a later ``asyncio.timeout`` in the same task works)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from llmbridge.web.streaming import ClientDisconnected, run_until_disconnect


class _Client:
    """An ASGI ``receive`` whose ``http.disconnect`` comes when ``leave()`` is called."""

    def __init__(self) -> None:
        self.gone = asyncio.Event()

    def leave(self) -> None:
        self.gone.set()

    async def receive(self) -> dict[str, Any]:
        await self.gone.wait()
        return {"type": "http.disconnect"}


async def test_the_work_runs_in_the_callers_task_and_returns_its_result() -> None:
    client = _Client()
    caller = asyncio.current_task()

    async def work() -> asyncio.Task[Any] | None:
        return asyncio.current_task()

    assert await run_until_disconnect(client.receive, work()) is caller
    assert caller is not None and caller.cancelling() == 0


async def test_a_client_that_leaves_cancels_the_work_and_leaves_no_cancellation() -> None:
    client = _Client()
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def work() -> str:
        started.set()
        try:
            await asyncio.Event().wait()  # a backend that never answers
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    async def leave_once_started() -> None:
        await started.wait()
        client.leave()

    leaving = asyncio.create_task(leave_once_started())
    with pytest.raises(ClientDisconnected):
        await run_until_disconnect(client.receive, work())
    await leaving
    assert cancelled.is_set()
    caller = asyncio.current_task()
    assert caller is not None and caller.cancelling() == 0
    # The task is usable afterwards: a timeout in it fires as a timeout, not a cancel.
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0):
            await asyncio.sleep(1)


async def test_work_that_swallows_the_cancellation_still_reports_the_departure() -> None:
    client = _Client()

    async def stubborn() -> str:
        client.leave()
        with contextlib.suppress(asyncio.CancelledError):  # cleanup that does not re-raise
            await asyncio.Event().wait()
        return "finished anyway"

    with pytest.raises(ClientDisconnected):
        await run_until_disconnect(client.receive, stubborn())
    caller = asyncio.current_task()
    assert caller is not None and caller.cancelling() == 0


@pytest.mark.parametrize("client_leaves_too", [False, True])
async def test_an_outside_cancellation_propagates_as_a_cancellation(
    client_leaves_too: bool,
) -> None:
    """A server shutting down cancels the request's task: that is a cancellation, not a
    departure, even when the client leaves at the same moment."""
    client = _Client()
    started = asyncio.Event()

    async def work() -> None:
        started.set()
        await asyncio.Event().wait()

    async def serve() -> None:
        await run_until_disconnect(client.receive, work())

    task = asyncio.create_task(serve())
    await started.wait()
    task.cancel()
    if client_leaves_too:
        client.leave()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_watcher_that_fails_leaves_the_work_alone() -> None:
    async def broken_receive() -> dict[str, Any]:
        raise RuntimeError("the server's receive failed")

    async def work() -> int:
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return 7

    assert await run_until_disconnect(broken_receive, work()) == 7


async def test_work_that_turns_the_cancellation_into_an_error_is_a_departure() -> None:
    client = _Client()

    async def converting() -> str:
        client.leave()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("cancelled while calling the backend") from None
        return "never"

    with pytest.raises(ClientDisconnected):
        await run_until_disconnect(client.receive, converting())
    caller = asyncio.current_task()
    assert caller is not None and caller.cancelling() == 0

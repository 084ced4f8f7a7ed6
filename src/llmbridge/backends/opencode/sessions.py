"""OpenCode sessions: a warm pool for requests, and deletion off the critical path.

Each request gets a session of its own, so no conversation ever sees another's
history (OpenCode resends a session's whole history on every prompt). Creating a
session is a round trip to OpenCode on the request's critical path, which the seed
measured at 100-300 ms against its server; the pool creates sessions ahead of
demand instead, so a request takes a ready one and a replacement is made in the
background. Every session is created with a title (so OpenCode makes no
title-generation LLM call) and a deny-all permission rule.

Used sessions are deleted in the background with their own deadline, best effort:
a failed deletion is logged and leaves an empty session behind, never a failed
request. ``aclose`` waits, boundedly, for pending deletions and deletes the pool.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from llmbridge.core.errors import BackendProtocolError, LLMBridgeError

__all__ = ["SESSION_TITLE", "SessionPool"]

log = logging.getLogger("llmbridge.opencode")

SESSION_TITLE = "llmbridge request"
DENY_ALL = [{"permission": "*", "pattern": "*", "action": "deny"}]

Call = Callable[[str, str, Any], Awaitable[object]]
"""``(method, path, body) -> decoded JSON``: the backend's HTTP call to OpenCode."""


class SessionPool:
    def __init__(self, call: Call, *, size: int, delete_timeout: float, backend: str) -> None:
        self._call = call
        self.size = size
        self.delete_timeout = delete_timeout
        self._backend = backend
        self._ready: list[str] = []
        self._filling = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = False
        self.created = 0
        self.deleted = 0
        self.delete_failures = 0

    async def create(self) -> str:
        reply = await self._call(
            "POST", "session", {"title": SESSION_TITLE, "permission": DENY_ALL}
        )
        sid = reply.get("id") if isinstance(reply, dict) else None
        if not isinstance(sid, str):
            raise BackendProtocolError(
                f"backend '{self._backend}': OpenCode created a session without an id",
                backend=self._backend,
            )
        self.created += 1
        return sid

    async def acquire(self) -> tuple[str, bool]:
        """A session for one request, and whether it came warm from the pool."""
        pooled = bool(self._ready)
        sid = self._ready.pop() if pooled else await self.create()
        self.refill()
        return sid, pooled

    def refill(self) -> None:
        """Create sessions in the background until the pool is full again."""
        for _ in range(self.size - len(self._ready) - self._filling):
            self._filling += 1
            self._spawn(self._add_one())

    def discard(self, sid: str, *, abort: bool = False) -> asyncio.Task[float | None]:
        """Delete a used session in the background (aborting it first if it may still
        be generating); the task's result is the seconds it took, ``None`` on failure."""
        return self._spawn(self._delete(sid, abort))

    def reset(self) -> None:
        """Forget the warm sessions (their server was restarted)."""
        self._ready.clear()

    async def aclose(self) -> None:
        self._closing = True  # a session still being created is deleted, not kept
        warm, self._ready = self._ready, []
        for sid in warm:
            self.discard(sid)
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=self.delete_timeout + 1)
        for task in list(self._tasks):
            task.cancel()
        self._closing = False

    # -- background work --------------------------------------------------------

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _add_one(self) -> None:
        try:
            sid = await self.create()
        except LLMBridgeError as exc:
            log.warning("backend %s: could not warm an OpenCode session: %s", self._backend, exc)
            return
        finally:
            self._filling -= 1
        if self._closing:
            await self._delete(sid, abort=False)
        else:
            self._ready.append(sid)

    async def _delete(self, sid: str, abort: bool) -> float | None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            async with asyncio.timeout(self.delete_timeout):
                if abort:
                    await self._call("POST", f"session/{sid}/abort", None)
                await self._call("DELETE", f"session/{sid}", None)
        except (LLMBridgeError, TimeoutError) as exc:
            self.delete_failures += 1
            log.warning(
                "backend %s: could not delete OpenCode session %s: %s",
                self._backend,
                sid,
                exc or "timed out",
            )
            return None
        self.deleted += 1
        return loop.time() - started

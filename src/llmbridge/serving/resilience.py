"""What the gateway does when a backend fails before the client got anything.

A request has a chain of targets: the backend its model resolves to, then the
route's ``fallbacks`` (other backends or models), in order. Before the first event
of a reply reaches the client, a failure is not final:

- a **transient** failure (unreachable, the connection dropped, HTTP 429, 500, 502,
  503, 504, 529) is retried on the same target up to ``retries`` times, after
  ``backoff_ms`` doubled each time, or after the backend's ``Retry-After`` when it
  asks for at most ``max_retry_after_s``; a timeout is not retried on the same target
  (it already took the whole deadline); when the backend's upstream said itself
  whether a failure is worth retrying (``BackendError.retryable``: OpenCode's
  ``isRetryable``), its verdict decides instead of the status;
- then the next target is tried; a caller mistake (400, 401, 404, 413...) is final at
  once, as it would be on every target.

After the first byte nothing is retried: the client already has part of a reply.

A **circuit breaker** per backend stops sending to a backend that keeps failing:
after ``breaker_failures`` failures in a row (transient ones other than 429, which
means busy, not dead) it opens, and requests skip it (to a fallback, or fail at once
with 503) for ``breaker_reset_s``; then the next request first probes it with the
backend's cheap health check. A healthy probe lets requests through again (half
open) and the first success closes the breaker; a failed probe or request reopens
it for another period. The states and transitions are core/breaker.py's ``Circuit``
(the MCP gateway's breakers, mcp/breaker.py, are the same circuit with another probe).

With shared state in Redis (``CircuitBreaker.share``, the gateway does it when
``state.redis_url`` is set) a backend has one breaker across every worker and
replica, with no Redis round trip on a successful request's path (the class
docstring says how).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from llmbridge.backends.base import Backend
from llmbridge.core.breaker import BreakerState, Circuit
from llmbridge.core.errors import (
    BackendBusyError,
    BackendError,
    BackendHTTPError,
    BackendProtocolError,
    BackendUnavailableError,
    LLMBridgeError,
)
from llmbridge.core.tracing import RequestTrace, TraceSpan
from llmbridge.state.base import BreakerView, SharedState

__all__ = ["CircuitBreaker", "RetryPolicy", "attempt_span", "is_transient"]

log = logging.getLogger("llmbridge.resilience")

_TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504, 529})


def is_transient(error: LLMBridgeError) -> bool:
    """Whether the same request may succeed if sent again (or elsewhere)."""
    if isinstance(error, BackendError) and error.retryable is not None:
        # The backend's upstream judged it (OpenCode's isRetryable): its verdict wins
        # over the status, e.g. a provider 500 it will not retry is not retried here.
        return error.retryable
    if isinstance(error, BackendHTTPError):
        return error.backend_status in _TRANSIENT_STATUSES
    if isinstance(error, BackendProtocolError):
        return False  # the backend answered, with garbage: sending again will not help
    return isinstance(error, BackendError)


def _counts_against_backend(error: LLMBridgeError) -> bool:
    if isinstance(error, BackendHTTPError) and error.backend_status == 429:
        return False  # busy, not broken
    if isinstance(error, BackendBusyError):
        return False  # a full queue (the embedded model): busy, not broken
    return is_transient(error)


def attempt_span(trace: RequestTrace, backend: Backend, model: str, *, fallback: bool) -> TraceSpan:
    """The traced request's child span for one try of ``backend`` (core/tracing.py):
    every try is one, so retries and fallbacks show as separate spans, each with its
    deployment; ``fallback``: a route fallback's try."""
    url = getattr(backend, "base_url", None) or getattr(backend, "url", None)
    return trace.attempt(
        deployment=backend.name,
        kind=backend.kind,
        model=model,
        url=url if isinstance(url, str) else None,
        fallback=fallback,
    )


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    retries: int = 1
    backoff_ms: float = 100.0
    max_retry_after_s: float = 5.0

    def delay(self, attempt: int, error: LLMBridgeError) -> float | None:
        """Seconds to wait before retry number ``attempt`` (1-based), or ``None``: do
        not retry this error (the backend asked for a longer pause than we wait)."""
        if isinstance(error, BackendBusyError):
            return None  # its queue will not be shorter in a moment: next target, or 503
        retry_after = error.retry_after if isinstance(error, BackendError) else None
        if retry_after is not None:
            return float(retry_after) if retry_after <= self.max_retry_after_s else None
        return float(self.backoff_ms / 1000 * 2 ** (attempt - 1))


REFRESH_S = 0.25
"""How old a shared breaker's local view may get before it is read again."""
PROBE_LEASE_S = 10.0
"""How long one replica's probe holds off the others' (ended early by its result)."""


class CircuitBreaker(Circuit):
    """One backend's breaker (module docstring).

    In one process the breaker is its ``Circuit``. With a shared state (``share``:
    Redis, across workers and replicas, state/) the fields are this process's *view*
    of the shared breaker, and every change is made in the shared store, atomically:

    - a failure is counted there (``breaker_failure``: it opens at the threshold
      counted across every replica), and the view takes the result;
    - a success costs no round trip while the view says closed with no failures;
      otherwise (``breaker_success``) it closes the shared breaker for everyone;
    - admission (``state``, ``admit``) reads the view, which is refreshed in the
      background when older than ``REFRESH_S`` (0.25 s) and a request reads it:
      another replica's opening reaches this one within that, with no round trip on
      the request's path;
    - when an open breaker is due for its probe, one replica probes
      (``breaker_claim_probe``: a short SET NX lease) while the others keep it open;
      the probe's result is stored for all (``breaker_set``).

    ``success`` and ``failure`` stay synchronous (they are called on the reply's
    path): their shared updates run as tasks, one at a time per breaker, so the view
    each one brings back is the store's latest answer to this process.
    """

    def __init__(self, backend: Backend, failures: int, reset_s: float) -> None:
        super().__init__(failures, reset_s, time.monotonic)
        self.backend = backend
        self._probe_lock = asyncio.Lock()
        self._shared: SharedState | None = None
        self._view_at = 0.0
        """When (monotonic) the view was last taken from the shared store."""
        self._refreshing = False
        self._shared_lock = asyncio.Lock()
        """One shared call at a time per breaker, so views arrive in the store's order."""
        self._tasks: set[asyncio.Task[None]] = set()

    def share(self, shared: SharedState) -> None:
        """Keep this breaker's state in ``shared`` from now on (class docstring)."""
        self._shared = shared
        self._clock = time.time  # the shared opened_at is unix seconds
        self.take("closed", 0, 0.0)

    @property
    def state(self) -> BreakerState:
        """The breaker's state as this process sees it (never waits)."""
        if self._shared is not None and self.enabled:
            self._refresh_if_stale()
        return self._state

    @state.setter
    def state(self, value: BreakerState) -> None:
        self._state = value

    async def admit(self) -> bool:
        """Whether a request may go to this backend now (probing it when due)."""
        if not self.enabled or self.state != "open":
            return True
        if not self.due():
            return False
        async with self._probe_lock:  # one probe for all the requests that are waiting
            if self._shared is not None:
                return await self._admit_shared(self._shared)
            if self._state != "open":
                return True
            if not self.due():
                return False
            health = await self.backend.health()
            if health.ok:
                log.info("backend %s answered its probe: trying it again", self.backend.name)
                self.probing()
                return True
            log.warning(
                "backend %s still fails its probe (%s): circuit stays open",
                self.backend.name,
                health.detail,
            )
            self.reopen()
            return False

    async def _admit_shared(self, shared: SharedState) -> bool:
        name = self.backend.name
        async with self._shared_lock:
            self._apply(await shared.breaker(name))
        if self._state != "open":
            return True
        if not await shared.breaker_claim_probe(name, self.reset_s, PROBE_LEASE_S):
            return False  # not due yet, or another replica is probing it
        ok, detail = False, "the probe raised"
        try:
            health = await self.backend.health()
            ok, detail = health.ok, health.detail
        finally:
            async with self._shared_lock:
                self._apply(await shared.breaker_set(name, "half_open" if ok else "open"))
        if ok:
            log.info("backend %s answered its probe: trying it again", name)
        else:
            log.warning("backend %s still fails its probe (%s): circuit stays open", name, detail)
        return ok

    def success(self) -> None:
        if self._shared is not None and self.enabled and (self.failures or self._state != "closed"):
            self._spawn(self._shared_success(self._shared))
        if self.succeeded():
            log.info("backend %s recovered: circuit closed", self.backend.name)

    def failure(self, error: LLMBridgeError) -> None:
        if not self.enabled or not _counts_against_backend(error):
            return
        if self._shared is not None:
            self._spawn(self._shared_failure(self._shared, error))
            return
        if self.failed():
            self._log_open(error)

    async def _shared_failure(self, shared: SharedState, error: LLMBridgeError) -> None:
        async with self._shared_lock:
            was = self._state
            view = await shared.breaker_failure(self.backend.name, self.threshold)
            self._apply(view)
        if view.state == "open" and was != "open":
            self._log_open(error)

    async def _shared_success(self, shared: SharedState) -> None:
        async with self._shared_lock:
            await shared.breaker_success(self.backend.name)
            self._apply(BreakerView("closed", 0, self.opened_at))

    def _log_open(self, error: LLMBridgeError) -> None:
        log.warning(
            "backend %s failed %d time(s) in a row (%s): circuit open for %g s",
            self.backend.name,
            self.failures,
            error.message,
            self.reset_s,
        )

    def _apply(self, view: BreakerView) -> None:
        """Take ``view`` (under ``_shared_lock``: the store's latest answer to us)."""
        self._view_at = time.monotonic()
        self.take(view.state, view.failures, view.opened_at)

    def _refresh_if_stale(self) -> None:
        if self._refreshing or time.monotonic() - self._view_at < REFRESH_S:
            return
        try:
            self._spawn(self._refresh())
        except RuntimeError:  # no event loop running (a synchronous caller): keep the view
            return
        self._refreshing = True

    async def _refresh(self) -> None:
        assert self._shared is not None
        try:
            async with self._shared_lock:
                self._apply(await self._shared.breaker(self.backend.name))
        finally:
            self._refreshing = False

    async def settled(self) -> None:
        """Wait for the shared updates under way (tests; a graceful shutdown)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, update: Coroutine[Any, Any, None]) -> None:
        """Run a shared update off the caller's path, kept referenced until done."""
        task = asyncio.get_running_loop().create_task(update)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning("breaker %s: a shared update failed: %r", self.backend.name, exc)

    def open_error(self) -> BackendUnavailableError:
        remaining = self.remaining_s()
        return BackendUnavailableError(
            f"backend '{self.backend.name}' is failing; the gateway stopped sending it "
            f"requests (circuit open, next probe in {remaining:.0f} s)",
            backend=self.backend.name,
            retry_after=max(1.0, remaining),
        )

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
it for another period.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Literal

from llmbridge.backends.base import Backend
from llmbridge.core.errors import (
    BackendBusyError,
    BackendError,
    BackendHTTPError,
    BackendProtocolError,
    BackendUnavailableError,
    LLMBridgeError,
)

__all__ = ["CircuitBreaker", "RetryPolicy", "is_transient"]

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


State = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    """One backend's breaker (module docstring)."""

    def __init__(self, backend: Backend, failures: int, reset_s: float) -> None:
        self.backend = backend
        self.threshold = failures
        self.reset_s = reset_s
        self.state: State = "closed"
        self.failures = 0
        self.opened_at = 0.0
        self._probe_lock = asyncio.Lock()

    @property
    def enabled(self) -> bool:
        return self.threshold > 0

    async def admit(self) -> bool:
        """Whether a request may go to this backend now (probing it when due)."""
        if not self.enabled or self.state != "open":
            return True
        if time.monotonic() - self.opened_at < self.reset_s:
            return False
        async with self._probe_lock:  # one probe for all the requests that are waiting
            if self.state != "open":
                return True
            if time.monotonic() - self.opened_at < self.reset_s:
                return False
            health = await self.backend.health()
            if health.ok:
                log.info("backend %s answered its probe: trying it again", self.backend.name)
                self.state = "half_open"
                return True
            log.warning(
                "backend %s still fails its probe (%s): circuit stays open",
                self.backend.name,
                health.detail,
            )
            self.opened_at = time.monotonic()
            return False

    def success(self) -> None:
        if self.state != "closed":
            log.info("backend %s recovered: circuit closed", self.backend.name)
        self.state, self.failures = "closed", 0

    def failure(self, error: LLMBridgeError) -> None:
        if not self.enabled or not _counts_against_backend(error):
            return
        self.failures += 1
        if self.state == "half_open" or self.failures >= self.threshold:
            if self.state != "open":
                log.warning(
                    "backend %s failed %d time(s) in a row (%s): circuit open for %g s",
                    self.backend.name,
                    self.failures,
                    error.message,
                    self.reset_s,
                )
            self.state, self.opened_at = "open", time.monotonic()

    def open_error(self) -> BackendUnavailableError:
        remaining = max(0.0, self.reset_s - (time.monotonic() - self.opened_at))
        return BackendUnavailableError(
            f"backend '{self.backend.name}' is failing; the gateway stopped sending it "
            f"requests (circuit open, next probe in {remaining:.0f} s)",
            backend=self.backend.name,
            retry_after=max(1.0, remaining),
        )

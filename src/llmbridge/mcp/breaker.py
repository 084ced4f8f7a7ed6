"""One upstream's circuit breaker: ``Breaker``.

``mcp.breaker_failures`` failed calls in a row (the server unreachable, its
connection lost, a call past its timeout: never a tool that answered with an error)
open it; while open, calls fail at once (503, saying when it is tried again) instead of
each waiting out its timeout on a server that is down. After ``mcp.breaker_reset_s``
one call goes through as a probe: its success closes the breaker, its failure opens it
for another period. Each worker has its own breaker per server, as it has its own
connection to it (docs/MCP.md, "Workers").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

from llmbridge.core.errors import BackendUnavailableError

__all__ = ["Breaker"]

State = Literal["closed", "open", "half-open"]


class Breaker:
    """The breaker of the server ``name`` (module docstring); ``failures`` 0: never opens."""

    def __init__(
        self,
        name: str,
        failures: int,
        reset_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.threshold = failures
        self.reset_s = reset_s
        self._clock = clock
        self.state: State = "closed"
        self.failures = 0
        """Failed calls in a row."""
        self.opened_at = 0.0

    def check(self) -> None:
        """Let a call through, or ``BackendUnavailableError`` while the breaker is open
        (one probe passes once ``reset_s`` has gone by)."""
        if self.state == "closed":
            return
        waited = self._clock() - self.opened_at
        if self.state == "open" and waited >= self.reset_s:
            self.state = "half-open"  # this call is the probe
            return
        retry = max(0.0, self.reset_s - waited)
        raise BackendUnavailableError(
            f"the MCP server {self.name!r} failed {self.failures} calls in a row: its "
            f"breaker is open, tried again in {retry:.0f} s",
            code="breaker_open",
        )

    def success(self) -> None:
        self.state = "closed"
        self.failures = 0

    def failure(self) -> None:
        self.failures += 1
        if self.threshold and (self.state == "half-open" or self.failures >= self.threshold):
            self.state = "open"
            self.opened_at = self._clock()

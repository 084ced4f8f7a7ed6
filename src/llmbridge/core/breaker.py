"""A circuit breaker's state and its transitions, with no I/O: ``Circuit``.

```
closed --(threshold failures in a row)--> open --(reset_s gone by: its owner
   ^                                       ^      lets a probe through)--> half_open
   |                                       +------------(a failure)-----------+
   +-----------------------(a success, from any state)------------------------+
```

Two owners build on it, each deciding what counts as a failure and what the probe is:

- serving/resilience.py's ``CircuitBreaker``, a backend's: transient failures other
  than "busy" count; the probe is the backend's health check, after which requests
  pass (half open) until one succeeds or fails; its state may live in Redis, across
  workers and replicas, and the circuit is then this process's view of it (``take``).
- mcp/breaker.py's ``Breaker``, an MCP server's: calls that found the server down or
  timed out count; the probe is the next call itself, and the others wait for its
  verdict.

``failures`` 0 is a breaker that never opens. ``clock`` (seconds) is the owner's:
``time.monotonic`` in one process, unix time when the state is shared (its
``opened_at`` is then written by every replica).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

__all__ = ["BreakerState", "Circuit"]

BreakerState = Literal["closed", "open", "half_open"]
"""``closed`` (calls pass), ``open`` (calls refused) or ``half_open`` (probing)."""


class Circuit:
    """One breaker's state (module docstring)."""

    def __init__(
        self, failures: int, reset_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.threshold = failures
        """Failures in a row that open it (0: never)."""
        self.reset_s = reset_s
        """How long it stays open before a probe is let through."""
        self._clock = clock
        self._state: BreakerState = "closed"
        self.failures = 0
        """Failures in a row since the last success."""
        self.opened_at = 0.0
        """When (``clock``) it last opened; 0.0 when never."""

    @property
    def enabled(self) -> bool:
        return self.threshold > 0

    @property
    def state(self) -> BreakerState:
        return self._state

    @state.setter
    def state(self, value: BreakerState) -> None:
        self._state = value

    def due(self) -> bool:
        """Whether an open circuit has waited out ``reset_s`` (a probe may go)."""
        return self._clock() - self.opened_at >= self.reset_s

    def remaining_s(self) -> float:
        """Seconds before an open circuit is due for its probe (0.0 when it is)."""
        return max(0.0, self.reset_s - (self._clock() - self.opened_at))

    def probing(self) -> None:
        """The probe was let through, or answered well: half open."""
        self._state = "half_open"

    def reopen(self) -> None:
        """A probe failed before any call: open for another ``reset_s``."""
        self.opened_at = self._clock()

    def succeeded(self) -> bool:
        """A success: closed, no failures; whether it was not closed before."""
        recovered = self._state != "closed"
        self._state, self.failures = "closed", 0
        return recovered

    def failed(self) -> bool:
        """A failure counted: open at the threshold, or at once while half open;
        whether this one opened it (it was not open already)."""
        self.failures += 1
        if self.enabled and (self._state == "half_open" or self.failures >= self.threshold):
            opened = self._state != "open"
            self._state, self.opened_at = "open", self._clock()
            return opened
        return False

    def take(self, state: BreakerState, failures: int, opened_at: float) -> None:
        """Become the state a shared store holds (``share``d breakers)."""
        self._state, self.failures, self.opened_at = state, failures, opened_at

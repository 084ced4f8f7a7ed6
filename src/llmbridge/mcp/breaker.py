"""One upstream's circuit breaker: ``Breaker``.

``mcp.breaker_failures`` failed calls in a row (the server unreachable, its
connection lost, a call past its timeout: never a tool that answered with an error)
open it; while open, calls fail at once (503, saying when it is tried again) instead of
each waiting out its timeout on a server that is down. After ``mcp.breaker_reset_s``
one call goes through as a probe (the others are still refused): its success closes
the breaker, its failure opens it for another period. Each worker has its own breaker
per server, as it has its own connection to it (docs/MCP.md, "Workers").

The states and transitions are core/breaker.py's ``Circuit``, the backends' breaker's
too (serving/resilience.py); what is this module's is the probe (the next call) and
the refusal. ``state`` spells the probing state ``half-open``, as ``/health``'s
``mcp`` section always has.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

from llmbridge.core.breaker import Circuit
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
        self.circuit = Circuit(failures, reset_s, clock)

    @property
    def state(self) -> State:
        state = self.circuit.state
        return "half-open" if state == "half_open" else state

    @property
    def failures(self) -> int:
        """Failed calls in a row."""
        return self.circuit.failures

    def check(self) -> None:
        """Let a call through, or ``BackendUnavailableError`` while the breaker is open
        (one probe passes once ``reset_s`` has gone by)."""
        circuit = self.circuit
        if circuit.state == "closed":
            return
        if circuit.state == "open" and circuit.due():
            circuit.probing()  # this call is the probe
            return
        raise BackendUnavailableError(
            f"the MCP server {self.name!r} failed {circuit.failures} calls in a row: its "
            f"breaker is open, tried again in {circuit.remaining_s():.0f} s",
            code="breaker_open",
        )

    def success(self) -> None:
        self.circuit.succeeded()

    def failure(self) -> None:
        self.circuit.failed()

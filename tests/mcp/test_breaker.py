"""An upstream's breaker (mcp/breaker.py): failures in a row open it, calls then fail
at once until the reset period, one probe then decides; a success closes it."""

from __future__ import annotations

import pytest

from llmbridge.core.errors import BackendUnavailableError
from llmbridge.mcp.breaker import Breaker


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_failures_in_a_row_open_it_and_a_probe_closes_it() -> None:
    clock = Clock()
    breaker = Breaker("box", failures=3, reset_s=30, clock=clock)
    for _ in range(2):
        breaker.check()
        breaker.failure()
    breaker.success()  # a success in between: the count starts again
    for _ in range(3):
        breaker.check()
        breaker.failure()
    assert breaker.state == "open"
    with pytest.raises(BackendUnavailableError) as refused:
        breaker.check()
    assert "breaker is open, tried again in 30 s" in refused.value.message
    assert refused.value.status_code == 503
    clock.now += 30
    breaker.check()  # the probe
    assert breaker.state == "half-open"
    breaker.failure()  # the probe failed: open for another period
    with pytest.raises(BackendUnavailableError):
        breaker.check()
    clock.now += 30
    breaker.check()
    breaker.success()
    assert breaker.state == "closed" and breaker.failures == 0


def test_zero_failures_never_opens_it() -> None:
    breaker = Breaker("box", failures=0, reset_s=30)
    for _ in range(100):
        breaker.failure()
    breaker.check()
    assert breaker.state == "closed"

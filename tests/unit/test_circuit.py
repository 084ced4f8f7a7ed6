"""The one circuit breaker's transitions (core/breaker.py ``Circuit``), which the
backends' breaker (serving/resilience.py) and the MCP servers' (mcp/breaker.py) are
built on: failures in a row open it, it is due for a probe after ``reset_s``, a failure
while half open reopens it at once, a success closes it from any state."""

from __future__ import annotations

from llmbridge.core.breaker import Circuit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_it_opens_at_the_threshold_and_says_so_once() -> None:
    clock = Clock()
    circuit = Circuit(failures=2, reset_s=10, clock=clock)
    assert not circuit.failed() and circuit.state == "closed" and circuit.failures == 1
    assert circuit.failed() and circuit.state == "open" and circuit.opened_at == 1000.0
    clock.now += 1
    assert not circuit.failed()  # already open: not opened again, its period restarts
    assert circuit.opened_at == 1001.0 and circuit.failures == 3


def test_it_is_due_after_reset_s_and_a_failed_probe_reopens_it() -> None:
    clock = Clock()
    circuit = Circuit(failures=1, reset_s=10, clock=clock)
    circuit.failed()
    clock.now += 4
    assert not circuit.due() and circuit.remaining_s() == 6
    clock.now += 6
    assert circuit.due() and circuit.remaining_s() == 0
    circuit.reopen()  # the probe failed before any call
    assert not circuit.due() and circuit.state == "open"
    clock.now += 10
    circuit.probing()
    assert circuit.state == "half_open"
    assert circuit.failed() and circuit.state == "open"  # half open: one failure reopens


def test_a_success_closes_it_from_any_state() -> None:
    circuit = Circuit(failures=3, reset_s=10, clock=Clock())
    circuit.failed()
    assert not circuit.succeeded() and circuit.failures == 0  # it was closed
    for _ in range(3):
        circuit.failed()
    circuit.probing()
    assert circuit.succeeded() and circuit.state == "closed" and circuit.failures == 0


def test_no_threshold_never_opens_and_a_shared_view_is_taken_whole() -> None:
    circuit = Circuit(failures=0, reset_s=10, clock=Clock())
    assert not circuit.enabled
    assert not any(circuit.failed() for _ in range(50)) and circuit.state == "closed"
    circuit.take("open", 7, 123.0)
    assert (circuit.state, circuit.failures, circuit.opened_at) == ("open", 7, 123.0)

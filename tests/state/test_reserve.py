"""Budget reservations, the shared state's side: ``admit_many`` counts the
key's live reservations against its budget and, when it lets a request in, holds the
request's worst case (``AdmitChecks.reserve``); ``settle`` gives it back and adds the
actual cost to the spend counter in the same atomic step. Run against ``LocalState``,
a real Redis (tests/state/conftest.py) and ``FailoverState``; 50 concurrent requests
on a $0.05 budget were all served before reservations.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from llmbridge.state.base import AdmitChecks
from llmbridge.state.redis import RedisState
from tests.servers import free_port
from tests.state.implementations import redis_state

from .conftest import State, eventually


def _checks(reserve: float = 0.03, budget: float = 0.05, **more: object) -> AdmitChecks:
    return AdmitChecks(
        spend_key="spend:k",
        budget=budget,
        reserve_key="rsv:k",
        reserve=reserve,
        **more,  # type: ignore[arg-type]
    )


async def test_fifty_concurrent_requests_on_a_small_budget(state: State) -> None:
    """0 + 0.03 < 0.05 lets the first in, 0.03 + 0.03 >= 0.05 stops the rest."""
    verdicts = await asyncio.gather(*(state.admit_many(_checks()) for _ in range(50)))
    admitted = [v for v in verdicts if v.refused == ""]
    assert len(admitted) == 2
    assert all(v.reserved == 0.03 for v in admitted)
    assert {v.refused for v in verdicts} == {"", "budget"}
    assert all(v.reserved == 0.0 for v in verdicts if v.refused)
    assert await state.reserved("rsv:k") == pytest.approx(0.06)


async def test_settle_moves_the_reservation_into_spend(state: State) -> None:
    first = await state.admit_many(_checks())
    assert first.reserved == 0.03
    await state.settle(reserve_key="rsv:k", reserve=0.03, spend_key="spend:k", spend=0.01)
    assert await state.reserved("rsv:k") == 0.0
    assert await state.get_float("spend:k") == pytest.approx(0.01)
    # 0.01 spent lets one in, 0.01 + 0.03 held = 0.04 < 0.05 another; 0.07 stops.
    verdicts = [await state.admit_many(_checks()) for _ in range(3)]
    assert [v.refused for v in verdicts] == ["", "", "budget"]
    assert verdicts[2].spent == pytest.approx(0.01)  # spent as before: the counter's


async def test_no_admission_sees_neither_the_reservation_nor_the_cost(state: State) -> None:
    """A request that held 0.04 settles for 0.04 while 20 others ask for 0.02: in any
    order, at every moment 0.04 counts (held or spent), so exactly one gets in. Given
    back first and spent after, up to three would."""
    assert (await state.admit_many(_checks(reserve=0.04))).reserved == 0.04
    settle = state.settle(reserve_key="rsv:k", reserve=0.04, spend_key="spend:k", spend=0.04)
    results = await asyncio.gather(
        settle, *(state.admit_many(_checks(reserve=0.02)) for _ in range(20))
    )
    verdicts = results[1:]
    assert sum(v.refused == "" for v in verdicts if v is not None) == 1
    assert await state.get_float("spend:k") == pytest.approx(0.04)
    assert await state.reserved("rsv:k") == pytest.approx(0.02)


async def test_a_refused_request_holds_nothing(state: State) -> None:
    refused = await state.admit_many(
        _checks(budget=1.0, parallel_key="par:k", rpm_key="rpm:k", rpm=0)
    )
    assert refused.refused == "rpm"
    assert refused.reserved == 0.0 and not refused.holds_slot
    assert await state.reserved("rsv:k") == 0.0


async def test_given_back_never_below_zero(state: State) -> None:
    await state.admit_many(_checks(reserve=0.1, budget=1.0))
    for _ in range(3):
        await state.settle(reserve_key="rsv:k", reserve=0.1)
    assert await state.reserved("rsv:k") == 0.0
    # Dust of float sums is none: 0.1 + 0.2 - 0.3 is not 0.0 in binary.
    await state.admit_many(_checks(reserve=0.1, budget=1.0))
    await state.admit_many(_checks(reserve=0.2, budget=1.0))
    await state.settle(reserve_key="rsv:k", reserve=0.3)
    assert await state.reserved("rsv:k") == 0.0
    assert (await state.admit_many(_checks(reserve=0.99, budget=1.0))).refused == ""


async def test_a_settle_with_nothing_to_do_makes_no_round_trip() -> None:
    nowhere = RedisState(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    try:
        await nowhere.settle()
        await nowhere.settle(reserve_key="rsv:k", reserve=0.0, spend_key="spend:k", spend=0.0)
        await nowhere.settle(tpm_key="tpm:k", tokens=0)
    finally:
        await nowhere.aclose()


_HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    from llmbridge.state.base import AdmitChecks
    from llmbridge.state.redis import RedisState

    async def main(url: str) -> None:
        state = RedisState(url, heartbeat_s=0.2, heartbeat_ttl_s=0.6)
        checks = AdmitChecks(spend_key="spend:d", budget=1.0, reserve_key="rsv:d", reserve=0.05)
        assert (await state.admit_many(checks)).reserved == 0.05
        print("held", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main(sys.argv[1]))
    """
)


def _python(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True
    )


async def test_a_killed_replicas_reservations_stop_counting(redis_url: str) -> None:
    me = redis_state(redis_url)
    checks = AdmitChecks(spend_key="spend:d", budget=0.05, reserve_key="rsv:d", reserve=0.01)
    holder = _python(_HOLDER, redis_url)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert (await me.admit_many(checks)).refused == "budget"  # 0.05 held elsewhere
        os.kill(holder.pid, signal.SIGKILL)
        holder.communicate(timeout=10)

        async def freed() -> bool:
            return await me.reserved("rsv:d") == 0.0

        # Its heartbeat expires; its reservation with it (nothing leaks for good).
        assert await eventually(freed)
        assert (await me.admit_many(checks)).refused == ""
        assert await me.reserved("rsv:d") == pytest.approx(0.01)  # this live one's stays
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate(timeout=10)
        await me.aclose()

"""``admit_many`` and ``settle`` (state/base.py): one request's checks and its finish in
one step, run against ``LocalState`` and a real Redis (tests/state/conftest.py). Each
decision must be the one the separate calls (``get_float``, ``acquire``, ``take``,
``release``, ``add``) make, and a refusal must leave nothing taken but what those calls
would leave: a request refused for its tokens has used its request; no refusal keeps
a parallel slot. And ``FailoverState`` keeps a slot where it was taken."""

from __future__ import annotations

import asyncio

import pytest

from llmbridge.state.base import AdmitChecks, AdmitVerdict, WindowVerdict
from llmbridge.state.failover import FailoverState
from llmbridge.state.redis import RedisState
from tests.servers import RedisServer
from tests.state.implementations import redis_state

from .conftest import State, eventually


async def _admit(state: State, **overrides: object) -> AdmitVerdict:
    options: dict[str, object] = {
        "spend_key": "spend:k",
        "spent": 0.0,
        "budget": None,
        "parallel_key": "par:k",
        "parallel": 2,
        "rpm_key": "rpm:k",
        "rpm": 3,
        "tpm_key": "tpm:k",
        "tpm": 100,
        "tpm_cost": 10,
        "window_s": 60,
    }
    options.update(overrides)
    return await state.admit_many(AdmitChecks(**options))  # type: ignore[arg-type]


async def _par(state: State) -> int:
    return (await state.in_flight(["par:k"]))["par:k"]


async def test_admitted_requests_take_every_limit_at_once(state: State) -> None:
    verdict = await _admit(state)
    assert verdict.refused == ""
    assert verdict.holds_slot
    assert verdict.requests == WindowVerdict(True, 1, 3, 0.0)
    assert verdict.tokens == WindowVerdict(True, 10, 100, 0.0)
    assert await _par(state) == 1
    assert await state.used("rpm:k", 60) == 1
    assert await state.used("tpm:k", 60) == 10


async def test_a_request_over_rpm_gives_its_slot_back(state: State) -> None:
    for _ in range(3):
        assert (await _admit(state, parallel=None)).refused == ""
    refused = await _admit(state, parallel=None)
    assert refused.refused == "rpm"
    assert not refused.holds_slot
    assert refused.requests is not None and refused.requests.used == 3
    assert not refused.requests.allowed and refused.requests.reset_s > 0
    assert refused.tokens is None
    assert await _par(state) == 3  # the three admitted ones only
    assert await state.used("tpm:k", 60) == 30  # the refused one took no tokens


async def test_a_request_over_tpm_has_used_its_request_but_not_a_slot(state: State) -> None:
    refused = await _admit(state, tpm_cost=150)
    assert refused.refused == "tpm"
    assert refused.requests == WindowVerdict(True, 1, 3, 0.0)
    assert refused.tokens is not None
    assert refused.tokens.used == 0 and refused.tokens.reset_s == 60
    assert await _par(state) == 0
    assert await state.used("rpm:k", 60) == 1  # as a separate take would leave it


async def test_a_key_at_max_parallel_takes_no_request(state: State) -> None:
    assert (await _admit(state, parallel=1)).refused == ""
    refused = await _admit(state, parallel=1)
    assert refused.refused == "parallel"
    assert refused.requests is None
    assert await state.used("rpm:k", 60) == 1
    assert await _par(state) == 1


async def test_the_budget_reads_the_spend_counter_and_takes_nothing(state: State) -> None:
    ok = await _admit(state, spent=0.5, budget=1.0)
    assert ok.refused == "" and ok.spent == pytest.approx(0.5)
    await state.add_float("spend:k", 0.5)
    refused = await _admit(state, spent=0.5, budget=1.0)
    assert refused.refused == "budget"
    assert refused.spent == pytest.approx(1.0)
    assert await state.used("rpm:k", 60) == 1  # only the first
    assert await _par(state) == 1


async def test_unchecked_limits_are_left_alone(state: State) -> None:
    verdict = await state.admit_many(AdmitChecks(rpm_key="rpm:k", rpm=5, window_s=60))
    assert verdict.refused == "" and not verdict.holds_slot
    assert verdict.tokens is None and verdict.spent == 0.0
    assert await _par(state) == 0
    assert await state.used("tpm:k", 60) == 0


async def test_settle_releases_and_adds_tokens(state: State) -> None:
    await _admit(state)
    await _admit(state)
    await state.settle(parallel_key="par:k", tpm_key="tpm:k", tokens=25, window_s=60)
    assert await _par(state) == 1
    assert await state.used("tpm:k", 60) == 45
    await state.settle(parallel_key="par:k", tpm_key="tpm:k", tokens=0, window_s=60)
    await state.settle(parallel_key="par:k", window_s=60)  # never below zero
    assert await _par(state) == 0
    assert await state.used("tpm:k", 60) == 45
    await state.settle(tpm_key="tpm:k", tokens=5, window_s=60)
    assert await state.used("tpm:k", 60) == 50


async def test_two_replicas_admit_exactly_the_limit_together(redis_url: str) -> None:
    replicas = [redis_state(redis_url), redis_state(redis_url)]
    try:
        verdicts = await asyncio.gather(
            *(
                replicas[i % 2].admit_many(AdmitChecks(rpm_key="rpm:shared", rpm=7, window_s=60))
                for i in range(20)
            )
        )
        assert sorted(v.refused for v in verdicts) == [""] * 7 + ["rpm"] * 13
    finally:
        for replica in replicas:
            await replica.aclose()


async def test_failover_settles_a_slot_where_it_was_taken(
    redis_server: RedisServer, redis_url: str
) -> None:
    redis = RedisState(redis_url, heartbeat_s=0.1, heartbeat_ttl_s=0.5, own_heartbeat=False)
    state = FailoverState(redis_url, retry_s=0.1, redis=redis)
    observer = redis_state(redis_url)
    try:
        assert (await state.admit_many(AdmitChecks(parallel_key="par:f", parallel=None))).holds_slot
        assert await observer.in_flight(["par:f"]) == {"par:f": 1}
        redis_server.pause()
        try:
            # Times out: degraded, the Redis slot released there once Redis answers.
            await state.settle(parallel_key="par:f", tpm_key="tpm:f", tokens=3, window_s=60)
            assert state.degraded
            assert await state.local.used("tpm:f", 60) == 3
            taken = await state.admit_many(AdmitChecks(parallel_key="par:f", parallel=1))
            assert taken.holds_slot  # in this process
            assert await state.local.in_flight(["par:f"]) == {"par:f": 1}
        finally:
            redis_server.resume()

        async def recovered() -> bool:
            return not state.degraded

        assert await eventually(recovered)
        assert await observer.in_flight(["par:f"]) == {"par:f": 0}
        await state.settle(parallel_key="par:f", window_s=60)  # back to this process
        assert await state.local.in_flight(["par:f"]) == {"par:f": 0}
    finally:
        await observer.aclose()
        await state.aclose()

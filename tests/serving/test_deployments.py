"""Several servers behind one model (serving/deployments.py, serving/models.py): the
strategies, weights, session affinity, failover before the first byte, and the
shared in-flight counts going back to zero however a reply ends.

Two scripted backends stand for two GPU servers of one model: they count the
requests each got, fail and stall on demand. The shared state is ``LocalState``,
the one a single process uses (tests/state/ runs the same contract on Redis)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncGenerator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.errors import BackendUnavailableError
from llmbridge.core.events import StreamError, StreamEvent
from llmbridge.core.messages import Message, TextPart
from llmbridge.core.request import ChatRequest
from llmbridge.dialects.anthropic.request import decode_chat_request as anthropic_request
from llmbridge.dialects.openai.request import decode_chat_request as openai_request
from llmbridge.dialects.responses.request import decode_chat_request as responses_request
from llmbridge.gateway.config import ConfigError, load_config
from llmbridge.serving.config import Deployment, ServingConfig
from llmbridge.serving.deployments import (
    claude_code_session,
    in_flight_key,
    rendezvous_order,
    session_key,
    smooth_cycle,
)
from llmbridge.serving.models import Models
from llmbridge.state.local import LocalState
from tests.state.implementations import redis_state

REQUESTS = Path(__file__).parents[1] / "fixtures" / "requests"
"""Captured requests of the real clients (copies of shared/reference/captured/)."""


class SlowStart(ScriptedBackend):
    """A scripted server that takes ``delay`` seconds before its first event (the time
    to first token the ``latency`` strategy measures), or stalls until cancelled."""

    def __init__(self, name: str, delay: float) -> None:
        super().__init__(name)
        self.delay = delay
        self.called = asyncio.Event()

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        self.called.set()
        await asyncio.sleep(self.delay)
        async with aclosing(super().chat(request)) as events:
            async for event in events:
                yield event


def _models(
    *backends: ScriptedBackend, route: dict[str, Any] | None = None, **extra: Any
) -> Models:
    config = ServingConfig.model_validate(
        {
            "backends": {b.name: {"type": "scripted"} for b in backends},
            "models": [{"name": "m", "backends": [b.name for b in backends], **(route or {})}],
            "default_backend": backends[0].name,
            "resilience": {"backoff_ms": 0, **extra.pop("resilience", {})},
            **extra,
        }
    )
    return Models(config, {b.name: b for b in backends}, state=LocalState())


def _request(key: str | None = None, **fields: Any) -> ChatRequest:
    return ChatRequest(
        model="m", messages=(Message("user", (TextPart("hi"),)),), affinity_key=key, **fields
    )


async def _served_by(models: Models, request: ChatRequest | None = None) -> str:
    """The deployment that answered one whole request."""
    reply = await models.open(request or _request())
    async with aclosing(reply.rest) as rest:
        async for _ in rest:
            pass
    return reply.deployment


async def _in_flight(models: Models, *names: str) -> list[int]:
    counts = await models.state.in_flight([in_flight_key(n) for n in names])
    return [counts[in_flight_key(n)] for n in names]


def _load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = orjson.loads(path.read_bytes())
    return loaded


async def _drain(models: Models, request: ChatRequest) -> list[StreamEvent]:
    async with aclosing(models.chat(request)) as events:
        return [event async for event in events]


# -- configuration ----------------------------------------------------------------------


def _config(tmp_path: Path, models: str) -> str:
    path = tmp_path / "llmbridge.yaml"
    path.write_text(
        "backends: {gpu1: {type: scripted}, gpu2: {type: scripted}}\n" + models, encoding="utf-8"
    )
    return str(path)


def test_a_route_names_its_servers_with_weights_a_strategy_and_affinity(tmp_path: Path) -> None:
    config = load_config(
        _config(
            tmp_path,
            "models:\n"
            "  - name: m\n"
            "    backends: [gpu1, {name: gpu2, weight: 2}]\n"
            "    strategy: round-robin\n"
            "    affinity: true\n"
            "    affinity_header: x-session-id\n",
        )
    )
    route = config.models[0]
    assert route.deployments == (Deployment(name="gpu1"), Deployment(name="gpu2", weight=2))
    assert route.backend == "gpu1"  # the first server, for what reads one backend per route
    assert (route.strategy, route.affinity, route.affinity_header) == (
        "round-robin",
        True,
        "x-session-id",
    )
    single = ServingConfig.model_validate(
        {"backends": {"gpu1": {"type": "scripted"}}, "models": [{"name": "m", "backend": "gpu1"}]}
    )
    assert single.models[0].deployments == (Deployment(name="gpu1"),)
    assert single.models[0].strategy == "least-busy" and not single.models[0].affinity


@pytest.mark.parametrize(
    ("route", "says"),
    [
        ("{name: m, backends: [gpu1, gpu3]}", "names backend 'gpu3', which is not among"),
        ("{name: m, backend: gpu1, backends: [gpu1, gpu2]}", "both 'backend' and 'backends'"),
        ("{name: m, backends: [gpu1, {name: gpu2, weight: 0}]}", "weight: Input should be greater"),
        (
            "{name: m, backends: [gpu1, {name: gpu2, weight: -1}]}",
            "weight: Input should be greater",
        ),
        ("{name: m, backends: []}", "'backends' must be a non-empty list"),
        ("{name: m, backends: [gpu1, gpu1]}", "lists backend(s) ['gpu1'] twice"),
        ("{name: m}", "needs 'backend' (its server) or 'backends'"),
        ("{name: m, backends: [gpu1, gpu2], strategy: fastest}", "strategy: Input should be"),
        ("{name: m, backends: [gpu1], affinity_header: x-s}", "without 'affinity: true'"),
    ],
)
def test_a_wrong_route_is_a_clear_config_error(tmp_path: Path, route: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(_config(tmp_path, f"models: [{route}]\n"))
    assert says in str(caught.value)


def test_the_weighted_cycle_interleaves_as_nginx_does() -> None:
    assert smooth_cycle([5, 1, 1]) == (0, 0, 1, 0, 2, 0, 0)
    assert smooth_cycle([1, 2]) == (1, 0, 1)
    assert smooth_cycle([1, 1]) == (0, 1)


# -- strategies -------------------------------------------------------------------------


async def test_least_busy_spreads_concurrent_slow_requests_over_both() -> None:
    slow = Script(text=["a", "b", "c"], chunk_delay=0.02)
    gpu1, gpu2 = ScriptedBackend("gpu1", default=slow), ScriptedBackend("gpu2", default=slow)
    models = _models(gpu1, gpu2)
    replies = await asyncio.gather(*(models.open(_request()) for _ in range(6)))
    # Each took a slot as it opened, so each went to the one with fewer in flight.
    assert await _in_flight(models, "gpu1", "gpu2") == [3, 3]
    assert Counter(r.deployment for r in replies) == {"gpu1": 3, "gpu2": 3}
    for reply in replies:
        async with aclosing(reply.rest) as rest:
            async for _ in rest:
                pass
    assert await _in_flight(models, "gpu1", "gpu2") == [0, 0]
    assert (len(gpu1.requests), len(gpu2.requests)) == (3, 3)


async def test_least_busy_divides_the_count_by_the_weight() -> None:
    slow = Script(text=["a", "b"], chunk_delay=0.02)
    gpu1, gpu2 = ScriptedBackend("gpu1", default=slow), ScriptedBackend("gpu2", default=slow)
    models = _models(gpu1, gpu2, route={"backends": ["gpu1", {"name": "gpu2", "weight": 2}]})
    replies = await asyncio.gather(*(models.open(_request()) for _ in range(6)))
    assert Counter(r.deployment for r in replies) == {"gpu1": 2, "gpu2": 4}
    for reply in replies:
        await reply.rest.aclose()
    assert await _in_flight(models, "gpu1", "gpu2") == [0, 0]


async def test_one_request_at_a_time_least_busy_still_takes_turns() -> None:
    models = _models(ScriptedBackend("gpu1"), ScriptedBackend("gpu2"))
    served = [await _served_by(models) for _ in range(4)]
    assert served == ["gpu1", "gpu2", "gpu1", "gpu2"]


async def test_round_robin_alternates() -> None:
    gpu1, gpu2 = ScriptedBackend("gpu1"), ScriptedBackend("gpu2")
    models = _models(gpu1, gpu2, route={"strategy": "round-robin"})
    served = [await _served_by(models) for _ in range(6)]
    assert served == ["gpu1", "gpu2"] * 3
    # The turn is the shared state's counter, so replicas sharing it share one cycle.
    assert await models.state.next_index("rr:m") == 6


async def test_round_robin_gives_each_its_weight_in_turns() -> None:
    models = _models(
        ScriptedBackend("gpu1"),
        ScriptedBackend("gpu2"),
        route={"strategy": "round-robin", "backends": [{"name": "gpu1", "weight": 3}, "gpu2"]},
    )
    served = [await _served_by(models) for _ in range(8)]
    assert served == ["gpu1", "gpu1", "gpu2", "gpu1"] * 2


async def test_latency_measures_each_then_prefers_the_faster() -> None:
    slow, fast = SlowStart("slow", 0.05), SlowStart("fast", 0.0)
    models = _models(slow, fast, route={"strategy": "latency"})
    # Neither measured yet: each is tried once (in the configured order) ...
    warm_up = [await _served_by(models) for _ in range(2)]
    assert warm_up == ["slow", "fast"]
    seen = await models.state.latencies(["ttft:slow", "ttft:fast"])
    slow_s, fast_s = seen["ttft:slow"], seen["ttft:fast"]
    assert slow_s is not None and fast_s is not None and slow_s > fast_s
    # ... then the lower time to first token wins every time.
    assert [await _served_by(models) for _ in range(5)] == ["fast"] * 5
    assert len(slow.requests) == 1


async def test_a_single_backend_route_touches_no_shared_state() -> None:
    lone = ScriptedBackend("lone")
    config = ServingConfig.model_validate(
        {"backends": {"lone": {"type": "scripted"}}, "models": [{"name": "m", "backend": "lone"}]}
    )
    models = Models(config, {"lone": lone}, state=LocalState())
    assert not models.router.counted
    assert await _served_by(models) == "lone"
    assert await models.state.in_flight([in_flight_key("lone")]) == {"dep:lone": 0}


# -- failover before the first byte ---------------------------------------------------


def _down() -> Script:
    return Script(fail_before=BackendUnavailableError("connection refused"))


async def test_a_deployment_that_fails_before_the_first_byte_hands_over_to_the_next() -> None:
    gpu1, gpu2 = ScriptedBackend("gpu1"), ScriptedBackend("gpu2")
    gpu1.enqueue(_down(), _down())  # the try and its retry
    models = _models(gpu1, gpu2, route={"strategy": "round-robin"})
    reply = await models.open(_request())
    await reply.rest.aclose()
    assert reply.deployment == "gpu2"
    assert reply.prepared.changes.fallback is None  # another server of the model, not a fallback
    assert (len(gpu1.requests), len(gpu2.requests)) == (2, 1)
    assert await _in_flight(models, "gpu1", "gpu2") == [0, 0]


async def test_an_open_circuit_is_skipped_and_probed_back() -> None:
    gpu1, gpu2 = ScriptedBackend("gpu1"), ScriptedBackend("gpu2")
    models = _models(
        gpu1,
        gpu2,
        route={"strategy": "round-robin"},
        # Open for a minute, then "a minute later" by setting its reset to 0: a busy
        # machine cannot outlast a 0.2 s window between two calls.
        resilience={"retries": 0, "breaker_failures": 1, "breaker_reset_s": 60},
    )
    gpu1.enqueue(_down())
    assert await _served_by(models) == "gpu2"  # gpu1's turn failed and opened its circuit
    assert [await _served_by(models) for _ in range(4)] == ["gpu2"] * 4
    assert len(gpu1.requests) == 1  # skipped while open: not sent anything
    models.router.breakers["gpu1"].reset_s = 0  # past the reset: the next turn probes it
    served = [await _served_by(models) for _ in range(4)]
    assert "gpu1" in served and "gpu2" in served


async def test_every_deployment_down_is_the_last_failure_and_frees_every_slot() -> None:
    gpu1, gpu2 = ScriptedBackend("gpu1"), ScriptedBackend("gpu2")
    gpu1.enqueue(_down(), _down())
    gpu2.enqueue(_down(), _down())
    models = _models(gpu1, gpu2)
    with pytest.raises(BackendUnavailableError):
        await models.open(_request())
    assert await _in_flight(models, "gpu1", "gpu2") == [0, 0]


async def test_the_route_fallbacks_come_after_every_deployment() -> None:
    gpu1, gpu2, spare = ScriptedBackend("gpu1"), ScriptedBackend("gpu2"), ScriptedBackend("spare")
    for backend in (gpu1, gpu2):
        backend.enqueue(_down(), _down())
    config = ServingConfig.model_validate(
        {
            "backends": {n: {"type": "scripted"} for n in ("gpu1", "gpu2", "spare")},
            "models": [
                {"name": "m", "backends": ["gpu1", "gpu2"], "fallbacks": [{"backend": "spare"}]}
            ],
            "resilience": {"backoff_ms": 0},
        }
    )
    models = Models(config, {"gpu1": gpu1, "gpu2": gpu2, "spare": spare})
    reply = await models.open(_request())
    await reply.rest.aclose()
    assert reply.deployment == "spare" and reply.prepared.changes.fallback == "spare/m"
    assert (len(gpu1.requests), len(gpu2.requests)) == (2, 2)


# -- in-flight counts go back to zero -------------------------------------------------


async def test_in_flight_is_released_after_a_mid_stream_error() -> None:
    gpu1, gpu2 = ScriptedBackend("gpu1"), ScriptedBackend("gpu2")
    gpu1.enqueue(Script(text=["a", "b"], fail_after=1))
    gpu2.enqueue(Script(text=["a", "b"], fail_after=1, in_band=True))
    models = _models(gpu1, gpu2, route={"strategy": "round-robin"})
    with pytest.raises(Exception, match="scripted failure"):
        await _drain(models, _request())
    events = await _drain(models, _request())
    assert isinstance(events[-1], StreamError)
    assert await _in_flight(models, "gpu1", "gpu2") == [0, 0]


async def test_in_flight_is_released_when_the_caller_cancels() -> None:
    stalled = SlowStart("gpu1", 3600.0)  # never sends its first event
    streaming = ScriptedBackend("gpu2", default=Script(text=["a"] * 50, chunk_delay=0.01))
    models = _models(stalled, streaming, route={"strategy": "round-robin"})
    opening = asyncio.create_task(models.open(_request()))  # gpu1's turn: waits for it
    await stalled.called.wait()
    assert await _in_flight(models, "gpu1") == [1]
    opening.cancel()  # the client left before the first byte
    with pytest.raises(asyncio.CancelledError):
        await opening
    assert await _in_flight(models, "gpu1") == [0]

    reading_started = asyncio.Event()

    async def read_some() -> None:
        async with aclosing(models.chat(_request())) as events:
            async for _ in events:
                reading_started.set()

    reading = asyncio.create_task(read_some())  # gpu2's turn: streams for a while
    await reading_started.wait()
    assert await _in_flight(models, "gpu2") == [1]
    reading.cancel()  # the client left mid-stream
    with pytest.raises(asyncio.CancelledError):
        await reading
    assert await _in_flight(models, "gpu1", "gpu2") == [0, 0]
    assert streaming.cancelled == 1


class NetworkedState(LocalState):
    """``LocalState`` whose ``acquire`` first waits for ``gate``, as a round trip to
    Redis does: a caller can be cancelled while its increment is on the way."""

    kind = "redis"

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()

    async def acquire(self, key: str, limit: int | None) -> bool:
        self.waiting.set()
        await self.gate.wait()
        return await super().acquire(key, limit)


async def _settle() -> None:
    """Let tasks already scheduled (a slot given back, a latency sample) run."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_slot_taken_after_its_caller_was_cancelled_is_given_back() -> None:
    state = NetworkedState()
    models = _models(ScriptedBackend("gpu1"), ScriptedBackend("gpu2"))
    models.state = state
    opening = asyncio.create_task(models.open(_request()))
    await state.waiting.wait()
    opening.cancel()  # the client left while the increment was on the way
    with pytest.raises(asyncio.CancelledError):
        await opening
    state.gate.set()  # the increment lands now ...
    await _settle()
    assert await _in_flight(models, "gpu1", "gpu2") == [0, 0]  # ... and is given back


async def test_over_the_network_the_latency_sample_does_not_delay_the_reply() -> None:
    state = NetworkedState()
    state.gate.set()
    models = _models(
        ScriptedBackend("gpu1"), ScriptedBackend("gpu2"), route={"strategy": "latency"}
    )
    models.state = state
    assert await _served_by(models) == "gpu1"
    await _settle()  # the sample was sent off the reply's path
    seen = await state.latencies(["ttft:gpu1", "ttft:gpu2"])
    assert seen["ttft:gpu1"] is not None and seen["ttft:gpu2"] is None
    assert await _in_flight(models, "gpu1", "gpu2") == [0, 0]


async def test_replicas_sharing_redis_balance_on_each_others_counts(redis_url: str) -> None:
    """Two replicas (each its own Models and Redis connection) see one set of counts:
    taking turns, their six requests split 3/3. Each on its own counts would send four
    to gpu1 (each replica's ties start there)."""
    backends = (ScriptedBackend("gpu1"), ScriptedBackend("gpu2"))
    replicas = [_models(*backends), _models(*backends)]
    for replica in replicas:
        replica.state = redis_state(redis_url)
    try:
        replies = []
        for turn in range(6):
            replies.append(await replicas[turn % 2].open(_request()))
        assert Counter(r.deployment for r in replies) == {"gpu1": 3, "gpu2": 3}
        for reply in replies:
            await reply.rest.aclose()
        assert await _in_flight(replicas[1], "gpu1", "gpu2") == [0, 0]
    finally:
        for replica in replicas:
            await replica.state.aclose()


# -- affinity ---------------------------------------------------------------------------


async def test_a_session_sticks_to_one_deployment_and_sessions_spread() -> None:
    backends = [ScriptedBackend(f"gpu{i}") for i in (1, 2, 3)]
    models = _models(*backends, route={"affinity": True, "strategy": "round-robin"})
    owners = {}
    for session in range(12):
        key = f"session-{session}"
        served = {await _served_by(models, _request(key)) for _ in range(3)}
        assert len(served) == 1  # round robin would have moved it: affinity wins
        owners[key] = served.pop()
        expected = rendezvous_order(key, models.config.models[0].deployments)[0]
        assert owners[key] == f"gpu{expected + 1}"
    assert len(set(owners.values())) == 3  # different sessions use every server


async def test_when_a_sessions_deployment_fails_only_its_sessions_move_and_come_back() -> None:
    backends = {n: ScriptedBackend(n) for n in ("gpu1", "gpu2", "gpu3")}
    models = _models(
        *backends.values(),
        route={"affinity": True},
        resilience={"retries": 0, "breaker_failures": 1, "breaker_reset_s": 60},
    )
    keys = [f"session-{i}" for i in range(15)]
    before = {k: await _served_by(models, _request(k)) for k in keys}
    lost = next(k for k in keys if before[k] == "gpu2")
    backends["gpu2"].enqueue(_down())
    await _served_by(models, _request(lost))  # fails on gpu2, opens its circuit
    after = {k: await _served_by(models, _request(k)) for k in keys}
    for key in keys:
        if before[key] == "gpu2":
            second = rendezvous_order(key, models.config.models[0].deployments)[1]
            assert after[key] == f"gpu{second + 1}"  # its own second choice
        else:
            assert after[key] == before[key]  # untouched
    models.router.breakers["gpu2"].reset_s = 0  # the circuit's reset: the next probes gpu2
    assert {k: await _served_by(models, _request(k)) for k in keys} == before


def test_the_session_key_comes_from_each_clients_body() -> None:
    chat = openai_request(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "prompt_cache_key": "c-1"}
    )
    assert session_key(chat.provider_details) == "c-1"
    codex = _load(REQUESTS / "codex_0_169_0_responses.json")
    assert session_key(responses_request(codex).provider_details) == codex["prompt_cache_key"]
    claude = _load(REQUESTS / "claude_code_2_1_330_messages.json")
    assert (
        session_key(anthropic_request(claude).provider_details)
        == "47857c73-bbaa-4e6b-a649-2dc7b3052e97"
    )
    legacy = "user_" + "ab" * 32 + "_account_0f1e_session_8c2d-41aa"
    assert claude_code_session(legacy) == "8c2d-41aa"
    assert claude_code_session("plain-user") == "plain-user"
    plain = openai_request({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert session_key(plain.provider_details) is None


async def test_with_affinity_reads_the_header_first_then_the_body() -> None:
    models = _models(
        ScriptedBackend("gpu1"),
        ScriptedBackend("gpu2"),
        route={"affinity": True, "affinity_header": "x-session-id"},
    )
    body = openai_request(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "prompt_cache_key": "b"}
    )
    assert models.with_affinity(body, {"x-session-id": "h"}).affinity_key == "h"
    assert models.with_affinity(body, {}).affinity_key == "b"
    plain = _models(ScriptedBackend("gpu1"), ScriptedBackend("gpu2"))
    assert plain.with_affinity(body, {"x-session-id": "h"}).affinity_key is None


def test_the_deploy_guides_example_route_is_valid() -> None:
    guide = (Path(__file__).parents[2] / "docs" / "DEPLOY.md").read_text(encoding="utf-8")
    section = guide.split("## Several servers behind one model", 1)[1]
    example = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    config = ServingConfig.model_validate(yaml.safe_load(example))
    route = config.models[0]
    assert [(d.name, d.weight) for d in route.deployments] == [
        ("gpu1", 1),
        ("gpu2", 1),
        ("gpu3", 2),
    ]
    assert route.strategy == "least-busy" and route.affinity_header == "x-session-id"


async def test_embeddings_take_turns_and_skip_an_open_circuit() -> None:
    gpu1, gpu2 = ScriptedBackend("gpu1"), ScriptedBackend("gpu2")
    models = _models(
        gpu1,
        gpu2,
        route={"strategy": "round-robin"},
        resilience={"retries": 0, "breaker_failures": 1, "breaker_reset_s": 60},
    )
    targets = [(await models.embed_target("m")).backend.name for _ in range(4)]
    assert targets == ["gpu1", "gpu2", "gpu1", "gpu2"]
    gpu1.enqueue(_down())
    await _served_by(models)  # gpu1's turn fails: its circuit opens
    assert {(await models.embed_target("m")).backend.name for _ in range(4)} == {"gpu2"}

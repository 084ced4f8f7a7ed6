"""What happens when things break (faults): each failure a backend can
produce on demand, and the gateway's retries, fallbacks and circuit breaker.

Backends are real HTTP backends (Ollama and OpenAI-compatible) in front of a fake
upstream that misbehaves exactly as told (tests/upstream.py), plus a scripted backend
for streams cut after the first byte and for client hang-ups.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from llmbridge.backends.http import HTTPSettings, parse_retry_after
from llmbridge.backends.ollama import OllamaBackend
from llmbridge.backends.openai_compat import OpenAICompatBackend
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.errors import BackendError, BackendHTTPError, BackendUnavailableError
from llmbridge.serving.resilience import RetryPolicy, is_transient
from tests.conftest import RunningServer, running_gateway
from tests.upstream import PAST_READ_TIMEOUT_S, READ_TIMEOUT_S, Canned, FakeUpstream
from tests.waiting import scaled, wait_until


def _ollama_reply(text: str) -> Canned:
    line = {
        "model": "m",
        "created_at": "2026-01-01T00:00:00Z",
        "message": {"role": "assistant", "content": text},
        "done": True,
        "done_reason": "stop",
    }
    return Canned(chunks=[json.dumps(line).encode() + b"\n"])


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


CHAT = {"model": "", "messages": [{"role": "user", "content": "hi"}], "stream": False}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
DECISION = '{"action": "tool_call", "tool_name": "get_weather", "arguments": {"city": "Paris"}}'


def chat(gateway: RunningServer, model: str, **extra: Any) -> httpx.Response:
    return httpx.post(f"{gateway.url}/api/chat", json={**CHAT, "model": model, **extra}, timeout=20)


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, RunningServer]]:
    fake = FakeUpstream()
    with RunningServer(fake.app) as server:
        yield fake, server


@pytest.fixture
def spare() -> ScriptedBackend:
    return ScriptedBackend(
        "spare", models=("spare-model",), default=Script(text=["from the spare"])
    )


def _gateway(
    upstream: RunningServer,
    spare: ScriptedBackend,
    read_s: float = READ_TIMEOUT_S,
    **resilience: Any,
) -> Any:
    fast = HTTPSettings(connect=1.0, read=read_s)
    backends = {
        "up": OllamaBackend("up", upstream.url, http=fast),
        "down": OllamaBackend("down", f"http://127.0.0.1:{_closed_port()}", http=fast),
        "spare": spare,
    }
    models = [
        {"name": "up-model", "backend": "up"},
        {"name": "down-model", "backend": "down"},
        {
            "name": "guarded",
            "backend": "down",
            "fallbacks": [{"backend": "spare", "model": "spare-model"}],
        },
        {"name": "slow-guarded", "backend": "up", "fallbacks": [{"backend": "spare"}]},
        # the same routes for a model without tools: tool calling is emulated
        {"name": "up-emulated", "backend": "up", "tools": False},
        {"name": "down-emulated", "backend": "down", "tools": False},
        {
            "name": "guarded-emulated",
            "backend": "down",
            "tools": False,
            "fallbacks": [{"backend": "spare", "model": "spare-model"}],
        },
        {
            "name": "slow-guarded-emulated",
            "backend": "up",
            "tools": False,
            "fallbacks": [{"backend": "spare"}],
        },
    ]
    settings = {"retries": 1, "backoff_ms": 10, "breaker_failures": 0, **resilience}
    return running_gateway(backends, models=models, resilience=settings)


# -- unit: the policy --------------------------------------------------------------------


def test_which_failures_are_transient() -> None:
    assert is_transient(BackendUnavailableError("refused"))
    assert is_transient(BackendError("dropped"))
    for status in (429, 500, 502, 503, 504, 529):
        assert is_transient(BackendHTTPError("x", backend_status=status))
    for status in (400, 401, 403, 404, 413, 422):
        assert not is_transient(BackendHTTPError("x", backend_status=status))


def test_retry_policy_backs_off_and_honours_retry_after() -> None:
    policy = RetryPolicy(retries=3, backoff_ms=100, max_retry_after_s=5)
    plain = BackendError("x")
    assert [policy.delay(n, plain) for n in (1, 2, 3)] == [0.1, 0.2, 0.4]
    assert policy.delay(1, BackendHTTPError("x", backend_status=429, retry_after=2)) == 2.0
    assert policy.delay(1, BackendHTTPError("x", backend_status=429, retry_after=60)) is None


def test_retry_after_is_parsed_in_both_forms() -> None:
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    future = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    delay = parse_retry_after(future)
    assert delay is not None and 25 <= delay <= 31


def test_retry_after_in_digits_other_than_ascii_is_ignored() -> None:
    # str.isdigit() is true for "²" and "١٢٠" (Arabic-Indic), which float() refuses
    # or misreads: neither is delta-seconds (RFC 9110 10.2.3 says DIGIT, i.e. ASCII).
    assert parse_retry_after("²") is None
    assert parse_retry_after("1²") is None
    assert parse_retry_after("١٢٠") is None
    assert parse_retry_after(" 7 ") == 7.0


# -- the faults ------------------------------------------------------------------------


def test_a_refused_connection_is_503_or_served_by_the_fallback(
    upstream: tuple[FakeUpstream, RunningServer], spare: ScriptedBackend
) -> None:
    with _gateway(upstream[1], spare) as gateway:
        refused = chat(gateway, "down-model")
        assert refused.status_code == 503 and "unreachable" in refused.json()["error"]
        served = chat(gateway, "guarded")
        assert served.status_code == 200
        assert served.json()["message"]["content"] == "from the spare"
        assert served.headers["x-llmbridge-fallback"] == "spare/spare-model"
        metrics = httpx.get(f"{gateway.url}/metrics").text
        assert 'llmbridge_fallbacks_total{backend="spare"} 1.0' in metrics


def test_a_backend_that_never_answers_times_out_and_falls_back(
    upstream: tuple[FakeUpstream, RunningServer], spare: ScriptedBackend
) -> None:
    fake, server = upstream
    fake.queue.append(Canned(chunks=[b"{}"], delay=PAST_READ_TIMEOUT_S))
    with _gateway(server, spare) as gateway:
        started = time.monotonic()
        reply = chat(gateway, "slow-guarded")
        assert reply.status_code == 200 and reply.json()["message"]["content"] == "from the spare"
        assert len(fake.bodies) == 1  # a timeout is not retried on the same backend
        # The spare answered before the slow backend would have: it was given up on.
        assert time.monotonic() - started < PAST_READ_TIMEOUT_S
        fake.queue.append(Canned(chunks=[b"{}"], delay=PAST_READ_TIMEOUT_S))
        timed_out = chat(gateway, "up-model")
        assert timed_out.status_code == 504


def test_a_slow_answer_within_the_deadline_is_fine(
    upstream: tuple[FakeUpstream, RunningServer], spare: ScriptedBackend
) -> None:
    fake, server = upstream
    reply = _ollama_reply("slowly")
    reply.delay = 0.3
    fake.queue.append(reply)
    # A read timeout well above the delay (0.3 s against 0.5 s left a 0.2 s
    # margin that a busy machine's scheduling ate).
    with _gateway(server, spare, read_s=scaled(3.0)) as gateway:
        answer = chat(gateway, "up-model")
    assert answer.status_code == 200 and answer.json()["message"]["content"] == "slowly"


@pytest.mark.parametrize("status", [500, 502, 503])
def test_a_5xx_is_retried_once_before_anything_is_sent(
    upstream: tuple[FakeUpstream, RunningServer], spare: ScriptedBackend, status: int
) -> None:
    fake, server = upstream
    fake.queue.extend([Canned(status=status, chunks=[b'{"error":"busy"}']), _ollama_reply("ok")])
    with _gateway(server, spare) as gateway:
        reply = chat(gateway, "up-model")
        assert reply.status_code == 200 and reply.json()["message"]["content"] == "ok"
        assert len(fake.bodies) == 2
        metrics = httpx.get(f"{gateway.url}/metrics").text
        assert 'llmbridge_backend_retries_total{backend="up"} 1.0' in metrics


def test_a_429_with_a_short_retry_after_is_waited_out(
    upstream: tuple[FakeUpstream, RunningServer], spare: ScriptedBackend
) -> None:
    fake, server = upstream
    busy = Canned(status=429, chunks=[b'{"error":"slow down"}'], headers={"Retry-After": "1"})
    fake.queue.extend([busy, _ollama_reply("after waiting")])
    with _gateway(server, spare) as gateway:
        started = time.monotonic()
        reply = chat(gateway, "up-model")
        waited = time.monotonic() - started
    assert reply.status_code == 200 and reply.json()["message"]["content"] == "after waiting"
    assert waited >= 0.9  # it honoured the backend's Retry-After: 1


def test_a_429_with_a_long_retry_after_is_passed_to_the_client(
    upstream: tuple[FakeUpstream, RunningServer], spare: ScriptedBackend
) -> None:
    fake, server = upstream
    busy = Canned(status=429, chunks=[b'{"error":"quota"}'], headers={"Retry-After": "120"})
    fake.queue.append(busy)
    with _gateway(server, spare) as gateway:
        reply = chat(gateway, "up-model")
        assert reply.status_code == 429 and reply.headers["retry-after"] == "120"
        assert "quota" in reply.json()["error"]
        assert len(fake.bodies) == 1


def test_a_503_without_retry_after_is_retried_then_reported(
    upstream: tuple[FakeUpstream, RunningServer], spare: ScriptedBackend
) -> None:
    fake, server = upstream
    down = Canned(status=503, chunks=[b'{"error":"overloaded"}'])
    fake.queue.extend([down, Canned(status=503, chunks=[b'{"error":"overloaded"}'])])
    with _gateway(server, spare) as gateway:
        reply = chat(gateway, "up-model")
    assert reply.status_code == 503 and "overloaded" in reply.json()["error"]
    assert "retry-after" not in reply.headers
    assert len(fake.bodies) == 2


def test_malformed_json_and_truncated_sse_are_not_retried(
    upstream: tuple[FakeUpstream, RunningServer], spare: ScriptedBackend
) -> None:
    fake, server = upstream
    fake.queue.append(Canned(chunks=[b"{not json\n"]))
    with _gateway(server, spare) as gateway:
        garbage = chat(gateway, "up-model")
        assert garbage.status_code == 502 and len(fake.bodies) == 1
    fast = HTTPSettings(connect=1.0, read=READ_TIMEOUT_S)
    oai = OpenAICompatBackend("oai", server.url, http=fast)
    fake.queue.append(
        Canned(media_type="text/event-stream", chunks=[b'data: {"id":"x","choices":[{"ind'])
    )
    with running_gateway({"oai": oai}, resilience={"retries": 2}) as gateway:
        truncated = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
        )
    assert truncated.status_code == 502 and len(fake.bodies) == 2


def test_nothing_is_retried_after_the_first_byte() -> None:
    backend = ScriptedBackend("mid")
    backend.enqueue(Script(text=["partial", " more"], fail_after=1, fail_error=BackendError("cut")))
    with (
        running_gateway({"mid": backend}, resilience={"retries": 3}) as gateway,
        httpx.stream(
            "POST", f"{gateway.url}/api/chat", json={**CHAT, "model": "m", "stream": True}
        ) as response,
    ):
        lines = [json.loads(line) for line in response.iter_lines() if line]
    assert response.status_code == 200
    assert lines[0]["message"]["content"] == "partial"
    assert "cut" in lines[-1]["error"]
    assert len(backend.requests) == 1


def test_a_client_hang_up_cancels_the_backend_mid_stream() -> None:
    # Told by events, not a clock ("within 100 ms" failed on a busy machine):
    # the reply would take four minutes, so a backend that ends before that without
    # completing was cut by the hang-up.
    backend = ScriptedBackend("slow")
    backend.enqueue(Script(text=["tick"] * 2400, chunk_delay=0.1))
    with running_gateway({"slow": backend}) as gateway:
        with httpx.stream(
            "POST", f"{gateway.url}/api/chat", json={**CHAT, "model": "m", "stream": True}
        ) as response:
            next(response.iter_lines())
        wait_until(lambda: bool(backend.cancelled or backend.completed), "the backend call ended")
    assert backend.cancelled == 1
    assert backend.completed == 0


def test_the_circuit_opens_skips_the_backend_and_probes_it_back(
    upstream: tuple[FakeUpstream, RunningServer], spare: ScriptedBackend
) -> None:
    fake, server = upstream
    # Open for a minute; "the reset time has passed" is told to the breaker by setting its
    # reset_s to 0, not by sleeping past a short one (a busy machine outlasted a
    # 0.5 s window between two requests, and the circuit half-opened too early).
    with _gateway(server, spare, retries=0, breaker_failures=2, breaker_reset_s=60) as gateway:
        breaker = gateway.server.config.app.state.gateway.models.router.breakers["up"]
        for _ in range(2):
            fake.queue.append(Canned(status=500, chunks=[b'{"error":"dead"}']))
            assert chat(gateway, "up-model").status_code == 502
        # Open: refused at once, the backend not contacted, with a Retry-After (the
        # seconds left until the reset).
        fast = chat(gateway, "up-model")
        assert fast.status_code == 503 and "circuit open" in fast.json()["error"]
        assert 1 <= int(fast.headers["retry-after"]) <= 60
        assert len(fake.bodies) == 2
        # A route with a fallback goes straight to it.
        spared = chat(gateway, "slow-guarded")
        assert spared.status_code == 200 and len(fake.bodies) == 2
        # After the reset time a failed probe keeps it open ...
        fake.healthy = False
        breaker.reset_s = 0
        assert chat(gateway, "up-model").status_code == 503 and fake.probes == 1
        assert len(fake.bodies) == 2
        # ... and a healthy one lets requests through again, closing it on success.
        fake.healthy = True
        fake.queue.append(_ollama_reply("back"))
        back = chat(gateway, "up-model")
        assert back.status_code == 200 and back.json()["message"]["content"] == "back"
        assert fake.probes == 2
        health = httpx.get(f"{gateway.url}/health").json()["backends"]["up"]
        assert health["circuit"] == "closed"


# -- the same faults under tool-call emulation ----------------------------------------
#
# A request with tools to a model without them goes through features/tool_emulation.py;
# a backend failure keeps its class through it, so retries, route fallbacks and the
# breaker act exactly as they do without tools.


def test_emulated_a_dead_primary_is_503_or_served_by_the_fallback(
    upstream: tuple[FakeUpstream, RunningServer], spare: ScriptedBackend
) -> None:
    with _gateway(upstream[1], spare) as gateway:
        refused = chat(gateway, "down-emulated", tools=TOOLS)
        assert refused.status_code == 503 and "unreachable" in refused.json()["error"]
        assert refused.headers["x-llmbridge-tools"] == "emulated"
        served = chat(gateway, "guarded-emulated", tools=TOOLS)
        assert served.status_code == 200
        assert served.json()["message"]["content"] == "from the spare"
        assert served.headers["x-llmbridge-fallback"] == "spare/spare-model"
        assert spare.requests[-1].tools  # the spare takes tools natively
        metrics = httpx.get(f"{gateway.url}/metrics").text
        assert 'llmbridge_fallbacks_total{backend="spare"} 1.0' in metrics
        assert 'llmbridge_backend_retries_total{backend="down"} 2.0' in metrics


def test_emulated_a_backend_that_never_answers_is_504_or_falls_back(
    upstream: tuple[FakeUpstream, RunningServer], spare: ScriptedBackend
) -> None:
    fake, server = upstream
    fake.queue.append(Canned(chunks=[b"{}"], delay=PAST_READ_TIMEOUT_S))
    with _gateway(server, spare) as gateway:
        reply = chat(gateway, "slow-guarded-emulated", tools=TOOLS)
        assert reply.status_code == 200 and reply.json()["message"]["content"] == "from the spare"
        assert len(fake.bodies) == 1  # not retried on the same backend, no fallback call
        fake.queue.append(Canned(chunks=[b"{}"], delay=PAST_READ_TIMEOUT_S))
        timed_out = chat(gateway, "up-emulated", tools=TOOLS)
        assert timed_out.status_code == 504
        assert len(fake.bodies) == 2


def test_emulated_a_5xx_is_retried_and_the_decision_then_served(
    upstream: tuple[FakeUpstream, RunningServer], spare: ScriptedBackend
) -> None:
    fake, server = upstream
    fake.queue.extend([Canned(status=500, chunks=[b'{"error":"busy"}']), _ollama_reply(DECISION)])
    with _gateway(server, spare) as gateway:
        reply = chat(gateway, "up-emulated", tools=TOOLS)
    assert reply.status_code == 200
    calls = reply.json()["message"]["tool_calls"]
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert len(fake.bodies) == 2
    assert b"Available tools:" in fake.bodies[1]  # the retry sent the decision prompt again


@pytest.mark.parametrize("status", [400, 401, 404])
def test_emulated_a_backend_4xx_keeps_its_status(
    upstream: tuple[FakeUpstream, RunningServer], spare: ScriptedBackend, status: int
) -> None:
    fake, server = upstream
    fake.queue.append(Canned(status=status, chunks=[b'{"error":"no such thing"}']))
    with _gateway(server, spare) as gateway:
        plain = chat(gateway, "up-model")
        fake.queue.append(Canned(status=status, chunks=[b'{"error":"no such thing"}']))
        emulated = chat(gateway, "up-emulated", tools=TOOLS)
    assert emulated.status_code == plain.status_code == status
    assert emulated.json() == plain.json()
    assert len(fake.bodies) == 2  # one call each: no fallback generation, no retry


def test_emulated_failures_open_the_circuit(
    upstream: tuple[FakeUpstream, RunningServer], spare: ScriptedBackend
) -> None:
    fake, server = upstream
    with _gateway(server, spare, retries=0, breaker_failures=2, breaker_reset_s=30) as gateway:
        for _ in range(2):
            fake.queue.append(Canned(status=500, chunks=[b'{"error":"dead"}']))
            assert chat(gateway, "up-emulated", tools=TOOLS).status_code == 502
        assert len(fake.bodies) == 2  # one model call per request, not two
        fast = chat(gateway, "up-emulated", tools=TOOLS)
        assert fast.status_code == 503 and "circuit open" in fast.json()["error"]
        spared = chat(gateway, "slow-guarded-emulated", tools=TOOLS)
        assert spared.status_code == 200 and len(fake.bodies) == 2

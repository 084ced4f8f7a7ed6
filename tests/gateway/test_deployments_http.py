"""Several servers behind one model, over HTTP: the gateway in front of two
OpenAI-compatible servers on loopback, called by the official clients.

Each "GPU server" is another llmbridge on its own port whose scripted backend says
which server it is ("served by gpu1"), so a client's reply shows where it went.
One of them is stopped in the middle of a run: the requests it would have had
before their first byte go to the other, and none fails.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx
import pytest

from llmbridge.backends.http import HTTPSettings
from llmbridge.backends.openai_compat import OpenAICompatBackend
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.request import EmbedRequest
from llmbridge.core.response import EmbedResponse
from llmbridge.gateway.state import GatewayState
from llmbridge.serving.deployments import in_flight_key, rendezvous_order
from llmbridge.serving.models import Models
from tests.conftest import RunningServer, anthropic_client, openai_client, running_gateway
from tests.waiting import wait_until

SERVERS = ("gpu1", "gpu2")


class Server:
    """One GPU server: an llmbridge whose scripted backend names it in every reply."""

    def __init__(self, name: str, chunk_delay: float) -> None:
        words = ["served", " by", f" {name}"]
        self.name = name
        self.backend = ScriptedBackend(name, default=Script(text=words, chunk_delay=chunk_delay))
        self._running = running_gateway({name: self.backend})
        self.server = self._running.__enter__()
        self.stopped = False

    def stop(self) -> None:
        """Stop it (uvicorn's shutdown: requests under way finish, new ones are refused)."""
        if not self.stopped:
            self.stopped = True
            self._running.__exit__(None, None, None)


@contextmanager
def _cluster(
    route: dict[str, Any], chunk_delay: float = 0.0, **resilience: Any
) -> Iterator[tuple[dict[str, Server], RunningServer]]:
    """Two servers and the gateway in front of them, serving model ``m`` from both."""
    with ExitStack() as stack:
        servers = {name: Server(name, chunk_delay) for name in SERVERS}
        for server in servers.values():
            stack.callback(server.stop)
        fast = HTTPSettings(connect=2.0, read=10.0)
        backends = {
            name: OpenAICompatBackend(name, f"{s.server.url}/v1", http=fast)
            for name, s in servers.items()
        }
        settings = {"retries": 1, "backoff_ms": 10, "breaker_failures": 2, **resilience}
        front = stack.enter_context(
            running_gateway(
                backends,
                models=[{"name": "m", "backends": list(SERVERS), **route}],
                resilience=settings,
            )
        )
        yield servers, front


def _models(front: RunningServer) -> Models:
    state: GatewayState = front.server.config.app.state.gateway
    return state.models


def _in_flight(front: RunningServer) -> list[int]:
    models = _models(front)
    counts = asyncio.run(models.state.in_flight([in_flight_key(n) for n in SERVERS]))
    return [counts[in_flight_key(n)] for n in SERVERS]


def _stream(front: RunningServer) -> str:
    """One streamed chat completion through the official client: its whole text."""
    client = openai_client(front.url)
    stream = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def _server_of(text: str) -> str:
    assert text.startswith("served by "), text
    return text.removeprefix("served by ")


def test_least_busy_spreads_concurrent_streams_over_both_servers() -> None:
    with _cluster({}, chunk_delay=0.05) as (servers, front):
        with ThreadPoolExecutor(max_workers=8) as pool:
            texts = list(pool.map(lambda _: _stream(front), range(8)))
        served = Counter(_server_of(t) for t in texts)
        assert sum(served.values()) == 8 and set(served) == set(SERVERS)
        assert served == {n: len(s.backend.requests) for n, s in servers.items()}
        # A slot goes back when the gateway closes its side of the stream, which may be
        # just after the client read the last frame: waited for, not assumed.
        wait_until(lambda: _in_flight(front) == [0, 0], what="every in-flight slot back")


def test_round_robin_alternates_over_http() -> None:
    with _cluster({"strategy": "round-robin"}) as (_servers, front):
        served = [_server_of(_stream(front)) for _ in range(4)]
        assert served == ["gpu1", "gpu2", "gpu1", "gpu2"]


def test_a_server_stopped_mid_run_loses_no_request() -> None:
    with _cluster({}, chunk_delay=0.02, breaker_reset_s=60) as (servers, front):
        gpu1 = servers["gpu1"]
        stopped = threading.Event()

        def stop_when_busy() -> None:
            # Once gpu1 has taken a few requests, stop it while the run goes on.
            for _ in range(2000):
                if len(gpu1.backend.requests) >= 3:
                    break
                threading.Event().wait(0.005)
            gpu1.stop()
            stopped.set()

        stopper = threading.Thread(target=stop_when_busy)
        stopper.start()
        with ThreadPoolExecutor(max_workers=4) as pool:
            first = list(pool.map(lambda _: _stream(front), range(12)))
            stopper.join()
            assert stopped.is_set()
            after = list(pool.map(lambda _: _stream(front), range(12)))
        # Every request answered in full, by one server or the other.
        for text in first + after:
            assert _server_of(text) in SERVERS
        assert {_server_of(t) for t in after} == {"gpu2"}  # gpu1 is gone
        assert len(gpu1.backend.requests) + len(servers["gpu2"].backend.requests) == 24
        # Its circuit opened: later requests skip it without trying to connect.
        health = httpx.get(f"{front.url}/health", timeout=10).json()
        assert health["backends"]["gpu1"]["circuit"] == "open"
        assert _in_flight(front) == [0, 0]


def _sessions_on_each_server(route: dict[str, Any]) -> dict[str, str]:
    """A session key that rendezvous hashing gives to each server."""
    deployments = _route_deployments(route)
    found: dict[str, str] = {}
    for number in range(100):
        key = f"session-{number}"
        found.setdefault(SERVERS[rendezvous_order(key, deployments)[0]], key)
        if len(found) == len(SERVERS):
            return found
    raise AssertionError("no session key for every server among 100")


def _route_deployments(route: dict[str, Any]) -> Any:
    from llmbridge.serving.config import ModelRoute

    return ModelRoute.model_validate({"name": "m", "backends": list(SERVERS), **route}).deployments


AFFINITY = {"strategy": "round-robin", "affinity": True, "affinity_header": "x-session-id"}


def test_a_claude_code_session_stays_on_one_server() -> None:
    sessions = _sessions_on_each_server(AFFINITY)
    with _cluster(AFFINITY) as (_servers, front):
        client = anthropic_client(front.url)
        for server, session in sessions.items():
            # Claude Code 2.1's metadata.user_id: a JSON object with its session id.
            user_id = json.dumps({"device_id": "d" * 64, "account_uuid": "", "session_id": session})
            for _ in range(3):  # round robin alone would alternate
                message = client.messages.create(
                    model="m",
                    max_tokens=32,
                    messages=[{"role": "user", "content": "hi"}],
                    metadata={"user_id": user_id},
                )
                assert message.content[0].text == f"served by {server}"


def test_openai_prompt_cache_key_and_the_header_keep_a_session_on_one_server() -> None:
    sessions = _sessions_on_each_server(AFFINITY)
    with _cluster(AFFINITY) as (_servers, front):
        client = openai_client(front.url)
        for server, session in sessions.items():
            for _ in range(2):
                chat = client.chat.completions.create(
                    model="m",
                    messages=[{"role": "user", "content": "hi"}],
                    prompt_cache_key=session,
                )
                assert chat.choices[0].message.content == f"served by {server}"
                # Codex sends its conversation id as the Responses prompt_cache_key.
                response = client.responses.create(model="m", input="hi", prompt_cache_key=session)
                assert response.output_text == f"served by {server}"
                # The configured header wins over the body's key.
                other = next(k for s, k in sessions.items() if s != server)
                headed = client.chat.completions.create(
                    model="m",
                    messages=[{"role": "user", "content": "hi"}],
                    prompt_cache_key=other,
                    extra_headers={"x-session-id": session},
                )
                assert headed.choices[0].message.content == f"served by {server}"


@pytest.mark.parametrize("strategy", ["least-busy", "round-robin", "latency"])
def test_without_a_session_key_each_strategy_uses_both_servers(strategy: str) -> None:
    with _cluster({"strategy": strategy, "affinity": True}) as (_servers, front):
        served = {_server_of(_stream(front)) for _ in range(6)}
        assert served == set(SERVERS)


class Embedder(ScriptedBackend):
    """A scripted server that counts the embedding requests it answered."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.embedded = 0

    async def embed(self, request: EmbedRequest) -> EmbedResponse:
        self.embedded += 1
        return await super().embed(request)


def test_embeddings_are_spread_over_the_deployments_too() -> None:
    backends = {name: Embedder(name) for name in SERVERS}
    route = {"name": "m", "backends": list(SERVERS), "strategy": "round-robin"}
    with running_gateway(dict(backends), models=[route]) as front:
        client = openai_client(front.url)
        for _ in range(4):
            reply = client.embeddings.create(model="m", input=["one", "two"])
            assert len(reply.data) == 2
    assert [b.embedded for b in backends.values()] == [2, 2]

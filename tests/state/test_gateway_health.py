"""The gateway over shared state: ``/health`` reports it, and a Redis that goes away
mid-run degrades the gateway without failing a request (state/failover.py), against
a real ``redis-server`` and the official OpenAI client."""

from __future__ import annotations

from typing import Any

import httpx

from llmbridge.backends.scripted import ScriptedBackend
from tests.conftest import openai_client, running_gateway
from tests.servers import RedisServer
from tests.waiting import value_until


def _health_until(url: str, degraded: bool, within_s: float = 15.0) -> dict[str, Any]:
    """``/health`` once its state says ``degraded`` (a bound on a hang, not a timing)."""

    def matching() -> dict[str, Any] | None:
        body: dict[str, Any] = httpx.get(url + "/health").json()
        return body if body["state"]["degraded"] is degraded else None

    return value_until(matching, f"/health saying degraded={degraded}", within_s)


def _ask(url: str) -> str:
    reply = openai_client(url).chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "hi"}]
    )
    return str(reply.choices[0].message.content)


def test_health_shows_the_local_state_by_default() -> None:
    with running_gateway({"scripted": ScriptedBackend()}) as gateway:
        body = httpx.get(gateway.url + "/health").json()
    assert body["state"] == {"kind": "local", "degraded": False}
    assert body["status"] == "up"


def test_health_is_degraded_while_redis_is_down(redis_server: RedisServer, redis_url: str) -> None:
    backend = ScriptedBackend()
    with running_gateway({"scripted": backend}, state={"redis_url": redis_url}) as gateway:
        body = httpx.get(gateway.url + "/health").json()
        assert body["state"] == {"kind": "redis", "degraded": False}
        assert body["status"] == "up"
        assert _ask(gateway.url)

        redis_server.stop()
        try:
            down = _health_until(gateway.url, degraded=True)
            assert down["state"] == {"kind": "redis", "degraded": True}
            assert down["status"] == "degraded"  # still answering: 200, not 503
            assert httpx.get(gateway.url + "/health").status_code == 200
            assert _ask(gateway.url)  # no request fails because Redis did
        finally:
            redis_server.start()
        back = _health_until(gateway.url, degraded=False)
        assert back["state"] == {"kind": "redis", "degraded": False}
        assert back["status"] == "up"
        assert _ask(gateway.url)
    assert len(backend.requests) == 3

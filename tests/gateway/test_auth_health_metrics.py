"""API keys, /health and /metrics, and cancelling the backend when a client leaves."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import ollama
import openai
import pytest

from llmbridge.backends.http import HTTPSettings
from llmbridge.backends.ollama import OllamaBackend
from llmbridge.backends.scripted import Script, ScriptedBackend
from tests.conftest import (
    RunningServer,
    anthropic_client,
    ollama_client,
    openai_client,
    running_gateway,
)
from tests.waiting import wait_until

KEY = "sk-test-key"


@pytest.fixture(scope="module")
def secured(scripted: ScriptedBackend) -> Iterator[RunningServer]:
    with running_gateway({"scripted": scripted}, server={"api_keys": [KEY]}) as server:
        yield server


def test_requests_without_a_key_are_refused_in_each_dialect(secured: RunningServer) -> None:
    with pytest.raises(ollama.ResponseError) as o_err:
        ollama_client(secured.url).list()
    assert o_err.value.status_code == 401
    with pytest.raises(openai.AuthenticationError):
        openai_client(secured.url, "wrong").models.list()
    with pytest.raises(anthropic.AuthenticationError) as a_err:
        anthropic_client(secured.url, "wrong").messages.create(
            model="m", max_tokens=4, messages=[{"role": "user", "content": "x"}]
        )
    assert a_err.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]


def test_keys_are_accepted_as_bearer_or_x_api_key(secured: RunningServer) -> None:
    models = openai_client(secured.url, KEY).models.list()
    assert any(m.id == "scripted" for m in models)
    reply = anthropic_client(secured.url, KEY).messages.create(
        model="m", max_tokens=4, messages=[{"role": "user", "content": "x"}]
    )
    assert reply.content
    headers = {"Authorization": f"Bearer {KEY}"}
    assert ollama_client(secured.url, headers=headers).list().models


def test_probes_stay_open(secured: RunningServer) -> None:
    assert httpx.get(secured.url + "/").status_code == 200
    assert httpx.get(secured.url + "/health").status_code == 200
    assert httpx.get(secured.url + "/metrics").status_code == 401


def test_health_reports_each_backend(scripted: ScriptedBackend) -> None:
    dead = OllamaBackend("dead", "http://127.0.0.1:9", http=HTTPSettings(connect=0.5))
    with running_gateway({"scripted": scripted, "dead": dead}) as server:
        body = httpx.get(server.url + "/health").json()
    assert body["status"] == "degraded"
    assert body["backends"]["scripted"]["ok"] is True
    assert body["backends"]["dead"]["ok"] is False
    assert body["backends"]["dead"]["detail"]


def test_metrics_count_requests_tokens_and_errors(gateway: RunningServer) -> None:
    client = openai_client(gateway.url, "x")
    client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "x"}])
    httpx.post(gateway.url + "/api/chat", content=b"{bad")
    text = httpx.get(gateway.url + "/metrics").text
    assert 'llmbridge_requests_total{backend="scripted",endpoint="/v1/chat/completions"' in text
    assert 'llmbridge_tokens_total{backend="scripted",direction="output",model="scripted"}' in text
    assert "llmbridge_request_duration_seconds_bucket" in text
    assert "llmbridge_in_flight_requests" in text


def test_client_disconnect_cancels_the_backend(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    before = scripted.cancelled
    scripted.enqueue(Script(text=[f"t{i} " for i in range(200)], chunk_delay=0.05))
    with httpx.stream(
        "POST",
        gateway.url + "/v1/chat/completions",
        json={"model": "scripted", "stream": True, "messages": [{"role": "user", "content": "x"}]},
    ) as response:
        for line in response.iter_lines():
            if "t1" in line:
                break  # leave after a couple of chunks; closing the stream disconnects
    # The disconnect reaches the backend when the gateway's loop next runs (an event;
    # the bound in tests/waiting.py only stops a hang).
    wait_until(lambda: scripted.cancelled != before, "the backend call was cancelled")
    assert scripted.cancelled == before + 1

"""A request's records (its ledger row, metrics and span) are written after its response
is sent, so the client never waits on them (gateway/exchange/handler.py,
web/after_response.py); the key's slot and spend are settled before it, so the key's
next request sees them; and the records still say what they said before.

Each case is served by a real gateway on loopback to the official client; what the app
hands the server is logged beside each ``Exchange.write_records``, in order. The
request counter read over HTTP afterwards already holds the request: the server's event
loop runs what a request left before it reads the next one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.gateway.app import create_app, http_protocol
from llmbridge.gateway.config import GatewayConfig
from llmbridge.gateway.exchange.exchange import Exchange
from tests.conftest import RunningServer, openai_client
from tests.waiting import wait_until

ASK = [{"role": "user", "content": "hello"}]
LOG: list[str] = []
_LOCK = threading.Lock()


def _log(line: str) -> None:
    with _LOCK:
        LOG.append(line)


def _sends_logged(app: ASGIApp) -> ASGIApp:
    """``app``, with the last body message of each chat response logged as it goes to
    the server."""

    async def logged(scope: Scope, receive: Receive, send: Send) -> None:
        chat = scope["type"] == "http" and scope["path"].endswith("/chat/completions")

        async def sending(message: Any) -> None:
            if chat and message["type"] == "http.response.body" and not message.get("more_body"):
                _log("last byte sent")
            await send(message)

        await app(scope, receive, sending)

    return logged


@pytest.fixture(scope="module")
def scripted() -> ScriptedBackend:
    return ScriptedBackend("scripted", models=("scripted",))


@pytest.fixture(scope="module")
def gateway(scripted: ScriptedBackend) -> Iterator[RunningServer]:
    config = GatewayConfig.model_validate(
        {"backends": {"scripted": {"type": "scripted"}}, "default_backend": "scripted"}
    )
    app = create_app(config, backends={"scripted": scripted})
    with RunningServer(_sends_logged(app), http=http_protocol(app)) as server:
        yield server


@pytest.fixture(autouse=True)
def _records_logged(monkeypatch: pytest.MonkeyPatch, scripted: ScriptedBackend) -> None:
    written = Exchange.write_records

    def logged(self: Exchange) -> None:
        if self.endpoint.endswith("/chat/completions"):
            _log(f"records {self.status}")
        written(self)

    monkeypatch.setattr(Exchange, "write_records", logged)
    scripted.queue.clear()
    LOG.clear()


def _logged() -> list[str]:
    """The log once the request's records are in it: the client may have its reply
    before the server's thread has run what it left for after the response."""
    wait_until(lambda: any(line.startswith("records") for line in LOG), "the records written")
    with _LOCK:
        return list(LOG)


def _requests_counted(url: str, status: str) -> float:
    metrics = httpx.get(f"{url}/metrics", timeout=30).text
    total = 0.0
    for line in metrics.splitlines():
        counted = line.startswith("llmbridge_requests_total{") and f'status="{status}"' in line
        if counted and 'endpoint="/v1/chat/completions"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_reply_sent_whole_is_recorded_after_its_last_byte(gateway: RunningServer) -> None:
    before = _requests_counted(gateway.url, "200")
    reply = openai_client(gateway.url).chat.completions.create(model="scripted", messages=ASK)
    assert reply.choices[0].message.content == "Hello from llmbridge."
    assert _logged() == ["last byte sent", "records 200"]
    assert _requests_counted(gateway.url, "200") == before + 1


def test_a_refusal_is_recorded_after_its_last_byte(gateway: RunningServer) -> None:
    before = _requests_counted(gateway.url, "400")
    with pytest.raises(openai.BadRequestError):
        openai_client(gateway.url).chat.completions.create(
            model="scripted", messages=ASK, temperature=9
        )
    assert _logged() == ["last byte sent", "records 400"]
    assert _requests_counted(gateway.url, "400") == before + 1


def test_a_stream_is_recorded_after_its_last_byte(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    scripted.queue.append(Script(text=["a", "b", "c"]))
    stream = openai_client(gateway.url).chat.completions.create(
        model="scripted", messages=ASK, stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "abc"
    assert _logged() == ["last byte sent", "records 200"]

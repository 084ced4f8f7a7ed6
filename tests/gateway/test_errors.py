"""Bad input and broken backends: each gets a clear error in the caller's dialect.

Covers malformed JSON, wrong types, missing fields, unknown models, oversized
bodies, unreachable / slow / failing / garbage-talking backends, and failures in
the middle of a stream. No response body may ever contain a traceback.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx
import ollama
import openai
import orjson
import pytest

from llmbridge.backends.http import HTTPSettings
from llmbridge.backends.ollama import OllamaBackend
from llmbridge.backends.openai_compat import OpenAICompatBackend
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.errors import BackendError
from tests.conftest import (
    RunningServer,
    anthropic_client,
    ollama_client,
    openai_client,
    running_gateway,
)
from tests.upstream import PAST_READ_TIMEOUT_S, READ_TIMEOUT_S, Canned, FakeUpstream

LIMIT = 64 * 1024

# (path, a minimal valid body for model M) per dialect
DIALECTS: dict[str, tuple[str, Callable[[str], dict[str, Any]]]] = {
    "ollama": (
        "/api/chat",
        lambda m: {"model": m, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "openai": (
        "/v1/chat/completions",
        lambda m: {"model": m, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "anthropic": (
        "/v1/messages",
        lambda m: {"model": m, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
    ),
}


def assert_dialect_error(dialect: str, response: httpx.Response, status: int) -> str:
    """The body has the dialect's error shape; returns the message."""
    assert response.status_code == status, response.text
    assert "Traceback" not in response.text
    body = response.json()
    if dialect == "ollama":
        assert set(body) == {"error"} and isinstance(body["error"], str)
        return str(body["error"])
    if dialect == "openai":
        assert set(body["error"]) >= {"message", "type", "param", "code"}
        return str(body["error"]["message"])
    assert body["type"] == "error"
    assert set(body["error"]) == {"type", "message"}
    assert body["request_id"].startswith("req_")
    assert response.headers["request-id"] == body["request_id"]
    return str(body["error"]["message"])


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[FakeUpstream, RunningServer]]:
    fake = FakeUpstream()
    with RunningServer(fake.app) as server:
        yield fake, server


@pytest.fixture(scope="module")
def gateway(  # type: ignore[override]
    scripted: ScriptedBackend, upstream: tuple[FakeUpstream, RunningServer]
) -> Iterator[RunningServer]:
    _, up = upstream
    fast = HTTPSettings(connect=1.0, read=READ_TIMEOUT_S)
    backends = {
        "scripted": scripted,
        "down": OllamaBackend("down", f"http://127.0.0.1:{_closed_port()}", http=fast),
        "up": OllamaBackend("up", up.url, http=fast),
        "upoai": OpenAICompatBackend("upoai", up.url, http=fast),
    }
    models = [
        {"name": "scripted", "backend": "scripted"},
        {"name": "down-model", "backend": "down"},
        {"name": "up-*", "backend": "up"},
        {"name": "oai-*", "backend": "upoai"},
    ]
    with running_gateway(
        backends,
        models=models,
        restrict_models=True,
        server={"max_body_bytes": LIMIT},
        # These tests pin down how each failure is reported; retries and the circuit
        # breaker (tests/gateway/test_resilience.py) would turn repeated ones into others.
        resilience={"retries": 0, "breaker_failures": 0},
    ) as server:
        yield server


def post(
    gateway: RunningServer, path: str, content: bytes | None = None, **kw: Any
) -> httpx.Response:
    return httpx.post(gateway.url + path, content=content, timeout=10, **kw)


@pytest.mark.parametrize("dialect", DIALECTS)
class TestBadInput:
    def test_malformed_json(self, gateway: RunningServer, dialect: str) -> None:
        path, _ = DIALECTS[dialect]
        message = assert_dialect_error(dialect, post(gateway, path, b'{"model": '), 400)
        assert "JSON" in message

    def test_empty_body(self, gateway: RunningServer, dialect: str) -> None:
        path, _ = DIALECTS[dialect]
        assert_dialect_error(dialect, post(gateway, path, b""), 400)

    def test_not_an_object(self, gateway: RunningServer, dialect: str) -> None:
        path, _ = DIALECTS[dialect]
        assert_dialect_error(dialect, post(gateway, path, b"[1, 2]"), 400)

    def test_wrong_types(self, gateway: RunningServer, dialect: str) -> None:
        path, body = DIALECTS[dialect]
        bad = body("scripted") | {"messages": "hello"}
        message = assert_dialect_error(dialect, post(gateway, path, orjson.dumps(bad)), 400)
        assert "messages" in message

    def test_missing_model(self, gateway: RunningServer, dialect: str) -> None:
        path, body = DIALECTS[dialect]
        bad = body("scripted")
        del bad["model"]
        message = assert_dialect_error(dialect, post(gateway, path, orjson.dumps(bad)), 400)
        assert "model" in message

    def test_unknown_model(self, gateway: RunningServer, dialect: str) -> None:
        path, body = DIALECTS[dialect]
        response = post(gateway, path, orjson.dumps(body("no-such-model")))
        assert "no-such-model" in assert_dialect_error(dialect, response, 404)

    def test_body_over_limit(self, gateway: RunningServer, dialect: str) -> None:
        path, body = DIALECTS[dialect]
        big = body("scripted")
        big["messages"][0]["content"] = "x" * (LIMIT + 10)
        assert_dialect_error(dialect, post(gateway, path, orjson.dumps(big)), 413)

    def test_chunked_body_over_limit(self, gateway: RunningServer, dialect: str) -> None:
        path, _ = DIALECTS[dialect]

        def chunks() -> Iterator[bytes]:
            yield b'{"model": "scripted", "x": "'
            for _ in range(LIMIT // 1024 + 2):
                yield b"y" * 1024
            yield b'"}'

        assert_dialect_error(dialect, post(gateway, path, chunks()), 413)  # type: ignore[arg-type]

    def test_unreachable_backend(self, gateway: RunningServer, dialect: str) -> None:
        path, body = DIALECTS[dialect]
        response = post(gateway, path, orjson.dumps(body("down-model")))
        assert "unreachable" in assert_dialect_error(dialect, response, 503)

    def test_backend_timeout(
        self, gateway: RunningServer, upstream: tuple[FakeUpstream, RunningServer], dialect: str
    ) -> None:
        fake, _ = upstream
        fake.queue.append(Canned(chunks=[b"{}\n"], delay=PAST_READ_TIMEOUT_S))
        path, body = DIALECTS[dialect]
        response = post(gateway, path, orjson.dumps(body("up-slow")))
        assert_dialect_error(dialect, response, 504)

    @pytest.mark.parametrize(
        ("status", "expected"), [(500, 502), (404, 404), (429, 429), (503, 503)]
    )
    def test_backend_http_error(
        self,
        gateway: RunningServer,
        upstream: tuple[FakeUpstream, RunningServer],
        dialect: str,
        status: int,
        expected: int,
    ) -> None:
        fake, _ = upstream
        fake.queue.append(
            Canned(
                status=status,
                chunks=[b'{"error":"upstream says no"}'],
                media_type="application/json",
            )
        )
        path, body = DIALECTS[dialect]
        response = post(gateway, path, orjson.dumps(body("up-x")))
        assert "upstream says no" in assert_dialect_error(dialect, response, expected)

    def test_malformed_backend_output(
        self, gateway: RunningServer, upstream: tuple[FakeUpstream, RunningServer], dialect: str
    ) -> None:
        fake, _ = upstream
        fake.queue.append(Canned(chunks=[b"this is not json\n"]))
        path, body = DIALECTS[dialect]
        response = post(gateway, path, orjson.dumps(body("up-x")))
        assert_dialect_error(dialect, response, 502)

    def test_malformed_openai_backend_output(
        self, gateway: RunningServer, upstream: tuple[FakeUpstream, RunningServer], dialect: str
    ) -> None:
        fake, _ = upstream
        fake.queue.append(Canned(chunks=[b"data: {not json\n\n"], media_type="text/event-stream"))
        path, body = DIALECTS[dialect]
        response = post(gateway, path, orjson.dumps(body("oai-x")))
        assert_dialect_error(dialect, response, 502)

    def test_unknown_route_and_method(self, gateway: RunningServer, dialect: str) -> None:
        path, _ = DIALECTS[dialect]
        prefix = {"ollama": "/api/nope", "openai": "/v1/nope", "anthropic": "/v1/messages/nope"}
        assert_dialect_error(dialect, post(gateway, prefix[dialect], b"{}"), 404)
        assert_dialect_error(dialect, httpx.get(gateway.url + path), 405)


def _stream_lines(gateway: RunningServer, path: str, body: dict[str, Any]) -> list[str]:
    with httpx.stream("POST", gateway.url + path, json=body | {"stream": True}, timeout=10) as r:
        assert r.status_code == 200
        return list(r.iter_lines())


def test_mid_stream_failure_ollama(gateway: RunningServer, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["a", "b", "c"], fail_after=2, fail_error=BackendError("boom")))
    lines = [
        orjson.loads(x)
        for x in _stream_lines(gateway, "/api/chat", DIALECTS["ollama"][1]("scripted"))
        if x
    ]
    assert lines[0]["message"]["content"] == "a"
    # Seed 000's error frame: the message says it, and `error` and `done` end the stream.
    assert lines[-1] == {
        "model": "scripted",
        "created_at": lines[0]["created_at"],
        "message": {"role": "assistant", "content": "Error: boom"},
        "done": True,
        "done_reason": "error",
        "error": "boom",
    }


def test_mid_stream_failure_openai(gateway: RunningServer, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["a", "b", "c"], fail_after=2, fail_error=BackendError("boom")))
    lines = [
        x
        for x in _stream_lines(gateway, "/v1/chat/completions", DIALECTS["openai"][1]("scripted"))
        if x
    ]
    assert lines[-1] == "data: [DONE]"
    error = orjson.loads(lines[-2].removeprefix("data: "))
    assert error["error"]["message"] == "boom"


def test_mid_stream_failure_anthropic(gateway: RunningServer, scripted: ScriptedBackend) -> None:
    scripted.enqueue(
        Script(text=["a", "b", "c"], fail_after=2, in_band=True, fail_error=BackendError("boom"))
    )
    lines = [
        x for x in _stream_lines(gateway, "/v1/messages", DIALECTS["anthropic"][1]("scripted")) if x
    ]
    assert lines[-2] == "event: error"
    error = orjson.loads(lines[-1].removeprefix("data: "))
    assert error["type"] == "error" and error["error"]["message"] == "boom"


def test_mid_stream_failure_reaches_official_clients(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    failing = Script(text=["a", "b"], fail_after=1, fail_error=BackendError("boom"))
    scripted.enqueue(failing)
    with pytest.raises(ollama.ResponseError, match="boom"):
        list(
            ollama_client(gateway.url).chat(
                model="scripted", messages=[{"role": "user", "content": "x"}], stream=True
            )
        )
    scripted.enqueue(failing)
    oai = openai_client(gateway.url, "x")
    with pytest.raises(openai.APIError, match="boom"):
        list(
            oai.chat.completions.create(
                model="scripted", messages=[{"role": "user", "content": "x"}], stream=True
            )
        )
    scripted.enqueue(failing)
    ant = anthropic_client(gateway.url, "x")
    with (
        pytest.raises(anthropic.APIError, match="boom"),
        ant.messages.stream(
            model="scripted", max_tokens=8, messages=[{"role": "user", "content": "x"}]
        ) as stream,
    ):
        list(stream.text_stream)


def test_failure_before_first_event_is_an_http_error(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    scripted.enqueue(Script(fail_before=BackendError("cannot start")))
    with pytest.raises(openai.APIStatusError) as info:
        openai_client(gateway.url, "x").chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": "x"}], stream=True
        )
    assert info.value.status_code == 502


def test_non_streaming_mid_failure_is_an_http_error(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    scripted.enqueue(Script(text=["a", "b"], fail_after=1, fail_error=BackendError("boom")))
    response = post(gateway, "/v1/messages", orjson.dumps(DIALECTS["anthropic"][1]("scripted")))
    assert "boom" in assert_dialect_error("anthropic", response, 502)


def test_unknown_model_through_official_clients(gateway: RunningServer) -> None:
    with pytest.raises(ollama.ResponseError) as o_err:
        ollama_client(gateway.url).chat(model="nope", messages=[{"role": "user", "content": "x"}])
    assert o_err.value.status_code == 404
    with pytest.raises(openai.NotFoundError):
        openai_client(gateway.url, "x").chat.completions.create(
            model="nope", messages=[{"role": "user", "content": "x"}]
        )
    with pytest.raises(anthropic.NotFoundError):
        anthropic_client(gateway.url, "x").messages.create(
            model="nope", max_tokens=8, messages=[{"role": "user", "content": "x"}]
        )


# Every other route that takes a body: (dialect, path, a valid body for model M).
OTHER_ROUTES: list[tuple[str, str, Callable[[str], dict[str, Any]]]] = [
    ("ollama", "/api/generate", lambda m: {"model": m, "prompt": "hi"}),
    ("ollama", "/api/embed", lambda m: {"model": m, "input": "hi"}),
    ("ollama", "/api/show", lambda m: {"model": m}),
    ("openai", "/v1/embeddings", lambda m: {"model": m, "input": "hi"}),
    ("openai", "/v1/completions", lambda m: {"model": m, "prompt": "hi"}),
    (
        "anthropic",
        "/v1/messages/count_tokens",
        lambda m: {"model": m, "messages": [{"role": "user", "content": "hi"}]},
    ),
]


@pytest.mark.parametrize(
    ("dialect", "path", "body"), OTHER_ROUTES, ids=[r[1] for r in OTHER_ROUTES]
)
def test_every_route_rejects_bad_input_in_its_dialect(
    gateway: RunningServer, dialect: str, path: str, body: Callable[[str], dict[str, Any]]
) -> None:
    assert_dialect_error(dialect, post(gateway, path, b"{nope"), 400)
    assert_dialect_error(dialect, post(gateway, path, b'"a string"'), 400)
    assert_dialect_error(dialect, post(gateway, path, orjson.dumps(body("no-such-model"))), 404)
    big = body("scripted") | {"padding": "x" * (LIMIT + 1)}
    assert_dialect_error(dialect, post(gateway, path, orjson.dumps(big)), 413)
    assert post(gateway, path, orjson.dumps(body("scripted"))).status_code == 200


def test_unknown_model_id_on_the_models_route(gateway: RunningServer) -> None:
    response = httpx.get(gateway.url + "/v1/models/no-such-model")
    assert_dialect_error("openai", response, 404)


def test_embeddings_on_a_backend_that_cannot_embed(
    gateway: RunningServer, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    # The upstream answers /api/embed with 404 (route unknown): a clear backend error.
    response = post(gateway, "/api/embed", orjson.dumps({"model": "up-x", "input": "hi"}))
    assert_dialect_error("ollama", response, 404)

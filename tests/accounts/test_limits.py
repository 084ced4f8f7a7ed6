"""Per-key limits (accounts/limits.py, gateway/exchange/admission.py) through the official clients
of every dialect, on a real gateway with keys in its database: a key with ``rpm`` 3 gets
exactly 3 of 6 requests and then the dialect's 429 with ``Retry-After`` and the
rate-limit headers; ``max_parallel``; tokens per minute; a model outside the key's globs
is the dialect's 403; an exhausted budget a 403 saying so; a revoked key a 401."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.response import Usage
from llmbridge.web.render import Dialect
from tests.conftest import (
    RunningServer,
    anthropic_client,
    create_key,
    ollama_client,
    openai_client,
    running_gateway,
)
from tests.fuzz.shapes import assert_error_shape

MASTER = "sk-master-limits"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("limits") / "gateway.db"


@pytest.fixture(scope="module")
def gateway(scripted: ScriptedBackend, database: Path) -> Iterator[RunningServer]:
    with running_gateway(
        {"scripted": scripted},
        server={"master_key": MASTER},
        agent={"database": str(database)},
    ) as server:
        yield server


def new_key(gateway: RunningServer, name: str, **limits: Any) -> str:
    return create_key(gateway.url, MASTER, name, **limits)


def _google(url: str, key: str) -> genai.Client:
    return genai.Client(api_key=key, http_options=genai_types.HttpOptions(base_url=url))


# -- one request in each dialect, returning the reply's headers or raising ------------


def _openai(url: str, key: str, model: str = "scripted") -> httpx.Headers:
    raw = openai_client(url, key).chat.completions.with_raw_response.create(
        model=model, messages=HI
    )
    assert raw.parse().choices[0].message.content
    return raw.headers


def _anthropic(url: str, key: str, model: str = "scripted") -> httpx.Headers:
    raw = anthropic_client(url, key).messages.with_raw_response.create(
        model=model, max_tokens=16, messages=HI
    )
    assert raw.parse().content
    return raw.headers


def _ollama(url: str, key: str, model: str = "scripted") -> httpx.Headers:
    seen: list[httpx.Headers] = []
    client = ollama_client(
        url,
        headers={"Authorization": f"Bearer {key}"},
        event_hooks={"response": [lambda r: seen.append(r.headers)]},
    )
    try:
        assert client.chat(model=model, messages=HI).message.content
    except ollama.ResponseError as exc:
        exc.headers = seen[-1]  # type: ignore[attr-defined]
        raise
    return seen[-1]


def _gemini(url: str, key: str, model: str = "scripted") -> httpx.Headers:
    client = _google(url, key)
    try:
        reply = client.models.generate_content(model=model, contents="hi")
        assert reply.text
        assert reply.sdk_http_response is not None and reply.sdk_http_response.headers
        return httpx.Headers(reply.sdk_http_response.headers)
    finally:
        client.close()


Call = Callable[..., httpx.Headers]

DIALECTS: list[tuple[Dialect, Call, type[Exception]]] = [
    (Dialect.OPENAI, _openai, openai.APIStatusError),
    (Dialect.ANTHROPIC, _anthropic, anthropic.APIStatusError),
    (Dialect.OLLAMA, _ollama, ollama.ResponseError),
    (Dialect.GEMINI, _gemini, genai_errors.APIError),
]


def _refusal(exc: Exception) -> tuple[int, httpx.Headers, bytes]:
    """The status, headers and body of a refusal, however the client reports it."""
    if isinstance(exc, openai.APIStatusError | anthropic.APIStatusError):
        return exc.status_code, exc.response.headers, exc.response.content
    if isinstance(exc, ollama.ResponseError):
        import orjson

        headers: httpx.Headers = exc.headers  # type: ignore[attr-defined]
        return exc.status_code, headers, orjson.dumps({"error": exc.error})
    assert isinstance(exc, genai_errors.APIError) and exc.response is not None
    # The SDK's own httpx-like response (the error body is read already).
    response: Any = exc.response
    return exc.code, httpx.Headers(dict(response.headers)), response.content


def _attempt(call: Call, error: type[Exception], *args: Any) -> tuple[int, httpx.Headers, bytes]:
    try:
        return 200, call(*args), b""
    except error as exc:
        return _refusal(exc)


@pytest.mark.parametrize(
    ("dialect", "call", "error"), DIALECTS, ids=[str(d) for d, _, _ in DIALECTS]
)
def test_rpm_3_lets_exactly_3_of_6_through(
    gateway: RunningServer, dialect: Dialect, call: Call, error: type[Exception]
) -> None:
    key = new_key(gateway, f"rpm-{dialect}", rpm=3)
    results = [_attempt(call, error, gateway.url, key) for _ in range(6)]
    assert [status for status, _, _ in results] == [200, 200, 200, 429, 429, 429]
    anthropic_style = dialect is Dialect.ANTHROPIC
    for sent, (_, headers, _) in enumerate(results[:3], start=1):
        if anthropic_style:
            assert headers["anthropic-ratelimit-requests-limit"] == "3"
            assert headers["anthropic-ratelimit-requests-remaining"] == str(3 - sent)
        else:
            assert headers["x-ratelimit-limit-requests"] == "3"
            assert headers["x-ratelimit-remaining-requests"] == str(3 - sent)
    for status, headers, body in results[3:]:
        message = assert_error_shape(dialect, status, body)
        assert "3 requests per minute" in message
        assert 1 <= int(headers["retry-after"]) <= 60
        if anthropic_style:
            assert headers["anthropic-ratelimit-requests-remaining"] == "0"
            reset = datetime.fromisoformat(headers["anthropic-ratelimit-requests-reset"])
            assert reset > datetime.now(UTC)
        else:
            assert headers["x-ratelimit-remaining-requests"] == "0"
            assert headers["x-ratelimit-reset-requests"].endswith("s")


@pytest.mark.parametrize(
    ("dialect", "call", "error"), DIALECTS, ids=[str(d) for d, _, _ in DIALECTS]
)
def test_a_model_outside_the_globs_is_forbidden(
    gateway: RunningServer, dialect: Dialect, call: Call, error: type[Exception]
) -> None:
    key = new_key(gateway, f"models-{dialect}", models=["scr*"])
    assert _attempt(call, error, gateway.url, key, "scripted")[0] == 200
    status, _, body = _attempt(call, error, gateway.url, key, "other")
    assert status == 403
    assert "'other'" in assert_error_shape(dialect, 403, body)


def test_model_lists_embeddings_and_token_counts_follow_the_key(gateway: RunningServer) -> None:
    listing = new_key(gateway, "lists", models=["scr*"])
    assert {m.id for m in openai_client(gateway.url, new_key(gateway, "all")).models.list()} == {
        "scripted",
        "other",
    }
    assert [m.id for m in openai_client(gateway.url, listing).models.list()] == ["scripted"]
    tags = ollama_client(gateway.url, headers={"Authorization": f"Bearer {listing}"}).list()
    assert [m.model for m in tags.models] == ["scripted"]
    google = _google(gateway.url, listing)
    try:
        assert [m.name for m in google.models.list()] == ["models/scripted"]
    finally:
        google.close()

    key = new_key(gateway, "embed-only", models=["scripted"], rpm=1)
    client = openai_client(gateway.url, key)
    assert client.embeddings.create(model="scripted", input="a").data
    with pytest.raises(openai.RateLimitError) as caught:
        client.embeddings.create(model="scripted", input="a")
    assert caught.value.response.headers["retry-after"]
    other = openai_client(gateway.url, new_key(gateway, "embed-other", models=["scripted"]))
    with pytest.raises(openai.PermissionDeniedError):
        other.embeddings.create(model="other", input="a")
    with pytest.raises(anthropic.PermissionDeniedError):
        anthropic_client(
            gateway.url, new_key(gateway, "count", models=["x"])
        ).messages.count_tokens(model="scripted", messages=HI)


def test_max_parallel(gateway: RunningServer, scripted: ScriptedBackend) -> None:
    key = new_key(gateway, "parallel", max_parallel=1)
    # The first reply streams slowly: its slot is held until it ends.
    scripted.enqueue(Script(text=["a", "b", "c", "d"], chunk_delay=0.3))
    client = openai_client(gateway.url, key)
    first_chunk = threading.Event()
    chunks: list[str] = []

    def stream() -> None:
        for chunk in client.chat.completions.create(model="scripted", messages=HI, stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                chunks.append(chunk.choices[0].delta.content)
                first_chunk.set()

    worker = threading.Thread(target=stream)
    worker.start()
    assert first_chunk.wait(10)
    with pytest.raises(openai.RateLimitError) as caught:
        openai_client(gateway.url, key).chat.completions.create(model="scripted", messages=HI)
    assert "max_parallel 1" in caught.value.message
    assert caught.value.response.headers["retry-after"] == "1"
    worker.join(10)
    assert "".join(chunks) == "abcd"
    # The slot is given back when the stream's response closes (bounded wait for it).
    for _ in range(100):
        try:
            _openai(gateway.url, key)
            break
        except openai.RateLimitError:
            threading.Event().wait(0.02)
    else:
        raise AssertionError("the parallel slot was never released")


def test_a_reply_sent_whole_gives_its_slot_back_before_the_client_has_it(
    gateway: RunningServer,
) -> None:
    # The records are written after the response is sent; the slot is not: a client
    # that asks again the moment it has its reply never meets its own last request.
    key = new_key(gateway, "parallel-in-turn", max_parallel=1)
    for _ in range(5):
        _openai(gateway.url, key)  # a 429 (max_parallel 1) would raise


def test_tokens_per_minute_count_the_replies_usage(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    key = new_key(gateway, "tpm", tpm=100)
    scripted.enqueue(Script(text=["ok"], usage=Usage(input_tokens=30, output_tokens=60)))
    headers = _openai(gateway.url, key)
    assert headers["x-ratelimit-limit-tokens"] == "100"
    # 90 of 100 used: the next prompt's estimate does not fit.
    with pytest.raises(openai.RateLimitError) as caught:
        openai_client(gateway.url, key).chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": "one two three " * 10}]
        )
    assert "100 tokens per minute" in caught.value.message
    refused = caught.value.response.headers
    assert refused["x-ratelimit-limit-tokens"] == "100"
    assert int(refused["x-ratelimit-remaining-tokens"]) <= 10
    assert int(refused["retry-after"]) >= 1


def test_an_exhausted_budget_is_refused(gateway: RunningServer, database: Path) -> None:
    spent = new_key(gateway, "spent", budget_usd=1.0)
    # What the usage ledger writes when it flushes (accounts/ledger.py): the spend so far.
    with sqlite3.connect(database) as db:
        db.execute("UPDATE api_keys SET spent_usd = 1.25 WHERE name = 'spent'")
    with pytest.raises(openai.PermissionDeniedError) as caught:
        openai_client(gateway.url, spent).chat.completions.create(model="scripted", messages=HI)
    assert "budget exhausted: spent $1.2500 of $1.0000" in caught.value.message
    with pytest.raises(anthropic.PermissionDeniedError, match="budget exhausted"):
        anthropic_client(gateway.url, spent).messages.create(
            model="scripted", max_tokens=8, messages=HI
        )
    zero = new_key(gateway, "zero", budget_usd=0)
    with pytest.raises(ollama.ResponseError) as refused:
        ollama_client(gateway.url, headers={"Authorization": f"Bearer {zero}"}).chat(
            model="scripted", messages=HI
        )
    assert refused.value.status_code == 403 and "budget exhausted" in refused.value.error


def test_a_revoked_key_is_refused_in_every_dialect(gateway: RunningServer) -> None:
    key = new_key(gateway, "revoked")
    for _, call, _ in DIALECTS:
        call(gateway.url, key)
    revoked = httpx.delete(
        gateway.url + "/admin/keys/revoked", headers={"Authorization": f"Bearer {MASTER}"}
    )
    assert revoked.status_code == 200
    for dialect, call, error in DIALECTS:
        status, _, body = _attempt(call, error, gateway.url, key)
        assert status == 401, dialect
        assert "revoked" in assert_error_shape(dialect, 401, body)


def test_responses_and_completions_count_too(gateway: RunningServer) -> None:
    client = openai_client(gateway.url, new_key(gateway, "responses", rpm=2))
    assert client.responses.create(model="scripted", input="hi").output_text
    assert client.completions.create(model="scripted", prompt="hi").choices[0].text
    with pytest.raises(openai.RateLimitError) as caught:
        client.responses.create(model="scripted", input="hi")
    assert caught.value.response.headers["x-ratelimit-remaining-requests"] == "0"
    with pytest.raises(openai.RateLimitError):
        client.completions.create(model="scripted", prompt="hi")

"""Faults of the embedded model through the official clients: the gateway on the
real embedded model, with schemas that used to crash it, a worker that really dies, a
full line and abandoned embedding batches. Every failure must reach the client in its
own dialect, and the gateway must go on serving.

The backend-level versions (and the worker's own protocol) are in
``tests/backends/test_embedded_worker.py`` and ``test_embedded_schema.py``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest

from llmbridge.backends.embedded.backend import EmbeddedBackend
from tests.conftest import (
    RunningServer,
    anthropic_client,
    ollama_client,
    openai_client,
    running_gateway,
)
from tests.waiting import HANG_S, wait_until

pytestmark = pytest.mark.embedded

LONG_REPLY = [{"role": "user", "content": "Write a long story about a dragon who learns to read."}]
HI = [{"role": "user", "content": "Say hi."}]


@pytest.fixture(scope="module")
def backend() -> EmbeddedBackend:
    return EmbeddedBackend(max_embed_inputs=300)


@pytest.fixture(scope="module")
def server(backend: EmbeddedBackend) -> Iterator[RunningServer]:
    # retries: 0, so that a crash before the reply's first token shows as the 503 the
    # backend reports (with the default one retry, the gateway would serve it again on
    # the new worker, which is what a user wants, and not what this test looks at).
    # health_cache_s 0: /health is read right after a crash, and must show it.
    with running_gateway(
        {"embedded": backend}, resilience={"retries": 0}, server={"health_cache_s": 0}
    ) as running:
        yield running


def until(condition: Callable[[], bool], what: str, within: float = HANG_S) -> None:
    """Wait for an event the backend counts (a bound on a hang, scaled in tests/waiting.py:
    a group of embeddings or a worker's restart takes tens of seconds on a busy machine)."""
    wait_until(condition, what, within)


def health(server: RunningServer) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(server.url + "/health").json()["backends"]["embedded"]
    return body


# -- schemas (a grammar llama.cpp refused used to crash the gateway) -----------------------

EMPTY_ENUM = {"enum": []}
LONG_STRING = {"type": "string", "maxLength": 5000}


@pytest.mark.parametrize("schema", [EMPTY_ENUM, LONG_STRING])
def test_openai_response_format_that_crashed_the_gateway_is_a_400(
    server: RunningServer, schema: dict[str, Any]
) -> None:
    client = openai_client(server.url)
    fmt: Any = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(
                model="gpt-4o", messages=HI, max_tokens=8, response_format=fmt, stream=stream
            )
        assert info.value.status_code == 400
        assert info.value.param == "response_format"
        assert "response_format" in info.value.message


@pytest.mark.parametrize("schema", [EMPTY_ENUM, LONG_STRING])
def test_ollama_format_that_crashed_the_gateway_is_a_400(
    server: RunningServer, schema: dict[str, Any]
) -> None:
    client = ollama_client(server.url)
    with pytest.raises(ollama.ResponseError) as info:
        client.chat(model="smollm2", messages=HI, format=schema, options={"num_predict": 8})
    assert info.value.status_code == 400
    assert info.value.error.startswith("format: ")
    with pytest.raises(ollama.ResponseError) as streamed:
        list(client.generate(model="smollm2", prompt="hi", format=schema, stream=True))
    assert streamed.value.status_code == 400


def test_anthropic_output_config_format_is_checked_too(server: RunningServer) -> None:
    client = anthropic_client(server.url)
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(
            model="smollm2",
            max_tokens=8,
            messages=HI,  # type: ignore[arg-type]
            extra_body={"output_config": {"format": {"type": "json_schema", "schema": EMPTY_ENUM}}},
        )
    assert info.value.status_code == 400
    assert "output_config.format" in info.value.message


def test_a_usable_schema_constrains_the_reply_and_nothing_crashed(server: RunningServer) -> None:
    before = health(server)["detail"]
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string", "maxLength": 20}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    reply = openai_client(server.url).chat.completions.create(
        model="gpt-4o",
        messages=HI,
        max_tokens=60,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
    )
    # What the grammar guarantees on any build: an object with one short string.
    data = json.loads(reply.choices[0].message.content or "")
    assert list(data) == ["answer"]
    assert isinstance(data["answer"], str) and len(data["answer"]) <= 20
    assert health(server)["detail"] == before  # the same worker, no restart


# -- a worker that dies (level 2) ------------------------------------------------------------


def crash_during(backend: EmbeddedBackend, call: Callable[[], Any]) -> BaseException:
    """Run ``call`` in a thread, SIGSEGV the worker once the request holds the model,
    and return what ``call`` raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            raised.append(exc)

    pid = backend.worker_state()["pid"]
    thread = threading.Thread(target=run)
    thread.start()
    until(lambda: backend.chat_queue.busy, "the request holds the model")
    os.kill(pid, signal.SIGSEGV)
    thread.join(60)
    assert not thread.is_alive()
    assert raised, "the request in flight did not fail"
    until(lambda: backend.worker_state()["pid"] not in (None, pid), "a new worker")
    return raised[0]


def test_a_worker_crash_is_a_503_in_each_dialect_and_the_next_request_is_served(
    server: RunningServer, backend: EmbeddedBackend
) -> None:
    restarts = backend.worker_state()["restarts"]
    options = {"num_predict": 400, "temperature": 0}
    ollama_chat = ollama_client(server.url)
    error = crash_during(
        backend, lambda: ollama_chat.chat(model="smollm2", messages=LONG_REPLY, options=options)
    )
    assert isinstance(error, ollama.ResponseError)
    assert error.status_code == 503
    assert "SIGSEGV" in error.error
    assert ollama_chat.chat(model="smollm2", messages=HI, options={"num_predict": 8}).message

    client = openai_client(server.url)
    error = crash_during(
        backend,
        lambda: client.chat.completions.create(model="gpt-4o", messages=LONG_REPLY, max_tokens=400),
    )
    assert isinstance(error, openai.InternalServerError)
    assert error.status_code == 503
    assert error.response.headers["retry-after"] == "1"

    # Streamed: the reply has begun, so the failure is OpenAI's in-stream error.
    stream = client.chat.completions.create(
        model="gpt-4o", messages=LONG_REPLY, max_tokens=400, stream=True
    )
    chunks = iter(stream)
    next(chunks)
    pid = backend.worker_state()["pid"]
    os.kill(pid, signal.SIGSEGV)
    with pytest.raises(openai.APIError, match="SIGSEGV"):
        for _ in chunks:
            pass
    until(lambda: backend.worker_state()["pid"] not in (None, pid), "a new worker")

    reply = client.chat.completions.create(model="gpt-4o", messages=HI, max_tokens=8)
    assert reply.choices[0].message.content
    state = health(server)
    assert state["ok"]
    assert f"{restarts + 3} restarts" in state["detail"]
    assert "last exit: was killed by SIGSEGV" in state["detail"]


# -- the line in front of the model -----------------------------------------------------------


def test_a_busy_model_is_a_503_with_retry_after_in_each_dialect(
    server: RunningServer, backend: EmbeddedBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backend.chat_queue, "max_waiting", 0)
    holder = ollama_client(server.url)
    stream = holder.chat(
        model="smollm2", messages=LONG_REPLY, options={"num_predict": 400}, stream=True
    )
    next(iter(stream))  # the model is generating for this one
    try:
        with pytest.raises(openai.InternalServerError) as info:
            openai_client(server.url).chat.completions.create(
                model="gpt-4o", messages=HI, max_tokens=8
            )
        assert info.value.status_code == 503
        assert int(info.value.response.headers["retry-after"]) >= 1
        assert "busy" in info.value.message

        with pytest.raises(ollama.ResponseError) as busy:
            ollama_client(server.url).chat(model="smollm2", messages=HI)
        assert busy.value.status_code == 503
        raw = httpx.post(server.url + "/api/chat", json={"model": "smollm2", "messages": HI})
        assert raw.status_code == 503
        assert int(raw.headers["retry-after"]) >= 1
        assert "busy" in raw.json()["error"]
    finally:
        stream.close()  # type: ignore[attr-defined]
    until(lambda: not backend.chat_queue.busy, "the held stream let the model go")


# -- embeddings ------------------------------------------------------------------------------


def test_too_many_embedding_inputs_is_a_400_naming_input(server: RunningServer) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        openai_client(server.url).embeddings.create(model="smollm2", input=["x"] * 301)
    assert info.value.param == "input"
    with pytest.raises(ollama.ResponseError) as refused:
        ollama_client(server.url).embed(model="smollm2", input=["x"] * 301)
    assert refused.value.status_code == 400
    assert "at most 300" in refused.value.error


def test_a_client_that_leaves_cancels_its_embedding_batch(
    server: RunningServer, backend: EmbeddedBackend
) -> None:
    cancelled = backend.cancelled
    text = "The quick brown fox jumps over the lazy dog. " * 40  # about 400 tokens
    body = json.dumps({"model": "smollm2", "input": [text] * 300}).encode()
    head = b"POST /api/embed HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    # Told by events, not windows (a client that left after a 1 s read timeout
    # and a 30 s poll both failed on a busy machine). The client leaves once the batch
    # holds the model, whenever that is ...
    with socket.create_connection(("127.0.0.1", server.port)) as client:
        client.sendall(head + b"content-length: %d\r\n\r\n" % len(body) + body)
        until(lambda: backend.embed_queue.busy, "the batch holds the model")
    # ... and the worker's end of the batch is the event: its turn passes on whether it
    # stopped between two groups of inputs (cancelled, counted) or ran all 300 inputs
    # (the disconnect never reached it: the bound is above a quiet machine's whole batch).
    until(lambda: not backend.embed_queue.busy, "the worker let the batch go", within=300)
    assert backend.cancelled == cancelled + 1, "the batch ran to its end: never cancelled"
    vectors = ollama_client(server.url).embed(model="smollm2", input=["still works"])
    assert len(vectors.embeddings) == 1

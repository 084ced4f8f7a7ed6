"""The Ollama front on the embedded model, through the official ``ollama`` client:
``/api/embeddings``, ``/api/show``'s ``model_info`` as Ollama shows a GGUF's, and an
unload that stops the model's worker (its memory freed) until the next request.

Only what holds on any CPU is asserted: shapes, types, equality between two routes on
the same model, the worker's life; never what the model says."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import ollama
import pytest

from llmbridge.backends.embedded.backend import EmbeddedBackend
from tests.conftest import RunningServer, ollama_client, running_gateway
from tests.waiting import HANG_S, wait_until

pytestmark = pytest.mark.embedded

STORY = [{"role": "user", "content": "Tell me a story about a lighthouse."}]


@pytest.fixture(scope="module")
def backend() -> EmbeddedBackend:
    return EmbeddedBackend()


@pytest.fixture(scope="module")
def gateway(backend: EmbeddedBackend) -> Iterator[RunningServer]:
    with running_gateway({"embedded": backend}) as server:
        yield server


@pytest.fixture
def client(gateway: RunningServer) -> ollama.Client:
    return ollama_client(gateway.url)


def test_embeddings_gives_the_vector_embed_gives(client: ollama.Client) -> None:
    single = list(client.embeddings(model="smollm2", prompt="a lighthouse").embedding)
    batch = client.embed(model="smollm2", input=["a lighthouse", "a harbour"])
    assert single and all(isinstance(x, float) for x in single)
    assert single == pytest.approx(list(batch.embeddings[0]), abs=1e-6)
    assert len(single) == len(batch.embeddings[1])
    assert list(client.embeddings(model="smollm2", prompt="").embedding) == []


def test_show_describes_the_gguf_as_ollama_does(client: ollama.Client) -> None:
    shown = client.show("smollm2")
    info = shown.modelinfo or {}
    assert info["general.architecture"] == "llama"
    # Numbers are numbers, as in Ollama's reply (llama.cpp gives strings).
    for key in ("llama.embedding_length", "llama.block_count", "llama.context_length"):
        assert isinstance(info[key], int) and info[key] > 0, key
    assert isinstance(info["general.name"], str)
    assert not any(key.startswith("tokenizer.chat_") for key in info)
    assert shown.details.format == "gguf" and shown.details.family == "llama"
    assert shown.capabilities == ["completion", "embedding"]


def test_unload_stops_the_worker_until_the_next_request(
    client: ollama.Client, backend: EmbeddedBackend, gateway: RunningServer
) -> None:
    client.generate(model="smollm2", prompt="Hi.", options={"num_predict": 2})
    first_pid = backend.worker_state()["pid"]
    assert first_pid is not None and [m.model for m in client.ps().models] == ["smollm2"]

    reply = client.generate(model="smollm2", prompt="", keep_alive=0)
    assert reply.done and reply.done_reason == "unload"
    assert backend.worker_state()["state"] == "stopped"
    assert client.ps().models == []
    assert backend.worker_state()["restarts"] == 0  # freed on purpose, not a crash
    health = httpx.get(gateway.url + "/health").json()["backends"]["embedded"]
    assert "worker stopped; restarts on the next request" in health["detail"]

    again = client.chat(model="smollm2", messages=STORY, options={"num_predict": 3})
    assert again.message.content and again.done
    assert backend.worker_state()["pid"] not in (None, first_pid)
    assert [m.model for m in client.ps().models] == ["smollm2"]


def _chats_in_flight(gateway: RunningServer) -> float:
    metrics = httpx.get(gateway.url + "/metrics").text
    for line in metrics.splitlines():
        if line.startswith('llmbridge_in_flight_requests{endpoint="/api/chat"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_an_unload_waits_for_the_generation_under_way(
    gateway: RunningServer, backend: EmbeddedBackend
) -> None:
    reader = ollama_client(gateway.url)
    stream = reader.chat(
        model="smollm2", messages=STORY, stream=True, options={"num_predict": 60, "seed": 3}
    )
    first = next(stream)  # the generation is under way
    unloaded: list[str | None] = []

    def unload() -> None:
        other = ollama.Client(host=gateway.url)
        try:
            reply = other.chat(model="smollm2", messages=[], keep_alive=0)
            unloaded.append(reply.done_reason)
        finally:
            other.close()

    thread = threading.Thread(target=unload)
    thread.start()
    # Both in the gateway: the unload waits for the model while the story is written
    # (the gauge counts the unload once the gateway has turned to the backend).
    wait_until(lambda: _chats_in_flight(gateway) == 2, "the unload waiting for its turn")
    rest = list(stream)
    thread.join(HANG_S)
    assert not thread.is_alive()
    # The stream ran to its own end, then the model was freed.
    assert rest and rest[-1].done and rest[-1].done_reason in ("stop", "length")
    assert first.message.content is not None
    assert unloaded == ["unload"]
    assert backend.worker_state()["state"] == "stopped"

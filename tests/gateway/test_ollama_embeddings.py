"""``POST /api/embeddings`` (one prompt, one vector: ollama-js's ``embeddings()``, older
ollama-python releases, many RAG tools) through the official ``ollama`` client: on a
scripted backend, and forwarded to an Ollama server with its ``options`` and
``keep_alive``; errors in Ollama's shape."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import ollama
import orjson
import pytest

from llmbridge.backends.ollama import OllamaBackend
from llmbridge.backends.scripted import ScriptedBackend
from tests.conftest import RunningServer, ollama_client, running_gateway
from tests.upstream import Canned, FakeUpstream


@pytest.fixture(scope="module")
def gateway(
    scripted: ScriptedBackend, upstream: tuple[FakeUpstream, RunningServer]
) -> Iterator[RunningServer]:
    fake, up = upstream
    fake.serve_canned("/api/embed")
    backends = {"scripted": scripted, "ollama": OllamaBackend("ollama", up.url)}
    models = [{"name": "nomic", "backend": "ollama", "model": "nomic-embed-text:v1.5"}]
    with running_gateway(backends, models=models) as server:
        yield server


@pytest.fixture
def client(gateway: RunningServer) -> ollama.Client:
    return ollama_client(gateway.url)


def test_one_prompt_one_vector_the_same_as_embed_gives(client: ollama.Client) -> None:
    single = client.embeddings(model="scripted", prompt="alpha")
    batch = client.embed(model="scripted", input=["alpha", "beta"])
    assert list(single.embedding) == list(batch.embeddings[0])
    assert list(single.embedding) != list(batch.embeddings[1])


def test_the_reply_holds_the_vector_only(gateway: RunningServer) -> None:
    reply = httpx.post(
        f"{gateway.url}/api/embeddings", json={"model": "scripted", "prompt": "alpha"}
    )
    assert reply.status_code == 200
    assert reply.headers["content-type"] == "application/json"
    body = reply.json()
    assert list(body) == ["embedding"]
    assert body["embedding"] and all(isinstance(x, float) for x in body["embedding"])


def test_an_empty_prompt_loads_the_model_and_answers_an_empty_vector(
    client: ollama.Client,
) -> None:
    assert list(client.embeddings(model="scripted", prompt="").embedding) == []
    assert list(client.embeddings(model="scripted").embedding) == []


def test_forwarded_to_ollama_with_its_options_and_keep_alive(
    client: ollama.Client, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(
        Canned(
            chunks=[b'{"model":"nomic-embed-text:v1.5","embeddings":[[0.5,-0.25,1.0]]}'],
            media_type="application/json",
        )
    )
    reply = client.embeddings(
        model="nomic", prompt="hello", options={"num_ctx": 2048, "num_thread": 2}, keep_alive="10m"
    )
    assert list(reply.embedding) == [0.5, -0.25, 1.0]
    assert fake.paths[-1] == "/api/embed"
    assert orjson.loads(fake.bodies[-1]) == {
        "model": "nomic-embed-text:v1.5",
        "input": ["hello"],
        "keep_alive": "10m",
        "options": {"num_ctx": 2048, "num_thread": 2},
    }


def test_embed_forwards_options_and_keep_alive_too(
    client: ollama.Client, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(
        Canned(chunks=[b'{"embeddings":[[1.0],[2.0]]}'], media_type="application/json")
    )
    reply = client.embed(model="nomic", input=["a", "b"], options={"num_ctx": 512}, keep_alive=0)
    assert [list(v) for v in reply.embeddings] == [[1.0], [2.0]]
    sent = orjson.loads(fake.bodies[-1])
    assert sent["keep_alive"] == 0
    assert sent["options"] == {"num_ctx": 512}


def test_the_ollama_servers_error_comes_back_in_its_shape(
    client: ollama.Client, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(
        Canned(
            status=404,
            chunks=[
                b'{"error":"model \\"nomic-embed-text:v1.5\\" not found, try pulling it first"}'
            ],
            media_type="application/json",
        )
    )
    with pytest.raises(ollama.ResponseError) as caught:
        client.embeddings(model="nomic", prompt="hello")
    assert caught.value.status_code == 404
    assert "not found, try pulling it first" in caught.value.error


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"prompt": "x"}, "model"),
        ({"model": "", "prompt": "x"}, "model"),
        ({"model": "scripted", "prompt": 3}, "prompt"),
        ({"model": "scripted", "prompt": "x", "options": {"num_ctx": "big"}}, "options.num_ctx"),
        ({"model": "scripted", "prompt": "x", "keep_alive": [1]}, "keep_alive"),
        ([1, 2], None),
    ],
)
def test_bad_bodies_are_400s_in_ollamas_shape(
    gateway: RunningServer, body: object, field: str | None
) -> None:
    reply = httpx.post(f"{gateway.url}/api/embeddings", json=body)
    assert reply.status_code == 400
    error = reply.json()
    assert list(error) == ["error"]
    if field is not None:
        assert error["error"].startswith(field)


def test_a_backend_that_cannot_embed_is_a_400_naming_it() -> None:
    # A scripted backend built without embeddings stands for one that has none.
    cannot = ScriptedBackend("plain", can_embed_vectors=False)
    with running_gateway({"plain": cannot}) as other:
        reply = httpx.post(f"{other.url}/api/embeddings", json={"model": "m", "prompt": "x"})
    assert reply.status_code == 400
    assert "cannot compute embeddings" in reply.json()["error"]

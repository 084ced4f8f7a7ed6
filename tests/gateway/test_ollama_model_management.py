"""Unloading a model and managing models through the gateway, with the official
``ollama`` client: ``keep_alive: 0`` with nothing to generate is an unload the backend
is told of, and ``/api/pull``, ``/api/push``, ``/api/delete``, ``/api/copy`` and
``/api/create`` reach the Ollama server that serves the model (a fake one on loopback
that records what it got), behind the master key or a static key; other backends'
models are not managed, and a database key may not manage any."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import ollama
import orjson
import pytest

from llmbridge.backends.base import Capabilities
from llmbridge.backends.ollama import OllamaBackend
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.errors import BackendError
from llmbridge.core.model_info import ModelOperation
from tests.conftest import (
    RunningServer,
    create_key,
    ledger_rows,
    ollama_client,
    running_gateway,
)
from tests.upstream import Canned, FakeUpstream

MASTER = "sk-master-manage"
STATIC = "sk-static-manage"
PROGRESS = [
    b'{"status":"pulling manifest"}\n',
    b'{"status":"pulling 6a0746a1ec1a","digest":"sha256:6a0746a1ec1a","total":4661211424,'
    b'"completed":2330605712}\n',
    b'{"status":"verifying sha256 digest"}\n',
    b'{"status":"writing manifest"}\n',
    b'{"status":"success"}\n',
]
UNLOADED = b'{"model":"qwen3-coder:30b","created_at":"2026-12-01T10:00:00Z","response":"","done":true,"done_reason":"unload"}'  # noqa: E501


class BrokenManager(ScriptedBackend):
    """A backend that manages models and fails after the first progress line (a
    connection the server dropped mid-pull)."""

    capabilities = Capabilities(manages_models=True)

    @asynccontextmanager
    async def manage_models(
        self, operation: ModelOperation, body: dict[str, Any]
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        async def chunks() -> AsyncGenerator[bytes, None]:
            yield PROGRESS[0]
            raise BackendError("backend 'broken' closed the connection unexpectedly")

        yield chunks()


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("manage") / "gateway.db"


@pytest.fixture(scope="module")
def gateway(
    scripted: ScriptedBackend, upstream: tuple[FakeUpstream, RunningServer], database: Path
) -> Iterator[RunningServer]:
    """The fake Ollama is the default backend (``--ollama-url``): names pass through to
    it; ``coder`` is a route with its own backend name, ``scripted`` and ``broken`` are
    other backends."""
    _, up = upstream
    backends = {
        "ollama": OllamaBackend("ollama", up.url),
        "scripted": scripted,
        "broken": BrokenManager("broken"),
    }
    models = [
        {"name": "coder", "backend": "ollama", "model": "qwen3-coder:30b"},
        {"name": "scripted", "backend": "scripted"},
        {"name": "broken", "backend": "broken"},
    ]
    with running_gateway(
        backends,
        models=models,
        server={"master_key": MASTER, "api_keys": [STATIC]},
        agent={"database": str(database)},
    ) as server:
        yield server


@pytest.fixture(autouse=True)
def _reset(upstream: tuple[FakeUpstream, RunningServer]) -> None:
    fake, _ = upstream
    fake.queue.clear()


@pytest.fixture
def client(gateway: RunningServer) -> ollama.Client:
    return ollama_client(gateway.url, headers={"Authorization": f"Bearer {STATIC}"})


def _sent(fake: FakeUpstream) -> tuple[str, str, Any]:
    """The last request the fake Ollama answered: method, path, JSON body."""
    body = fake.bodies[-1]
    return fake.methods[-1], fake.paths[-1], orjson.loads(body) if body else None


# -- unloading ------------------------------------------------------------------------


def test_generate_with_keep_alive_0_is_forwarded_as_an_unload(
    client: ollama.Client, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(chunks=[UNLOADED], media_type="application/json"))
    reply = client.generate(model="coder", prompt="", keep_alive=0)
    assert reply.done and reply.done_reason == "unload"
    assert _sent(fake) == (
        "POST",
        "/api/generate",
        {"model": "qwen3-coder:30b", "prompt": "", "keep_alive": 0, "stream": False},
    )


def test_chat_without_messages_and_keep_alive_0_is_an_unload_too(
    client: ollama.Client, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(chunks=[UNLOADED], media_type="application/json"))
    reply = client.chat(model="coder", messages=[], keep_alive="0s")
    assert reply.done_reason == "unload"
    assert reply.message.role == "assistant" and not reply.message.content
    assert _sent(fake)[2]["keep_alive"] == 0


def test_without_keep_alive_0_nothing_to_generate_is_still_a_load(
    client: ollama.Client, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    asked = len(fake.paths)
    for keep_alive in (None, "5m", -1):
        assert client.generate(model="coder", prompt="", keep_alive=keep_alive).done_reason == (
            "load"
        )
    assert len(fake.paths) == asked  # a load asks the backend nothing


def test_a_backend_with_nothing_to_free_answers_unload_and_generates_nothing(
    client: ollama.Client, scripted: ScriptedBackend
) -> None:
    asked = len(scripted.requests)
    assert client.generate(model="scripted", prompt="", keep_alive=0).done_reason == "unload"
    assert client.chat(model="scripted", messages=[], keep_alive="0m").done_reason == "unload"
    assert len(scripted.requests) == asked


def test_the_ollama_servers_refusal_of_an_unload_comes_back(
    client: ollama.Client, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(
        Canned(status=404, chunks=[b'{"error":"model \'gone\' not found"}'], media_type="x")
    )
    with pytest.raises(ollama.ResponseError) as caught:
        client.generate(model="gone", prompt="", keep_alive=0)
    assert caught.value.status_code == 404
    assert "model 'gone' not found" in caught.value.error


# -- model management on the Ollama server -------------------------------------------


def test_pull_streams_the_servers_progress_lines(
    client: ollama.Client, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(chunks=PROGRESS))
    lines = list(client.pull("coder", stream=True))
    assert [line.status for line in lines] == [
        "pulling manifest",
        "pulling 6a0746a1ec1a",
        "verifying sha256 digest",
        "writing manifest",
        "success",
    ]
    assert lines[1].total == 4661211424 and lines[1].completed == 2330605712
    method, path, body = _sent(fake)
    assert (method, path) == ("POST", "/api/pull")
    assert body == {"model": "qwen3-coder:30b", "insecure": False, "stream": True}


def test_pull_without_a_stream_is_one_line(
    client: ollama.Client, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(chunks=[b'{"status":"success"}'], media_type="application/json"))
    assert client.pull("llama3.2:1b").status == "success"
    assert _sent(fake)[2] == {"model": "llama3.2:1b", "insecure": False, "stream": False}


def test_the_deprecated_name_field_is_sent_as_model(
    gateway: RunningServer, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    # ollama-js sends {"name": ...} for pull, push and delete.
    fake, _ = upstream
    fake.queue.append(Canned(chunks=PROGRESS[-1:]))
    reply = httpx.post(
        f"{gateway.url}/api/pull",
        json={"name": "coder", "stream": True},
        headers={"Authorization": f"Bearer {STATIC}"},
    )
    assert reply.status_code == 200
    assert reply.headers["content-type"] == "application/x-ndjson"
    assert reply.text == PROGRESS[-1].decode()
    assert _sent(fake)[2] == {"model": "qwen3-coder:30b", "stream": True}


def test_push_create_copy_and_delete_reach_the_server(
    client: ollama.Client, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(chunks=[b'{"status":"retrieving manifest"}\n', PROGRESS[-1]]))
    assert [p.status for p in client.push("coder", stream=True)][-1] == "success"
    assert _sent(fake)[:2] == ("POST", "/api/push")
    assert _sent(fake)[2]["model"] == "qwen3-coder:30b"

    fake.queue.append(Canned(chunks=[b'{"status":"using existing layer"}\n', PROGRESS[-1]]))
    created = list(client.create(model="terse", from_="coder", system="Be terse.", stream=True))
    assert created[-1].status == "success"
    method, path, body = _sent(fake)
    assert (method, path) == ("POST", "/api/create")
    assert body["model"] == "terse" and body["from"] == "qwen3-coder:30b"
    assert body["system"] == "Be terse."

    fake.queue.append(Canned(chunks=[], media_type="application/json"))
    assert client.copy("coder", "coder-backup").status == "success"
    assert _sent(fake) == (
        "POST",
        "/api/copy",
        {"source": "qwen3-coder:30b", "destination": "coder-backup"},
    )

    fake.queue.append(Canned(chunks=[], media_type="application/json"))
    assert client.delete("coder-backup").status == "success"
    assert _sent(fake) == ("DELETE", "/api/delete", {"model": "coder-backup"})


def test_the_servers_own_errors_come_back_in_ollamas_shape(
    client: ollama.Client, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(
        Canned(status=404, chunks=[b'{"error":"model \'nope\' not found"}'], media_type="x")
    )
    with pytest.raises(ollama.ResponseError) as caught:
        client.delete("nope")
    assert caught.value.status_code == 404
    assert "model 'nope' not found" in caught.value.error
    # An error line inside the stream (a registry that refused) is passed on as sent.
    fake.queue.append(
        Canned(chunks=[PROGRESS[0], b'{"error":"pull model manifest: file does not exist"}\n'])
    )
    with pytest.raises(ollama.ResponseError) as caught:
        list(client.pull("missing:latest", stream=True))
    assert "file does not exist" in caught.value.error


def test_a_failure_after_the_first_line_is_ollamas_error_line(gateway: RunningServer) -> None:
    reply = httpx.post(
        f"{gateway.url}/api/pull",
        json={"model": "broken"},
        headers={"Authorization": f"Bearer {STATIC}"},
    )
    assert reply.status_code == 200
    lines = [orjson.loads(line) for line in reply.text.splitlines()]
    assert lines[0] == {"status": "pulling manifest"}
    assert lines[-1] == {"error": "backend 'broken' closed the connection unexpectedly"}


def test_a_copy_across_backends_is_refused(client: ollama.Client) -> None:
    with pytest.raises(ollama.ResponseError) as caught:
        client.copy("coder", "scripted")
    assert caught.value.status_code == 400
    assert "different backends" in caught.value.error


@pytest.mark.parametrize("operation", ["pull", "push", "delete", "copy", "create"])
def test_other_backends_models_are_not_managed(gateway: RunningServer, operation: str) -> None:
    body: dict[str, Any] = {"model": "scripted"}
    if operation == "copy":
        body = {"source": "scripted", "destination": "scripted-2"}
    reply = httpx.request(
        "DELETE" if operation == "delete" else "POST",
        f"{gateway.url}/api/{operation}",
        json=body,
        headers={"Authorization": f"Bearer {STATIC}"},
    )
    assert reply.status_code == 400
    assert reply.json() == {
        "error": "the gateway does not manage the models of backend 'scripted' (scripted), "
        f"which serves 'scripted': {operation} goes to Ollama backends only"
    }


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/api/pull", {}, "model is required"),
        ("/api/pull", {"model": "m", "stream": "yes"}, "stream"),
        ("/api/copy", {"source": "m"}, "destination"),
        ("/api/create", {"model": 3}, "model"),
    ],
)
def test_bad_bodies_are_400s_naming_the_field(
    gateway: RunningServer, path: str, body: dict[str, Any], message: str
) -> None:
    reply = httpx.post(gateway.url + path, json=body, headers={"Authorization": f"Bearer {STATIC}"})
    assert reply.status_code == 400
    assert reply.json()["error"].startswith(message)


# -- who may ------------------------------------------------------------------------


def test_the_master_key_may_manage_models_and_nothing_else_on_the_model_api(
    gateway: RunningServer, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(chunks=[b'{"status":"success"}'], media_type="application/json"))
    master = ollama_client(gateway.url, headers={"Authorization": f"Bearer {MASTER}"})
    assert master.pull("llama3.2:1b").status == "success"
    with pytest.raises(ollama.ResponseError) as caught:
        master.chat(model="scripted", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 401


def test_a_database_key_may_not_manage_models(
    gateway: RunningServer, scripted: ScriptedBackend, database: Path
) -> None:
    key = create_key(gateway.url, MASTER, "team-member")
    member = ollama_client(gateway.url, headers={"Authorization": f"Bearer {key}"})
    with pytest.raises(ollama.ResponseError) as caught:
        member.pull("llama3.2:1b")
    assert caught.value.status_code == 403
    assert "may not manage models" in caught.value.error
    # It may still use, load and unload the models its globs allow.
    scripted.enqueue(Script(text=["ok"]))
    assert member.chat(model="scripted", messages=[{"role": "user", "content": "hi"}])
    assert member.generate(model="scripted", prompt="", keep_alive=0).done_reason == "unload"
    rows = ledger_rows(database, "team-member", 3)
    assert [(row["endpoint"], row["status"]) for row in rows] == [
        ("/api/pull", 403),
        ("/api/chat", 200),
        ("/api/generate", 200),
    ]
    assert rows[2]["backend"] == "scripted"


def test_without_a_key_nothing_is_managed(gateway: RunningServer) -> None:
    reply = httpx.post(f"{gateway.url}/api/pull", json={"model": "llama3.2:1b"})
    assert reply.status_code == 401
    assert list(reply.json()) == ["error"]


def test_an_open_gateway_manages_models_as_ollama_does(
    upstream: tuple[FakeUpstream, RunningServer],
) -> None:
    fake, up = upstream
    fake.queue.append(Canned(chunks=[b'{"status":"success"}'], media_type="application/json"))
    with running_gateway({"ollama": OllamaBackend("ollama", up.url)}) as open_gateway:
        assert ollama_client(open_gateway.url).pull("llama3.2:1b").status == "success"
    assert _sent(fake)[1] == "/api/pull"

"""The requests Open WebUI (0.12.4) sends its Ollama connection, sent to the gateway as
Open WebUI sends them and read back as it reads them.

Open WebUI itself is not installed by ``make test``: its PyPI package pulls 261 wheels,
3.4 GB (torch and the CUDA libraries among them; docs/OLLAMA.md has the measurement).
So this module replays what its backend does (``open_webui/routers/ollama.py``,
``utils/payload.py``, ``utils/session_pool.py``): aiohttp, a JSON body sent as bytes
with ``Content-Type: application/json`` and the connection's key as a Bearer token;
a non-streamed reply read with ``r.json()`` (which refuses another content type), a
stream read line by line (chat) or passed through chunk by chunk (pull).

- the model list: ``GET /api/tags``, then ``GET /api/ps`` for ``expires_at``, parsed
  with ``datetime.fromisoformat``; the connection check ``GET /api/version``;
- a chat: ``POST /api/chat`` with the payload ``convert_payload_openai_to_ollama``
  makes of the UI's OpenAI-shaped request (streamed, and not for its title task);
- eject: ``POST /api/generate {"model", "keep_alive": 0, "prompt": ""}``, which must
  reach the Ollama server as an unload;
- pull (``{"name", "model", "insecure": true}``, streamed through) and delete.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import aiohttp
import orjson
import pytest

from llmbridge.backends.ollama import OllamaBackend
from llmbridge.backends.scripted import Script, ScriptedBackend
from tests.conftest import RunningServer, running_gateway
from tests.upstream import Canned, FakeUpstream

KEY = "sk-open-webui"
TAGS = [
    {
        "name": "qwen3:0.6b",
        "model": "qwen3:0.6b",
        "modified_at": "2026-11-20T08:00:00.123456789+01:00",
        "size": 522653767,
        "digest": "7df6b6e09427a769808717c0a93cadc4ae99ed4eb8bf5ca557c90846becea435",
        "details": {
            "parent_model": "",
            "format": "gguf",
            "family": "qwen3",
            "families": ["qwen3"],
            "parameter_size": "751.63M",
            "quantization_level": "Q4_K_M",
        },
        "capabilities": ["completion", "tools", "thinking"],
    }
]
RUNNING = [
    {
        "name": "qwen3:0.6b",
        "model": "qwen3:0.6b",
        "size": 1027887104,
        "digest": TAGS[0]["digest"],
        "details": TAGS[0]["details"],
        "expires_at": "2026-12-01T21:05:00.123456789+01:00",
        "size_vram": 0,
        "context_length": 4096,
    }
]


@pytest.fixture(scope="module")
def gateway(
    scripted: ScriptedBackend, upstream: tuple[FakeUpstream, RunningServer]
) -> Iterator[RunningServer]:
    """A real Ollama (the fake) as the default backend, as ``--ollama-url`` sets it up,
    and the scripted backend for one model; the connection's key is a static key."""
    fake, up = upstream
    fake.tags, fake.running = TAGS, RUNNING
    with running_gateway(
        {"ollama": OllamaBackend("ollama", up.url), "scripted": scripted},
        models=[{"name": "scripted", "backend": "scripted"}],
        server={"api_keys": [KEY]},
    ) as server:
        yield server


@pytest.fixture(autouse=True)
def _reset(upstream: tuple[FakeUpstream, RunningServer]) -> None:
    upstream[0].queue.clear()


def _headers() -> dict[str, str]:
    """``get_headers_and_cookies`` for a connection with a key."""
    return {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}


async def _json(method: str, url: str, payload: dict[str, Any] | None = None) -> Any:
    """``send_request(..., stream=False)`` and ``send_get_request``: ``r.json()``."""
    data = None if payload is None else orjson.dumps(payload)
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, data=data, headers=_headers()) as r,
    ):
        assert r.ok, await r.text()
        return await r.json()


async def _lines(url: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
    """A streamed ``/api/chat``: Open WebUI's middleware reads it a line at a time."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=orjson.dumps(payload), headers=_headers()) as r,
    ):
        assert r.status == 200, await r.text()
        return [orjson.loads(line) async for line in r.content if line.strip()]


async def _passed_through(method: str, url: str, payload: dict[str, Any]) -> tuple[int, bytes]:
    """``stream=True, passthrough=True`` (pull, push, create): the chunks as they come."""
    data = orjson.dumps(payload)
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, data=data, headers=_headers()) as r,
    ):
        return r.status, b"".join([chunk async for chunk in r.content.iter_any()])


def _openai_to_ollama(openai_payload: dict[str, Any]) -> dict[str, Any]:
    """What ``convert_payload_openai_to_ollama`` makes of the UI's request: model,
    messages (text content as a string), ``stream`` (false unless set), tools, and the
    options it moves to the top (``keep_alive``, ``think``, ``format``)."""
    payload: dict[str, Any] = {
        "model": openai_payload["model"],
        "messages": openai_payload["messages"],
        "stream": openai_payload.get("stream", False),
    }
    options = dict(openai_payload.get("options") or {})
    for key in ("format", "keep_alive", "think"):
        if key in options:
            payload[key] = options.pop(key)
    if options:
        payload["options"] = options
    return payload


def test_the_model_list_as_open_webui_builds_it(gateway: RunningServer) -> None:
    async def listing() -> tuple[Any, Any, Any]:
        version = await _json("GET", f"{gateway.url}/api/version")
        tags = await _json("GET", f"{gateway.url}/api/tags")
        ps = await _json("GET", f"{gateway.url}/api/ps")
        return version, tags, ps

    version, tags, ps = asyncio.run(listing())
    # get_ollama_versions: the lowest version, split on dots.
    assert tuple(map(int, version["version"].split("."))) >= (0, 13, 4)
    # merge_models_lists keys entries by "model"; every entry needs one.
    models = {entry["model"]: entry for entry in tags["models"]}
    assert {"scripted", "qwen3:0.6b"} <= set(models)
    assert models["qwen3:0.6b"]["details"]["family"] == "qwen3"
    # get_all_models: expires_at from /api/ps, through datetime.fromisoformat.
    expires = {m["model"]: m["expires_at"] for m in ps["models"] if "expires_at" in m}
    assert int(datetime.fromisoformat(expires["qwen3:0.6b"]).timestamp()) > 0


def test_a_chat_as_open_webui_sends_it(gateway: RunningServer, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["Hello", " there"]), Script(text=["A short title"]))
    streamed = _openai_to_ollama(
        {
            "model": "scripted",
            "messages": [{"role": "user", "content": "Say hello."}],
            "stream": True,
            "options": {"temperature": 0.7, "keep_alive": "5m"},
        }
    )
    lines = asyncio.run(_lines(f"{gateway.url}/api/chat", streamed))
    assert "".join(line["message"]["content"] for line in lines) == "Hello there"
    assert lines[-1]["done"] is True and lines[-1]["done_reason"] == "stop"
    assert scripted.requests[-1].params.temperature == 0.7
    assert scripted.requests[-1].keep_alive == "5m"
    # Its title task: the same route, not streamed, read with r.json().
    task = _openai_to_ollama(
        {"model": "scripted", "messages": [{"role": "user", "content": "Title this chat."}]}
    )
    reply = asyncio.run(_json("POST", f"{gateway.url}/api/chat", task))
    assert reply["message"]["content"] == "A short title" and reply["done"] is True


def test_eject_reaches_the_ollama_server_as_an_unload(
    gateway: RunningServer, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(
        Canned(
            chunks=[b'{"model":"qwen3:0.6b","response":"","done":true,"done_reason":"unload"}'],
            media_type="application/json",
        )
    )
    # unload_model: send_request(f"{url}/api/generate", payload, stream=False)
    payload = {"model": "qwen3:0.6b", "keep_alive": 0, "prompt": ""}
    reply = asyncio.run(_json("POST", f"{gateway.url}/api/generate", payload))
    assert reply["done"] is True and reply["done_reason"] == "unload"
    assert fake.paths[-1] == "/api/generate"
    assert orjson.loads(fake.bodies[-1]) == {
        "model": "qwen3:0.6b",
        "prompt": "",
        "keep_alive": 0,
        "stream": False,
    }


def test_pull_and_delete_as_open_webui_sends_them(
    gateway: RunningServer, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    progress = [
        b'{"status":"pulling manifest"}\n',
        b'{"status":"pulling 74701a8c35f6","digest":"sha256:74701a8c35f6","total":1321082688,'
        b'"completed":1321082688}\n',
        b'{"status":"success"}\n',
    ]
    fake.queue.append(Canned(chunks=progress))
    # pull_model: {**form_data, "insecure": True}, form_data holding the UI's name.
    payload = {"name": "llama3.2:1b", "model": "llama3.2:1b", "insecure": True}
    status, body = asyncio.run(_passed_through("POST", f"{gateway.url}/api/pull", payload))
    assert status == 200
    assert [orjson.loads(line)["status"] for line in body.splitlines()] == [
        "pulling manifest",
        "pulling 74701a8c35f6",
        "success",
    ]
    assert (fake.methods[-1], fake.paths[-1]) == ("POST", "/api/pull")
    assert orjson.loads(fake.bodies[-1]) == {"model": "llama3.2:1b", "insecure": True}

    fake.queue.append(Canned(chunks=[], media_type="application/json"))
    # delete_model: send_request(f"{url}/api/delete", "DELETE", payload) -> r.json()
    # of an empty body fails and Open WebUI takes None: only the status matters.
    status, body = asyncio.run(
        _passed_through("DELETE", f"{gateway.url}/api/delete", {"name": "llama3.2:1b"})
    )
    assert status == 200 and body == b""
    assert (fake.methods[-1], fake.paths[-1]) == ("DELETE", "/api/delete")
    assert orjson.loads(fake.bodies[-1]) == {"model": "llama3.2:1b"}


def test_a_pull_error_reaches_open_webui_as_its_detail(
    gateway: RunningServer, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(
        Canned(status=500, chunks=[b'{"error":"pull model manifest: file does not exist"}'])
    )

    async def pull() -> tuple[int, Any]:
        payload = orjson.dumps({"model": "nope:latest", "insecure": True})
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{gateway.url}/api/pull", data=payload, headers=_headers()) as r,
        ):
            # send_request: not r.ok -> r.json(); 'error' in it -> HTTPException(detail)
            return r.status, await r.json()

    status, body = asyncio.run(pull())
    assert status == 502
    assert "file does not exist" in body["error"]

"""Ollama gets the context window a request needs (serving/prepare/context_size.py).

Behind the gateway is a scripted Ollama on loopback that does what a real one does
with a prompt longer than its window: it keeps the last ``num_ctx`` tokens (counted
roughly, a word or a punctuation mark each), 2,048 unless the request says
otherwise, and reports what it kept as ``prompt_eval_count``. Its reply names the
first token it saw (the first message's role when nothing was cut), so a test can
tell whether the prompt's start (the system prompt, where the agent's instructions
live) reached the model.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from llmbridge.backends.ollama import OllamaBackend
from llmbridge.serving.prepare.context_size import SAFE_CONTEXT
from tests.conftest import RunningServer, anthropic_client, ollama_client, running_gateway

DEFAULT_NUM_CTX = 2048
"""The window the scripted Ollama allocates when a request sets none."""
TOOLS: list[dict[str, Any]] = [
    {
        "name": "Read",
        "description": "Reads a file from the local filesystem.",
        "input_schema": {
            "type": "object",
            "properties": {"file_path": {"type": "string"}},
            "required": ["file_path"],
        },
    }
]


def tokens(text: str) -> list[str]:
    return re.findall(r"\w+|[^\w\s]", text)


class TruncatingOllama:
    """``/api/chat`` and ``/api/show`` as a real Ollama answers them, truncation included.

    ``windows`` maps a model to the context length ``/api/show`` reports (a model not
    in it reports none)."""

    def __init__(self) -> None:
        self.windows: dict[str, int] = {}
        self.bodies: list[dict[str, Any]] = []
        self.app = Starlette(
            routes=[
                Route("/api/chat", self._chat, methods=["POST"]),
                Route("/api/show", self._show, methods=["POST"]),
                Route("/api/version", self._version, methods=["GET"]),
            ]
        )

    async def _chat(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        self.bodies.append(body)
        seen = [
            token
            for message in body["messages"]
            for token in tokens(f"{message['role']}: {message.get('content') or ''}")
        ]
        seen += tokens(orjson.dumps(body.get("tools") or []).decode())
        num_ctx = (body.get("options") or {}).get("num_ctx") or DEFAULT_NUM_CTX
        kept = seen[-num_ctx:]  # what Ollama does with a prompt past its window
        frames = [
            {
                "model": body["model"],
                "created_at": "2026-01-01T00:00:00Z",
                "message": {"role": "assistant", "content": f"first:{kept[0]}"},
                "done": False,
            },
            {
                "model": body["model"],
                "created_at": "2026-01-01T00:00:00Z",
                "message": {"role": "assistant", "content": ""},
                "done": True,
                "done_reason": "stop",
                "prompt_eval_count": len(kept),
                "eval_count": 2,
            },
        ]
        if body.get("stream") is False:  # one object, as Ollama answers it
            whole = {**frames[1], "message": frames[0]["message"]}
            return Response(orjson.dumps(whole), media_type="application/json")
        return Response(
            b"".join(orjson.dumps(f) + b"\n" for f in frames), media_type="application/x-ndjson"
        )

    async def _show(self, request: Request) -> Response:
        model = orjson.loads(await request.body())["model"]
        info: dict[str, Any] = {"general.architecture": "llama"}
        if model in self.windows:
            info["llama.context_length"] = self.windows[model]
        return JSONResponse({"model_info": info, "capabilities": ["completion", "tools"]})

    async def _version(self, request: Request) -> Response:
        return JSONResponse({"version": "0.12.0"})


@pytest.fixture(scope="module")
def ollama() -> TruncatingOllama:
    return TruncatingOllama()


@pytest.fixture(scope="module")
def ollama_server(ollama: TruncatingOllama) -> Iterator[RunningServer]:
    with RunningServer(ollama.app) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(ollama_server: RunningServer) -> Iterator[RunningServer]:  # type: ignore[override]
    routes = [{"name": "qwen3-16k", "backend": "ollama", "model": "qwen3", "context_length": 16384}]
    with running_gateway(
        {"ollama": OllamaBackend("ollama", ollama_server.url)}, models=routes
    ) as server:
        yield server


def long_system_prompt(sentences: int) -> str:
    """Claude Code's system prompt is tens of thousands of characters; this one is as
    long as asked."""
    body = " ".join(f"Rule {n}: read a file before you edit it." for n in range(sentences))
    return f"You are an interactive coding agent. {body}"


def test_claude_codes_long_prompt_reaches_ollama_whole(
    gateway: RunningServer, ollama: TruncatingOllama
) -> None:
    """Claude Code's dialect, its size of prompt, its max_tokens: without num_ctx the
    scripted Ollama keeps the last 2,048 tokens and the model never sees the system
    prompt's start."""
    ollama.windows["qwen3-cc"] = 40960
    system = long_system_prompt(600)  # about 6,000 tokens
    with anthropic_client(gateway.url).messages.stream(
        model="qwen3-cc",
        max_tokens=32000,
        system=[{"type": "text", "text": system}],
        messages=[{"role": "user", "content": "Fix the failing test."}],
        tools=TOOLS,  # type: ignore[arg-type]
    ) as stream:
        reply = stream.get_final_message()
        headers = stream.response.headers
    sent = ollama.bodies[-1]
    num_ctx = sent["options"]["num_ctx"]
    whole = len(tokens(f"system: {system}")) + len(tokens("user: Fix the failing test."))
    whole += len(tokens(orjson.dumps(sent["tools"]).decode()))
    assert whole > DEFAULT_NUM_CTX  # the request needs more than the default window
    assert num_ctx >= whole + sent["options"]["num_predict"]  # prompt and reply fit
    assert [b.text for b in reply.content if b.type == "text"] == ["first:system"]
    assert reply.usage.input_tokens == whole  # Ollama evaluated all of it
    assert f"num_ctx={num_ctx}" in headers["x-llmbridge-params"].split(",")


def test_the_window_is_the_models_when_the_request_fits(
    gateway: RunningServer, ollama: TruncatingOllama
) -> None:
    """The same window on every request to a model: Ollama reloads a model whose
    num_ctx changes, and the reload loses its prompt cache."""
    ollama.windows["qwen3-fits"] = 40960
    client = anthropic_client(gateway.url)
    for question in ("Hello", "And now a longer question, please?"):
        raw = client.messages.with_raw_response.create(
            model="qwen3-fits", max_tokens=1024, messages=[{"role": "user", "content": question}]
        )
        assert raw.headers["x-llmbridge-params"] == "num_ctx=40960"
        assert ollama.bodies[-1]["options"]["num_ctx"] == 40960


def test_a_routes_context_length_wins_over_the_models(
    gateway: RunningServer, ollama: TruncatingOllama
) -> None:
    ollama.windows["qwen3"] = 40960  # what /api/show says; the route says 16384
    raw = anthropic_client(gateway.url).messages.with_raw_response.create(
        model="qwen3-16k", max_tokens=512, messages=[{"role": "user", "content": "Hi"}]
    )
    assert raw.headers["x-llmbridge-params"] == "num_ctx=16384"
    assert ollama.bodies[-1]["model"] == "qwen3"
    assert ollama.bodies[-1]["options"]["num_ctx"] == 16384


def test_a_clients_own_num_ctx_is_kept_when_it_holds_the_request(
    gateway: RunningServer, ollama: TruncatingOllama
) -> None:
    ollama.windows["qwen3-own"] = 40960
    reply = ollama_client(gateway.url).chat(
        model="qwen3-own",
        messages=[{"role": "user", "content": "Turn on the kitchen light"}],
        options={"num_ctx": 4096},
    )
    assert reply.message.content == "first:user"
    assert ollama.bodies[-1]["options"]["num_ctx"] == 4096


def test_a_clients_num_ctx_below_the_request_is_raised_and_said(
    gateway: RunningServer, ollama: TruncatingOllama
) -> None:
    """Home Assistant sets num_ctx itself (8,192 by default); a prompt larger than
    what it set would lose its start, so serving raises it and says so."""
    ollama.windows["qwen3-small"] = 40960
    system = long_system_prompt(300)  # about 3,000 tokens
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Hi"}]
    reply = ollama_client(gateway.url).chat(
        model="qwen3-small", messages=messages, options={"num_ctx": 1024}
    )
    assert reply.message.content == "first:system"
    num_ctx = ollama.bodies[-1]["options"]["num_ctx"]
    assert num_ctx > len(tokens(f"system: {system}"))
    # The ollama client does not show response headers; the same request over HTTP:
    raw = httpx.post(
        f"{gateway.url}/api/chat",
        json={"model": "qwen3-small", "messages": messages, "options": {"num_ctx": 1024}},
        timeout=30,
    )
    assert raw.headers["x-llmbridge-params"] == f"num_ctx={num_ctx}"


def test_without_a_known_window_only_a_large_request_sets_num_ctx(
    gateway: RunningServer, ollama: TruncatingOllama
) -> None:
    """A model whose window nobody states keeps the server's own default for a request
    any Ollama holds (an operator may have raised it), and gets a window that holds a
    larger one."""
    client = ollama_client(gateway.url)
    small = client.chat(model="mystery", messages=[{"role": "user", "content": "Hi"}])
    assert small.message.content == "first:user"
    assert "num_ctx" not in (ollama.bodies[-1].get("options") or {})
    system = long_system_prompt(300)
    large = client.chat(
        model="mystery",
        messages=[{"role": "system", "content": system}, {"role": "user", "content": "Hi"}],
    )
    assert large.message.content == "first:system"
    num_ctx = ollama.bodies[-1]["options"]["num_ctx"]
    assert num_ctx > SAFE_CONTEXT and num_ctx & (num_ctx - 1) == 0  # a power of two

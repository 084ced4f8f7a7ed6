"""Work that grows with a request runs off the event loop for a large one:
encoding it for the backend (backends/http.py) and the Anthropic front's input-token
estimate (gateway/exchange/exchange.py). Checked by where the work ran, not by a timer: the
hooks below wrap the real functions and note whether an event loop was running in
their thread (``asyncio.get_running_loop`` answers only on the loop's own thread)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest

from llmbridge.backends.http import HTTPSettings
from llmbridge.backends.openai_compat import OpenAICompatBackend
from llmbridge.dialects import openai as openai_dialect
from llmbridge.gateway.exchange import exchange
from tests.conftest import RunningServer, anthropic_client, openai_client, running_gateway
from tests.upstream import Canned, FakeUpstream

_CHUNK = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "x"}
_REPLY = [
    f"data: {orjson.dumps(payload).decode()}\n\n".encode()
    for payload in (
        _CHUNK | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"}}]},
        _CHUNK | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    )
] + [b"data: [DONE]\n\n"]

_LARGE = [
    {"role": ("user", "assistant")[i % 2], "content": f"message {i} " + "lorem ipsum " * 90}
    for i in range(1_999)
]
"""About 2 MB: over the 32 KiB offload threshold, and written out in slices (256 KiB)."""


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class _Where:
    """Wraps a function; records, per call, whether it ran on the event loop, and
    what it returned."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.on_loop: list[bool] = []
        self.results: list[Any] = []

    def __call__(self, *args: Any) -> Any:
        self.on_loop.append(_on_event_loop())
        result = self.function(*args)
        self.results.append(result)
        return result


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[FakeUpstream, RunningServer]]:
    fake = FakeUpstream()
    with RunningServer(fake.app) as server:
        yield fake, server


@pytest.fixture(scope="module")
def gateway(upstream: tuple[FakeUpstream, RunningServer]) -> Iterator[RunningServer]:  # type: ignore[override]
    backend = OpenAICompatBackend("vllm", upstream[1].url, http=HTTPSettings())
    # Where the encoder runs is the translated path's question: the OpenAI client's
    # requests would otherwise be relayed as they came (docs/PASSTHROUGH.md).
    models = [{"name": "m", "backend": "vllm", "passthrough": False}]
    with running_gateway({"vllm": backend}, models=models) as server:
        yield server


@pytest.fixture
def hooks(monkeypatch: pytest.MonkeyPatch) -> tuple[_Where, _Where]:
    encode = _Where(openai_dialect.encode_chat_request)
    count = _Where(exchange.count_request_tokens)
    monkeypatch.setattr(openai_dialect, "encode_chat_request", encode)
    monkeypatch.setattr(exchange, "count_request_tokens", count)
    return encode, count


def test_a_large_request_is_encoded_and_counted_off_the_event_loop(
    gateway: RunningServer,
    upstream: tuple[FakeUpstream, RunningServer],
    hooks: tuple[_Where, _Where],
) -> None:
    fake, _ = upstream
    encode, count = hooks
    fake.queue.append(Canned(media_type="text/event-stream", chunks=_REPLY))
    with anthropic_client(gateway.url).messages.stream(
        model="m", max_tokens=8, messages=_LARGE
    ) as stream:
        events = list(stream)
    start = next(e for e in events if e.type == "message_start")
    assert encode.on_loop == [False]
    assert count.on_loop == [False]
    assert start.message.usage.input_tokens == count.results[0] > 0
    # The body written out in slices arrived whole and in order.
    sent = orjson.loads(fake.bodies[-1])
    assert fake.bodies[-1] == orjson.dumps(encode.results[0])
    assert [m["content"] for m in sent["messages"]] == [m["content"] for m in _LARGE]
    assert "".join(e.delta.text for e in events if e.type == "content_block_delta") == "ok"


def test_a_small_request_is_encoded_and_counted_in_place(
    gateway: RunningServer,
    upstream: tuple[FakeUpstream, RunningServer],
    hooks: tuple[_Where, _Where],
) -> None:
    fake, _ = upstream
    encode, count = hooks
    fake.queue.append(Canned(media_type="text/event-stream", chunks=_REPLY))
    with anthropic_client(gateway.url).messages.stream(
        model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        assert stream.get_final_message().content[0].type == "text"
    assert encode.on_loop == [True]
    assert count.on_loop == [True]
    whole = _CHUNK | {"object": "chat.completion"}  # asked whole, as the client asks
    whole["choices"] = [{"index": 0, "message": {"content": "ok"}, "finish_reason": "stop"}]
    fake.queue.append(Canned(media_type="application/json", chunks=[orjson.dumps(whole)]))
    reply = openai_client(gateway.url).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.choices[0].message.content == "ok"
    assert encode.on_loop == [True, True]
    assert orjson.loads(fake.bodies[-1])["messages"] == [{"role": "user", "content": "hi"}]


def test_every_token_count_of_a_large_prompt_runs_off_the_event_loop(
    gateway: RunningServer, hooks: tuple[_Where, _Where]
) -> None:
    """The three token-count routes (16 counts on a 4 MB stored chain
    took another client's /api/chat from 10 ms to 2.3 s): one count each, each in a
    worker thread, each the same figure."""
    import httpx

    _, count = hooks
    with httpx.Client(base_url=gateway.url, timeout=60) as client:
        anthropic_count = client.post(
            "/v1/messages/count_tokens", json={"model": "m", "messages": _LARGE}
        )
        responses_count = client.post(
            "/v1/responses/input_tokens", json={"model": "m", "input": _LARGE}
        )
        gemini_count = client.post(
            "/v1beta/models/m:countTokens",
            json={
                "contents": [
                    {"role": ("user", "model")[i % 2], "parts": [{"text": m["content"]}]}
                    for i, m in enumerate(_LARGE)
                ]
            },
        )
    assert count.on_loop == [False, False, False]
    assert anthropic_count.json()["input_tokens"] == count.results[0] > 0
    assert responses_count.json()["input_tokens"] == count.results[1]
    assert gemini_count.json()["totalTokens"] == count.results[2]

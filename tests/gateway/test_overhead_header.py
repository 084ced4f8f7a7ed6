"""``x-llmbridge-overhead-ms``: on every reply of every dialect,
streamed or not, a refusal included, as each dialect's official client reads it (its
raw response; Ollama's client shows no headers, so plain HTTP there).

The figure is the gateway's own time without the wait on the backend. That is checked
without timing anything: a backend that takes ``DELAY`` seconds to write its reply makes
the request last at least that long, and a reply sent whole excludes the wait, so its
overhead is at most the client's wall time less ``DELAY``, however loaded the machine.
"""

from __future__ import annotations

import time

import httpx
import pytest
from google import genai
from google.genai import types

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.gateway.exchange.exchange import OVERHEAD_HEADER
from tests.conftest import RunningServer, anthropic_client, openai_client

ASK = [{"role": "user", "content": "hello"}]
DELAY = 0.1
"""Seconds between the scripted backend's chunks (three of them)."""


def _overhead(headers: httpx.Headers | dict[str, str]) -> float:
    value = float(headers[OVERHEAD_HEADER])
    assert value >= 0
    return value


def test_openai_chat_whole_and_streamed(gateway: RunningServer) -> None:
    client = openai_client(gateway.url)
    raw = client.chat.completions.with_raw_response.create(model="scripted", messages=ASK)
    _overhead(raw.headers)
    assert raw.parse().choices[0].message.content
    with client.chat.completions.with_streaming_response.create(
        model="scripted", messages=ASK, stream=True
    ) as streamed:
        _overhead(streamed.headers)
        assert list(streamed.parse())


def test_openai_responses_completions_embeddings_and_models(gateway: RunningServer) -> None:
    client = openai_client(gateway.url)
    _overhead(client.responses.with_raw_response.create(model="scripted", input="hi").headers)
    with client.responses.with_streaming_response.create(
        model="scripted", input="hi", stream=True
    ) as streamed:
        _overhead(streamed.headers)
        assert list(streamed.parse())
    completion = client.completions.with_raw_response.create(model="scripted", prompt="hi")
    _overhead(completion.headers)
    embedding = client.embeddings.with_raw_response.create(model="scripted", input="hi")
    _overhead(embedding.headers)
    _overhead(client.models.with_raw_response.list().headers)


def test_anthropic_messages_whole_streamed_and_counted(gateway: RunningServer) -> None:
    client = anthropic_client(gateway.url)
    raw = client.messages.with_raw_response.create(model="scripted", max_tokens=32, messages=ASK)
    _overhead(raw.headers)
    with client.messages.with_streaming_response.create(
        model="scripted", max_tokens=32, messages=ASK, stream=True
    ) as streamed:
        _overhead(streamed.headers)
        assert [event.type for event in streamed.parse()][-1] == "message_stop"
    counted = client.messages.with_raw_response.count_tokens(model="scripted", messages=ASK)
    _overhead(counted.headers)


def test_gemini_whole_and_streamed(gateway: RunningServer) -> None:
    client = genai.Client(api_key="x", http_options=types.HttpOptions(base_url=gateway.url))
    try:
        reply = client.models.generate_content(model="scripted", contents="hello")
        assert reply.sdk_http_response is not None and reply.sdk_http_response.headers
        _overhead(reply.sdk_http_response.headers)
        chunks = list(client.models.generate_content_stream(model="scripted", contents="go"))
        first = chunks[0].sdk_http_response
        assert first is not None and first.headers
        _overhead(first.headers)
    finally:
        client.close()


@pytest.mark.parametrize("stream", [False, True])
def test_ollama_chat(gateway: RunningServer, stream: bool) -> None:
    reply = httpx.post(
        gateway.url + "/api/chat",
        json={"model": "scripted", "messages": ASK, "stream": stream},
        timeout=30,
    )
    assert reply.status_code == 200
    _overhead(reply.headers)
    _overhead(httpx.get(gateway.url + "/api/tags", timeout=30).headers)


def test_a_refusal_has_it_too(gateway: RunningServer) -> None:
    import anthropic

    client = anthropic_client(gateway.url)
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="scripted", max_tokens=32, messages=[])
    _overhead(caught.value.response.headers)


def test_a_reply_sent_whole_excludes_the_wait_on_the_backend(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    scripted.enqueue(Script(text=["a", "b", "c"], chunk_delay=DELAY))
    client = openai_client(gateway.url)
    started = time.perf_counter()
    raw = client.chat.completions.with_raw_response.create(model="scripted", messages=ASK)
    wall_ms = (time.perf_counter() - started) * 1000
    assert raw.parse().choices[0].message.content == "abc"
    assert _overhead(raw.headers) <= wall_ms - 3 * DELAY * 1000

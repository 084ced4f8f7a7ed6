"""The Ollama and OpenAI-compatible backends end to end: a client's dialect in front,
a fake upstream replaying a backend's quirky stream behind."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import anthropic
import httpx
import orjson
import pytest

from llmbridge.backends.http import HTTPSettings
from llmbridge.backends.ollama import OllamaBackend
from llmbridge.backends.openai_compat import OpenAICompatBackend
from llmbridge.core.messages import Message, TextPart
from llmbridge.core.request import ChatRequest
from llmbridge.gateway.config import GatewayConfig
from tests.conftest import (
    RunningServer,
    anthropic_client,
    ollama_client,
    openai_client,
    running_gateway,
)
from tests.upstream import Canned, FakeUpstream


def ndjson(*frames: dict[str, object]) -> list[bytes]:
    return [orjson.dumps(f) + b"\n" for f in frames]


def sse(*payloads: dict[str, object] | str) -> list[bytes]:
    out = []
    for p in payloads:
        data = p if isinstance(p, str) else orjson.dumps(p).decode()
        out.append(f"data: {data}\n\n".encode())
    return out


def ok_stream(chunk_id: str = "c") -> list[bytes]:
    """An OpenAI-compatible server's stream of one reply, ``ok``, then ``[DONE]``."""
    base = {"id": chunk_id, "object": "chat.completion.chunk", "created": 1, "model": "x"}
    return sse(
        base | {"choices": [{"index": 0, "delta": {"content": "ok"}}]},
        base | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        "[DONE]",
    )


def ok_reply(chunk_id: str = "c", **headers: str) -> Canned:
    """An OpenAI-compatible server's reply sent whole, ``ok``: what a request the client
    wants whole is answered with (the backend is asked for it whole)."""
    message = {"role": "assistant", "content": "ok"}
    reply = {"id": chunk_id, "object": "chat.completion", "created": 1, "model": "x"}
    reply["choices"] = [{"index": 0, "message": message, "finish_reason": "stop"}]
    return Canned(media_type="application/json", chunks=[orjson.dumps(reply)], headers=headers)


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[FakeUpstream, RunningServer]]:
    fake = FakeUpstream()
    with RunningServer(fake.app) as server:
        yield fake, server


@pytest.fixture(scope="module")
def gateway(upstream: tuple[FakeUpstream, RunningServer]) -> Iterator[RunningServer]:  # type: ignore[override]
    _, up = upstream
    backends = {
        "ollama": OllamaBackend("ollama", up.url),
        "vllm": OpenAICompatBackend("vllm", up.url),
        # By host name: aiohttp's default cookie jar keeps no cookie from an IP address.
        "named": OpenAICompatBackend("named", f"http://localhost:{up.port}"),
    }
    # These tests read the translated path's decoding of quirky streams: the
    # pass-through path (tests/gateway/test_passthrough.py) relays them as they are.
    models = [
        {"name": "oai-*", "backend": "vllm", "passthrough": False},
        {"name": "named-*", "backend": "named", "passthrough": False},
    ]
    with running_gateway(backends, models=models) as server:
        yield server


OLLAMA_TOOLS_IN_DONE_FRAME = ndjson(
    {
        "model": "qwen3",
        "created_at": "2026-01-01T00:00:00Z",
        "message": {"role": "assistant", "content": ""},
        "done": False,
    },
    {
        "model": "qwen3",
        "created_at": "2026-01-01T00:00:00Z",
        "message": {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}},
                {"function": {"index": 0, "name": "get_weather", "arguments": {"city": "Rome"}}},
            ],
        },
        "done": True,
        "done_reason": "stop",
        "prompt_eval_count": 12,
        "eval_count": 7,
    },
)


def test_anthropic_client_over_ollama_tool_calls_in_final_frame(
    gateway: RunningServer, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(chunks=OLLAMA_TOOLS_IN_DONE_FRAME))
    client = anthropic_client(gateway.url)
    with client.messages.stream(
        model="qwen3",
        max_tokens=64,
        messages=[{"role": "user", "content": "weather in Paris and Rome?"}],
        tools=[{"name": "get_weather", "input_schema": {"type": "object"}}],
    ) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["tool_use", "tool_use"]
    inputs = [b.input for b in final.content if b.type == "tool_use"]
    assert inputs == [{"city": "Paris"}, {"city": "Rome"}]
    ids = {b.id for b in final.content if b.type == "tool_use"}
    assert len(ids) == 2
    assert final.stop_reason == "tool_use"
    assert final.usage.output_tokens == 7
    sent = orjson.loads(fake.bodies[-1])
    assert sent["model"] == "qwen3" and sent["tools"][0]["function"]["name"] == "get_weather"


def test_ollama_client_over_ollama_streams_text(
    gateway: RunningServer, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(
        Canned(
            chunks=ndjson(
                {
                    "model": "m",
                    "created_at": "2026-01-01T00:00:00Z",
                    "message": {"role": "assistant", "content": "Bon"},
                    "done": False,
                },
                {
                    "model": "m",
                    "created_at": "2026-01-01T00:00:00Z",
                    "message": {"role": "assistant", "content": "jour"},
                    "done": False,
                },
                {
                    "model": "m",
                    "created_at": "2026-01-01T00:00:00Z",
                    "message": {"role": "assistant", "content": ""},
                    "done": True,
                    "done_reason": "length",
                    "eval_count": 2,
                },
            )
        )
    )
    chunks = list(
        ollama_client(gateway.url).chat(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert "".join(c.message.content for c in chunks) == "Bonjour"
    assert chunks[-1].done_reason == "length"


def test_openai_client_over_openai_compat_with_reasoning_and_combined_chunk(
    gateway: RunningServer, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "x"}
    fake.queue.append(
        Canned(
            media_type="text/event-stream",
            chunks=sse(
                base
                | {"choices": [{"index": 0, "delta": {"role": "assistant", "reasoning": "hmm"}}]},
                base | {"choices": [{"index": 0, "delta": {"content": "Hel"}}]},
                # content and finish_reason in the same chunk: the content must survive
                base
                | {"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]},
                base
                | {
                    "choices": [],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
                },
                "[DONE]",
            ),
        )
    )
    client = openai_client(gateway.url)
    chunks = list(
        client.chat.completions.create(
            model="oai-model",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello"
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == 2
    sent = orjson.loads(fake.bodies[-1])
    assert sent["model"] == "oai-model" and sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}


def test_anthropic_thinking_over_openai_compat(
    gateway: RunningServer, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "x"}
    fake.queue.append(
        Canned(
            media_type="text/event-stream",
            chunks=sse(
                base | {"choices": [{"index": 0, "delta": {"reasoning_content": "step 1"}}]},
                base | {"choices": [{"index": 0, "delta": {"content": "42"}}]},
                base | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                "[DONE]",
            ),
        )
    )
    with anthropic_client(gateway.url).messages.stream(
        model="oai-r1", max_tokens=32, messages=[{"role": "user", "content": "?"}]
    ) as stream:
        reply = stream.get_final_message()
    assert [b.type for b in reply.content] == ["thinking", "text"]
    assert reply.content[0].type == "thinking" and reply.content[0].thinking == "step 1"
    assert reply.content[1].type == "text" and reply.content[1].text == "42"


def test_a_reply_the_client_wants_whole_is_asked_for_whole(
    gateway: RunningServer, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    """A translated request the client wants whole asks the OpenAI-compatible backend for
    a whole reply (no stream to decode chunk by chunk), and the reply's reasoning, text
    and counts reach the client as a stream's would."""
    fake, _ = upstream
    message = {"role": "assistant", "reasoning_content": "step 1", "content": "42"}
    reply = {"id": "c9", "object": "chat.completion", "created": 1, "model": "x"}
    reply["choices"] = [{"index": 0, "message": message, "finish_reason": "stop"}]
    reply["usage"] = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    fake.queue.append(Canned(media_type="application/json", chunks=[orjson.dumps(reply)]))
    answer = anthropic_client(gateway.url).messages.create(
        model="oai-r1", max_tokens=32, messages=[{"role": "user", "content": "?"}]
    )
    assert [b.type for b in answer.content] == ["thinking", "text"]
    assert answer.content[1].type == "text" and answer.content[1].text == "42"
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (3, 2)
    sent = orjson.loads(fake.bodies[-1])
    assert sent["stream"] is False and "stream_options" not in sent


@pytest.mark.parametrize("model", ["m", "oai-m"])
def test_upstream_connections_are_reused(
    gateway: RunningServer, upstream: tuple[FakeUpstream, RunningServer], model: str
) -> None:
    """Decoders stop at the final frame; the transport drains the body's tail so the
    next request reuses the connection instead of opening a new one (the Ollama
    backend's stream; an OpenAI-compatible backend is asked for a whole reply here,
    read to its end)."""
    fake, _ = upstream
    client = openai_client(gateway.url)
    for _ in range(3):
        if model.startswith("oai-"):  # asked whole: one body, read to its end
            fake.queue.append(ok_reply())
        else:
            fake.queue.append(
                Canned(
                    chunks=ndjson(
                        {
                            "model": "m",
                            "created_at": "2026-01-01T00:00:00Z",
                            "message": {"role": "assistant", "content": "ok"},
                            "done": True,
                        },
                    )
                )
            )
        reply = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}]
        )
        assert reply.choices[0].message.content == "ok"
    assert len(set(fake.peers[-3:])) == 1


async def _one_chat(backend: OpenAICompatBackend, fake: FakeUpstream) -> None:
    fake.queue.append(Canned(media_type="text/event-stream", chunks=ok_stream()))
    request = ChatRequest(
        model="x", messages=[Message(role="user", parts=(TextPart("hi"),))], stream=True
    )
    events = [event async for event in backend.chat(request)]
    assert events, "the backend answered nothing"


async def test_an_idle_upstream_connection_is_dropped_after_keep_alive_timeout(
    upstream: tuple[FakeUpstream, RunningServer],
) -> None:
    """``keep_alive_timeout`` reaches the pool: a connection idle for longer is not reused
    (the gateway drops it before a backend that closes at 5 s would), a shorter pause
    reuses it."""
    fake, up = upstream
    brief = OpenAICompatBackend("brief", up.url, http=HTTPSettings(keep_alive=0.2))
    kept = OpenAICompatBackend("kept", up.url, http=HTTPSettings(keep_alive=60))
    try:
        for backend in (brief, kept):
            await _one_chat(backend, fake)
            await asyncio.sleep(0.4)  # longer than brief's 0.2 s, far shorter than 60 s
            await _one_chat(backend, fake)
        brief_first, brief_second, kept_first, kept_second = fake.peers[-4:]
        assert brief_first != brief_second  # a new connection
        assert kept_first == kept_second  # the same one
    finally:
        await brief.aclose()
        await kept.aclose()


def test_idle_connection_defaults_follow_what_a_new_connection_costs() -> None:
    """Plain HTTP (vLLM, llama.cpp's server: closed at 5 s, cheap to reopen): under 5 s.
    HTTPS (cloud APIs: a TLS handshake to reopen): longer. A set value wins."""
    kinds = {
        "local": {"type": "openai", "url": "http://127.0.0.1:8000/v1"},
        "cloud": {"type": "openai", "url": "https://api.openai.com/v1"},
        "claude": {"type": "anthropic"},
        "gemini": {"type": "gemini"},
        "set": {"type": "ollama", "url": "http://h:11434", "keep_alive_timeout": 30},
    }
    config = GatewayConfig.model_validate({"backends": kinds})
    keep = {name: b.keep_alive_s for name, b in config.backends.items()}  # type: ignore[union-attr]
    assert 0 < keep["local"] < 5
    assert keep["cloud"] == keep["claude"] == keep["gemini"] == 15
    assert keep["set"] == 30


def test_a_cookie_a_backend_sets_is_not_sent_on_later_requests(
    gateway: RunningServer, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    """One upstream session serves every caller: a ``Set-Cookie`` in one caller's reply
    must not ride along on the next caller's request."""
    fake, _ = upstream
    client = openai_client(gateway.url)
    for _ in range(2):
        fake.queue.append(ok_reply(**{"set-cookie": "session=first-callers; Path=/"}))
        reply = client.chat.completions.create(
            model="named-model", messages=[{"role": "user", "content": "hi"}]
        )
        assert reply.choices[0].message.content == "ok"
    assert fake.cookies[-2:] == [None, None]


def _frame(message: dict[str, object], done: bool = False, **extra: object) -> dict[str, object]:
    base = {"model": "qwen3", "created_at": "2026-01-01T00:00:00Z"}
    return base | {"message": {"role": "assistant", "content": ""} | message, "done": done} | extra


def test_anthropic_stream_heals_quirky_arguments_after_thinking_and_text(
    gateway: RunningServer, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(
        Canned(
            chunks=ndjson(
                _frame({"thinking": "The user wants files."}),
                _frame({"content": "Listing them now."}),
                _frame(
                    {
                        "tool_calls": [
                            # a JSON string, then doubly escaped; both in the final frame
                            {
                                "function": {
                                    "index": 0,
                                    "name": "bash",
                                    "arguments": '{"command": "ls"}',
                                }
                            },
                            {
                                "function": {
                                    "index": 0,
                                    "name": "bash",
                                    "arguments": '"{\\"command\\":\\"pwd\\"}"',
                                }
                            },
                        ]
                    },
                    done=True,
                    done_reason="stop",
                    prompt_eval_count=5,
                    eval_count=9,
                ),
            )
        )
    )
    tools = [
        {
            "name": "bash",
            "input_schema": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        }
    ]
    with anthropic_client(gateway.url).messages.stream(
        model="qwen3",
        max_tokens=64,
        tools=tools,
        messages=[{"role": "user", "content": "list files"}],
    ) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use", "tool_use"]
    inputs = [b.input for b in final.content if b.type == "tool_use"]
    assert inputs == [{"command": "ls"}, {"command": "pwd"}]
    assert final.stop_reason == "tool_use"


def test_anthropic_stream_reports_a_backend_failure_mid_stream(
    gateway: RunningServer, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(
        Canned(
            chunks=[
                *ndjson(_frame({"content": "partial "})),
                b'{"error":"model runner crashed"}\n',
            ]
        )
    )
    client = anthropic_client(gateway.url)
    with (
        pytest.raises(anthropic.APIError, match="model runner crashed"),
        client.messages.stream(
            model="qwen3", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        ) as stream,
    ):
        list(stream.text_stream)


def test_an_ollama_repeat_penalty_reaches_an_openai_backend_as_frequency_penalty(
    gateway: RunningServer, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    """Parameters are fitted to the backend for gateway clients exactly as for agent
    turns (serving/prepare/sampling.py): an OpenAI-compatible server has no repeat_penalty, so it
    gets the converted frequency_penalty, and the reply says what was fitted."""
    fake, _ = upstream
    for _ in range(2):
        fake.queue.append(ok_reply("c1"))
    reply = ollama_client(gateway.url).chat(
        model="oai-x",
        messages=[{"role": "user", "content": "hi"}],
        options={"repeat_penalty": 1.1, "top_k": 5},
    )
    assert reply.message.content == "ok"
    sent = orjson.loads(fake.bodies[-1])
    assert sent["frequency_penalty"] == 0.1906  # 2 * ln(1.1), rounded
    assert "repeat_penalty" not in sent and "top_k" not in sent
    # An explicit frequency_penalty wins over the conversion; the header names both.
    raw = httpx.post(
        f"{gateway.url}/api/chat",
        json={
            "model": "oai-x",
            "stream": False,
            "messages": [{"role": "user", "content": "hi"}],
            "options": {"repeat_penalty": 1.5, "frequency_penalty": 0.25},
        },
    )
    assert raw.status_code == 200, raw.text
    assert orjson.loads(fake.bodies[-1])["frequency_penalty"] == 0.25
    assert raw.headers["x-llmbridge-params"] == "repeat_penalty"

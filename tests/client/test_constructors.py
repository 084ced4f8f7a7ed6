"""Every constructor over its own wire: native Ollama and OpenAI-compatible against a fake
upstream, Anthropic and the llmbridge gateway against the gateway over a scripted backend,
and a backend in process."""

from __future__ import annotations

from typing import Any

import orjson

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.client import ErrorCode, EventType, OllamaAdapter, StreamEvent, TokenType
from llmbridge.core.errors import BackendError, BackendProtocolError
from llmbridge.core.response import Usage
from tests.client.conftest import DONE, chunk, closed_port, collect, kinds, ndjson
from tests.conftest import RunningServer
from tests.upstream import Canned, FakeUpstream

Upstream = tuple[FakeUpstream, RunningServer]
RESPONSE = TokenType.FINAL_SYNTHESIS_LLM_RESPONSE
TOOLS = [{"name": "get_weather", "input_schema": {"type": "object"}}]


def frame(content: str = "", done: bool = False, **extra: object) -> dict[str, object]:
    message = {"role": "assistant", "content": content, **extra.pop("message", {})}  # type: ignore[dict-item]
    return {
        "model": "qwen3",
        "created_at": "2026-01-01T00:00:00Z",
        "message": message,
        "done": done,
        **extra,
    }


# -- native Ollama --------------------------------------------------------------------


async def test_native_ollama_streams_text_with_usage(upstream: Upstream) -> None:
    fake, server = upstream
    fake.queue.append(
        Canned(
            chunks=ndjson(
                frame("Bon"),
                frame("jour"),
                frame(done=True, done_reason="stop", prompt_eval_count=9, eval_count=2),
            )
        )
    )
    async with OllamaAdapter.native(server.url, default_model="qwen3") as adapter:
        events = await collect(adapter.call("Say hello", temperature=0, top_k=20, mirostat=1))
    assert kinds(events) == ["TOKEN", "TOKEN", "METADATA", "END"]
    assert [e.data for e in events[:2]] == ["Bon", "jour"]
    meta = events[2].metadata
    assert meta is not None
    assert (meta.stop_reason, meta.input_tokens, meta.output_tokens) == ("stop", 9, 2)
    sent = orjson.loads(fake.bodies[-1])
    assert sent["model"] == "qwen3" and sent["stream"] is True
    assert sent["options"] == {"temperature": 0.0, "top_k": 20, "mirostat": 1}


async def test_native_ollama_tool_calls_in_the_final_frame(upstream: Upstream) -> None:
    fake, server = upstream
    calls = [
        {"function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}},
        {"function": {"index": 0, "name": "get_weather", "arguments": {"city": "Rome"}}},
    ]
    fake.queue.append(
        Canned(
            chunks=ndjson(
                frame(),
                frame(done=True, done_reason="stop", message={"tool_calls": calls}),
            )
        )
    )
    async with OllamaAdapter.native(server.url, default_model="qwen3") as adapter:
        events = await collect(adapter.call("Weather in Paris and Rome?", tools=TOOLS))
    assert kinds(events) == ["TOKEN", "METADATA", "END"]
    uses = events[0].tool_uses
    assert [(u["name"], u["input"]) for u in uses] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Rome"}),
    ]
    assert len({u["id"] for u in uses}) == 2
    assert events[1].metadata is not None and events[1].metadata.stop_reason == "tool_calls"


async def test_native_ollama_in_band_error_and_http_error(upstream: Upstream) -> None:
    fake, server = upstream
    fake.queue.append(Canned(chunks=[*ndjson(frame("Hi")), b'{"error":"out of memory"}\n']))
    fake.queue.append(Canned(status=500, chunks=[b'{"error":"boom"}'], media_type="text/plain"))
    async with OllamaAdapter.native(server.url, default_model="qwen3") as adapter:
        in_band = await collect(adapter.call("Hi"))
        http = await collect(adapter.call("Hi"))
    assert kinds(in_band) == ["TOKEN", "ERROR", "END"]
    assert in_band[1].error is not None and in_band[1].error.message == "out of memory"
    assert kinds(http) == ["ERROR", "END"]
    assert http[0].error is not None and http[0].error.status == 500
    assert "boom" in http[0].error.message


async def test_native_ollama_connection_refused() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    async with OllamaAdapter.native(url, default_model="m") as adapter:
        events = await collect(adapter.call("Hi"))
    assert kinds(events) == ["ERROR", "END"]
    err = events[0].error
    assert err is not None and (err.code, err.status) == (ErrorCode.LLM_PROVIDER_ERROR, 503)


# -- any OpenAI-compatible server -----------------------------------------------------


async def test_openai_compatible_server(upstream: Upstream) -> None:
    fake, server = upstream
    fake.queue.append(
        Canned(
            media_type="text/event-stream",
            chunks=[chunk({"content": "ok"}), chunk({}, finish="stop"), DONE],
        )
    )
    async with OllamaAdapter.openai_compatible(
        server.url, api_key="sk-test", default_model="gpt-x"
    ) as adapter:
        assert adapter.base_url == server.url + "/v1"
        events = await collect(adapter.call("Hi"))
    assert kinds(events) == ["TOKEN", "METADATA", "END"]
    assert orjson.loads(fake.bodies[-1])["model"] == "gpt-x"


# -- the llmbridge gateway, through its Anthropic and OpenAI fronts --------------------


async def test_anthropic_constructor_streams_text_and_thinking(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    scripted.enqueue(Script(thinking=["Let me think."], text=["Hi", " there"], usage=Usage(7, 3)))
    async with OllamaAdapter.anthropic(gateway.url, api_key="x") as adapter:
        events = await collect(adapter.call("Hello", model="claude-sonnet-4-6", max_tokens=64))
    assert [(e.type.value, e.data, e.token_type) for e in events[:3]] == [
        ("TOKEN", "Let me think.", TokenType.FINAL_SYNTHESIS_LLM_THINKING),
        ("TOKEN", "Hi", RESPONSE),
        ("TOKEN", " there", RESPONSE),
    ]
    assert kinds(events)[3:] == ["METADATA", "END"]
    meta = events[3].metadata
    assert meta is not None
    assert (meta.stop_reason, meta.input_tokens, meta.output_tokens) == ("stop", 7, 3)
    seen = scripted.requests[-1]
    assert seen.model == "claude-sonnet-4-6" and seen.params.max_tokens == 64


async def test_anthropic_constructor_tool_calls_and_tool_results(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    scripted.enqueue(Script(text=[], tool_calls=[("get_weather", {"city": "Paris"})]))
    prompt: list[dict[str, Any]] = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
                }
            ],
        },
        {"role": "tool_result", "tool_call_id": "toolu_1", "content": "sunny"},
    ]
    async with OllamaAdapter.anthropic(gateway.url, api_key="x", default_model="claude") as a:
        events = await collect(a.call(prompt, tools=TOOLS))
    assert kinds(events) == ["TOKEN", "METADATA", "END"]
    (use,) = events[0].tool_uses
    assert (use["name"], use["input"]) == ("get_weather", {"city": "Paris"})
    assert use["id"].startswith("toolu_")
    seen = scripted.requests[-1]
    assert [m.role for m in seen.messages] == ["user", "assistant", "tool"]
    assert seen.messages[2].parts[0].tool_call_id == "toolu_1"  # type: ignore[union-attr]
    assert [t.name for t in seen.tools] == ["get_weather"]


async def test_anthropic_constructor_backend_failure_mid_stream(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    scripted.enqueue(
        Script(text=["a", "b", "c"], fail_after=2, fail_error=BackendError("model crashed"))
    )
    async with OllamaAdapter.anthropic(gateway.url, api_key="x", default_model="claude") as a:
        events = await collect(a.call("Hi"))
    assert kinds(events) == ["TOKEN", "TOKEN", "ERROR", "END"]
    assert events[2].error is not None and "model crashed" in events[2].error.message


async def test_gateway_constructor_over_the_openai_front(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    scripted.enqueue(Script(text=["Hel", "lo"], usage=Usage(4, 2)))
    # Not transient (a protocol error), so the gateway does not retry it.
    scripted.enqueue(Script(text=["Hel", "lo"], fail_before=BackendProtocolError("no capacity")))
    async with OllamaAdapter.gateway(gateway.url, default_model="any-model") as adapter:
        assert adapter.base_url == gateway.url + "/v1"
        events = await collect(adapter.call("Hi", call_context="AGENT_THOUGHT"))
        failed = await collect(adapter.call("Hi"))
    assert [e.data for e in events[:2]] == ["Hel", "lo"]
    assert {e.token_type for e in events[:2]} == {TokenType.AGENT_THOUGHT_LLM_RESPONSE}
    meta = events[2].metadata
    assert meta is not None and (meta.input_tokens, meta.output_tokens) == (4, 2)
    assert kinds(failed) == ["ERROR", "END"]
    assert failed[0].error is not None and failed[0].error.status == 502


# -- a backend in process --------------------------------------------------------------


async def test_from_backend_in_process() -> None:
    backend = ScriptedBackend()
    backend.enqueue(Script(text=["x"], tool_calls=[("run", {"cmd": "ls"})]))
    backend.enqueue(Script(fail_before=BackendError("down")))
    async with OllamaAdapter.from_backend(backend, default_model="scripted") as adapter:
        reply = await collect(adapter.call("go", stream=False))
        failed = await collect(adapter.call("go"))
    assert reply[0] == StreamEvent(
        EventType.TOKEN,
        [
            {"type": "text", "text": "x"},
            {
                "type": "tool_use",
                "id": reply[0].tool_uses[0]["id"],
                "name": "run",
                "input": {"cmd": "ls"},
            },
        ],
        RESPONSE,
    )
    assert kinds(failed) == ["ERROR", "END"]
    assert failed[0].error is not None and failed[0].error.status == 502

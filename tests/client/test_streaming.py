"""The default adapter (official openai client, Ollama's /v1) against a fake upstream,
event by event: tool calls, usage, and every way a provider can fail."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest

from llmbridge.client import (
    AdapterError,
    ErrorCode,
    EventType,
    LLMMetadata,
    OllamaAdapter,
    StreamEvent,
    TokenType,
)
from llmbridge.core.messages import Message, TextPart
from llmbridge.features.token_count import count_request_tokens, count_text_tokens
from tests.client.conftest import (
    DONE,
    chunk,
    closed_port,
    collect,
    kinds,
    usage_chunk,
)
from tests.conftest import RunningServer
from tests.upstream import Canned, FakeUpstream

Upstream = tuple[FakeUpstream, RunningServer]
RESPONSE = TokenType.FINAL_SYNTHESIS_LLM_RESPONSE
TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


@pytest.fixture
async def adapter(upstream: Upstream) -> AsyncIterator[OllamaAdapter]:
    _, server = upstream
    async with OllamaAdapter(server.url, default_model="qwen3", max_retries=0) as adapter:
        yield adapter


def sse(*chunks: bytes) -> Canned:
    return Canned(media_type="text/event-stream", chunks=list(chunks))


def metadata(events: list[StreamEvent]) -> LLMMetadata:
    found = [e.metadata for e in events if e.metadata is not None]
    assert len(found) == 1
    return found[0]


def error(events: list[StreamEvent]) -> AdapterError:
    found = [e.error for e in events if e.error is not None]
    assert len(found) == 1
    return found[0]


# -- text and usage -------------------------------------------------------------------


async def test_text_tokens_then_metadata_from_usage_in_last_chunk(
    adapter: OllamaAdapter, upstream: Upstream
) -> None:
    fake, _ = upstream
    fake.queue.append(
        sse(
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Bon"}),
            chunk({"content": "jour"}),
            chunk({}, finish="stop"),
            usage_chunk(11, 2),
            DONE,
        )
    )
    events = await collect(adapter.call("Say hello in French"))
    assert kinds(events) == ["TOKEN", "TOKEN", "METADATA", "END"]
    assert [(e.data, e.token_type) for e in events[:2]] == [("Bon", RESPONSE), ("jour", RESPONSE)]
    meta = metadata(events)
    assert meta.stop_reason == "stop"
    assert (meta.input_tokens, meta.output_tokens) == (11, 2)
    assert meta.tokens_estimated is False
    assert meta.time_to_first_token_ms is not None
    assert meta.total_generation_time_ms is not None
    assert 0 < meta.time_to_first_token_ms <= meta.total_generation_time_ms
    assert events[-1] == StreamEvent(EventType.END)
    # The body is the gateway's own OpenAI codec's, sent by the official client.
    sent = orjson.loads(fake.bodies[-1])
    assert sent["model"] == "qwen3" and sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["messages"] == [{"role": "user", "content": "Say hello in French"}]


async def test_usage_missing_metadata_counts_tokens(
    adapter: OllamaAdapter, upstream: Upstream
) -> None:
    fake, _ = upstream
    fake.queue.append(
        sse(chunk({"content": "The capital "}), chunk({"content": "is Paris."}, finish="stop"))
    )  # no usage, no [DONE]: the finish_reason ends the stream
    prompt = "What is the capital of France?"
    events = await collect(adapter.call(prompt))
    assert kinds(events) == ["TOKEN", "TOKEN", "METADATA", "END"]
    meta = metadata(events)
    request_tokens = count_request_tokens(adapter.build_request(prompt))
    assert meta.input_tokens == request_tokens > 0
    assert meta.output_tokens == count_text_tokens("The capital is Paris.")
    assert meta.tokens_estimated is True
    assert meta.stop_reason == "stop"


async def test_finish_length_is_max_tokens_and_params_reach_the_body(
    adapter: OllamaAdapter, upstream: Upstream
) -> None:
    fake, _ = upstream
    fake.queue.append(sse(chunk({"content": "Once"}, finish="length"), DONE))
    events = await collect(
        adapter.call("Tell a story", max_tokens=1, temperature=0, stop=["\n"], mirostat=2)
    )
    assert metadata(events).stop_reason == "length"
    sent = orjson.loads(fake.bodies[-1])
    assert sent["max_tokens"] == 1 and sent["temperature"] == 0.0 and sent["stop"] == ["\n"]
    assert sent["mirostat"] == 2  # unknown parameters ride along as body fields


async def test_call_context_sets_token_types_and_thinking_is_a_thinking_token(
    adapter: OllamaAdapter, upstream: Upstream
) -> None:
    fake, _ = upstream
    fake.queue.append(
        sse(
            chunk({"reasoning": "Paris is the capital."}),
            chunk({"content": "Paris"}, finish="stop"),
            DONE,
        )
    )
    events = await collect(adapter.call("Capital of France?", call_context="AGENT_THOUGHT"))
    assert [(e.data, e.token_type) for e in events[:2]] == [
        ("Paris is the capital.", TokenType.AGENT_THOUGHT_LLM_THINKING),
        ("Paris", TokenType.AGENT_THOUGHT_LLM_RESPONSE),
    ]
    meta = metadata(events)
    assert meta.thinking_tokens == count_text_tokens("Paris is the capital.")


# -- tool calls -----------------------------------------------------------------------


async def test_tool_call_arguments_fragmented_across_many_chunks(
    adapter: OllamaAdapter, upstream: Upstream
) -> None:
    fake, _ = upstream
    arguments = '{"city": "Paris", "units": "celsius", "days": [1, 2, 3]}'
    pieces = [arguments[i : i + 3] for i in range(0, len(arguments), 3)]
    first = chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ""},
                }
            ]
        }
    )
    fragments = [
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}) for piece in pieces
    ]
    raw = b"".join([chunk({"content": "Checking."}), first, *fragments])
    # Network reads that cut SSE lines (and JSON) at arbitrary bytes.
    reads = [raw[i : i + 37] for i in range(0, len(raw), 37)]
    fake.queue.append(sse(*reads, chunk({}, finish="tool_calls"), usage_chunk(20, 9), DONE))
    events = await collect(adapter.call("Weather in Paris?", tools=TOOLS))
    assert kinds(events) == ["TOKEN", "TOKEN", "METADATA", "END"]
    assert events[0].data == "Checking."
    assert events[1].token_type == RESPONSE
    assert events[1].data == [
        {
            "type": "tool_use",
            "id": "call_1",
            "name": "get_weather",
            "input": {"city": "Paris", "units": "celsius", "days": [1, 2, 3]},
        }
    ]
    assert metadata(events).stop_reason == "tool_calls"
    sent = orjson.loads(fake.bodies[-1])
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather in a city",
                "parameters": TOOLS[0]["input_schema"],
            },
        }
    ]


async def test_two_calls_with_index_zero_are_two_tool_uses(
    adapter: OllamaAdapter, upstream: Upstream
) -> None:
    fake, _ = upstream

    def call(call_id: str, city: str) -> bytes:
        function = {"name": "get_weather", "arguments": orjson.dumps({"city": city}).decode()}
        return chunk(
            {"tool_calls": [{"index": 0, "id": call_id, "type": "function", "function": function}]}
        )

    # Ollama's /v1 gives every call of a parallel batch index 0 (ollama/ollama#16212),
    # and ends with finish_reason "stop" rather than "tool_calls".
    fake.queue.append(sse(call("call_a", "Paris"), call("call_b", "Rome"), chunk({}, "stop"), DONE))
    events = await collect(adapter.call("Weather in Paris and Rome?", tools=TOOLS))
    assert kinds(events) == ["TOKEN", "METADATA", "END"]
    assert events[0].tool_uses == [
        {"type": "tool_use", "id": "call_a", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "call_b", "name": "get_weather", "input": {"city": "Rome"}},
    ]
    assert metadata(events).stop_reason == "tool_calls"


async def test_cut_off_tool_arguments_are_healed(
    adapter: OllamaAdapter, upstream: Upstream
) -> None:
    fake, _ = upstream
    function = {"name": "get_weather", "arguments": '{"city": "Par'}
    fake.queue.append(
        sse(
            chunk({"tool_calls": [{"index": 0, "id": "call_1", "function": function}]}),
            chunk({}, finish="length"),
            DONE,
        )
    )
    events = await collect(adapter.call("Weather?", tools=TOOLS))
    assert events[0].tool_uses[0]["input"] == {"city": "Par"}


async def test_non_streaming_is_one_token_with_text_and_tool_uses(
    adapter: OllamaAdapter, upstream: Upstream
) -> None:
    fake, _ = upstream
    function = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    fake.queue.append(
        sse(
            chunk({"content": "  Let me check.  "}),
            chunk({"tool_calls": [{"index": 0, "id": "call_1", "function": function}]}),
            chunk({}, finish="tool_calls"),
            usage_chunk(30, 12),
            DONE,
        )
    )
    events = await collect(adapter.call("Weather in Paris?", tools=TOOLS, stream=False))
    assert kinds(events) == ["TOKEN", "METADATA", "END"]
    assert events[0].data == [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
    ]
    meta = metadata(events)
    assert (meta.stop_reason, meta.input_tokens, meta.output_tokens) == ("tool_calls", 30, 12)
    assert meta.time_to_first_token_ms is None  # only for streams, as in the seed


async def test_non_streaming_text_is_one_trimmed_string(
    adapter: OllamaAdapter, upstream: Upstream
) -> None:
    fake, _ = upstream
    fake.queue.append(
        sse(chunk({"content": " Hello"}), chunk({"content": " there. "}, finish="stop"), DONE)
    )
    events = await collect(adapter.call("Hi", stream=False))
    assert kinds(events) == ["TOKEN", "METADATA", "END"]
    assert (events[0].data, events[0].token_type) == ("Hello there.", RESPONSE)


# -- failures -------------------------------------------------------------------------


async def test_http_500_is_an_error_event_then_end(
    adapter: OllamaAdapter, upstream: Upstream
) -> None:
    fake, _ = upstream
    fake.queue.append(
        Canned(
            status=500,
            chunks=[b'{"error":{"message":"upstream exploded"}}'],
            media_type="application/json",
        )
    )
    events = await collect(adapter.call("Hi"))
    assert kinds(events) == ["ERROR", "END"]
    err = error(events)
    assert err.code is ErrorCode.LLM_PROVIDER_ERROR
    assert err.status == 500
    assert "upstream exploded" in err.message


async def test_http_404_keeps_status_and_plain_message(
    adapter: OllamaAdapter, upstream: Upstream
) -> None:
    fake, _ = upstream
    fake.queue.append(
        Canned(
            status=404,
            chunks=[b'{"error":"model \\"nope\\" not found, try pulling it first"}'],
            media_type="application/json",
        )
    )
    events = await collect(adapter.call("Hi", model="nope"))
    err = error(events)
    assert (err.status, kinds(events)) == (404, ["ERROR", "END"])
    assert 'model "nope" not found' in err.message


async def test_connection_refused_is_an_error_event_then_end() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    async with OllamaAdapter(url, default_model="m", max_retries=0) as adapter:
        events = await collect(adapter.call("Hi"))
    assert kinds(events) == ["ERROR", "END"]
    err = error(events)
    assert err.code is ErrorCode.LLM_PROVIDER_ERROR
    assert err.status == 503
    assert "unreachable" in err.message


async def test_timeout_is_an_error_event_then_end(upstream: Upstream) -> None:
    fake, server = upstream
    fake.queue.append(sse(chunk({"content": "late"}, finish="stop")))
    fake.queue[-1].delay = 2.0
    async with OllamaAdapter(server.url, default_model="m", max_retries=0, timeout=0.3) as a:
        events = await collect(a.call("Hi"))
    assert kinds(events) == ["ERROR", "END"]
    assert error(events).status == 504


async def test_malformed_chunk_is_an_error_event_then_end(
    adapter: OllamaAdapter, upstream: Upstream
) -> None:
    fake, _ = upstream
    fake.queue.append(sse(chunk({"content": "Hel"}), b"data: {not json\n\n", DONE))
    events = await collect(adapter.call("Hi"))
    assert kinds(events) == ["TOKEN", "ERROR", "END"]
    err = error(events)
    assert (err.code, err.status) == (ErrorCode.LLM_PROVIDER_ERROR, 502)
    assert "not JSON" in err.message


async def test_in_band_error_mid_stream_follows_the_earlier_tokens(
    adapter: OllamaAdapter, upstream: Upstream
) -> None:
    fake, _ = upstream
    fake.queue.append(
        sse(
            chunk({"content": "Hel"}),
            chunk({"content": "lo"}),
            b'data: {"error": {"message": "model runner crashed", "code": 500}}\n\n',
        )
    )
    events = await collect(adapter.call("Hi"))
    assert kinds(events) == ["TOKEN", "TOKEN", "ERROR", "END"]
    assert [e.data for e in events[:2]] == ["Hel", "lo"]
    err = error(events)
    assert err.code is ErrorCode.LLM_PROVIDER_ERROR and err.status == 502
    assert err.message == "model runner crashed"


async def test_stream_cut_off_mid_way_is_an_error_after_the_tokens(
    adapter: OllamaAdapter, upstream: Upstream
) -> None:
    fake, _ = upstream
    fake.queue.append(sse(chunk({"content": "Hel"})))  # no finish_reason, no [DONE]
    events = await collect(adapter.call("Hi"))
    assert kinds(events) == ["TOKEN", "ERROR", "END"]
    assert "ended before it finished" in error(events).message


async def test_non_streaming_failure_is_error_then_end_without_tokens(
    adapter: OllamaAdapter, upstream: Upstream
) -> None:
    fake, _ = upstream
    fake.queue.append(sse(chunk({"content": "Hel"}), b'data: {"error": "overloaded"}\n\n'))
    events = await collect(adapter.call("Hi", stream=False))
    assert kinds(events) == ["ERROR", "END"]
    assert error(events).message == "overloaded"


async def test_plain_api_raises_provider_errors(adapter: OllamaAdapter, upstream: Upstream) -> None:
    from llmbridge.core.errors import BackendHTTPError

    fake, _ = upstream
    fake.queue.append(Canned(status=503, chunks=[b"busy"], media_type="text/plain"))
    with pytest.raises(BackendHTTPError) as caught:
        await adapter.chat("Hi")
    assert caught.value.backend_status == 503


async def test_plain_api_chat_and_stream(adapter: OllamaAdapter, upstream: Upstream) -> None:
    fake, _ = upstream
    body = sse(chunk({"content": "Bon"}), chunk({"content": "jour"}, finish="stop"), DONE)
    fake.queue.extend([body, body])
    reply = await adapter.chat([Message("user", (TextPart("Hi"),))])
    assert reply.message == Message("assistant", (TextPart("Bonjour"),))
    assert reply.stop_reason == "end_turn"
    neutral = [event async for event in adapter.stream("Hi")]
    assert [e.event for e in neutral] == [
        "response_start",
        "part_start",
        "part_delta",
        "part_delta",
        "part_end",
        "response_end",
    ]

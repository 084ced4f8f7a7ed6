"""The ``gemini`` backend against a scripted Gemini-protocol server on loopback
(tests/backends/gemini_server.py): the wire it sends (path, ``alt=sse``, the key in
``x-goog-api-key`` and never in the URL, the body), the replies it reads (text, tool
calls, thought signatures, a ``finishReason`` alone in its chunk, a mid-stream error),
Google's error statuses before the stream and the serving layer's verdicts on them,
the paged model list, embeddings, token counts and the health probe.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import orjson
import pytest

from llmbridge.backends.gemini import (
    MAX_PAGES,
    SKIP_SIGNATURE,
    GeminiBackend,
    model_path,
    retry_delay,
)
from llmbridge.core.accumulate import accumulate
from llmbridge.core.errors import BackendHTTPError, LLMBridgeError
from llmbridge.core.events import PartDelta, StreamError, StreamEvent, TextDelta
from llmbridge.core.messages import (
    Message,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolDefinition,
    ToolResultPart,
)
from llmbridge.core.request import ChatRequest, EmbedRequest, GenerationParams
from llmbridge.core.response import ChatResponse, StopReason
from llmbridge.dialects.gemini.thoughts import GEMINI
from llmbridge.serving.resilience import is_transient
from tests.backends.gemini_server import (
    GeminiServer,
    chunk,
    google_error,
    json_reply,
    model_entry,
    running_gemini_server,
    sse,
)

KEY = "AIza-test-key-0123456789"
MODEL = "gemini-2.5-flash"
WEATHER = ToolDefinition(
    name="get_weather",
    description="Weather for a city",
    input_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)
USAGE = {"promptTokenCount": 7, "candidatesTokenCount": 3, "totalTokenCount": 10}


@pytest.fixture(scope="module")
def running() -> Iterator[tuple[GeminiServer, str]]:
    with running_gemini_server() as (server, http):
        yield server, http.url


@pytest.fixture
def server(running: tuple[GeminiServer, str]) -> GeminiServer:
    running[0].reset()
    return running[0]


@pytest.fixture
async def backend(running: tuple[GeminiServer, str]) -> AsyncIterator[GeminiBackend]:
    gemini = GeminiBackend("gem", running[1], api_key=KEY)
    try:
        yield gemini
    finally:
        await gemini.aclose()


def ask(*messages: Message, tools: tuple[ToolDefinition, ...] = (), **kw: Any) -> ChatRequest:
    """A streamed request (what these tests read is the stream); ``stream=False`` for
    one asked for whole."""
    return ChatRequest(model=MODEL, messages=messages, tools=tools, **{"stream": True, **kw})


def user(text: str) -> Message:
    return Message(role="user", parts=(TextPart(text),))


async def reply_to(backend: GeminiBackend, request: ChatRequest) -> ChatResponse:
    return await accumulate(backend.chat(request))


async def events_of(backend: GeminiBackend, request: ChatRequest) -> list[StreamEvent]:
    return [event async for event in backend.chat(request)]


def signatures_in(body: Any) -> list[str]:
    """Every ``thoughtSignature`` anywhere in a request body."""
    found: list[str] = []
    if isinstance(body, dict):
        for key, value in body.items():
            if key == "thoughtSignature":
                found.append(value)
            else:
                found.extend(signatures_in(value))
    elif isinstance(body, list):
        for item in body:
            found.extend(signatures_in(item))
    return found


# -- chat -------------------------------------------------------------------------------


async def test_plain_text_streams_with_the_key_in_a_header_never_in_the_url(
    server: GeminiServer, backend: GeminiBackend
) -> None:
    server.enqueue(sse(chunk({"text": "Bon"}), chunk({"text": "jour"}, finish="STOP", usage=USAGE)))
    reply = await reply_to(
        backend, ask(Message(role="system", parts=(TextPart("Be brief."),)), user("hi"))
    )
    assert [p for p in reply.message.parts if isinstance(p, TextPart)] == [TextPart("Bonjour")]
    assert reply.stop_reason is StopReason.END_TURN
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (7, 3)

    seen = server.last
    assert (seen.method, seen.path) == ("POST", f"/v1beta/models/{MODEL}:streamGenerateContent")
    assert seen.query == {"alt": "sse"}  # no ?key=: URLs reach logs
    assert seen.headers["x-goog-api-key"] == KEY
    assert KEY not in seen.path and "authorization" not in seen.headers
    assert seen.body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]
    assert seen.body["systemInstruction"]["parts"] == [{"text": "Be brief."}]


async def test_a_reply_the_client_wants_whole_is_asked_for_whole(
    server: GeminiServer, backend: GeminiBackend
) -> None:
    """A request that does not stream goes to ``:generateContent`` (one reply decoded,
    no stream read chunk by chunk); its text, signed call and counts read as a stream's,
    and a 429 there carries Google's retry delay as one before a stream does."""
    signed = {"text": "Checking.", "thoughtSignature": "c2ln"}
    call = {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}
    server.enqueue(json_reply(chunk(signed, call, finish="STOP", usage=USAGE)))
    reply = await reply_to(backend, ask(user("weather?"), tools=(WEATHER,), stream=False))
    seen = server.last
    assert (seen.method, seen.path) == ("POST", f"/v1beta/models/{MODEL}:generateContent")
    assert seen.query == {} and seen.headers["x-goog-api-key"] == KEY
    texts = [p.text for p in reply.message.parts if isinstance(p, TextPart)]
    calls = [p for p in reply.message.parts if isinstance(p, ToolCallPart)]
    assert texts == ["Checking."]
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert reply.stop_reason is StopReason.TOOL_USE
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (7, 3)

    delay = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}]
    server.enqueue(google_error(429, "quota", "RESOURCE_EXHAUSTED", details=delay))
    with pytest.raises(BackendHTTPError) as raised:
        await reply_to(backend, ask(user("again"), stream=False))
    assert raised.value.backend_status == 429 and raised.value.retry_after == 7.0


async def test_sampling_parameters_reach_generation_config(
    server: GeminiServer, backend: GeminiBackend
) -> None:
    server.enqueue(sse(chunk({"text": "ok"}, finish="STOP")))
    params = GenerationParams(
        max_tokens=64, temperature=0.2, top_p=0.9, top_k=40, stop=("END",), seed=7
    )
    await reply_to(backend, ask(user("hi"), params=params))
    config = server.last.body["generationConfig"]
    assert config["maxOutputTokens"] == 64
    assert (config["temperature"], config["topP"], config["topK"]) == (0.2, 0.9, 40)
    assert (config["stopSequences"], config["seed"]) == (["END"], 7)


async def test_a_tool_loop_sends_the_thought_signature_back_on_the_function_call(
    server: GeminiServer, backend: GeminiBackend
) -> None:
    call = {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}
    server.enqueue(
        sse(chunk({**call, "thoughtSignature": "c2lnLUE="}, finish="STOP", usage=USAGE)),
        sse(chunk({"text": "Sunny."}, finish="STOP")),
    )
    question = user("Weather in Paris?")
    first = await reply_to(backend, ask(question, tools=(WEATHER,)))
    assert first.stop_reason is StopReason.TOOL_USE
    calls = [p for p in first.message.parts if isinstance(p, ToolCallPart)]
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", {"city": "Paris"})]
    # The signature rides in a thinking part right before the call it was on, tagged
    # with the backend that issued it.
    thinking = first.message.parts[first.message.parts.index(calls[0]) - 1]
    assert isinstance(thinking, ThinkingPart)
    assert GEMINI.recover(thinking.signature, "gem") == "c2lnLUE="
    declared = server.last.body["tools"][0]["functionDeclarations"][0]
    assert (declared["name"], declared["description"]) == ("get_weather", "Weather for a city")
    assert declared["parametersJsonSchema"] == WEATHER.input_schema

    result = ToolResultPart(tool_call_id=calls[0].id, content="sunny", name="get_weather")
    second = await reply_to(
        backend,
        ask(question, first.message, Message(role="tool", parts=(result,)), tools=(WEATHER,)),
    )
    assert second.message.text == "Sunny."
    contents = server.last.body["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    assert contents[1]["parts"] == [{**call, "thoughtSignature": "c2lnLUE="}]
    response = contents[2]["parts"][0]["functionResponse"]
    assert (response["name"], response["response"]) == ("get_weather", {"output": "sunny"})


async def test_a_function_call_and_text_in_one_candidate(
    server: GeminiServer, backend: GeminiBackend
) -> None:
    server.enqueue(
        sse(
            chunk(
                {"text": "Let me check. "},
                {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}},
                finish="STOP",
                usage=USAGE,
            )
        )
    )
    reply = await reply_to(backend, ask(user("Rome?"), tools=(WEATHER,)))
    kinds = [p.kind for p in reply.message.parts]
    assert kinds == ["text", "tool_call"]
    assert reply.message.text == "Let me check. "
    assert reply.stop_reason is StopReason.TOOL_USE
    call = reply.message.parts[1]
    assert isinstance(call, ToolCallPart) and call.arguments == {"city": "Rome"}
    assert call.id  # Gemini sends no id: the decoder makes one


async def test_a_finish_reason_in_its_own_chunk(
    server: GeminiServer, backend: GeminiBackend
) -> None:
    server.enqueue(
        sse(
            chunk({"text": "Once upon"}),
            chunk({"text": " a time"}),
            chunk(finish="MAX_TOKENS", usage=USAGE),
        )
    )
    reply = await reply_to(backend, ask(user("story")))
    assert reply.message.text == "Once upon a time"
    assert reply.stop_reason is StopReason.MAX_TOKENS
    assert reply.usage.input_tokens == 7


async def test_an_error_mid_stream_ends_it_with_googles_message(
    server: GeminiServer, backend: GeminiBackend
) -> None:
    error = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
    server.enqueue(sse(chunk({"text": "Partial"}), error))
    events = await events_of(backend, ask(user("hi")))
    assert isinstance(events[-1], StreamError)
    assert "The model is overloaded." in events[-1].error.message
    texts = [
        e.delta.text for e in events if isinstance(e, PartDelta) and isinstance(e.delta, TextDelta)
    ]
    assert "".join(texts) == "Partial"


async def test_a_signature_another_backend_issued_is_not_sent(
    server: GeminiServer, backend: GeminiBackend
) -> None:
    server.enqueue(sse(chunk({"text": "ok"}, finish="STOP")))
    call = ToolCallPart(id="call_1", name="get_weather", arguments={"city": "Oslo"})
    history = (
        user("Oslo?"),
        Message(
            role="assistant",
            parts=(
                # issued by another Gemini backend, and one by Anthropic
                ThinkingPart(
                    "", signature=GEMINI.carry("other-gemini", "b3RoZXI="), provider="gemini"
                ),
                ThinkingPart("Claude's thoughts", signature="EqQBCkYIARgC", provider="anthropic"),
                call,
            ),
        ),
        Message(
            role="tool",
            parts=(ToolResultPart(tool_call_id="call_1", content="cold", name="get_weather"),),
        ),
    )
    await reply_to(backend, ask(*history, tools=(WEATHER,)))
    body = server.last.body
    assert signatures_in(body) == []
    assert "Claude's thoughts" not in orjson.dumps(body).decode()  # thought text is not sent
    assert body["contents"][1]["parts"] == [
        {"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}}
    ]


async def test_gemini_3_gets_googles_placeholder_where_a_call_lost_its_signature(
    server: GeminiServer, backend: GeminiBackend
) -> None:
    """Gemini 3 refuses a function call sent back without its signature; a client that
    cannot carry one (Ollama's) gets Google's documented placeholder instead, and a
    turn with its own signature keeps it."""
    own = ThinkingPart("", signature=GEMINI.carry("gem", "b3du"), provider="gemini")

    def turn(call_id: str, *parts: ThinkingPart) -> tuple[Message, Message]:
        call = ToolCallPart(id=call_id, name="get_weather", arguments={"city": "Oslo"})
        second = ToolCallPart(id=call_id + "b", name="get_weather", arguments={"city": "Bergen"})
        results = tuple(
            ToolResultPart(tool_call_id=c.id, content="cold", name="get_weather")
            for c in (call, second)
        )
        return (
            Message(role="assistant", parts=(*parts, call, second)),
            Message(role="tool", parts=results),
        )

    history = (user("Oslo?"), *turn("call_1"), *turn("call_2", own))
    for model, placeholder in (("gemini-3-pro-preview", True), (MODEL, False), ("qwen3:8b", False)):
        server.enqueue(sse(chunk({"text": "ok"}, finish="STOP")))
        await reply_to(backend, replace(ask(*history, tools=(WEATHER,)), model=model))
        model_turns = [c["parts"] for c in server.last.body["contents"] if c["role"] == "model"]
        first, second = model_turns
        # only the first call of a step carries a signature, as in Gemini's own replies
        assert [p.get("thoughtSignature") for p in first] == [
            SKIP_SIGNATURE if placeholder else None,
            None,
        ]
        assert [p.get("thoughtSignature") for p in second] == ["b3du", None]


# -- errors before the stream -----------------------------------------------------------

RETRY_INFO = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}


@pytest.mark.parametrize(
    ("reply", "status", "transient", "retry_after", "message"),
    [
        pytest.param(
            google_error(
                429, "Resource has been exhausted.", "RESOURCE_EXHAUSTED", details=[RETRY_INFO]
            ),
            429,
            True,
            7.0,
            "Resource has been exhausted.",
            id="429-retry-info",
        ),
        pytest.param(
            google_error(429, "Quota exceeded.", "RESOURCE_EXHAUSTED", Retry_After="3"),
            429,
            True,
            3.0,
            "Quota exceeded.",
            id="429-retry-after",
        ),
        pytest.param(
            google_error(
                400,
                "* GenerateContentRequest.contents: contents is not specified",
                "INVALID_ARGUMENT",
            ),
            400,
            False,
            None,
            "contents is not specified",
            id="400",
        ),
        pytest.param(
            google_error(503, "The model is overloaded. Please try again later.", "UNAVAILABLE"),
            503,
            True,
            None,
            "The model is overloaded.",
            id="503",
        ),
    ],
)
async def test_an_error_status_before_the_stream_is_the_right_core_error(
    server: GeminiServer,
    backend: GeminiBackend,
    reply: Any,
    status: int,
    transient: bool,
    retry_after: float | None,
    message: str,
) -> None:
    server.enqueue(reply)
    with pytest.raises(BackendHTTPError) as caught:
        await reply_to(backend, ask(user("hi")))
    error = caught.value
    assert (error.backend_status, error.status_code) == (status, status)
    assert message in error.message and error.backend == "gem"
    assert is_transient(error) is transient
    assert error.retry_after == retry_after


def test_retry_delay_reads_only_a_retry_info_duration() -> None:
    def body(*details: object) -> object:
        return {"error": {"code": 429, "details": list(details)}}

    assert retry_delay(body(RETRY_INFO)) == 7.0
    assert retry_delay(body({**RETRY_INFO, "retryDelay": "1.5s"})) == 1.5
    assert retry_delay(body({**RETRY_INFO, "retryDelay": "soon"})) is None
    assert retry_delay(body({"@type": "type.googleapis.com/google.rpc.QuotaFailure"})) is None
    assert retry_delay({"error": "text"}) is None
    assert retry_delay("plain text") is None


# -- models, embeddings, tokens, health -------------------------------------------------


async def test_the_model_list_follows_next_page_tokens(
    server: GeminiServer, backend: GeminiBackend
) -> None:
    server.pages = {
        "": {"models": [model_entry("gemini-2.5-pro"), model_entry(MODEL)], "nextPageToken": "p2"},
        "p2": {"models": [model_entry("text-embedding-004", embeds=True)]},
    }
    models = await backend.list_models()
    assert [m.name for m in models] == ["gemini-2.5-pro", MODEL, "text-embedding-004"]
    assert {m.backend for m in models} == {"gem"}
    assert [m.backend_model for m in models] == [m.name for m in models]
    # what an Ollama client reads from /api/show before it offers tools
    assert models[1].capabilities == {"completion", "thinking", "tools", "vision"}
    assert models[2].capabilities == {"embedding"}
    queries = [s.query for s in server.seen]
    assert queries == [{"pageSize": "1000"}, {"pageSize": "1000", "pageToken": "p2"}]
    assert all(s.headers["x-goog-api-key"] == KEY for s in server.seen)


async def test_a_model_list_that_never_ends_is_cut(
    server: GeminiServer, backend: GeminiBackend
) -> None:
    server.pages = {
        "": {"models": [model_entry(MODEL)], "nextPageToken": "again"},
        "again": {"models": [], "nextPageToken": "again"},
    }
    models = await backend.list_models()
    assert [m.name for m in models] == [MODEL]
    assert len(server.seen) == MAX_PAGES


async def test_one_model_is_described_by_its_own_resource(
    server: GeminiServer, backend: GeminiBackend
) -> None:
    server.models = {MODEL: model_entry(MODEL)}
    info = await backend.show_model(MODEL)
    assert (info.name, info.backend, info.backend_model) == (MODEL, "gem", MODEL)
    # what the serving layer's thinking policy reads (Gemini's "thinking": true)
    assert "thinking" in info.capabilities
    assert server.last.path == f"/v1beta/models/{MODEL}"
    with pytest.raises(BackendHTTPError) as caught:
        await backend.show_model("no-such-model")
    assert caught.value.status_code == 404


async def test_embeddings_go_through_batch_embed_contents(
    server: GeminiServer, backend: GeminiBackend
) -> None:
    server.enqueue(json_reply({"embeddings": [{"values": [0.1, 0.2]}, {"values": [0.3, 0.4]}]}))
    assert backend.can_embed
    result = await backend.embed(EmbedRequest(model="text-embedding-004", inputs=("a", "b")))
    assert result.embeddings == ((0.1, 0.2), (0.3, 0.4))
    assert result.model == "text-embedding-004"
    seen = server.last
    assert seen.path == "/v1beta/models/text-embedding-004:batchEmbedContents"
    requests = seen.body["requests"]
    assert [r["model"] for r in requests] == ["models/text-embedding-004"] * 2
    assert [r["content"]["parts"] for r in requests] == [[{"text": "a"}], [{"text": "b"}]]


async def test_token_counts_come_from_count_tokens(
    server: GeminiServer, backend: GeminiBackend
) -> None:
    server.enqueue(json_reply({"totalTokens": 42}))
    system = Message(role="system", parts=(TextPart("Be brief."),))
    assert await backend.count_tokens(ask(system, user("hi"), tools=(WEATHER,))) == 42
    seen = server.last
    assert seen.path == f"/v1beta/models/{MODEL}:countTokens"
    counted = seen.body["generateContentRequest"]
    assert counted["model"] == f"models/{MODEL}"
    assert counted["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]
    assert counted["systemInstruction"]["parts"] == [{"text": "Be brief."}]
    assert counted["tools"][0]["functionDeclarations"][0]["name"] == "get_weather"
    assert "generationConfig" not in counted


async def test_a_count_tokens_reply_without_a_total_is_a_protocol_error(
    server: GeminiServer, backend: GeminiBackend
) -> None:
    server.enqueue(json_reply({"cachedContentTokenCount": 3}))
    with pytest.raises(LLMBridgeError, match="totalTokens"):
        await backend.count_tokens(ask(user("hi")))


async def test_health_probes_the_model_list(server: GeminiServer, backend: GeminiBackend) -> None:
    verdict = await backend.health()
    assert verdict.ok
    assert (server.last.path, server.last.query) == ("/v1beta/models", {"pageSize": "1"})
    assert server.last.headers["x-goog-api-key"] == KEY
    unreachable = GeminiBackend("down", "http://127.0.0.1:9")
    try:
        assert not (await unreachable.health()).ok
    finally:
        await unreachable.aclose()


def test_model_paths_and_base_urls() -> None:
    assert (
        model_path("gemini-2.5-flash", "countTokens")
        == "/v1beta/models/gemini-2.5-flash:countTokens"
    )
    assert model_path("models/gemini-2.5-flash") == "/v1beta/models/gemini-2.5-flash"
    assert (
        model_path("tunedModels/mine", "generateContent")
        == "/v1beta/tunedModels/mine:generateContent"
    )
    # a tag's colon is quoted, so the last colon is the method's
    assert (
        model_path("qwen3:8b", "streamGenerateContent")
        == "/v1beta/models/qwen3%3A8b:streamGenerateContent"
    )
    for url in ("http://h:1", "http://h:1/", "http://h:1/v1beta", "http://h:1/v1beta/"):
        assert GeminiBackend("g", url).base_url == "http://h:1"
    assert GeminiBackend("g").base_url == "https://generativelanguage.googleapis.com"

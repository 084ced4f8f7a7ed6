"""Google's Gemini API, through the official ``google-genai`` SDK against the gateway on
loopback: the scripted backend for exact replies, decisions and faults, the embedded
model for real generations (asserting only protocol facts, or equality with the same
model called directly: tests/embedded_reference.py)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import errors, types

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.errors import BackendError
from llmbridge.core.messages import ToolCallPart, ToolResultPart
from llmbridge.features.tool_choice import named_tool_instruction
from llmbridge.gateway.app import create_app
from llmbridge.gateway.config import load_config
from llmbridge.web.render import Dialect
from tests.conftest import RunningServer, running_gateway
from tests.embedded_reference import direct_reply
from tests.fuzz.shapes import assert_error_shape

NO_AUTO_CALLS = types.AutomaticFunctionCallingConfig(disable=True)
WEATHER = types.FunctionDeclaration(
    name="get_weather",
    description="The weather in a city.",
    parameters_json_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)


def gemini_client(url: str, api_version: str | None = None) -> genai.Client:
    options = types.HttpOptions(base_url=url, api_version=api_version)
    return genai.Client(api_key="x", http_options=options)


@pytest.fixture
def client(gateway: RunningServer) -> Iterator[genai.Client]:
    client = gemini_client(gateway.url)
    yield client
    client.close()


def _config(**kwargs: Any) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(automatic_function_calling=NO_AUTO_CALLS, **kwargs)


# -- generateContent and streamGenerateContent ---------------------------------------


def test_generate_content(client: genai.Client, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["Hi", "!"]))
    reply = client.models.generate_content(
        model="gemini-2.5-flash",
        contents="hello",
        config=_config(system_instruction="be nice", max_output_tokens=16, temperature=0.5),
    )
    assert reply.text == "Hi!"
    candidate = reply.candidates[0]  # type: ignore[index]
    assert candidate.finish_reason == types.FinishReason.STOP
    assert candidate.content is not None and candidate.content.role == "model"
    assert reply.model_version == "gemini-2.5-flash"
    assert reply.response_id
    usage = reply.usage_metadata
    assert usage is not None and usage.prompt_token_count and usage.candidates_token_count
    assert usage.total_token_count == usage.prompt_token_count + usage.candidates_token_count
    seen = scripted.requests[-1]
    assert [m.role for m in seen.messages] == ["system", "user"]
    assert seen.model == "gemini-2.5-flash"
    assert seen.params.max_tokens == 16 and seen.params.temperature == 0.5
    assert not seen.stream


def test_generate_content_stream(client: genai.Client, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["A", "B", "C"]))
    chunks = list(client.models.generate_content_stream(model="scripted", contents="go"))
    assert "".join(c.text or "" for c in chunks) == "ABC"
    last = chunks[-1]
    assert last.candidates and last.candidates[0].finish_reason == types.FinishReason.STOP
    assert last.usage_metadata is not None and last.usage_metadata.candidates_token_count
    assert scripted.requests[-1].stream


def test_stream_without_alt_sse_is_one_json_array(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    scripted.enqueue(Script(text=["x", "y"]))
    body = {"contents": [{"role": "user", "parts": [{"text": "go"}]}]}
    reply = httpx.post(gateway.url + "/v1beta/models/scripted:streamGenerateContent", json=body)
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("application/json")
    chunks = reply.json()
    assert isinstance(chunks, list) and len(chunks) >= 2
    text = "".join(
        part.get("text", "")
        for chunk in chunks
        for part in chunk["candidates"][0]["content"]["parts"]
    )
    assert text == "xy"
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    url = gateway.url + "/v1beta/models/scripted:streamGenerateContent"
    scripted.enqueue(Script(text=["x", "y"]))
    as_json = httpx.post(url, params={"alt": "json"}, json=body).json()
    assert [c["candidates"] for c in as_json] == [c["candidates"] for c in chunks]
    refused = httpx.post(url, params={"alt": "proto"}, json=body)
    assert "alt" in assert_error_shape(Dialect.GEMINI, 400, refused.content)


def test_alt_given_twice_or_unknown_is_a_400_naming_it_on_every_method(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    """``alt=xml`` on generateContent was served as JSON, and ``alt`` given
    twice was read as its last value; now each is Google's 400 naming ``alt``, on every
    method, before the model is called."""
    body = {"contents": [{"role": "user", "parts": [{"text": "go"}]}]}
    embed = {"content": {"parts": [{"text": "go"}]}}
    batch = {"requests": [embed]}
    calls = [
        ("post", "scripted:generateContent", body),
        ("post", "scripted:streamGenerateContent", body),
        ("post", "scripted:countTokens", body),
        ("post", "scripted:embedContent", embed),
        ("post", "scripted:batchEmbedContents", batch),
        ("get", "", None),
        ("get", "scripted", None),
    ]
    asked = len(scripted.requests)
    for query in ("alt=xml", "alt=sse&alt=sse", "alt=json&alt=sse", "alt=", "alt=SSE"):
        for verb, path, payload in calls:
            url = f"{gateway.url}/v1beta/models{'/' if path else ''}{path}?{query}"
            reply = httpx.request(verb, url, json=payload)
            message = assert_error_shape(Dialect.GEMINI, 400, reply.content)
            assert "alt" in message, (query, path, message)
            error = reply.json()["error"]
            assert error["status"] == "INVALID_ARGUMENT"
            assert error["details"][0]["fieldViolations"][0]["field"] == "alt"
    assert len(scripted.requests) == asked  # nothing reached the model
    scripted.enqueue(Script(text=["fine"]))
    served = httpx.post(gateway.url + "/v1beta/models/scripted:generateContent?alt=json", json=body)
    assert served.status_code == 200


def test_output_dimensionality_below_one_is_a_400_naming_it(
    client: genai.Client, gateway: RunningServer
) -> None:
    """``outputDimensionality`` 0 or -3 reached the backend (which cut the
    vector to nothing, or to all but its last three values)."""
    for dimensions in (0, -3):
        with pytest.raises(errors.ClientError) as caught:
            client.models.embed_content(
                model="scripted",
                contents=["alpha"],
                config=types.EmbedContentConfig(output_dimensionality=dimensions),
            )
        assert caught.value.code == 400 and caught.value.status == "INVALID_ARGUMENT"
        assert "outputDimensionality" in (caught.value.message or "")
        url = gateway.url + "/v1beta/models/scripted:embedContent"
        one = {"content": {"parts": [{"text": "alpha"}]}, "outputDimensionality": dimensions}
        reply = httpx.post(url, json=one)
        assert "outputDimensionality" in assert_error_shape(Dialect.GEMINI, 400, reply.content)
        field = reply.json()["error"]["details"][0]["fieldViolations"][0]["field"]
        assert field == "outputDimensionality"
        batch = {"requests": [{"content": one["content"], "outputDimensionality": dimensions}]}
        reply = httpx.post(url.replace(":embedContent", ":batchEmbedContents"), json=batch)
        field = reply.json()["error"]["details"][0]["fieldViolations"][0]["field"]
        assert reply.status_code == 400 and field == "requests.0.outputDimensionality"


def test_sse_stream_media_type(gateway: RunningServer, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["x"]))
    body = {"contents": [{"role": "user", "parts": [{"text": "go"}]}]}
    url = gateway.url + "/v1beta/models/scripted:streamGenerateContent?alt=sse"
    with httpx.stream("POST", url, json=body) as reply:
        assert reply.headers["content-type"].startswith("text/event-stream")
        events = [line for line in reply.iter_lines() if line.startswith("data: ")]
    assert events and all(json.loads(e[6:])["candidates"] for e in events)


def test_the_v1_prefix(gateway: RunningServer, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["v", "1"]))
    client = gemini_client(gateway.url, api_version="v1")
    try:
        reply = client.models.generate_content(model="scripted", contents="hi")
        assert reply.text == "v1"
        assert client.models.count_tokens(model="scripted", contents="a b").total_tokens == 2
        assert [m.name for m in client.models.list()] == ["models/scripted", "models/other"]
    finally:
        client.close()


def test_model_names_may_hold_colons(client: genai.Client, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["ok"]))
    client.models.generate_content(model="qwen3:8b", contents="hi")
    assert scripted.requests[-1].model == "qwen3:8b"


def test_a_percent_encoded_colon(gateway: RunningServer, scripted: ScriptedBackend) -> None:
    """``%3A`` as some clients send it: http.client sends the path byte for byte."""
    scripted.enqueue(Script(text=["ok"]))
    connection = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=10)
    try:
        body = json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
        path = "/v1beta/models/qwen3%3A8b%3AgenerateContent"
        connection.request("POST", path, body, {"content-type": "application/json"})
        response = connection.getresponse()
        reply = json.loads(response.read())
    finally:
        connection.close()
    assert response.status == 200, reply
    assert reply["candidates"][0]["content"]["parts"] == [{"text": "ok"}]
    assert reply["modelVersion"] == "qwen3:8b"
    assert scripted.requests[-1].model == "qwen3:8b"


# -- tools, thinking, JSON output -----------------------------------------------------


def test_function_calling_round_trip(client: genai.Client, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=[], tool_calls=[("get_weather", {"city": "Oslo"})]))
    tools = [types.Tool(function_declarations=[WEATHER])]
    question = types.Content(role="user", parts=[types.Part(text="weather in Oslo?")])
    reply = client.models.generate_content(
        model="scripted", contents=[question], config=_config(tools=tools)
    )
    calls = reply.function_calls
    assert calls is not None and len(calls) == 1
    assert calls[0].name == "get_weather" and calls[0].args == {"city": "Oslo"}
    assert calls[0].id is None  # the client sent no ids: none back, as Google does
    seen = scripted.requests[-1]
    assert [t.name for t in seen.tools] == ["get_weather"]
    assert seen.tools[0].input_schema["required"] == ["city"]

    scripted.enqueue(Script(text=["Sunny."]))
    answer = types.Part.from_function_response(name="get_weather", response={"output": "sunny"})
    turns = [question, reply.candidates[0].content, types.Content(role="user", parts=[answer])]  # type: ignore[index]
    final = client.models.generate_content(
        model="scripted", contents=turns, config=_config(tools=tools)
    )
    assert final.text == "Sunny."
    seen = scripted.requests[-1]
    assert [m.role for m in seen.messages] == ["user", "assistant", "tool"]
    call = seen.messages[1].parts[0]
    result = seen.messages[2].parts[0]
    assert isinstance(call, ToolCallPart) and isinstance(result, ToolResultPart)
    assert result.tool_call_id == call.id and result.content == "sunny"


def test_forced_function_call(client: genai.Client, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=[], tool_calls=[("get_weather", {"city": "Rome"})]))
    forced = types.ToolConfig(
        function_calling_config=types.FunctionCallingConfig(
            mode=types.FunctionCallingConfigMode.ANY, allowed_function_names=["get_weather"]
        )
    )
    chunks = list(
        client.models.generate_content_stream(
            model="scripted",
            contents="weather?",
            config=_config(tools=[types.Tool(function_declarations=[WEATHER])], tool_config=forced),
        )
    )
    calls = [call for chunk in chunks for call in chunk.function_calls or []]
    assert [(c.name, c.args) for c in calls] == [("get_weather", {"city": "Rome"})]
    # The scripted backend has no native tool choice: serving says it in the prompt.
    system = scripted.requests[-1].messages[0]
    assert system.role == "system" and system.text == named_tool_instruction("get_weather")


def test_thinking(client: genai.Client, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(thinking=["hmm"], text=["ok"]))
    reply = client.models.generate_content(
        model="scripted",
        contents="think",
        config=_config(
            thinking_config=types.ThinkingConfig(include_thoughts=True, thinking_budget=512)
        ),
    )
    parts = reply.candidates[0].content.parts  # type: ignore[index,union-attr]
    assert parts is not None
    assert [(p.thought, p.text) for p in parts] == [(True, "hmm"), (None, "ok")]
    thinking = scripted.requests[-1].thinking
    assert thinking is not None and thinking.enabled and thinking.budget_tokens == 512

    scripted.enqueue(Script(thinking=["hmm"], text=["ok"]))
    hidden = client.models.generate_content(
        model="scripted",
        contents="think",
        config=_config(thinking_config=types.ThinkingConfig(thinking_budget=512)),
    )
    assert [p.text for p in hidden.candidates[0].content.parts] == ["ok"]  # type: ignore[index,union-attr]


def test_json_output(client: genai.Client, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=['{"n": 1}']))
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    reply = client.models.generate_content(
        model="scripted",
        contents="a number",
        config=_config(response_mime_type="application/json", response_json_schema=schema),
    )
    assert reply.parsed == {"n": 1} or json.loads(reply.text or "") == {"n": 1}
    fmt = scripted.requests[-1].response_format
    assert fmt is not None and fmt.type == "json_schema" and fmt.schema == schema


# -- countTokens, embeddings, models ---------------------------------------------------


def test_count_tokens(client: genai.Client) -> None:
    counted = client.models.count_tokens(model="scripted", contents="one two three fourfive")
    # seed 001's rule: words of up to 4 characters are one token, longer ones one per 4.
    assert counted.total_tokens == 6


def test_embed_content(client: genai.Client, gateway: RunningServer) -> None:
    reply = client.models.embed_content(model="scripted", contents=["alpha", "beta"])
    assert reply.embeddings is not None and len(reply.embeddings) == 2
    first, second = (e.values for e in reply.embeddings)
    assert first and second and len(first) == len(second) and first != second
    one = httpx.post(
        gateway.url + "/v1beta/models/scripted:embedContent",
        json={"content": {"parts": [{"text": "alpha"}]}},
    )
    assert one.status_code == 200 and one.json() == {"embedding": {"values": first}}


def test_models_list_and_get(client: genai.Client, gateway: RunningServer) -> None:
    listed = list(client.models.list())
    assert [m.name for m in listed] == ["models/scripted", "models/other"]
    assert "generateContent" in (listed[0].supported_actions or [])
    model = client.models.get(model="scripted")
    assert model.name == "models/scripted" and model.input_token_limit == 8192
    servable = client.models.get(model="anything-else")  # the default backend serves it
    assert servable.name == "models/anything-else"


def test_v1_models_is_gemini_only_for_gemini_clients(gateway: RunningServer) -> None:
    openai_list = httpx.get(gateway.url + "/v1/models").json()
    assert openai_list["object"] == "list" and openai_list["data"][0]["id"] == "scripted"
    gemini_list = httpx.get(gateway.url + "/v1/models", headers={"x-goog-api-key": "x"}).json()
    assert [m["name"] for m in gemini_list["models"]] == ["models/scripted", "models/other"]
    by_query = httpx.get(gateway.url + "/v1/models/scripted", params={"key": "x"}).json()
    assert by_query["name"] == "models/scripted"
    assert httpx.get(gateway.url + "/v1/models/scripted").json()["object"] == "model"


# -- errors ---------------------------------------------------------------------------


def test_unknown_model_is_a_404(scripted: ScriptedBackend) -> None:
    with running_gateway({"scripted": scripted}, restrict_models=True) as server:
        client = gemini_client(server.url)
        try:
            with pytest.raises(errors.ClientError) as caught:
                client.models.generate_content(model="no-such-model", contents="hi")
            assert caught.value.code == 404 and caught.value.status == "NOT_FOUND"
            with pytest.raises(errors.ClientError) as missing:
                client.models.get(model="no-such-model")
            assert missing.value.code == 404
        finally:
            client.close()


def test_bad_bodies_are_400_invalid_argument(client: genai.Client, gateway: RunningServer) -> None:
    with pytest.raises(errors.ClientError) as caught:
        client.models.generate_content(
            model="scripted", contents="hi", config=_config(candidate_count=2)
        )
    assert caught.value.code == 400 and caught.value.status == "INVALID_ARGUMENT"
    assert "candidateCount" in (caught.value.message or "")
    url = gateway.url + "/v1beta/models/scripted:generateContent"
    bodies = (
        b"{not json",
        b'{"contents": "hi"}',
        b"[]",
        b'{"contents": [{"parts": 1}]}',
        # Found by the fuzzer: the count check iterated a number (a 500 before).
        b'{"contents": [{"parts": [{"text": "hi"}]}], "tools": 1.5}',
    )
    for body in bodies:
        reply = httpx.post(url, content=body, headers={"content-type": "application/json"})
        assert_error_shape(Dialect.GEMINI, 400, reply.content)


def test_unknown_method_is_a_404_naming_it(gateway: RunningServer) -> None:
    for prefix in ("/v1beta", "/v1"):
        reply = httpx.post(gateway.url + prefix + "/models/qwen3:8b:predict", json={})
        assert "'predict'" in assert_error_shape(Dialect.GEMINI, 404, reply.content)
    wrong_verb = httpx.get(gateway.url + "/v1beta/models/scripted:generateContent")
    assert_error_shape(Dialect.GEMINI, 405, wrong_verb.content)


def test_error_before_the_stream(client: genai.Client, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(fail_before=BackendError("overloaded", status_code=503, retry_after=7)))
    with pytest.raises(errors.ServerError) as caught:
        list(client.models.generate_content_stream(model="scripted", contents="hi"))
    assert caught.value.code == 503 and caught.value.status == "UNAVAILABLE"
    assert caught.value.response is not None
    assert caught.value.response.headers["retry-after"] == "7"  # type: ignore[union-attr]


def test_error_in_the_stream(client: genai.Client, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["a", "b", "c"], fail_after=2, fail_error=BackendError("boom")))
    received: list[str] = []
    with pytest.raises(errors.APIError) as caught:
        for chunk in client.models.generate_content_stream(model="scripted", contents="hi"):
            received.append(chunk.text or "")
    assert "".join(received) == "ab"
    assert caught.value.code == 502 and "boom" in (caught.value.message or "")


def test_error_in_the_json_array_stream(gateway: RunningServer, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["a", "b"], fail_after=1, fail_error=BackendError("boom")))
    body = {"contents": [{"role": "user", "parts": [{"text": "go"}]}]}
    reply = httpx.post(gateway.url + "/v1/models/scripted:streamGenerateContent", json=body)
    chunks = reply.json()
    assert chunks[-1]["error"]["code"] == 502 and "boom" in chunks[-1]["error"]["message"]
    assert chunks[0]["candidates"][0]["content"]["parts"] == [{"text": "a"}]


# -- the embedded model ---------------------------------------------------------------

QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def zero_config() -> Iterator[RunningServer]:
    """Exactly what `llmbridge serve` builds with no flags and no file."""
    with RunningServer(create_app(load_config(None))) as server:
        yield server


@pytest.mark.embedded
def test_embedded_generate_and_stream(zero_config: RunningServer) -> None:
    client = gemini_client(zero_config.url)
    try:
        config = types.GenerateContentConfig(temperature=0, max_output_tokens=12, seed=1)
        reply = client.models.generate_content(model="smollm2", contents=QUESTION, config=config)
        expected = direct_reply([{"role": "user", "content": QUESTION}], max_tokens=12)
        assert reply.text == expected.text
        usage = reply.usage_metadata
        assert usage is not None and usage.candidates_token_count == expected.completion_tokens
        streamed = client.models.generate_content_stream(
            model="smollm2", contents=QUESTION, config=config
        )
        assert "".join(chunk.text or "" for chunk in streamed) == expected.text
        assert client.models.count_tokens(model="smollm2", contents=QUESTION).total_tokens
    finally:
        client.close()


@pytest.mark.embedded
def test_embedded_function_calling(zero_config: RunningServer) -> None:
    """Emulated tools (the model has none of its own): a function call or text comes
    back, well formed; which one is the model's choice."""
    client = gemini_client(zero_config.url)
    try:
        reply = client.models.generate_content(
            model="smollm2",
            contents="What is the weather in Oslo? Use the tool.",
            config=_config(
                tools=[types.Tool(function_declarations=[WEATHER])],
                temperature=0,
                max_output_tokens=64,
            ),
        )
        dumped = reply.model_dump_json(exclude_none=True)
        assert reply.sdk_http_response is not None and reply.sdk_http_response.headers
        assert reply.sdk_http_response.headers["x-llmbridge-tools"] == "emulated"
        assert reply.candidates and reply.candidates[0].content, dumped
        parts = reply.candidates[0].content.parts or []
        calls = [part.function_call for part in parts if part.function_call is not None]
        if calls:
            # "unknown": tool emulation's name for a call to a tool that was not offered
            assert all(c.name in ("get_weather", "unknown") for c in calls), dumped
            assert all(isinstance(c.args, dict) for c in calls), dumped
        else:
            assert "".join(part.text or "" for part in parts).strip(), dumped
        finish = reply.candidates[0].finish_reason
        assert finish in (types.FinishReason.STOP, types.FinishReason.MAX_TOKENS), dumped
    finally:
        client.close()


@pytest.mark.embedded
def test_embedded_count_tokens_with_the_backend_tokenizer() -> None:
    """``tokenizer: backend``: countTokens is the templated prompt in SmolLM2's own
    tokens, what generation really uses (``promptTokenCount``)."""
    with RunningServer(create_app(load_config(None, {"tokenizer": "backend"}))) as server:
        client = gemini_client(server.url)
        try:
            counted = client.models.count_tokens(model="smollm2", contents="Hello there")
            reply = client.models.generate_content(
                model="smollm2",
                contents="Hello there",
                config=types.GenerateContentConfig(max_output_tokens=1),
            )
        finally:
            client.close()
    assert reply.usage_metadata is not None
    assert counted.total_tokens == reply.usage_metadata.prompt_token_count
    assert counted.total_tokens != 4  # the word rule's estimate

"""The ``gemini`` backend behind the gateway: clients of the other dialects (the
official ``anthropic`` and ``ollama`` SDKs, as Claude Code and Ollama apps are) on a
Gemini model, configured as ``type: gemini`` and served by the scripted
Gemini-protocol server on loopback; and its configuration (``GEMINI_API_KEY``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest
from google import genai
from google.genai import types as genai_types

from llmbridge.backends.gemini import SKIP_SIGNATURE, GeminiBackend
from llmbridge.gateway.config import load_config
from llmbridge.serving.build import build_backends
from llmbridge.serving.config import ServingConfig
from tests.backends.gemini_server import (
    GeminiServer,
    chunk,
    google_error,
    model_entry,
    running_gemini_server,
    sse,
)
from tests.conftest import RunningServer, anthropic_client, ollama_client, running_gateway

MODEL = "gemini-2.5-flash"
KEY = "AIza-gateway-key"
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
USAGE = {"promptTokenCount": 12, "candidatesTokenCount": 4, "totalTokenCount": 16}


def genai_client(url: str) -> genai.Client:
    return genai.Client(api_key="x", http_options=genai_types.HttpOptions(base_url=url))


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[GeminiServer, RunningServer]]:
    """The gateway with one backend, built from ``type: gemini`` as a file would say it."""
    with running_gemini_server() as (server, upstream):
        config = ServingConfig.model_validate(
            {"backends": {"gem": {"type": "gemini", "url": upstream.url, "api_key": KEY}}}
        )
        backends = build_backends(config)
        with running_gateway(backends, resilience={"retries": 0, "breaker_failures": 0}) as front:
            yield server, front


@pytest.fixture
def server(stack: tuple[GeminiServer, RunningServer]) -> GeminiServer:
    stack[0].reset()
    stack[0].models = {MODEL: model_entry(MODEL)}
    return stack[0]


@pytest.fixture
def gateway(stack: tuple[GeminiServer, RunningServer]) -> RunningServer:
    return stack[1]


def test_an_anthropic_client_runs_a_tool_loop_on_a_gemini_model(
    server: GeminiServer, gateway: RunningServer
) -> None:
    call = {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}
    server.enqueue(
        sse(
            chunk({"text": "Checking. "}),
            chunk({**call, "thoughtSignature": "c2lnLWdhdGV3YXk="}, finish="STOP", usage=USAGE),
        ),
        sse(chunk({"text": "Sunny in Paris."}, finish="STOP", usage=USAGE)),
    )
    client = anthropic_client(gateway.url)
    question = {"role": "user", "content": "Weather in Paris?"}
    with client.messages.stream(
        model=MODEL, max_tokens=256, tools=[WEATHER], messages=[question]
    ) as stream:
        first = stream.get_final_message()
    assert first.stop_reason == "tool_use"
    tool_use = next(b for b in first.content if b.type == "tool_use")
    assert (tool_use.name, tool_use.input) == ("get_weather", {"city": "Paris"})
    assert (first.usage.input_tokens, first.usage.output_tokens) == (12, 4)
    sent = server.generations()[-1]
    assert sent.headers["x-goog-api-key"] == KEY and "key" not in sent.query
    assert sent.body["tools"][0]["functionDeclarations"][0]["name"] == "get_weather"

    second = client.messages.create(
        model=MODEL,
        max_tokens=256,
        tools=[WEATHER],
        messages=[
            question,
            # the whole assistant turn back, the block carrying the signature included
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": tool_use.id, "content": "sunny"}
                ],
            },
        ],
    )
    assert [b.type for b in second.content] == ["text"]
    assert second.content[0].text == "Sunny in Paris."
    contents = server.generations()[-1].body["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    # Gemini got its own signature back, on the part it came with.
    assert contents[1]["parts"] == [
        {"text": "Checking. "},
        {**call, "thoughtSignature": "c2lnLWdhdGV3YXk="},
    ]
    answer = contents[2]["parts"][0]["functionResponse"]
    assert (answer["name"], answer["response"]) == ("get_weather", {"output": "sunny"})


def test_thinking_reaches_gemini_and_its_thoughts_come_back_to_an_anthropic_client(
    server: GeminiServer, gateway: RunningServer
) -> None:
    thought = {"text": "weigh options", "thought": True, "thoughtSignature": "dGhvdWdodA=="}
    server.enqueue(
        sse(chunk(thought), chunk({"text": "Use a set."}, finish="STOP", usage=USAGE)),
        sse(chunk({"text": "Done."}, finish="STOP")),
    )
    client = anthropic_client(gateway.url)
    question = {"role": "user", "content": "How do I dedupe a list?"}
    thinking = {"type": "enabled", "budget_tokens": 2048}
    with client.messages.stream(
        model=MODEL, max_tokens=4096, thinking=thinking, messages=[question]
    ) as stream:
        first = stream.get_final_message()
    # The model's own description ("thinking": true) let the request's thinking through.
    config = server.generations()[-1].body["generationConfig"]
    assert config["thinkingConfig"] == {"includeThoughts": True, "thinkingBudget": 2048}
    assert [b.type for b in first.content] == ["thinking", "text"]
    assert first.content[0].thinking == "weigh options"

    client.messages.create(
        model=MODEL,
        max_tokens=4096,
        thinking=thinking,
        messages=[
            question,
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": "And keep the order?"},
        ],
    )
    contents = server.generations()[-1].body["contents"]
    # The signature goes back on the next part; the thought's text is not sent.
    assert contents[1] == {
        "role": "model",
        "parts": [{"text": "Use a set.", "thoughtSignature": "dGhvdWdodA=="}],
    }


@pytest.mark.parametrize("model", [MODEL, "gemini-3-flash-preview"])
def test_an_ollama_client_runs_a_tool_loop_on_a_gemini_model(
    server: GeminiServer, gateway: RunningServer, model: str
) -> None:
    """Ollama's API has no place for a thought signature: Gemini 3, which wants one on
    the call sent back, gets Google's placeholder (backends/gemini.py)."""
    server.models[model] = model_entry(model)
    server.enqueue(
        sse(
            chunk(
                {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}}, finish="STOP"
            )
        ),
        sse(chunk({"text": "Rainy."}, finish="STOP")),
    )
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": WEATHER["input_schema"],
        },
    }
    client = ollama_client(gateway.url)
    question = {"role": "user", "content": "Weather in Rome?"}
    first = client.chat(model=model, messages=[question], tools=[tool])
    calls = first.message.tool_calls or []
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "Rome"})
    ]
    second = client.chat(
        model=model,
        messages=[
            question,
            first.message,
            {"role": "tool", "tool_name": "get_weather", "content": "rainy"},
        ],
        tools=[tool],
    )
    assert second.message.content == "Rainy."
    contents = server.generations()[-1].body["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    assert contents[2]["parts"][0]["functionResponse"]["response"] == {"output": "rainy"}
    placeholder = {"thoughtSignature": SKIP_SIGNATURE} if model.startswith("gemini-3") else {}
    call = {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}}
    assert contents[1]["parts"] == [{**call, **placeholder}]


GEMINI_3 = "gemini-3-flash-preview"


def test_a_gemini_client_keeps_googles_signatures_and_call_ids_across_turns(
    server: GeminiServer, gateway: RunningServer
) -> None:
    """google-genai on a Gemini 3 model, as its docs say to run a tool loop: the reply's
    content appended as it came, each result answering its call's id. Google gets its
    own signatures back on the parts they came on, and its own ids on the calls and on
    the results that answer them, two turns later still."""
    server.models[GEMINI_3] = model_entry(GEMINI_3)
    paris = {"id": "46ww9pp1", "name": "get_weather", "args": {"city": "Paris"}}
    rome = {"id": "8zq1lk0v", "name": "get_weather", "args": {"city": "Rome"}}
    server.enqueue(
        sse(
            chunk({"functionCall": paris, "thoughtSignature": "c2lnLWNhbGw="}, model=GEMINI_3),
            chunk({"functionCall": rome}, finish="STOP", usage=USAGE, model=GEMINI_3),
        ),
        sse(chunk({"text": "Both sunny.", "thoughtSignature": "c2lnLXRleHQ="}, finish="STOP")),
        sse(chunk({"text": "You are welcome."}, finish="STOP")),
    )
    client = genai_client(gateway.url)
    declaration = genai_types.FunctionDeclaration(
        name="get_weather",
        description="Weather for a city",
        parameters_json_schema=WEATHER["input_schema"],
    )
    config = genai_types.GenerateContentConfig(
        tools=[genai_types.Tool(function_declarations=[declaration])],
        automatic_function_calling=genai_types.AutomaticFunctionCallingConfig(disable=True),
    )
    history: list[genai_types.Content] = [
        genai_types.Content(role="user", parts=[genai_types.Part(text="Paris and Rome?")])
    ]
    first = client.models.generate_content(model=GEMINI_3, contents=history, config=config)
    calls = first.function_calls or []
    assert [(c.name, c.args) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Rome"}),
    ]
    assert all(c.id for c in calls)  # Google gave ids: so does the gateway
    history.append(first.candidates[0].content)  # type: ignore[index, arg-type]
    answers = [
        genai_types.Part(
            function_response=genai_types.FunctionResponse(
                id=call.id, name=call.name, response={"output": "sunny"}
            )
        )
        for call in reversed(calls)  # answered out of order: the ids say which is which
    ]
    history.append(genai_types.Content(role="user", parts=answers))
    second = client.models.generate_content(model=GEMINI_3, contents=history, config=config)
    assert second.text == "Both sunny."
    history.append(second.candidates[0].content)  # type: ignore[index, arg-type]
    history.append(genai_types.Content(role="user", parts=[genai_types.Part(text="Thanks!")]))
    client.models.generate_content(model=GEMINI_3, contents=history, config=config)

    contents = server.generations()[-1].body["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user", "model", "user"]
    assert contents[1]["parts"] == [
        {"functionCall": paris, "thoughtSignature": "c2lnLWNhbGw="},
        {"functionCall": rome},
    ]
    assert [p["functionResponse"]["id"] for p in contents[2]["parts"]] == ["8zq1lk0v", "46ww9pp1"]
    assert contents[3]["parts"] == [{"text": "Both sunny.", "thoughtSignature": "c2lnLXRleHQ="}]
    client.close()


def test_an_id_google_did_not_issue_never_reaches_it(
    server: GeminiServer, gateway: RunningServer
) -> None:
    """Gemini CLI names its calls itself when the reply has no ids
    (tests/profiler/fixtures/transcripts/gemini_cli_session.jsonl): matched by the
    gateway, but sent without them, as Google matches by name and order."""
    server.enqueue(sse(chunk({"text": "Done."}, finish="STOP")))
    call_id = "run_shell_command__run_shell_command_1795865846431_0"
    call = {"id": call_id, "name": "get_weather", "args": {"city": "Oslo"}}
    result = {"id": call_id, "name": "get_weather", "response": {"output": "snow"}}
    client = genai_client(gateway.url)
    client.models.generate_content(
        model=MODEL,
        contents=[
            {"role": "user", "parts": [{"text": "Oslo?"}]},
            {"role": "model", "parts": [{"function_call": call}]},
            {"role": "user", "parts": [{"function_response": result}]},
        ],
    )
    contents = server.generations()[-1].body["contents"]
    assert contents[1]["parts"] == [
        {"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}}
    ]
    assert contents[2]["parts"] == [
        {"functionResponse": {"name": "get_weather", "response": {"output": "snow"}}}
    ]
    client.close()


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (GEMINI_3, {"includeThoughts": True, "thinkingLevel": "MINIMAL"}),
        (MODEL, {"includeThoughts": True, "thinkingBudget": 1024}),  # 2.5: budgets only
    ],
)
def test_a_gemini_clients_thinking_level_reaches_a_model_that_takes_levels(
    server: GeminiServer, gateway: RunningServer, model: str, expected: dict[str, object]
) -> None:
    server.models[model] = model_entry(model)
    server.enqueue(sse(chunk({"text": "ok"}, finish="STOP")))
    client = genai_client(gateway.url)
    thinking = genai_types.ThinkingConfig(thinking_level=genai_types.ThinkingLevel.MINIMAL)
    # google-genai spells it ``thinking_level``, which only the translated path reads.
    client.models.generate_content(
        model=model,
        contents="hi",
        config=genai_types.GenerateContentConfig(thinking_config=thinking),
    )
    config = server.generations()[-1].body["generationConfig"]
    assert config["thinkingConfig"] == expected
    client.close()


def test_claude_codes_effort_is_a_thinking_level_for_gemini_3(
    server: GeminiServer, gateway: RunningServer
) -> None:
    server.models[GEMINI_3] = model_entry(GEMINI_3)
    server.enqueue(sse(chunk({"text": "ok"}, finish="STOP")))
    anthropic_client(gateway.url).messages.create(
        model=GEMINI_3,
        max_tokens=1024,
        thinking={"type": "adaptive"},  # type: ignore[typeddict-item]
        messages=[{"role": "user", "content": "hi"}],
        extra_body={"output_config": {"effort": "high"}},
    )
    config = server.generations()[-1].body["generationConfig"]
    assert config["thinkingConfig"] == {"includeThoughts": True, "thinkingLevel": "HIGH"}


def test_thinking_anthropic_signed_is_not_sent_to_gemini(
    server: GeminiServer, gateway: RunningServer
) -> None:
    server.enqueue(sse(chunk({"text": "ok"}, finish="STOP")))
    anthropic_client(gateway.url).messages.create(
        model=MODEL,
        max_tokens=64,
        tools=[WEATHER],
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Claude's", "signature": "EqQBCkYIARgC"},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sun"}],
            },
        ],
    )
    contents = server.generations()[-1].body["contents"]
    # Neither the text nor Anthropic's signature: Google would refuse a signature of
    # another's, and thought text is never sent back.
    assert contents[1]["parts"] == [{"functionCall": {"name": "get_weather", "args": {}}}]


def test_googles_429_reaches_the_client_as_a_429_with_retry_after(
    server: GeminiServer, gateway: RunningServer
) -> None:
    retry = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "30s"}
    server.enqueue(
        google_error(429, "Resource has been exhausted.", "RESOURCE_EXHAUSTED", details=[retry])
    )
    with pytest.raises(anthropic.RateLimitError, match="Resource has been exhausted") as caught:
        anthropic_client(gateway.url).messages.create(
            model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.response.headers["retry-after"] == "30"


def test_the_gemini_models_are_listed_to_an_ollama_client(
    server: GeminiServer, gateway: RunningServer
) -> None:
    server.pages = {"": {"models": [model_entry(MODEL), model_entry("gemini-2.5-pro")]}}
    client = ollama_client(gateway.url)
    names = [m.model for m in client.list().models]
    assert {MODEL, "gemini-2.5-pro"} <= set(names)
    # Ollama apps (Home Assistant) offer tools only to a model that says it has them.
    assert {"tools", "thinking", "vision"} <= set(client.show(MODEL).capabilities or [])


# -- configuration ----------------------------------------------------------------------


def test_configured_as_type_gemini() -> None:
    config = ServingConfig.model_validate({"backends": {"g": {"type": "gemini"}}})
    backend = build_backends(config)["g"]
    assert isinstance(backend, GeminiBackend)
    assert backend.kind == "gemini"
    assert backend.base_url == "https://generativelanguage.googleapis.com"


def test_the_key_comes_from_gemini_api_key_when_the_file_sets_none(tmp_path: Path) -> None:
    environ = {"GEMINI_API_KEY": "from-env", "GOOGLE_GEMINI_BASE_URL": "http://127.0.0.1:1"}
    path = tmp_path / "config.yaml"
    path.write_text(
        "backends:\n"
        "  g: {type: gemini}\n"
        "  h: {type: gemini, api_key: from-file, url: 'http://10.0.0.9:8080/v1beta'}\n",
        encoding="utf-8",
    )
    loaded = load_config(path, {}, environ)
    g, h = loaded.backends["g"], loaded.backends["h"]
    assert g.type == "gemini" and h.type == "gemini"
    assert g.api_key == "from-env"
    # GOOGLE_GEMINI_BASE_URL is Gemini CLI's variable (where the CLI finds us), not ours
    assert g.url == "https://generativelanguage.googleapis.com"
    assert (h.api_key, h.url) == ("from-file", "http://10.0.0.9:8080/v1beta")
    built = build_backends(loaded)["h"]
    assert isinstance(built, GeminiBackend) and built.base_url == "http://10.0.0.9:8080"

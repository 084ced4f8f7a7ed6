"""Legacy completions (``POST /v1/completions``) and fill-in-the-middle, through the
official ``openai`` client (and ``ollama``'s ``generate`` with a ``suffix``): over the
scripted backend, and over a fake Ollama / OpenAI-compatible upstream to check that
the prompt and ``suffix`` reach it natively (docs/COMPLETIONS.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import ollama
import openai
import orjson
import pytest

from llmbridge.backends.ollama import OllamaBackend
from llmbridge.backends.openai_compat import OpenAICompatBackend
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.errors import BackendUnavailableError
from llmbridge.core.request import Completion
from tests.conftest import RunningServer, ollama_client, openai_client, running_gateway
from tests.upstream import Canned, FakeUpstream


def ndjson(*frames: dict[str, object]) -> list[bytes]:
    return [orjson.dumps(f) + b"\n" for f in frames]


def sse(*payloads: dict[str, object] | str) -> list[bytes]:
    out = []
    for p in payloads:
        data = p if isinstance(p, str) else orjson.dumps(p).decode()
        out.append(f"data: {data}\n\n".encode())
    return out


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[FakeUpstream, RunningServer]]:
    fake = FakeUpstream()
    with RunningServer(fake.app) as server:
        yield fake, server


@pytest.fixture(scope="module")
def fim() -> ScriptedBackend:
    """A scripted model that says it fills in the middle (Ollama's ``insert``)."""
    return ScriptedBackend(
        "fim", models=("coder",), capabilities=frozenset({"completion", "insert"})
    )


@pytest.fixture(scope="module")
def gateway(  # type: ignore[override]
    scripted: ScriptedBackend,
    fim: ScriptedBackend,
    upstream: tuple[FakeUpstream, RunningServer],
) -> Iterator[RunningServer]:
    _, up = upstream
    backends = {
        "scripted": scripted,
        "fim": fim,
        "ollama": OllamaBackend("ollama", up.url),
        "vllm": OpenAICompatBackend("vllm", up.url),
    }
    models = [
        {"name": "coder", "backend": "fim"},
        {"name": "ollama-*", "backend": "ollama"},
        {"name": "oai-*", "backend": "vllm"},
    ]
    with running_gateway(backends, models=models) as server:
        yield server


@pytest.fixture
def client(gateway: RunningServer) -> openai.OpenAI:
    return openai_client(gateway.url)


@pytest.fixture(autouse=True)
def _reset(fim: ScriptedBackend, upstream: tuple[FakeUpstream, RunningServer]) -> None:
    fim.queue.clear()
    fake, _ = upstream
    fake.queue.clear()
    fake.show = None


# -- the openai SDK on the scripted backend -------------------------------------------


def test_completion(client: openai.OpenAI, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["def", " add"]))
    reply = client.completions.create(
        model="scripted", prompt="# add two numbers\n", max_tokens=7, stop=["\n\n"], seed=3
    )
    assert reply.object == "text_completion"
    assert reply.id.startswith("cmpl-")
    assert reply.model == "scripted"
    assert [(c.text, c.index, c.logprobs, c.finish_reason) for c in reply.choices] == [
        ("def add", 0, None, "stop")
    ]
    assert reply.usage is not None
    assert reply.usage.completion_tokens > 0
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    sent = scripted.requests[-1]
    assert sent.completion == Completion(prompt="# add two numbers\n", raw=True)
    assert [m.text for m in sent.messages] == ["# add two numbers\n"]  # for chat-only backends
    assert (sent.params.max_tokens, sent.params.stop, sent.params.seed) == (7, ("\n\n",), 3)


def test_completion_defaults_to_sixteen_tokens(
    client: openai.OpenAI, scripted: ScriptedBackend
) -> None:
    client.completions.create(model="scripted", prompt=["one prompt in a list"])
    sent = scripted.requests[-1]
    assert sent.params.max_tokens == 16  # the API's documented default
    assert sent.completion is not None and sent.completion.prompt == "one prompt in a list"


def test_streamed_completion_with_usage(client: openai.OpenAI, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["a", "b", "c"], stop_reason=None))
    chunks = list(
        client.completions.create(
            model="scripted",
            prompt="x",
            max_tokens=3,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "abc"
    assert {c.object for c in chunks} == {"text_completion"}
    assert len({c.id for c in chunks}) == 1
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])


def test_streamed_completion_without_usage(client: openai.OpenAI) -> None:
    chunks = list(client.completions.create(model="scripted", prompt="x", stream=True))
    assert all(c.choices for c in chunks)
    assert "".join(c.choices[0].text for c in chunks) == "Hello from llmbridge."


def test_length_finish_reason(client: openai.OpenAI, scripted: ScriptedBackend) -> None:
    from llmbridge.core.response import StopReason

    scripted.enqueue(Script(text=["abc"], stop_reason=StopReason.MAX_TOKENS))
    reply = client.completions.create(model="scripted", prompt="x", max_tokens=1)
    assert reply.choices[0].finish_reason == "length"


def test_echo_repeats_the_prompt(client: openai.OpenAI, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=[" world"]), Script(text=[" world"]))
    reply = client.completions.create(model="scripted", prompt="hello", echo=True)
    assert reply.choices[0].text == "hello world"
    chunks = client.completions.create(model="scripted", prompt="hello", echo=True, stream=True)
    assert "".join(c.choices[0].text for c in chunks) == "hello world"


def test_user_and_logit_bias_ride_along(client: openai.OpenAI, scripted: ScriptedBackend) -> None:
    client.completions.create(model="scripted", prompt="x", user="u-1", logit_bias={"50256": -100})
    details = scripted.requests[-1].provider_details
    assert details == {"openai": {"user": "u-1", "logit_bias": {"50256": -100}}}


def test_fill_in_the_middle_on_a_model_that_says_insert(
    client: openai.OpenAI, fim: ScriptedBackend
) -> None:
    fim.enqueue(Script(text=["a + b"]))
    reply = client.completions.create(
        model="coder", prompt="def add(a, b):\n    return ", suffix="\n\nprint(add(1, 2))\n"
    )
    assert reply.choices[0].text == "a + b"
    assert fim.requests[-1].completion == Completion(
        prompt="def add(a, b):\n    return ", suffix="\n\nprint(add(1, 2))\n"
    )


def test_a_mid_stream_failure_is_the_in_stream_error(
    client: openai.OpenAI, scripted: ScriptedBackend
) -> None:
    scripted.enqueue(Script(text=["a", "b"], fail_after=1))
    stream = client.completions.create(model="scripted", prompt="x", stream=True)
    with pytest.raises(openai.APIError, match="scripted failure"):
        list(stream)


def test_a_dead_backend_is_a_503_in_openai_shape(
    client: openai.OpenAI, scripted: ScriptedBackend
) -> None:
    failure = BackendUnavailableError("down", backend="scripted")
    scripted.enqueue(Script(fail_before=failure), Script(fail_before=failure))
    with pytest.raises(openai.InternalServerError) as caught:
        client.completions.create(model="scripted", prompt="x")
    assert caught.value.status_code == 503


# -- bad input: a 400 naming the field ---------------------------------------------------


def _post(gateway: RunningServer, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(gateway.url + "/v1/completions", json=body, timeout=10)


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"suffix": "tail"}, "suffix"),  # the scripted default model has no "insert"
        ({"prompt": ["one", "two"]}, "prompt"),
        ({"prompt": [1, 2, 3]}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": ""}, "prompt"),
        ({"n": 2}, "n"),
        ({"best_of": 3}, "best_of"),
        ({"logprobs": 2}, "logprobs"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": 3}, "temperature"),
        ({"echo": "yes"}, "echo"),
        ({"model": ""}, "model"),
    ],
)
def test_bad_input_names_the_field(
    gateway: RunningServer, extra: dict[str, Any], param: str
) -> None:
    response = _post(gateway, {"model": "scripted", "prompt": "x", **extra})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"


def test_suffix_without_fim_through_the_sdk(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="scripted", prompt="def f(", suffix=")")
    assert caught.value.param == "suffix"  # type: ignore[attr-defined]
    assert "fill-in-the-middle" in caught.value.message


def test_an_empty_suffix_is_a_plain_completion(
    client: openai.OpenAI, scripted: ScriptedBackend
) -> None:
    client.completions.create(model="scripted", prompt="x", suffix="")
    assert scripted.requests[-1].completion == Completion(prompt="x")


# -- Ollama's /api/generate with a suffix ---------------------------------------------


def test_ollama_generate_with_suffix(gateway: RunningServer, fim: ScriptedBackend) -> None:
    fim.enqueue(Script(text=["a + b"]))
    reply = ollama_client(gateway.url).generate(
        model="coder", prompt="return ", suffix="\n", options={"temperature": 0}
    )
    assert reply.response == "a + b"
    assert fim.requests[-1].completion == Completion(prompt="return ", suffix="\n", raw=False)


def test_ollama_generate_with_suffix_without_fim(gateway: RunningServer) -> None:
    with pytest.raises(ollama.ResponseError) as caught:
        ollama_client(gateway.url).generate(model="scripted", prompt="return ", suffix="\n")
    assert caught.value.status_code == 400
    assert "suffix" in caught.value.error


# -- the suffix reaches an Ollama / OpenAI-compatible upstream natively ----------------

GENERATE_STREAM = ndjson(
    {"model": "qwen2.5-coder", "created_at": "2026-01-01T00:00:00Z", "response": "a +"},
    {"model": "qwen2.5-coder", "created_at": "2026-01-01T00:00:00Z", "response": " b"},
    {
        "model": "qwen2.5-coder",
        "created_at": "2026-01-01T00:00:00Z",
        "response": "",
        "done": True,
        "done_reason": "stop",
        "prompt_eval_count": 11,
        "eval_count": 3,
    },
)


def test_openai_suffix_reaches_ollama_as_generate(
    client: openai.OpenAI, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.show = {"capabilities": ["completion", "insert"]}
    fake.queue.append(Canned(chunks=GENERATE_STREAM))
    reply = client.completions.create(
        model="ollama-coder", prompt="return ", suffix="\n", max_tokens=9, stop=["\n"]
    )
    assert reply.choices[0].text == "a + b"
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (11, 3)
    assert fake.paths[-1] == "/api/generate"
    body = orjson.loads(fake.bodies[-1])
    assert body["prompt"] == "return "
    assert body["suffix"] == "\n"
    assert "raw" not in body  # Ollama fills the gap through the model's template
    assert body["options"] == {"num_predict": 9, "stop": ["\n"]}


def test_ollama_model_without_insert_refuses_suffix(
    client: openai.OpenAI, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.show = {"capabilities": ["completion"]}
    sent = len(fake.bodies)
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="ollama-llama3", prompt="return ", suffix="\n")
    assert caught.value.param == "suffix"  # type: ignore[attr-defined]
    assert len(fake.bodies) == sent  # refused before anything reached Ollama


def test_plain_completion_reaches_ollama_raw(
    client: openai.OpenAI, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(chunks=GENERATE_STREAM))
    chunks = list(client.completions.create(model="ollama-coder", prompt="return ", stream=True))
    assert "".join(c.choices[0].text for c in chunks) == "a + b"
    body = orjson.loads(fake.bodies[-1])
    assert fake.paths[-1] == "/api/generate"
    assert (body["prompt"], body["raw"]) == ("return ", True)


def test_ollama_generate_passes_template_and_suffix_to_ollama(
    gateway: RunningServer, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(chunks=GENERATE_STREAM))
    reply = ollama_client(gateway.url).generate(
        model="ollama-coder", prompt="return ", suffix="\n", system="code", template="{{ .Prompt }}"
    )
    assert reply.response == "a + b"
    body = orjson.loads(fake.bodies[-1])
    assert fake.paths[-1] == "/api/generate"
    assert {k: body[k] for k in ("prompt", "suffix", "system", "template")} == {
        "prompt": "return ",
        "suffix": "\n",
        "system": "code",
        "template": "{{ .Prompt }}",
    }


COMPLETION_STREAM = sse(
    {
        "id": "cmpl-up",
        "object": "text_completion",
        "created": 1,
        "model": "coder",
        "choices": [{"text": "a +", "index": 0, "logprobs": None, "finish_reason": None}],
    },
    {
        "id": "cmpl-up",
        "object": "text_completion",
        "created": 1,
        "model": "coder",
        "choices": [{"text": " b", "index": 0, "logprobs": None, "finish_reason": "length"}],
    },
    {
        "id": "cmpl-up",
        "object": "text_completion",
        "created": 1,
        "model": "coder",
        "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    },
    "[DONE]",
)


def test_openai_suffix_reaches_an_openai_compatible_server(
    client: openai.OpenAI, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(chunks=COMPLETION_STREAM, media_type="text/event-stream"))
    reply = client.completions.create(
        model="oai-coder", prompt="return ", suffix="\n", max_tokens=2, user="u-7"
    )
    assert reply.choices[0].text == "a + b"
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.total_tokens == 7
    assert fake.paths[-1] == "/v1/completions"
    body = orjson.loads(fake.bodies[-1])
    assert body == {
        "model": "oai-coder",
        "prompt": "return ",
        "suffix": "\n",
        "max_tokens": 2,
        "user": "u-7",
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_ollama_suffix_reaches_an_openai_compatible_server(
    gateway: RunningServer, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(chunks=COMPLETION_STREAM, media_type="text/event-stream"))
    chunks = list(
        ollama_client(gateway.url).generate(
            model="oai-coder", prompt="return ", suffix="\n", stream=True
        )
    )
    assert "".join(c.response for c in chunks) == "a + b"
    assert chunks[-1].done and chunks[-1].eval_count == 2
    assert fake.paths[-1] == "/v1/completions"
    assert orjson.loads(fake.bodies[-1])["suffix"] == "\n"


def test_templated_generate_to_an_openai_compatible_server_is_a_chat(
    gateway: RunningServer, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    reply_whole = {  # asked for whole, as the client asks for it
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": {"content": "hi"}, "finish_reason": "stop"}],
    }
    fake.queue.append(Canned(chunks=[orjson.dumps(reply_whole)], media_type="application/json"))
    reply = ollama_client(gateway.url).generate(model="oai-chat", prompt="hello")
    assert reply.response == "hi"
    assert fake.paths[-1] == "/v1/chat/completions"

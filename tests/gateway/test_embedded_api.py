"""Real generations: the zero-configuration gateway on the embedded model, through
the official client of each dialect (small ``max_tokens`` keeps it quick).

What the model says depends on the CPU and the llama.cpp build, so no test asserts
what it knows: each greedy answer must equal what the same model gives for the same
prompt called directly in this process (``tests/embedded_reference.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import pytest

from llmbridge.gateway.app import create_app
from llmbridge.gateway.config import load_config
from tests.conftest import RunningServer, anthropic_client, ollama_client, openai_client
from tests.embedded_reference import direct_reply

pytestmark = pytest.mark.embedded

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens"}
"""llama.cpp's finish reasons in Anthropic's words."""


@pytest.fixture(scope="module")
def zero_config() -> Iterator[RunningServer]:
    """Exactly what `llmbridge serve` builds with no flags and no file."""
    with RunningServer(create_app(load_config(None))) as server:
        yield server


def test_ollama_chat_and_stream(zero_config: RunningServer) -> None:
    client = ollama_client(zero_config.url)
    options = {"temperature": 0, "num_predict": 12, "seed": 1}
    reply = client.chat(model="smollm2", messages=QUESTION, options=options)
    assert reply.message.content == direct_reply(QUESTION, max_tokens=12).text
    assert reply.eval_count and reply.eval_count <= 12
    chunks = list(client.chat(model="smollm2", messages=QUESTION, options=options, stream=True))
    assert len(chunks) > 2 and chunks[-1].done
    assert "".join(c.message.content for c in chunks) == reply.message.content


def test_ollama_generate_tags_show_ps(zero_config: RunningServer) -> None:
    client = ollama_client(zero_config.url)
    reply = client.generate(model="smollm2", prompt="Say hello.", options={"num_predict": 5})
    assert reply.response and reply.done
    assert [m.model for m in client.list().models] == ["smollm2"]
    shown = client.show("smollm2")
    assert "completion" in (shown.capabilities or [])
    assert shown.modelinfo and any(k.endswith("context_length") for k in shown.modelinfo)
    assert [m.model for m in client.ps().models] == ["smollm2"]


def test_openai_any_model_name(zero_config: RunningServer) -> None:
    client = openai_client(zero_config.url, "x")
    reply = client.chat.completions.create(
        model="gpt-4o", messages=QUESTION, max_tokens=12, temperature=0, seed=1
    )
    assert reply.choices[0].message.content == direct_reply(QUESTION, max_tokens=12).text
    assert reply.model == "gpt-4o"
    stream = client.chat.completions.create(
        model="gpt-4o",
        messages=QUESTION,
        max_tokens=12,
        temperature=0,
        seed=1,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == reply.choices[0].message.content
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens <= 12


def test_openai_embeddings(zero_config: RunningServer) -> None:
    client = openai_client(zero_config.url, "x")
    result = client.embeddings.create(model="smollm2", input=["cat", "stock market"])
    assert len(result.data) == 2
    assert len(result.data[0].embedding) == len(result.data[1].embedding) > 0


def test_anthropic_create_and_stream(zero_config: RunningServer) -> None:
    client = anthropic_client(zero_config.url, "x")
    # anthropic 2.10's create() has no `temperature` keyword; the API field still exists.
    greedy = {"temperature": 0}
    reply = client.messages.create(
        model="claude-sonnet-4-6", max_tokens=12, messages=QUESTION, extra_body=greedy
    )
    direct = direct_reply(QUESTION, max_tokens=12)
    assert reply.content[0].type == "text" and reply.content[0].text == direct.text
    assert reply.stop_reason == STOP_REASONS[direct.finish_reason]
    with client.messages.stream(
        model="claude-sonnet-4-6", max_tokens=12, messages=QUESTION, extra_body=greedy
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == reply.content[0].text
    assert final.usage.output_tokens > 0


def test_context_overflow_is_a_dialect_error(zero_config: RunningServer) -> None:
    huge = " ".join(["word"] * 20000)
    client = anthropic_client(zero_config.url, "x")
    with pytest.raises(anthropic.BadRequestError, match="context"):
        client.messages.create(
            model="claude-x", max_tokens=8, messages=[{"role": "user", "content": huge}]
        )
    # the gateway is still healthy afterwards
    assert httpx.get(zero_config.url + "/health").json()["status"] == "up"


def test_count_tokens_with_the_backend_tokenizer() -> None:
    """`tokenizer: backend` counts the templated prompt in SmolLM2's own tokens."""
    body = {"model": "claude-x", "messages": [{"role": "user", "content": "Hello there"}]}
    with RunningServer(create_app(load_config(None, {"tokenizer": "backend"}))) as server:
        exact = httpx.post(server.url + "/v1/messages/count_tokens", json=body).json()
        reply = ollama_client(server.url).chat(
            model="smollm2", messages=body["messages"], options={"num_predict": 1}
        )
    estimate = 4  # the word rule: "Hello" (5 characters: 2), "there" (2)
    assert exact["input_tokens"] == reply.prompt_eval_count  # what generation really used
    assert exact["input_tokens"] != estimate

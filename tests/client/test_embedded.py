"""Real generations: the adapter against the zero-configuration gateway (embedded model),
through each of the gateway's fronts, and the examples of docs/CLIENT.md run as written.

What the model says depends on the CPU and the llama.cpp build, so no test asserts what
it knows: a greedy answer must equal what the same model gives for the same prompt
called directly in this process (``tests/embedded_reference.py``)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from llmbridge.client import EventType, OllamaAdapter, TokenType
from llmbridge.gateway.app import create_app
from llmbridge.gateway.config import load_config
from tests.client.conftest import collect, kinds
from tests.conftest import RunningServer
from tests.embedded_reference import direct_reply

pytestmark = pytest.mark.embedded

QUESTION = "What is the capital of France?"
DOC_SYSTEM = "Answer in one short sentence."  # the system prompt of CLIENT.md's main example
PARAMS: dict[str, Any] = {"max_tokens": 12, "temperature": 0, "seed": 1}
DOC = Path(__file__).resolve().parents[2] / "docs" / "CLIENT.md"
DOC_URL = "http://127.0.0.1:11435"


@pytest.fixture(scope="module")
def zero_config() -> Iterator[RunningServer]:
    """Exactly what `llmbridge serve` builds with no flags and no file."""
    with RunningServer(create_app(load_config(None))) as server:
        yield server


@pytest.fixture
async def adapter(zero_config: RunningServer) -> AsyncIterator[OllamaAdapter]:
    # The gateway serves any model name with the embedded model.
    async with OllamaAdapter(zero_config.url, default_model="llama3.2", max_retries=0) as a:
        yield a


async def test_default_adapter_streams_tokens_metadata_end(adapter: OllamaAdapter) -> None:
    events = await collect(adapter.call(QUESTION, **PARAMS))
    assert kinds(events)[-2:] == ["METADATA", "END"]
    tokens = events[:-2]
    assert len(tokens) > 2
    assert all(e.type is EventType.TOKEN for e in tokens)
    assert {e.token_type for e in tokens} == {TokenType.FINAL_SYNTHESIS_LLM_RESPONSE}
    assert "".join(e.text for e in tokens) == _direct(QUESTION)
    meta = events[-2].metadata
    assert meta is not None
    assert meta.stop_reason in ("stop", "length")
    assert meta.output_tokens is not None and 0 < meta.output_tokens <= 12
    assert meta.input_tokens is not None and meta.input_tokens > 0
    assert meta.tokens_estimated is False  # the gateway reports usage
    assert meta.time_to_first_token_ms is not None and meta.total_generation_time_ms is not None
    assert 0 < meta.time_to_first_token_ms <= meta.total_generation_time_ms


async def test_non_streaming_is_one_token(adapter: OllamaAdapter) -> None:
    streamed = await collect(adapter.call(QUESTION, **PARAMS))
    events = await collect(adapter.call(QUESTION, stream=False, **PARAMS))
    assert kinds(events) == ["TOKEN", "METADATA", "END"]
    text = "".join(e.text for e in streamed if e.type is EventType.TOKEN)
    assert events[0].data == text.strip()


async def test_every_front_gives_the_same_answer(zero_config: RunningServer) -> None:
    adapters = [
        OllamaAdapter(zero_config.url, default_model="m", max_retries=0),
        OllamaAdapter.native(zero_config.url, default_model="m"),
        OllamaAdapter.anthropic(zero_config.url, api_key="x", default_model="m"),
        OllamaAdapter.gateway(zero_config.url, default_model="m"),
    ]
    answers = []
    for adapter in adapters:
        async with adapter:
            reply = await adapter.chat(QUESTION, **PARAMS)
        answers.append(reply.message.text)
    assert answers[0] == _direct(QUESTION)
    assert answers == [answers[0]] * len(adapters)


def _direct(question: str) -> str:
    """The same model's greedy answer, called directly (``PARAMS``: 12 tokens)."""
    return direct_reply([{"role": "user", "content": question}], max_tokens=12).text


# -- docs/CLIENT.md ---------------------------------------------------------------------


def doc_example(name: str) -> str:
    """The ```python block right after ``<!-- example: name -->`` in docs/CLIENT.md."""
    text = DOC.read_text(encoding="utf-8")
    match = re.search(rf"<!-- example: {name} -->\s*```python\n(.*?)```", text, re.DOTALL)
    assert match is not None, f"docs/CLIENT.md has no example named {name!r}"
    return match.group(1)


def run_doc_example(name: str, server: RunningServer) -> None:
    code = doc_example(name)
    assert DOC_URL in code
    exec(compile(code.replace(DOC_URL, server.url), f"CLIENT.md:{name}", "exec"), {})


def test_doc_main_example(zero_config: RunningServer, capsys: pytest.CaptureFixture[str]) -> None:
    run_doc_example("main", zero_config)
    out = capsys.readouterr().out
    expected = direct_reply(
        [{"role": "system", "content": DOC_SYSTEM}, {"role": "user", "content": QUESTION}],
        max_tokens=12,
    )
    assert expected.text and out.split("\nstop_reason=")[0] == expected.text
    assert "stop_reason=" in out and "output_tokens=" in out


def test_doc_tools_example(zero_config: RunningServer, capsys: pytest.CaptureFixture[str]) -> None:
    # The embedded model has no tools of its own: the gateway emulates them, so the
    # example either sees get_weather calls or a text answer, and prints either.
    run_doc_example("tools", zero_config)
    out = capsys.readouterr().out
    assert out.strip()
    assert "-> get_weather(" in out or "no final answer" not in out


def test_doc_plain_example(zero_config: RunningServer, capsys: pytest.CaptureFixture[str]) -> None:
    run_doc_example("plain", zero_config)
    out = capsys.readouterr().out
    answer = _direct(QUESTION)  # printed twice: the whole reply, then the stream
    assert answer and out.startswith(answer + " ") and out.endswith("\n" + answer + "\n")

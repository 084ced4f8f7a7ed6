"""Legacy completions on the real embedded model (SmolLM2-135M), through the official
``openai`` client: a raw completion, streamed and not, and a ``suffix`` refused because
this GGUF has no fill-in-the-middle tokens.

What the model writes depends on the CPU and the llama.cpp build, so the text is only
compared with the same model's greedy continuation of the same prompt, called directly
in this process (``tests/embedded_reference.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from llmbridge.gateway.app import create_app
from llmbridge.gateway.config import load_config
from tests.conftest import RunningServer, ollama_client, openai_client
from tests.embedded_reference import direct_completion

pytestmark = pytest.mark.embedded

PROMPT = "def fibonacci(n):\n    "


@pytest.fixture(scope="module")
def zero_config() -> Iterator[RunningServer]:
    """Exactly what `llmbridge serve` builds with no flags and no file."""
    with RunningServer(create_app(load_config(None))) as server:
        yield server


def test_raw_completion_streamed_and_not(zero_config: RunningServer) -> None:
    client = openai_client(zero_config.url)
    reply = client.completions.create(model="smollm2", prompt=PROMPT, max_tokens=8, temperature=0)
    direct = direct_completion(PROMPT, max_tokens=8)
    choice = reply.choices[0]
    assert choice.text and choice.text == direct.text  # no chat template around the prompt
    assert choice.finish_reason == direct.finish_reason
    assert reply.usage is not None
    assert reply.usage.prompt_tokens > 0
    assert 0 < reply.usage.completion_tokens <= 8
    chunks = list(
        client.completions.create(
            model="smollm2",
            prompt=PROMPT,
            max_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    # The same prompt again: the worker reuses its cached prompt, as llama.cpp called
    # directly twice does (tests/embedded_reference.py, ``again``).
    again = direct_completion(PROMPT, max_tokens=8, again=True)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == again.text
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == again.completion_tokens


def test_suffix_is_refused_without_fim_tokens(zero_config: RunningServer) -> None:
    # SmolLM2-135M's vocabulary has no <fim_prefix>-style tokens (llama.cpp's
    # llama_vocab_fim_pre/suf/mid are all -1), so the model cannot fill a gap.
    client = openai_client(zero_config.url)
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="smollm2", prompt=PROMPT, suffix="\n", max_tokens=4)
    assert caught.value.param == "suffix"  # type: ignore[attr-defined]
    shown = ollama_client(zero_config.url).show("smollm2")
    assert "insert" not in (shown.capabilities or [])

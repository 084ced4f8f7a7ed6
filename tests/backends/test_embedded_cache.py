"""The embedded model's prefix cache, as the backend reports it: the
prompt tokens llama.cpp took from its KV cache come back as
``Usage.cache_read_input_tokens``; and the machine settings (threads, flash
attention) it starts with.

The counts asserted hold on any build: they follow from the prompt's tokens and
llama-cpp-python's rule for reusing a prefix, not from what the model writes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from llmbridge.backends.embedded import backend as embedded_backend
from llmbridge.backends.embedded.backend import EmbeddedBackend, default_threads, physical_cores
from llmbridge.backends.embedded.prompt import cached_prefix
from llmbridge.core.accumulate import accumulate
from llmbridge.core.messages import Message, TextPart
from llmbridge.core.request import ChatRequest, Completion, GenerationParams
from llmbridge.core.response import ChatResponse

pytestmark = pytest.mark.asyncio(loop_scope="module")

SYSTEM = "You are a terse assistant for a test of the prompt cache. Answer in one line."


def request(*texts: str, completion: Completion | None = None) -> ChatRequest:
    """A conversation: the system prompt, then user and assistant turns alternating."""
    messages = [Message("system", (TextPart(SYSTEM),))]
    for index, text in enumerate(texts):
        messages.append(Message("user" if index % 2 == 0 else "assistant", (TextPart(text),)))
    return ChatRequest(
        model="smollm2",
        messages=tuple(messages),
        params=GenerationParams(max_tokens=6, temperature=0.0, seed=7),
        completion=completion,
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def backend() -> AsyncIterator[EmbeddedBackend]:
    instance = EmbeddedBackend()
    await instance.start()
    yield instance
    await instance.aclose()


async def reply(backend: EmbeddedBackend, chat: ChatRequest) -> ChatResponse:
    return await accumulate(backend.chat(chat))


# -- the rule, without a model ---------------------------------------------------------


async def test_cached_prefix_follows_llama_generate() -> None:
    # A longer prompt that starts with what the context holds: all of it is reused.
    assert cached_prefix([1, 2, 3], [1, 2, 3, 4, 5], requires_eval=True) == 3
    # They part at the third token: two are reused.
    assert cached_prefix([1, 2, 9, 9], [1, 2, 3, 4], requires_eval=True) == 2
    # The whole prompt is held (and output after it): its last token is evaluated again
    # for fresh logits.
    assert cached_prefix([1, 2, 3, 4, 5], [1, 2, 3], requires_eval=True) == 2
    # Exactly the prompt, its logits live: nothing is evaluated.
    assert cached_prefix([1, 2, 3], [1, 2, 3], requires_eval=False) == 3
    assert cached_prefix([1, 2, 3], [1, 2, 3], requires_eval=True) == 2
    assert cached_prefix([], [1, 2], requires_eval=True) == 0


async def test_physical_cores_counts_cores_not_hyperthreads(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Four logical CPUs on two cores of one package; the process may use CPUs 0-2.
    for cpu, core in enumerate((0, 0, 1, 1)):
        topology = tmp_path / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text("0\n")
        (topology / "core_id").write_text(f"{core}\n")
    real_path = embedded_backend.Path

    def sysfs(path: str) -> Path:
        prefix = "/sys/devices/system/cpu/"
        return tmp_path / path[len(prefix) :] if path.startswith(prefix) else real_path(path)

    monkeypatch.setattr(embedded_backend, "Path", sysfs)
    monkeypatch.setattr(embedded_backend.os, "sched_getaffinity", lambda _pid: {0, 1, 2})
    assert physical_cores() == 2
    monkeypatch.setattr(embedded_backend.os, "sched_getaffinity", lambda _pid: {0, 1})
    assert physical_cores() == 1
    # No topology to read (a container without /sys): every allowed CPU is a core.
    monkeypatch.setattr(embedded_backend.os, "sched_getaffinity", lambda _pid: {5, 6, 7})
    assert physical_cores() == 3


# -- the worker's count ------------------------------------------------------------------


@pytest.mark.embedded
async def test_a_repeated_prompt_is_read_from_the_cache_but_its_last_token(
    backend: EmbeddedBackend,
) -> None:
    first = await reply(backend, request("Name a colour."))
    again = await reply(backend, request("Name a colour."))
    prompt = again.usage.input_tokens
    assert prompt is not None and prompt == first.usage.input_tokens
    # llama.cpp re-evaluates the last prompt token of a full match (Llama.generate).
    assert again.usage.cache_read_input_tokens == prompt - 1


@pytest.mark.embedded
async def test_a_conversation_one_turn_longer_reuses_the_turn_before(
    backend: EmbeddedBackend,
) -> None:
    first = await reply(backend, request("Name a fruit."))
    answer = "".join(p.text for p in first.message.parts if isinstance(p, TextPart))
    longer = await reply(backend, request("Name a fruit.", answer or "Apple.", "And a tree?"))
    before = first.usage.input_tokens
    cached, total = longer.usage.cache_read_input_tokens, longer.usage.input_tokens
    assert before is not None and cached is not None and total is not None
    # The earlier prompt is a prefix of this one (the chat template closes each turn
    # the same way); at most the tokens where the reply begins can differ.
    assert before - 2 <= cached < total


@pytest.mark.embedded
async def test_a_completion_reports_its_cached_prefix(backend: EmbeddedBackend) -> None:
    text = "The first three primes are two, three and"
    raw = Completion(prompt=text, raw=True)
    await reply(backend, request(completion=raw))
    again = await reply(backend, request(completion=raw))
    assert again.usage.input_tokens is not None
    assert again.usage.cache_read_input_tokens == again.usage.input_tokens - 1


@pytest.mark.embedded
async def test_threads_default_to_physical_cores_and_show_in_health(
    backend: EmbeddedBackend,
) -> None:
    # Physical cores, or what $LLMBRIDGE_EMBEDDED_THREADS says (the parallel suite sets
    # 1; tests/unit/test_embedded_config.py checks both without a model).
    assert backend.n_threads == default_threads("embedded")
    state = backend.worker_state()
    assert state["n_threads"] == backend.n_threads
    assert state["flash_attn"] is embedded_backend.DEFAULT_FLASH_ATTN
    health = await backend.health()
    assert f"{backend.n_threads} threads" in health.detail

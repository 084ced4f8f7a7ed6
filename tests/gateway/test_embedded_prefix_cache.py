"""Prefix-cache hits reach the client and the ledger: a conversation that
extends the previous request is mostly read from the embedded model's KV cache, and
each dialect says so in its own words, through its official client:

- OpenAI: ``usage.prompt_tokens_details.cached_tokens``, within ``prompt_tokens``;
- Anthropic: ``usage.cache_read_input_tokens``, beside ``input_tokens``, which count
  only the rest (Anthropic's convention), streamed or not;
- Ollama: ``prompt_eval_count`` is the whole prompt (as real Ollama counts it since
  ollama/ollama#5371) and ``prompt_eval_cached_count`` the cached part (#17943);

and the usage ledger's row holds the same ``cached_tokens``. Counts only, never what
the model writes: a greedy reply of a few tokens, replayed as the assistant's turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from llmbridge.backends.embedded.backend import EmbeddedBackend
from tests.conftest import (
    RunningServer,
    anthropic_client,
    create_key,
    ledger_rows,
    openai_client,
    running_gateway,
)

pytestmark = pytest.mark.embedded

MASTER = "sk-master-prefix-cache"
SYSTEM = "You are a terse assistant. Answer every question in a few words."


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("prefix-cache") / "gateway.db"


@pytest.fixture(scope="module")
def gateway(database: Path) -> Iterator[RunningServer]:
    with running_gateway(
        {"embedded": EmbeddedBackend()},
        server={"master_key": MASTER},
        agent={"database": str(database), "summaries": False},
    ) as server:
        yield server


def test_openai_reports_the_cached_prefix_and_the_ledger_keeps_it(
    gateway: RunningServer, database: Path
) -> None:
    client = openai_client(gateway.url, create_key(gateway.url, MASTER, "openai-cache"))
    messages: list[Any] = [
        {"role": "system", "content": SYSTEM + " (openai)"},
        {"role": "user", "content": "Name a planet."},
    ]
    first = client.chat.completions.create(
        model="smollm2", messages=messages, max_tokens=6, temperature=0
    )
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content or "Mars."},
        {"role": "user", "content": "And a moon?"},
    ]
    second = client.chat.completions.create(
        model="smollm2", messages=messages, max_tokens=6, temperature=0
    )
    assert first.usage is not None and second.usage is not None
    details = second.usage.prompt_tokens_details
    assert details is not None and details.cached_tokens is not None
    # The first request's prompt is a prefix of the second's (its last token or two
    # aside, where the reply begins); OpenAI counts cached tokens within prompt_tokens.
    assert first.usage.prompt_tokens - 2 <= details.cached_tokens < second.usage.prompt_tokens
    rows = ledger_rows(database, "openai-cache", 2)
    assert rows[1]["cached_tokens"] == details.cached_tokens
    assert rows[1]["input_tokens"] == second.usage.prompt_tokens


@pytest.mark.parametrize("stream", [False, True], ids=["message", "stream"])
def test_anthropic_counts_cache_reads_beside_input_tokens(
    gateway: RunningServer, database: Path, stream: bool
) -> None:
    name = f"anthropic-cache-{stream}"
    client = anthropic_client(gateway.url, create_key(gateway.url, MASTER, name))
    system = SYSTEM + f" (anthropic, stream {stream})"
    messages: list[Any] = [{"role": "user", "content": "Name a river."}]

    # anthropic 2.10 has no `temperature` keyword; the API field still exists.
    options: dict[str, Any] = {"max_tokens": 6, "extra_body": {"temperature": 0}}

    def ask() -> Any:
        if stream:
            with client.messages.stream(
                model="smollm2", system=system, messages=messages, **options
            ) as events:
                return events.get_final_message()
        return client.messages.create(model="smollm2", system=system, messages=messages, **options)

    first = ask()
    text = "".join(block.text for block in first.content if block.type == "text")
    messages += [
        {"role": "assistant", "content": text or "The Nile."},
        {"role": "user", "content": "And a lake?"},
    ]
    second = ask()
    usage = second.usage
    assert usage.cache_read_input_tokens
    rows = ledger_rows(database, name, 2)
    # The ledger counts the whole prompt (cached included, as OpenAI does); Anthropic's
    # input_tokens are the part not read from the cache.
    assert rows[1]["cached_tokens"] == usage.cache_read_input_tokens
    assert usage.input_tokens + usage.cache_read_input_tokens == rows[1]["input_tokens"]
    whole_first = first.usage.input_tokens + (first.usage.cache_read_input_tokens or 0)
    assert usage.cache_read_input_tokens >= whole_first - 2
    assert usage.input_tokens > 0


def test_ollama_counts_the_whole_prompt_and_its_cached_part(gateway: RunningServer) -> None:
    # The official ollama client's models drop fields they do not know, so the
    # final frame is read as JSON here (ollama-python 0.6 predates the field).
    key = create_key(gateway.url, MASTER, "ollama-cache")
    headers = {"Authorization": f"Bearer {key}"}
    body: dict[str, Any] = {
        "model": "smollm2",
        "messages": [
            {"role": "system", "content": SYSTEM + " (ollama)"},
            {"role": "user", "content": "Name a mountain."},
        ],
        "options": {"temperature": 0, "num_predict": 6},
        "stream": False,
    }
    with httpx.Client(base_url=gateway.url, headers=headers, timeout=120) as http:
        first = http.post("/api/chat", json=body).json()
        body["messages"] += [
            {"role": "assistant", "content": first["message"]["content"] or "Everest."},
            {"role": "user", "content": "And a hill?"},
        ]
        body["stream"] = True
        lines = http.post("/api/chat", json=body).content.splitlines()
    final = orjson.loads(lines[-1])
    assert final["done"]
    assert first["prompt_eval_count"] - 2 <= final["prompt_eval_cached_count"]
    assert final["prompt_eval_cached_count"] < final["prompt_eval_count"]

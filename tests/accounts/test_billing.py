"""What a key is billed for when requests race and streams break (a budget's
reservation, a dropped stream's bill), through the official openai client on a real
gateway with keys in its database:

- a budget holds under concurrency: each request reserves its worst case on
  admission (its ``max_tokens`` at the model's price, gateway/exchange/admission.py), so 50
  requests at once on a nearly spent budget cannot all pass; the overspend is bounded
  by one request (it was $1.50 on a $0.05 budget);
- a stream the client drops is billed for what was generated (it was recorded as 499
  with 0 tokens, so twelve dropped streams went past tpm 200 and a $0.05 budget).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.response import Usage
from tests.conftest import RunningServer, create_key, ledger_rows, running_gateway

MASTER = "sk-master-billing"
PRICES = {"priced": {"input": 0.0, "output": 10_000.0}}
"""$0.01 per output token: three tokens cost $0.03."""


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("billing") / "gateway.db"


@pytest.fixture(scope="module")
def gateway(scripted: ScriptedBackend, database: Path) -> Iterator[RunningServer]:
    with running_gateway(
        {"scripted": scripted},
        server={"master_key": MASTER},
        agent={"database": str(database), "summaries": False},
        prices=PRICES,
    ) as server:
        yield server


def _new_key(gateway: RunningServer, name: str, **limits: Any) -> str:
    return create_key(gateway.url, MASTER, name, **limits)


def test_concurrent_requests_cannot_overspend_a_budget(
    gateway: RunningServer, scripted: ScriptedBackend, database: Path
) -> None:
    key = _new_key(gateway, "tight-budget", budget_usd=0.05)
    release = threading.Event()
    replies = 50
    # Slow replies, so that all 50 are in flight at once; each uses 3 output tokens.
    scripted.enqueue(
        *(
            Script(text=["a", " b", " c"], usage=Usage(1, 3), chunk_delay=0.05)
            for _ in range(replies)
        )
    )

    async def one(client: openai.AsyncOpenAI) -> int:
        try:
            await client.chat.completions.create(
                model="priced", max_tokens=3, messages=[{"role": "user", "content": "hi"}]
            )
        except openai.PermissionDeniedError as exc:
            assert exc.code == "budget_exhausted" or "budget" in str(exc)
            return 403
        return 200

    async def all_at_once() -> list[int]:
        client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
        async with client:
            return await asyncio.gather(*(one(client) for _ in range(replies)))

    statuses = asyncio.run(all_at_once())
    release.set()
    served = statuses.count(200)
    # $0.03 reserved each: the first (0 < 0.05) and the second (0.03 < 0.05) pass.
    assert served == 2, statuses
    rows = [row for row in ledger_rows(database, "tight-budget", replies) if row["status"] == 200]
    spent = sum(row["cost_usd"] for row in rows)
    assert spent == pytest.approx(0.06)  # over by less than one request's worst case
    # The reservations are given back: the spent budget refuses, nothing is held.
    with pytest.raises(openai.PermissionDeniedError):
        openai.OpenAI(
            base_url=gateway.url + "/v1", api_key=key, max_retries=0
        ).chat.completions.create(
            model="priced", max_tokens=1, messages=[{"role": "user", "content": "hi"}]
        )


def test_a_dropped_stream_is_billed_for_what_was_generated(
    gateway: RunningServer, scripted: ScriptedBackend, database: Path
) -> None:
    key = _new_key(gateway, "dropper", tpm=10_000)
    # The backend's usage comes only with the last event, which the client never reads.
    scripted.enqueue(
        Script(text=[f"word{i} " for i in range(400)], usage=Usage(5, 400), chunk_delay=0.01)
    )
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
    seen = 0
    with client.chat.completions.create(
        model="priced", stream=True, messages=[{"role": "user", "content": "go on"}]
    ) as stream:
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                seen += 1
            if seen == 20:
                break  # the client leaves mid-stream
    (row,) = ledger_rows(database, "dropper", 1)
    assert row["status"] == 499
    # Billed for at least what the client saw, and not for the 380 words never made
    # (the backend stops at the disconnect; a few chunks may be in flight).
    assert 20 <= row["output_tokens"] < 400
    assert row["cost_usd"] == pytest.approx(row["output_tokens"] * 0.01)
    assert row["input_tokens"] is not None and row["input_tokens"] > 0

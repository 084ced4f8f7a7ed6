"""Summaries written by the embedded model (SmolLM2-135M) through the gateway's real
pipeline (router, ``prepare``, healing), stored with the ids they cover and used in
the next context within the budget."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from llmbridge.agent.memory import (
    PINS_PREFIX,
    SUMMARIES_PREFIX,
    MemoryBuilder,
    MemoryConfig,
    Summariser,
    SummariserConfig,
)
from llmbridge.agent.store import AgentStore
from llmbridge.gateway.config import load_config
from llmbridge.serving.models import Models, open_models

pytestmark = pytest.mark.embedded

CHAT = [
    ("user", "My grandmother Mary takes Lisinopril 10mg every morning at 8am."),
    ("assistant", "Thanks. Lisinopril 10mg at 8am each morning, noted."),
    ("user", "She also takes Metformin 500mg twice a day with meals."),
    ("assistant", "Metformin 500mg twice daily with meals, noted."),
    ("user", "Her cardiologist is Dr. Johnson."),
    ("assistant", "Dr. Johnson is her cardiologist."),
]


@pytest.fixture
async def gateway() -> AsyncIterator[Models]:
    config = load_config(None)  # what `llmbridge serve` builds with no flags: embedded
    async with open_models(config) as models:
        yield models


async def test_the_embedded_model_writes_summaries(store: AgentStore, gateway: Models) -> None:
    session = await store.create_session()
    ids = [(await store.add_message(session.id, role, text)).id for role, text in CHAT]
    await store.add_pin(session.id, "Mary is allergic to penicillin.")
    assert gateway.backend_name("smollm2") == "embedded"
    summariser = Summariser(
        store,
        gateway.chat,
        "smollm2",
        SummariserConfig(threshold=4, keep_recent=2, max_summary_tokens=60),
    )
    summary = await summariser.summarise_once(session.id)
    assert summary is not None and summary.content.strip()
    assert summary.message_ids == tuple(ids[:4]) and summary.model == "smollm2"
    assert 0 < summary.token_count <= 60
    context = await MemoryBuilder(store, MemoryConfig(budget=400)).build(session.id)
    assert context.tokens <= 400 and context.summary_ids == (summary.id,)
    texts = [m.text for m in context.messages]
    assert any(t.startswith(SUMMARIES_PREFIX) and summary.content.strip() in t for t in texts)
    assert any(t.startswith(PINS_PREFIX) and "allergic to penicillin" in t for t in texts)
    assert context.recent_ids == tuple(ids[4:])

"""The agent's background memory calls count in the usage ledger like any model call
as well: once four user messages wait (``facts_every``), fact extraction runs after
the turn's reply, and each of its calls (one per statement and reading) is a ledger
row of its own (endpoint
``/agent memory:facts``, dialect ``agent``, its tokens and its price), beside the
turns' own rows.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from llmbridge.accounts.request_log import RequestRow, recent_requests
from llmbridge.agent.memory.facts import READINGS
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.response import Usage
from llmbridge.store.engine import make_engine
from tests.conftest import running_gateway
from tests.waiting import wait_until

USAGE = Usage(input_tokens=100, output_tokens=10)
STATED = [
    "My sister's name is Ana.",
    "The gate code is 4512.",
    "I am allergic to penicillin.",
    "My appointment is on Tuesday.",
]


def _rows(url: str) -> list[RequestRow]:
    async def read() -> list[RequestRow]:
        engine = make_engine(url)
        try:
            return (await recent_requests(engine)).rows
        finally:
            await engine.dispose()

    return asyncio.run(read())


def test_fact_extraction_is_a_ledger_row_of_its_own(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'llmbridge.db'}"
    backend = ScriptedBackend("model", models=("scripted",), default=Script(usage=USAGE))
    with (
        running_gateway(
            {"model": backend},
            server={"ledger": True},
            agent={"database": url, "model": "scripted"},
            prices={"scripted": {"input": 1.0, "output": 2.0}},
        ) as gateway,
        httpx.Client(base_url=gateway.url, timeout=60) as client,
    ):
        session = client.post("/agent/sessions", json={"title": "memory"}).json()["id"]
        for said in STATED:
            turn = client.post(f"/agent/sessions/{session}/messages", json={"input": said})
            assert turn.status_code == 200, turn.text
        found: list[RequestRow] = []

        def both_written() -> bool:
            found[:] = _rows(url)
            return sum(row.endpoint == "/agent memory:facts" for row in found) == asked

        # The scripted reply is no yes/no answer, so every statement is asked in
        # every reading.
        asked = len(STATED) * len(READINGS)
        wait_until(both_written, "the fact extraction's rows")
    turns = [row for row in found if row.endpoint == "/agent/sessions/{session_id}/messages"]
    assert len(turns) == len(STATED)
    facts = [row for row in found if row.endpoint == "/agent memory:facts"]
    assert len(facts) == asked
    for row in facts:
        assert (row.dialect, row.model, row.status) == ("agent", "scripted", 200)
        assert (row.input_tokens, row.output_tokens) == (100, 10)
        assert row.cost_usd is not None and row.cost_usd > 0
        assert row.key_name is None

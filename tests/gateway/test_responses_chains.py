"""Bounded ``previous_response_id`` chains, through the official
``openai`` client against a gateway whose agent store is on (SQLite, then PostgreSQL on
loopback) over a scripted backend.

Each stored response repeats the conversation before it, so a chain's room grows with
the square of its turns (six 4 MB turns took 115 MB). ``server.limits.max_chain_turns``
and ``max_chain_bytes`` bound it: a continuation past either is a 400 naming
``previous_response_id`` in OpenAI's shape, the model is not called and nothing is
stored; the running totals each stored row keeps are what the check reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from sqlalchemy import select

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.dialects.framing import dumps
from llmbridge.gateway.config import GatewayConfig
from llmbridge.store import Database
from llmbridge.store.tables import ResponseRow
from tests.conftest import RunningServer, openai_client, running_gateway


@pytest.fixture
def database(db_url: str) -> str:
    """The agent database: a SQLite file, then a PostgreSQL database
    (``tests/servers.py``' ``db_url``)."""
    return db_url


@pytest.fixture
def backend() -> ScriptedBackend:
    return ScriptedBackend("scripted", models=("scripted",))


def gateway(database: str, backend: ScriptedBackend, **limits: int) -> Any:
    return running_gateway(
        {"scripted": backend}, server={"limits": limits}, agent={"database": database}
    )


def stored(database: str) -> dict[str, ResponseRow]:
    """Every stored response, by id, read from the database itself."""

    async def read() -> dict[str, ResponseRow]:
        opened = await Database.open(database)
        try:
            async with opened.reading() as db:
                rows = (await db.execute(select(ResponseRow))).scalars().all()
                return {row.id: row for row in rows}
        finally:
            await opened.close()

    return asyncio.run(read())


@pytest.fixture
def turns_bound(database: str, backend: ScriptedBackend) -> Iterator[RunningServer]:
    with gateway(database, backend, max_chain_turns=3) as server:
        yield server


def test_a_chain_past_max_chain_turns_is_a_400_and_nothing_is_stored(
    turns_bound: RunningServer, backend: ScriptedBackend, database: str
) -> None:
    client = openai_client(turns_bound.url)
    backend.enqueue(*(Script(text=[f"answer {n}"]) for n in range(3)))
    first = client.responses.create(model="scripted", input="one")
    second = client.responses.create(model="scripted", input="two", previous_response_id=first.id)
    third = client.responses.create(model="scripted", input="three", previous_response_id=second.id)
    rows = stored(database)
    assert [rows[r.id].chain_turns for r in (first, second, third)] == [1, 2, 3]
    asked = len(backend.requests)

    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(
                model="scripted", input="four", previous_response_id=third.id, stream=stream
            )
        error = refused.value
        assert error.status_code == 400 and error.param == "previous_response_id"
        assert error.code == "chain_too_long"
        assert "4 stored responses" in error.message and "max_chain_turns" in error.message
    with pytest.raises(openai.BadRequestError) as counted:
        client.responses.input_tokens.count(
            model="scripted", input="four", previous_response_id=third.id
        )
    assert counted.value.param == "previous_response_id"
    assert len(backend.requests) == asked  # the model was not called
    assert set(stored(database)) == {first.id, second.id, third.id}  # nothing stored

    # A branch from an earlier turn is a chain of its own length.
    backend.enqueue(Script(text=["branch"]))
    branch = client.responses.create(model="scripted", input="3b", previous_response_id=second.id)
    assert stored(database)[branch.id].chain_turns == 3
    # store: false continues nothing either: the chain cannot be continued at all.
    with pytest.raises(openai.BadRequestError):
        client.responses.create(
            model="scripted", input="x", previous_response_id=branch.id, store=False
        )


def test_a_chain_past_max_chain_bytes_is_a_400_and_nothing_is_stored(
    database: str, backend: ScriptedBackend
) -> None:
    """50 kB turns: the first stores ~50 kB, the second ~100 kB more (it repeats the
    first), the third would take the chain past 280 kB."""
    with gateway(database, backend, max_chain_bytes=280_000) as server:
        client = openai_client(server.url)
        backend.enqueue(Script(text=["short"]), Script(text=["short"]))
        first = client.responses.create(model="scripted", input="a" * 50_000)
        second = client.responses.create(
            model="scripted",
            input=[{"role": "user", "content": "b" * 50_000}],
            previous_response_id=first.id,
        )
        rows = stored(database)
        for reply in (first, second):
            row = rows[reply.id]
            # The totals are the stored JSON's size (up to a list's brackets and commas).
            measured = len(dumps(row.input)) + len(dumps(row.output))
            assert abs(row.conversation_bytes - measured) < 100
        assert rows[first.id].chain_bytes >= rows[first.id].conversation_bytes > 50_000
        assert (
            rows[second.id].chain_bytes
            >= rows[first.id].chain_bytes + rows[second.id].conversation_bytes
        )
        assert rows[second.id].conversation_bytes > 100_000
        asked = len(backend.requests)

        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(
                model="scripted", input="c" * 50_000, previous_response_id=second.id
            )
        error = refused.value
        assert error.param == "previous_response_id" and error.code == "chain_too_long"
        assert "max_chain_bytes" in error.message and "280000" in error.message
        assert len(backend.requests) == asked
        assert set(stored(database)) == {first.id, second.id}
        # A short turn still fits.
        backend.enqueue(Script(text=["fits"]))
        fits = client.responses.create(model="scripted", input="c", previous_response_id=second.id)
        assert fits.output_text == "fits"


def test_the_defaults_bound_a_chain() -> None:
    """64 MiB and 1,000 turns unless configured (core/request_limits.py says why)."""
    limits = GatewayConfig().server.limits.request_limits(32 * 1024 * 1024)
    assert (limits.max_chain_bytes, limits.max_chain_turns) == (64 * 1024 * 1024, 1000)

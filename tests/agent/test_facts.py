"""Durable facts: extracted in the background from the user's statements in
a constrained format, kept in every context like pins, shared with the sessions of
the same patient, and listed, corrected and deleted through the agent API (a real
gateway on a loopback port) and ``llmbridge agent facts``."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result

from llmbridge.agent.memory import (
    FACTS_PREFIX,
    FACTS_SYSTEM_PROMPT,
    MemoryBuilder,
    Summariser,
    SummariserConfig,
)
from llmbridge.agent.memory.facts import (
    EXAMPLES,
    FACT_QUESTION,
    FACT_SCHEMA,
    READINGS,
    candidates,
    fact_messages,
    parse_answer,
)
from llmbridge.agent.store import AgentStore
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.cli import cli
from llmbridge.core.events import StreamEvent
from llmbridge.core.request import ChatRequest
from tests.agent.serving import agent_gateway
from tests.conftest import RunningServer

STATED = [
    "My sister's name is Margaret. How are you today?",
    "Thanks, that helps.",
    "The gate code is 4417.",
    "I am allergic to penicillin!",
]


class Labeller(ScriptedBackend):
    """Turns get ``ok``; each fact question gets ``yes`` for a statement holding a
    digit or a capitalised name after the first word, else ``no``."""

    def __init__(self, name: str = "scripted") -> None:
        super().__init__(name, default=Script(text=["ok"]))
        self.fact_requests: list[ChatRequest] = []

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        if request.messages and request.messages[0].text == FACTS_SYSTEM_PROMPT:
            self.fact_requests.append(request)
            statement = _asked(request)
            answer = "yes" if _salient(statement) else "no"
            self.enqueue(Script(text=[json.dumps({"label": answer})]))
        async for event in super().chat(request):
            yield event


def _asked(request: ChatRequest) -> str:
    """The statement a fact question asks about (``FACT_QUESTION``'s quotes)."""
    question = request.messages[-1].text
    return question[question.index('"') + 1 : question.rindex('"')]


def _salient(text: str) -> bool:
    words = text.split()
    return any(c.isdigit() for c in text) or any(w[:1].isupper() for w in words[1:])


def test_candidates_are_the_users_statements() -> None:
    from datetime import UTC, datetime

    from llmbridge.agent.store import StoredMessage

    now = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [StoredMessage(n, "s", "user", text, now) for n, text in enumerate(STATED)]
    rows.append(StoredMessage(9, "s", "assistant", "Margaret is a lovely name.", now))
    found = candidates(rows)
    assert [c.text for c in found] == [
        "My sister's name is Margaret.",
        "Thanks, that helps.",
        "The gate code is 4417.",
        "I am allergic to penicillin!",
    ]


def test_a_fact_question_is_one_statement_after_worked_examples() -> None:
    examples = READINGS[0]
    turns = fact_messages("The gate code is 4417.", examples)
    assert turns[0].role == "system" and turns[0].text == FACTS_SYSTEM_PROMPT
    # The examples as earlier turns, question then answer: a prefix shared by every call.
    assert [t.role for t in turns[1:-1]] == ["user", "assistant"] * examples
    for n, (text, is_fact) in enumerate(EXAMPLES[:examples]):
        asked, answered = turns[1 + 2 * n], turns[2 + 2 * n]
        assert asked.text == FACT_QUESTION.format(statement=text)
        assert json.loads(answered.text) == {"label": "yes" if is_fact else "no"}
    assert turns[-1].text == FACT_QUESTION.format(statement="The gate code is 4417.")
    assert fact_messages("x y z", READINGS[1])[: len(turns) - 1] == turns[:-1]
    assert FACT_SCHEMA["properties"]["label"]["enum"] == ["yes", "no"]
    assert parse_answer('{"label": "yes"}') is True
    assert parse_answer(' {"label":"NO"} ') is False
    for prose in ("Margaret and 4417", '{"label": "maybe"}', "[1]", '{"fact": "yes"}'):
        with pytest.raises(ValueError):
            parse_answer(prose)


async def test_facts_are_extracted_in_the_background_and_kept_in_the_context(
    store: AgentStore,
) -> None:
    session = await store.create_session()
    for text in STATED:
        await store.add_message(session.id, "user", text)
        await store.add_message(session.id, "assistant", "ok")
    backend = Labeller()
    summariser = Summariser(store, backend.chat, "scripted")
    await summariser.schedule(session.id)
    # Each statement once in the first reading, then the two it did not keep again in
    # the second (a statement either reading keeps is kept).
    assert [_asked(r) for r in backend.fact_requests] == [
        "My sister's name is Margaret.",
        "Thanks, that helps.",
        "The gate code is 4417.",
        "I am allergic to penicillin!",
        "Thanks, that helps.",
        "I am allergic to penicillin!",
    ]
    assert summariser.usage.calls == {"facts": 6}
    for request in backend.fact_requests:
        assert request.response_format is not None
        assert request.response_format.type == "json_schema"
        assert request.response_format.schema == FACT_SCHEMA
    facts = await store.memory.facts(session.id)
    assert [f.content for f in facts] == [
        "My sister's name is Margaret.",
        "The gate code is 4417.",
    ]
    assert all(f.source == "extracted" and f.message_id for f in facts)
    # Read once: the next run has nothing new to offer.
    await summariser.schedule(session.id)
    assert summariser.usage.calls == {"facts": 6}
    context = await MemoryBuilder(store).build(session.id)
    block = next(m.text for m in context.messages if m.text.startswith(FACTS_PREFIX))
    assert "Margaret" in block and "4417" in block
    assert context.fact_ids == tuple(f.id for f in facts)


class SecondReading(Labeller):
    """Says ``yes`` to the allergy only after the second reading's examples, and with
    one reading configured never sees them."""

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        if request.messages and request.messages[0].text == FACTS_SYSTEM_PROMPT:
            self.fact_requests.append(request)
            examples = (len(request.messages) - 2) // 2
            yes = "penicillin" in _asked(request) and examples == READINGS[1]
            self.enqueue(Script(text=[json.dumps({"label": "yes" if yes else "no"})]))
        async for event in ScriptedBackend.chat(self, request):
            yield event


@pytest.mark.parametrize("readings", [1, 2])
async def test_a_statement_any_reading_keeps_is_kept(store: AgentStore, readings: int) -> None:
    session = await store.create_session()
    for text in STATED:
        await store.add_message(session.id, "user", text)
    backend = SecondReading()
    config = SummariserConfig(facts_every=1, fact_readings=readings)
    await Summariser(store, backend.chat, "m", config).schedule(session.id)
    facts = [f.content for f in await store.memory.facts(session.id)]
    assert facts == (["I am allergic to penicillin!"] if readings == 2 else [])
    assert len(backend.fact_requests) == 4 * readings


async def test_a_reply_that_is_not_json_stores_nothing_and_moves_on(store: AgentStore) -> None:
    session = await store.create_session()
    for text in STATED:
        await store.add_message(session.id, "user", text)
    backend = ScriptedBackend(default=Script(text=["Margaret, 4417."]))
    summariser = Summariser(store, backend.chat, "m", SummariserConfig(facts_every=1))
    await summariser.schedule(session.id)
    assert await store.memory.facts(session.id) == []
    # Four statements, two readings: every reply unusable, each counted, none kept.
    assert summariser.usage.failures == {"facts": 8}
    assert await store.memory.facts_upto(session.id) is not None


# -- the API and the CLI --------------------------------------------------------------


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "agent.db")


@pytest.fixture
def server(db: str) -> Any:
    with agent_gateway(db, {"scripted": Labeller()}) as running:
        yield running


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        yield http


async def test_facts_through_the_api(client: httpx.AsyncClient) -> None:
    patient = await client.post("/agent/patients", json={"name": "Mary"})
    assert patient.status_code == 201, patient.text
    patient_id = patient.json()["id"]
    created = await client.post("/agent/sessions", json={"patient_id": patient_id})
    session_id = created.json()["id"]
    base = f"/agent/sessions/{session_id}/facts"
    assert (await client.get(base)).json() == {"facts": []}
    added = await client.post(base, json={"content": "Mary's gate code is 4417"})
    assert added.status_code == 201, added.text
    fact = added.json()
    assert fact["source"] == "user" and fact["patient_id"] == patient_id
    fixed = await client.patch(f"{base}/{fact['id']}", json={"content": "Gate code 4418"})
    assert fixed.status_code == 200 and fixed.json()["content"] == "Gate code 4418"
    # The same patient's other session sees it too.
    other = (await client.post("/agent/sessions", json={"patient_id": patient_id})).json()
    listed = (await client.get(f"/agent/sessions/{other['id']}/facts")).json()["facts"]
    assert [f["content"] for f in listed] == ["Gate code 4418"]
    # A turn's context holds it.
    turn = await client.post(f"/agent/sessions/{other['id']}/messages", json={"input": "Hi"})
    assert turn.status_code == 200, turn.text
    assert (await client.delete(f"{base}/{fact['id']}")).status_code == 204
    gone = await client.delete(f"{base}/{fact['id']}")
    assert gone.status_code == 404 and "no fact" in gone.json()["error"]["message"]
    blank = await client.post(base, json={"content": "  "})
    assert blank.status_code == 400 and blank.json()["error"]["param"] == "content"
    missing = await client.get("/agent/sessions/nope/facts")
    assert missing.status_code == 404
    long = await client.get(f"/agent/sessions/{session_id}/long-summary")
    assert long.json() == {"long_summary": None}


def _run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_facts_through_the_cli(db: str) -> None:
    session_id = _run("agent", "sessions", "create", "--db", db).stdout.strip()
    added = _run("agent", "facts", "add", session_id, "Mary is allergic to penicillin", "--db", db)
    assert added.exit_code == 0, added.output
    fact_id = added.stdout.strip()
    listed = _run("agent", "facts", "list", session_id, "--db", db)
    assert "penicillin" in listed.stdout and "user" in listed.stdout
    edited = _run(
        "agent", "facts", "edit", session_id, fact_id, "Allergic to amoxicillin", "--db", db
    )
    assert edited.exit_code == 0 and "corrected." in edited.stdout
    (row,) = json.loads(_run("agent", "facts", "list", session_id, "--json", "--db", db).stdout)
    assert row["content"] == "Allergic to amoxicillin"
    assert _run("agent", "facts", "delete", session_id, fact_id, "--db", db).exit_code == 0
    again = _run("agent", "facts", "delete", session_id, fact_id, "--db", db)
    assert again.exit_code == 1 and "no fact" in again.output
    assert json.loads(_run("agent", "facts", "list", session_id, "--json", "--db", db).stdout) == []

"""A session's subject (``subject_id``, what the conversation is about) and the domains
that own it: the HTTP API's two names for it, the eldercare domain's check and its
clean-up when a patient is deleted, the agent with no domain, and migration 0010
(``patient_id`` became ``subject_id``, its foreign key the domain's check) on SQLite
and PostgreSQL, with the data kept both ways.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, get_args

import httpx
import pytest
from alembic import command
from sqlalchemy import inspect
from sqlalchemy.ext.asyncio import AsyncEngine

from llmbridge.agent.config import AgentConfig, DomainName
from llmbridge.agent.domains.registry import DOMAINS
from llmbridge.agent.routes import DOMAIN_ROUTES, mounted_routes, routes
from llmbridge.backends.scripted import ScriptedBackend
from llmbridge.store import current_revision, head_revision, make_engine, migrate
from llmbridge.store.migrate import alembic_config, downgrade
from tests.agent.serving import agent_gateway, error_of, session_of
from tests.conftest import RunningServer


@pytest.fixture
def backend() -> ScriptedBackend:
    return ScriptedBackend("scripted")


@pytest.fixture
def server(tmp_path: Path, backend: ScriptedBackend) -> Any:
    with agent_gateway(str(tmp_path / "agent.db"), {"scripted": backend}) as running:
        yield running


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        yield http


# -- the domains' names ---------------------------------------------------------------


def test_every_domain_is_named_alike_in_the_config_the_registry_and_the_routes() -> None:
    assert set(get_args(DomainName)) == set(DOMAINS) == set(DOMAIN_ROUTES) == {"eldercare"}
    assert AgentConfig().domains == ("eldercare",)
    assert mounted_routes(AgentConfig(domains=())) == routes
    with pytest.raises(ValueError, match="more than once"):
        AgentConfig(domains=("eldercare", "eldercare"))
    with pytest.raises(ValueError, match="eldercare"):
        AgentConfig.model_validate({"domains": ["gardening"]})


# -- the HTTP API: subject_id and patient_id ----------------------------------------------


async def test_a_session_names_its_subject_by_either_name(client: httpx.AsyncClient) -> None:
    mary = (await client.post("/agent/patients", json={"name": "Mary"})).json()["id"]
    john = (await client.post("/agent/patients", json={"name": "John"})).json()["id"]
    by_old_name = await client.post("/agent/sessions", json={"patient_id": mary})
    assert by_old_name.status_code == 201, by_old_name.text
    assert by_old_name.json()["subject_id"] == by_old_name.json()["patient_id"] == mary
    by_new_name = (await client.post("/agent/sessions", json={"subject_id": mary})).json()
    assert by_new_name["subject_id"] == by_new_name["patient_id"] == mary
    both = await client.post("/agent/sessions", json={"subject_id": mary, "patient_id": mary})
    assert both.status_code == 201 and both.json()["subject_id"] == mary

    differ = await client.post("/agent/sessions", json={"subject_id": mary, "patient_id": john})
    assert error_of(differ, 400)["param"] == "subject_id"
    session = f"/agent/sessions/{by_new_name['id']}"
    differ = await client.patch(session, json={"subject_id": john, "patient_id": None})
    assert error_of(differ, 400)["param"] == "subject_id"
    assert (await client.get(session)).json()["subject_id"] == mary  # nothing changed

    moved = (await client.patch(session, json={"subject_id": john})).json()
    assert moved["subject_id"] == moved["patient_id"] == john
    cleared = (await client.patch(session, json={"patient_id": None})).json()
    assert cleared["subject_id"] is None and cleared["patient_id"] is None
    renamed = (await client.patch(session, json={"title": "Visit"})).json()
    assert renamed["title"] == "Visit" and renamed["subject_id"] is None

    # The eldercare domain checks the subject, by either name, as it did patient_id.
    for name in ("subject_id", "patient_id"):
        error_of(await client.post("/agent/sessions", json={name: 999}), 404)
        error_of(await client.patch(session, json={name: 999}), 404)


async def test_deleting_a_patient_clears_the_subject_of_its_sessions_and_facts(
    client: httpx.AsyncClient,
) -> None:
    mary = (await client.post("/agent/patients", json={"name": "Mary"})).json()["id"]
    session_id = await session_of(client, subject_id=mary)
    facts = f"/agent/sessions/{session_id}/facts"
    fact = (await client.post(facts, json={"content": "Gate code 4417"})).json()
    assert fact["subject_id"] == fact["patient_id"] == mary
    other = await session_of(client, patient_id=mary)
    shared = (await client.get(f"/agent/sessions/{other}/facts")).json()["facts"]
    assert [f["content"] for f in shared] == ["Gate code 4417"]

    assert (await client.delete(f"/agent/patients/{mary}")).status_code == 204
    session = (await client.get(f"/agent/sessions/{session_id}")).json()
    assert session["subject_id"] is None and session["patient_id"] is None
    kept = (await client.get(facts)).json()["facts"]
    assert [(f["content"], f["subject_id"]) for f in kept] == [("Gate code 4417", None)]
    # No longer the same subject: the other session does not see the fact any more.
    assert (await client.get(f"/agent/sessions/{other}/facts")).json()["facts"] == []


async def test_with_no_domain_the_care_routes_are_gone_and_a_subject_is_unchecked(
    tmp_path: Path,
) -> None:
    database = str(tmp_path / "agent.db")
    with agent_gateway(database, {"scripted": ScriptedBackend("scripted")}, domains=[]) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            assert (await client.get("/agent/patients")).status_code == 404
            assert (await client.post("/agent/patients", json={"name": "M"})).status_code == 404
            first = await session_of(client, subject_id=42)
            again = (await client.post("/agent/sessions", json={"patient_id": 42})).json()
            assert again["subject_id"] == 42
            await client.post(f"/agent/sessions/{first}/facts", json={"content": "Likes tea"})
            shared = (await client.get(f"/agent/sessions/{again['id']}/facts")).json()["facts"]
            assert [(f["content"], f["subject_id"]) for f in shared] == [("Likes tea", 42)]
            turn = await client.post(f"/agent/sessions/{first}/messages", json={"input": "Hi"})
            assert turn.status_code == 200, turn.text


# -- migration 0010, on SQLite and PostgreSQL -----------------------------------------------


async def test_migration_0010_renames_the_subject_and_keeps_every_row(db_url: str) -> None:
    """A store at 0009 with a patient's session, its messages and facts upgrades in
    place: the values move to ``subject_id``, nothing that refers to the rebuilt
    ``sessions`` is lost (SQLite rebuilds it: with foreign keys on, dropping it would
    have cascaded into its messages), the keys to ``patients`` are gone; and 0010 goes
    back down to 0009, a subject no patient has cleared."""
    engine = make_engine(db_url)
    try:
        await _upgrade_to(engine, "0009")
        await _fill_at_0009(engine)
        await migrate(engine)
        assert await current_revision(engine) == head_revision()
        assert await _rows(engine, "SELECT id, subject_id FROM sessions ORDER BY id") == [
            ("about-mary", 1),
            ("about-no-one", None),
        ]
        assert await _rows(engine, "SELECT COUNT(*) FROM messages") == [(2,)]
        assert await _rows(engine, "SELECT COUNT(*) FROM pins") == [(1,)]
        assert await _rows(engine, "SELECT content, subject_id FROM facts") == [("Gate 4417", 1)]
        for table in ("sessions", "facts"):
            keys = await _inspected(engine, "get_foreign_keys", table)
            assert "patients" not in {key["referred_table"] for key in keys}
            columns = {c["name"] for c in await _inspected(engine, "get_columns", table)}
            assert "subject_id" in columns and "patient_id" not in columns
        indexes = await _inspected(engine, "get_indexes", "facts")
        assert {"ix_facts_subject_id_id": ["subject_id", "id"]}.items() <= {
            i["name"]: i["column_names"] for i in indexes
        }.items()

        await _execute(engine, "UPDATE sessions SET subject_id = 77 WHERE id = 'about-no-one'")
        assert await downgrade(engine, "0009") == "0009"
        assert await _rows(engine, "SELECT id, patient_id FROM sessions ORDER BY id") == [
            ("about-mary", 1),
            ("about-no-one", None),
        ]
        assert await _rows(engine, "SELECT COUNT(*) FROM messages") == [(2,)]
        assert await _rows(engine, "SELECT content, patient_id FROM facts") == [("Gate 4417", 1)]
        keys = await _inspected(engine, "get_foreign_keys", "sessions")
        assert "patients" in {key["referred_table"] for key in keys}
        await migrate(engine)  # and up again
        assert await current_revision(engine) == head_revision()
    finally:
        await engine.dispose()


async def _upgrade_to(engine: AsyncEngine, revision: str) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(lambda sync: command.upgrade(alembic_config(sync), revision))


async def _fill_at_0009(engine: AsyncEngine) -> None:
    """Rows as 0009 wrote them: a patient, a session about them with two messages, a
    pin and a fact, and a session about no one."""
    now = "CURRENT_TIMESTAMP"
    for statement in (
        f"INSERT INTO patients (id, name, conditions, allergies, notes, created_at) "
        f"VALUES (1, 'Mary', '[]', '[]', '', {now})",
        f"INSERT INTO sessions (id, name, patient_id, created_at, updated_at) "
        f"VALUES ('about-mary', 'Mary', 1, {now}, {now})",
        f"INSERT INTO sessions (id, name, created_at, updated_at) "
        f"VALUES ('about-no-one', '', {now}, {now})",
        f"INSERT INTO messages (session_id, role, content, created_at, token_count, status) "
        f"VALUES ('about-mary', 'user', 'hi', {now}, 1, 'complete')",
        f"INSERT INTO messages (session_id, role, content, created_at, token_count, status) "
        f"VALUES ('about-mary', 'assistant', 'hello', {now}, 1, 'complete')",
        f"INSERT INTO pins (session_id, content, token_count, created_at) "
        f"VALUES ('about-mary', 'Mary takes tea', 3, {now})",
        f"INSERT INTO facts (session_id, patient_id, content, source, token_count, "
        f"created_at, updated_at) VALUES ('about-mary', 1, 'Gate 4417', 'user', 3, {now}, {now})",
    ):
        await _execute(engine, statement)


async def _execute(engine: AsyncEngine, statement: str) -> None:
    async with engine.begin() as conn:
        await conn.exec_driver_sql(statement)


async def _rows(engine: AsyncEngine, query: str) -> list[tuple[Any, ...]]:
    async with engine.connect() as conn:
        return [tuple(row) for row in (await conn.exec_driver_sql(query)).fetchall()]


async def _inspected(engine: AsyncEngine, method: str, table: str) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        found: list[dict[str, Any]] = await conn.run_sync(
            lambda sync: getattr(inspect(sync), method)(table)
        )
    return found

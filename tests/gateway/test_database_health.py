"""A frozen database through the gateway: requests that need it get
a 503 in their caller's dialect instead of hanging, requests that do not are served,
``/health`` names the database and says it is down, then up again once it thaws.

A real PostgreSQL server, frozen for real (SIGSTOP on every process of it,
``tests/agent/postgres_faults.py``), a real gateway on a loopback port, the official
OpenAI and Anthropic clients and httpx for the agent API. The deadlines are short
ones set in the database URL, as an operator sets them (``store/engine.py``).
Every wait is bounded generously so a hang fails the test; no timing is asserted."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import httpx
import openai
import pytest

from llmbridge.accounts.keys import KeyStore
from llmbridge.backends.scripted import ScriptedBackend
from tests.agent.postgres_faults import SHORT_DEADLINES, frozen
from tests.agent.serving import agent_gateway
from tests.conftest import anthropic_client, openai_client
from tests.servers import PostgresServer
from tests.waiting import scaled, value_until

STATIC = "static-operator-key"
"""A key in the configuration: it needs no database to be recognised."""

_BOUND_S = scaled(120.0)
"""A client's own timeout: far above every deadline, so only a hang reaches it."""


def _create_key(url: str) -> str:
    async def create() -> str:
        keys = await KeyStore.open(url)
        try:
            _, key = await keys.create("team-a")
            return key
        finally:
            await keys.close()

    return asyncio.run(create())


def _health(url: str, key: str | None = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.get(url + "/health", headers=headers, timeout=_BOUND_S)


def _health_until(url: str, database_ok: bool, within_s: float = 60.0) -> dict[str, Any]:
    """``/health`` (with the static key) once it says the database is ``database_ok``:
    its probe is cached for ``server.health_cache_s`` (a bound on a hang, not a timing)."""

    def matching() -> dict[str, Any] | None:
        body: dict[str, Any] = _health(url, STATIC).json()
        return body if body["database"]["ok"] is database_ok else None

    return value_until(matching, f"/health saying the database is ok={database_ok}", within_s)


def _agent_session(url: str) -> httpx.Response:
    return httpx.post(
        url + "/agent/sessions",
        json={},
        headers={"authorization": f"Bearer {STATIC}"},
        timeout=_BOUND_S,
    )


def _ask_openai(url: str, key: str) -> Any:
    client = openai_client(url, api_key=key).with_options(timeout=_BOUND_S)
    return client.chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "hi"}]
    )


def _ask_anthropic(url: str, key: str) -> Any:
    client = anthropic_client(url, api_key=key).with_options(timeout=_BOUND_S)
    return client.messages.create(
        model="scripted", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
    )


def test_a_frozen_database_is_a_503_in_the_callers_dialect_and_health_names_it(
    postgres_server: PostgresServer, pg_url: str
) -> None:
    url = f"{pg_url.replace('postgres@', 'postgres:pw-not-shown@')}?{SHORT_DEADLINES}"
    key = _create_key(url)  # a database key: auth is on
    backend = ScriptedBackend("scripted")
    with agent_gateway(url, {"scripted": backend}, keys=(STATIC,)) as gateway:
        assert _agent_session(gateway.url).status_code == 201
        up = _health_until(gateway.url, database_ok=True)
        assert up["status"] == "up"
        assert up["database"]["kind"] == "postgresql"
        assert up["database"]["url"].startswith("postgresql+asyncpg://postgres:***@127.0.0.1:")
        assert "pw-not-shown" not in _health(gateway.url, STATIC).text

        with frozen(postgres_server):
            # The agent API: its store past its deadline, a 503 with a JSON error.
            session = _agent_session(gateway.url)
            assert session.status_code == 503, session.text
            error = session.json()["error"]
            assert "database" in error["message"] and "pw-not-shown" not in session.text

            # A database key not in the cache: the key lookup's 503, in each dialect.
            with pytest.raises(openai.APIStatusError) as from_openai:
                _ask_openai(gateway.url, key)
            assert from_openai.value.status_code == 503
            assert "database" in from_openai.value.message
            with pytest.raises(anthropic.APIStatusError) as from_anthropic:
                _ask_anthropic(gateway.url, key)
            assert from_anthropic.value.status_code == 503
            assert from_anthropic.value.body["type"] == "error"  # Anthropic's shape

            # What needs no database is still served: a static key's chat.
            assert _ask_openai(gateway.url, STATIC).choices[0].message.content is not None

            down = _health_until(gateway.url, database_ok=False)
            assert down["status"] == "degraded"  # the backends answer: 200, not 503
            assert down["database"]["ok"] is False and down["database"]["detail"]
            # Without a key, the verdict alone; with the database key, the verdict
            # alone too (it cannot be checked now), and no wait on the database.
            assert _health(gateway.url).json() == {"status": "degraded"}
            assert _health(gateway.url, key).json() == {"status": "degraded"}

        back = _health_until(gateway.url, database_ok=True)
        assert back["status"] == "up"
        assert _agent_session(gateway.url).status_code == 201
        assert _ask_openai(gateway.url, key).choices[0].message.content is not None
        assert _ask_anthropic(gateway.url, key).content

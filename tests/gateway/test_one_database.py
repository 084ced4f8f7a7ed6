"""The gateway opens the product's database once: one engine and
one migration run per start, shared by the key store, the agent service, the stored
Responses and the usage ledger (store/database.py), and closed once at shutdown.

Counted for real, whatever module makes them: the connection pool of every SQLAlchemy
engine that opens a connection (SQLAlchemy's ``engine_connect`` event on ``Engine``; a
pool per ``create_engine``, which the write engine, an ``execution_options`` copy of
the read engine, shares with it) and every Alembic
upgrade (``alembic.command.upgrade``, which each migration run calls once). Before the
database moved to ``store/``, a start opened three engines and migrated three times
(``KeyStore.open``, ``AgentRuntime.open``, ``UsageLedger.open``).
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from alembic import command
from sqlalchemy import Engine, event
from sqlalchemy.pool import Pool

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.gateway.app import create_app, http_protocol
from llmbridge.gateway.config import GatewayConfig
from tests.conftest import RunningServer, openai_client

MASTER = "master-key-for-the-test"


class _Seen:
    """The pools of the engines that connected, and the migration runs, from any
    thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.pools: list[Pool] = []
        self.upgrades = 0

    def connected(self, conn: Any) -> None:
        with self._lock:
            if not any(pool is conn.engine.pool for pool in self.pools):
                self.pools.append(conn.engine.pool)

    def upgraded(self) -> None:
        with self._lock:
            self.upgrades += 1


def test_a_start_opens_one_engine_and_migrates_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = tmp_path / "llmbridge.db"
    seen = _Seen()
    upgrade = command.upgrade

    def counted_upgrade(*args: Any, **kwargs: Any) -> None:
        seen.upgraded()
        upgrade(*args, **kwargs)

    monkeypatch.setattr(command, "upgrade", counted_upgrade)
    event.listen(Engine, "engine_connect", seen.connected)
    try:
        # Every user of the database on: keys (a master key turns auth on, and with it
        # the ledger), the agent service and its stored responses.
        config = GatewayConfig.model_validate(
            {
                "backends": {"scripted": {"type": "scripted"}},
                "default_backend": "scripted",
                "server": {"master_key": MASTER},
                "agent": {"database": str(database)},
            }
        )
        backend = ScriptedBackend("scripted", models=("scripted",))
        app = create_app(config, backends={"scripted": backend})
        with RunningServer(app, http=http_protocol(app)) as server, httpx.Client() as http:
            made = http.post(
                server.url + "/admin/keys",
                json={"name": "team"},
                headers={"authorization": f"Bearer {MASTER}"},
            )
            assert made.status_code == 201, made.text
            key = made.json()["key"]
            client = openai_client(server.url, key)
            backend.enqueue(Script(text=["kept"]))
            stored = client.responses.create(model="scripted", input="question")
            assert client.responses.retrieve(stored.id).output_text == "kept"
            personas = http.get(
                server.url + "/agent/personas", headers={"authorization": f"Bearer {key}"}
            )
            assert personas.status_code == 200, personas.text
            # Each part used it; still the one engine, migrated once.
            assert seen.upgrades == 1
            assert len(seen.pools) == 1
        # Closed once, at shutdown, after the ledger's last flush.
        assert app.state.gateway.database.opened is None
    finally:
        event.remove(Engine, "engine_connect", seen.connected)

    assert seen.upgrades == 1
    assert len(seen.pools) == 1
    with sqlite3.connect(database) as conn:
        # The ledger wrote on that same database: the key's request, and the others.
        (rows,) = conn.execute("SELECT count(*) FROM usage WHERE key_name = 'team'").fetchone()
        (responses,) = conn.execute("SELECT count(*) FROM responses").fetchone()
    assert rows >= 2
    assert responses == 1


def test_a_database_section_alone_holds_every_product_in_one_file(tmp_path: Path) -> None:
    """Only ``database: {url: sqlite:///FILE}`` (no ``agent:`` section: the agent serves
    by default) and a master key: a key made through the admin API, a request with it,
    an agent session and a stored response all land in FILE, read back with sqlite3."""
    database = tmp_path / "only.db"
    config = GatewayConfig.model_validate(
        {
            "backends": {"scripted": {"type": "scripted"}},
            "default_backend": "scripted",
            "server": {"master_key": MASTER},
            "database": {"url": f"sqlite:///{database}"},
        }
    )
    assert "agent" not in config.model_fields_set
    backend = ScriptedBackend("scripted", models=("scripted",))
    app = create_app(config, backends={"scripted": backend})
    with RunningServer(app, http=http_protocol(app)) as server, httpx.Client() as http:
        made = http.post(
            server.url + "/admin/keys",
            json={"name": "only-team"},
            headers={"authorization": f"Bearer {MASTER}"},
        )
        assert made.status_code == 201, made.text
        key = made.json()["key"]
        client = openai_client(server.url, key)
        backend.enqueue(Script(text=["counted"]), Script(text=["stored"]))
        chat = client.chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": "hi"}]
        )
        assert chat.choices[0].message.content == "counted"
        stored = client.responses.create(model="scripted", input="keep this")
        session = http.post(
            server.url + "/agent/sessions",
            json={"title": "in the one file"},
            headers={"authorization": f"Bearer {key}"},
        )
        assert session.status_code == 201, session.text
        session_id = session.json()["id"]
    # After shutdown: the ledger's last rows are flushed, the database closed.
    with sqlite3.connect(database) as conn:
        (keys,) = conn.execute("SELECT count(*) FROM api_keys WHERE name = 'only-team'").fetchone()
        (chats,) = conn.execute(
            "SELECT count(*) FROM usage WHERE key_name = 'only-team' AND endpoint LIKE ?",
            ("%chat/completions",),
        ).fetchone()
        (sessions,) = conn.execute(
            "SELECT name FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        (responses,) = conn.execute(
            "SELECT count(*) FROM responses WHERE id = ?", (stored.id,)
        ).fetchone()
    assert (keys, chats, sessions, responses) == (1, 1, "in the one file", 1)

"""``llmbridge agent``: personas, sessions and chat through click's CliRunner, against a
scripted backend from a YAML configuration and a database given by --db or
LLMBRIDGE_DB; the conversation and its memory survive across runs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from llmbridge.agent.memory import PINS_PREFIX, RECENT_PREFIX
from llmbridge.agent.store import AgentStore, PinRecord, SessionRecord, StoredMessage
from llmbridge.backends.base import Backend
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.cli import cli
from llmbridge.features.token_count import count_message_tokens
from llmbridge.gateway.config import load_config
from llmbridge.serving import build as serving_build

REPLY = "Noted, I will remember."


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "llmbridge.yaml"
    path.write_text(
        f"backends:\n  s: {{type: scripted, reply: {REPLY!r}, chunks: 3}}\n"
        "agent:\n  history_budget: 500\n"
    )
    return path


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "agent.db")


def _run(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
    result = CliRunner().invoke(cli, list(args), input=input, env=env, catch_exceptions=False)
    return result


def _stored(db: str) -> tuple[list[SessionRecord], list[StoredMessage], list[PinRecord]]:
    async def read() -> tuple[list[SessionRecord], list[StoredMessage], list[PinRecord]]:
        store = await AgentStore.open(db)
        try:
            sessions = await store.list_sessions()
            messages = await store.last_messages(sessions[0].id, 1000) if sessions else []
            pins = await store.pins(sessions[0].id) if sessions else []
            return sessions, messages, pins
        finally:
            await store.close()

    return asyncio.run(read())


def test_personas_create_and_list(config: Path, db: str) -> None:
    created = _run(
        "agent",
        "personas",
        "create",
        "Nurse",
        "--prompt",
        "You are a nurse.",
        "--id",
        "nurse",
        "--set",
        "temperature=0.5",
        "--set",
        'stop=["END"]',
        "--db",
        db,
    )
    assert created.exit_code == 0, created.output
    assert created.stdout.strip() == "nurse"
    listed = _run("agent", "personas", "list", "--db", db)
    assert "nurse" in listed.stdout and '"temperature":0.5' in listed.stdout
    as_json = json.loads(_run("agent", "personas", "list", "--json", "--db", db).stdout)
    assert as_json[0]["settings"] == {"temperature": 0.5, "stop": ["END"]}
    again = _run("agent", "personas", "create", "Other", "--id", "nurse", "--db", db)
    assert again.exit_code == 1 and "is taken" in again.output
    bad = _run("agent", "personas", "create", "X", "--set", "temperature=hot", "--db", db)
    assert bad.exit_code == 2 and "temperature" in bad.output
    bad = _run("agent", "personas", "create", "X", "--set", "novalue", "--db", db)
    assert bad.exit_code == 2 and "KEY=VALUE" in bad.output


def test_sessions_create_and_list_on_the_database_from_the_environment(db: str) -> None:
    env = {"LLMBRIDGE_DB": db}
    assert _run("agent", "personas", "create", "N", "--id", "n", env=env).exit_code == 0
    created = _run("agent", "sessions", "create", "--persona", "n", "--title", "Mary", env=env)
    assert created.exit_code == 0, created.output
    session_id = created.stdout.strip()
    listed = _run("agent", "sessions", "list", env=env)
    assert session_id in listed.stdout and "Mary" in listed.stdout
    (row,) = json.loads(_run("agent", "sessions", "list", "--json", env=env).stdout)
    assert row == {**row, "id": session_id, "title": "Mary", "persona_id": "n"}
    missing = _run("agent", "sessions", "create", "--persona", "nope", env=env)
    assert missing.exit_code == 1 and "no persona 'nope'" in missing.output


def test_chat_streams_replies_pins_facts_and_stores_the_conversation(config: Path, db: str) -> None:
    _run("agent", "personas", "create", "Nurse", "--id", "nurse", "--db", db)
    lines = "Hello there\n\n/pin Mary is allergic to penicillin\n/pin\n/nope\nHow is she?\n/quit\n"
    result = _run(
        "agent", "chat", "--persona", "nurse", "--config", str(config), "--db", db, input=lines
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.count(f"assistant> {REPLY}") == 2
    assert "pinned." in result.stdout
    assert "usage: /pin TEXT" in result.stderr and "unknown command /nope" in result.stderr
    assert "persona nurse" in result.stderr and "tokens)" in result.stderr
    (session,), messages, pins = _stored(db)
    assert session.name == "Hello there" and session.persona_id == "nurse"
    assert [(m.role, m.content) for m in messages] == [
        ("user", "Hello there"),
        ("assistant", REPLY),
        ("user", "How is she?"),
        ("assistant", REPLY),
    ]
    assert [p.content for p in pins] == ["Mary is allergic to penicillin"]


def test_chat_continues_a_session_with_its_memory_within_budget(
    config: Path, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = ScriptedBackend("s", default=Script(text=[" ".join(["word"] * 60)]))
    # The CLI builds its backends from the configuration; hand it this one to watch.
    monkeypatch.setattr(serving_build, "build_backend", lambda *args, **kwargs: backend)
    first = "\n".join([*(f"turn {n}" for n in range(10)), "/pin Mary takes metformin at 8"])
    result = _run("agent", "chat", "--config", str(config), "--db", db, input=first + "\n")
    assert result.exit_code == 0, result.output
    (session,), messages, _ = _stored(db)
    assert len(messages) == 20

    # A second run (a restart) continues the same session from the database.
    backend.requests.clear()
    result = _run(
        "agent",
        "chat",
        "--session",
        session.id,
        "--config",
        str(config),
        "--db",
        db,
        input="What do we know?\n",
    )
    assert result.exit_code == 0, result.output
    (request,) = backend.requests
    _, *history, question = request.messages
    assert question.text == "What do we know?"
    assert sum(count_message_tokens(m) for m in history) <= 500  # agent.history_budget
    texts = [m.text for m in history]
    assert any(t.startswith(PINS_PREFIX) and "metformin at 8" in t for t in texts)
    assert any(t.startswith(RECENT_PREFIX + "turn 9") for t in texts)
    assert not any("turn 0" in t for t in texts)
    assert len(_stored(db)[1]) == 22


def test_chat_on_an_unknown_session_fails_clearly(config: Path, db: str) -> None:
    result = _run("agent", "chat", "--session", "nope", "--config", str(config), "--db", db)
    assert result.exit_code == 1 and "no session 'nope'" in result.output


def test_chat_reports_a_backend_failure_and_goes_on(
    config: Path, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llmbridge.core.errors import BackendUnavailableError

    backend = ScriptedBackend("s")
    # The try and the serving layer's one retry both fail.
    backend.enqueue(*[Script(fail_before=BackendUnavailableError("connection refused"))] * 2)

    def build(*args: Any, **kwargs: Any) -> Backend:
        return backend

    monkeypatch.setattr(serving_build, "build_backend", build)
    result = _run(
        "agent", "chat", "--config", str(config), "--db", db, input="first\nsecond\n/quit\n"
    )
    assert result.exit_code == 0, result.output
    assert "error: connection refused" in result.stderr
    assert "assistant> Hello from llmbridge." in result.stdout
    _, messages, _ = _stored(db)
    assert [m.role for m in messages] == ["user", "user", "assistant"]


def test_the_db_option_sets_the_database(tmp_path: Path) -> None:
    assert load_config(None, {"db": "postgresql://u@h/agent"}).database.url == (
        "postgresql://u@h/agent"
    )
    default = load_config(None, environ={"XDG_DATA_HOME": str(tmp_path)}).database.url
    assert default == str(tmp_path / "llmbridge" / "llmbridge.db")
    serve_help = _run("serve", "--help").stdout
    assert "--db" in serve_help and "LLMBRIDGE_DB" in serve_help
    assert "chat" in _run("agent", "--help").stdout


def test_a_database_that_cannot_be_reached_is_a_clear_error_not_a_traceback() -> None:
    """Nothing listens on port 1: the CLI says the database is unavailable and exits 1
    (the store maps the driver's ConnectionRefusedError once, store/errors.py)."""
    result = CliRunner().invoke(
        cli, ["agent", "personas", "list", "--db", "postgresql://nobody@127.0.0.1:1/agent"]
    )
    assert result.exit_code == 1, result.output
    assert "the database is unavailable" in result.output
    assert "Traceback" not in result.output and result.exception is not None
    assert isinstance(result.exception, SystemExit)

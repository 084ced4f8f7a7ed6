"""One client session's cost, on SQLite and PostgreSQL: each request's
session id in the usage ledger (``usage.session_id``, migration 0007), summed by
``GET /admin/usage?group_by=session``, one session alone with ``session=ID``, and
``llmbridge usage --group-by session --session ID``.

The requests come from the official clients with the headers the agent CLIs send
(Claude Code's ``X-Claude-Code-Session-Id``, Codex's ``session-id``, and
``x-llmbridge-session-id`` from the google-genai client, as Gemini CLI adds it through
``GEMINI_CLI_CUSTOM_HEADERS``), or with the session in the body alone (OpenAI's
``prompt_cache_key``); tests/accounts/test_session_clis.py runs the CLIs themselves.
A scripted backend gives each reply exact token counts.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from alembic import command
from click.testing import CliRunner
from google import genai
from google.genai import types as genai_types
from sqlalchemy import inspect, select
from sqlalchemy.ext.asyncio import AsyncEngine

from llmbridge.accounts.ledger import USAGE, UsageLedger, UsageRecord
from llmbridge.accounts.rollups import roll_up_batch
from llmbridge.accounts.usage import usage_report
from llmbridge.accounts.usage_record import storable_record
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.cli import cli
from llmbridge.core.response import Usage
from llmbridge.store import Database, current_revision, head_revision, make_engine, migrate
from llmbridge.store.migrate import alembic_config
from llmbridge.store.tables import SESSION_ID_LENGTH
from tests.conftest import (
    RunningServer,
    anthropic_client,
    ollama_client,
    openai_client,
    running_gateway,
)

MASTER = "sk-master-sessions"
STATIC = "sk-static-sessions"
PRICES = {"priced-*": {"input": 2.0, "output": 8.0}}
CLAUDE = "8b0ed646-b8ca-4827-8def-98db052d4ac2"
CODEX = "01a22050-e6ce-7953-b3ac-b874ac3ed9dd"
GEMINI = "gemini-run-1"
CACHE_KEY = "conversation-7"


@pytest.fixture
def scripted() -> ScriptedBackend:
    return ScriptedBackend("scripted", models=("priced-model", "free-model"))


@pytest.fixture
def gateway(scripted: ScriptedBackend, db_url: str) -> Iterator[RunningServer]:
    with running_gateway(
        {"scripted": scripted},
        server={"api_keys": [STATIC], "master_key": MASTER},
        agent={"database": db_url, "summaries": False},
        prices=PRICES,
        models=[{"name": "priced-*", "backend": "scripted"}],
    ) as server:
        yield server


def _usage(server: RunningServer, **params: str) -> dict[str, Any]:
    reply = httpx.get(
        server.url + "/admin/usage",
        headers={"Authorization": f"Bearer {MASTER}"},
        params=params,
        timeout=10,
    )
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def _by_session(server: RunningServer, requests: int) -> dict[str | None, dict[str, Any]]:
    """``/admin/usage?group_by=session`` once ``requests`` rows are written (the
    ledger writes every second): a bounded poll."""
    waited = threading.Event()
    rows: list[dict[str, Any]] = []
    for _ in range(150):
        rows = _usage(server, group_by="session")["data"]
        if sum(r["requests"] for r in rows) >= requests:
            return {r["group"]: r for r in rows}
        waited.wait(0.1)
    raise AssertionError(f"the ledger never reached {requests} requests: {rows}")


def _sessions_of_rows(db_url: str) -> list[str | None]:
    async def read() -> list[str | None]:
        engine = make_engine(db_url)
        try:
            async with engine.connect() as conn:
                return list((await conn.execute(select(USAGE.c.session_id))).scalars())
        finally:
            await engine.dispose()

    return asyncio.run(read())


def _cost(usage: Usage) -> float:
    return ((usage.input_tokens or 0) * 2.0 + (usage.output_tokens or 0) * 8.0) / 1e6


def test_each_clients_session_is_recorded_and_summed(
    gateway: RunningServer, scripted: ScriptedBackend, db_url: str
) -> None:
    def u(tokens_in: int, tokens_out: int) -> Usage:
        return Usage(input_tokens=tokens_in, output_tokens=tokens_out)

    usages = {
        "claude": [u(11, 7), u(13, 5)],
        "codex": [u(17, 9), u(19, 2)],
        "gemini": [u(23, 4)],
        "cache_key": [u(29, 6)],
        "none": [u(31, 3)],
    }
    for name in usages:
        scripted.enqueue(*(Script(text=["Hello", " there."], usage=u) for u in usages[name]))

    # Claude Code's header (the SDK Claude Code is built on), streamed and not.
    anthropic = anthropic_client(gateway.url, api_key=STATIC)
    claude_headers = {"X-Claude-Code-Session-Id": CLAUDE}
    messages = [{"role": "user", "content": "hi"}]
    anthropic.messages.create(
        model="priced-model", max_tokens=50, messages=messages, extra_headers=claude_headers
    )
    with anthropic.messages.stream(
        model="priced-model", max_tokens=50, messages=messages, extra_headers=claude_headers
    ) as stream:
        stream.get_final_message()
    # Codex's header on the Responses API, streamed and not.
    openai = openai_client(gateway.url, api_key=STATIC)
    codex_headers = {"session-id": CODEX}
    openai.responses.create(model="priced-model", input="hi", extra_headers=codex_headers)
    events = openai.responses.create(
        model="priced-model", input="hi", stream=True, extra_headers=codex_headers
    )
    assert [e.type for e in events][-1] == "response.completed"
    # The gateway's own header from the google-genai client (Gemini CLI's SDK).
    gemini = genai.Client(
        api_key=STATIC,
        http_options=genai_types.HttpOptions(
            base_url=gateway.url, headers={"x-llmbridge-session-id": GEMINI}
        ),
    )
    gemini.models.generate_content(model="priced-model", contents="hi")
    gemini.close()
    # The body alone: OpenAI's prompt_cache_key.
    openai.chat.completions.create(
        model="priced-model", messages=messages, prompt_cache_key=CACHE_KEY
    )
    # No session at all.
    ollama = ollama_client(gateway.url, headers={"Authorization": f"Bearer {STATIC}"})
    ollama.chat(model="priced-model", messages=messages)

    by_session = _by_session(gateway, 7)
    assert sorted(_sessions_of_rows(db_url), key=str) == sorted(
        [CLAUDE, CLAUDE, CODEX, CODEX, GEMINI, CACHE_KEY, None], key=str
    )
    expected = {
        CLAUDE: usages["claude"],
        CODEX: usages["codex"],
        GEMINI: usages["gemini"],
        CACHE_KEY: usages["cache_key"],
        None: usages["none"],
    }
    assert set(by_session) == set(expected)
    for session, replies in expected.items():
        group = by_session[session]
        assert group["requests"] == len(replies), session
        assert group["input_tokens"] == sum(u.input_tokens or 0 for u in replies), session
        assert group["output_tokens"] == sum(u.output_tokens or 0 for u in replies), session
        assert group["cost_usd"] == pytest.approx(sum(_cost(u) for u in replies)), session
        assert group["priced"] == len(replies)

    # One session alone, by any grouping: Claude Code's run is one line.
    one = _usage(gateway, group_by="model", session=CLAUDE)
    assert one["session"] == CLAUDE
    (line,) = one["data"]
    assert (line["group"], line["requests"]) == ("priced-model", 2)
    assert line["cost_usd"] == pytest.approx(sum(_cost(u) for u in usages["claude"]))
    assert _usage(gateway, group_by="session", session="no-such-session")["data"] == []

    # The CLI: the same sums, one session's too.
    runner = CliRunner()
    alone = runner.invoke(cli, ["usage", "--db", db_url, "--session", CODEX, "--json"])
    assert alone.exit_code == 0, alone.output
    (codex_line,) = json.loads(alone.output)
    assert codex_line["requests"] == 2
    assert codex_line["cost_usd"] == pytest.approx(sum(_cost(u) for u in usages["codex"]))
    table = runner.invoke(cli, ["usage", "--db", db_url, "--group-by", "session"])
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert lines[0].split()[:2] == ["session", "requests"]
    firsts = {line.split()[0]: line.split()[1] for line in lines[1:]}
    assert firsts[CLAUDE] == "2" and firsts[GEMINI] == "1"
    (unnamed,) = [line for line in lines if line.startswith("(no session) ")]
    assert unnamed.split()[2] == "1"
    assert firsts["total"] == "7"


def test_a_session_id_is_bounded_and_cleaned_and_found_as_sent(
    gateway: RunningServer, scripted: ScriptedBackend, db_url: str
) -> None:
    """A header longer than the column is cut to it; a body's session with a NUL (no
    header can carry one) is stored with U+FFFD on both databases; a filter with
    either value as the client sent it finds the row."""
    long_id = "s" * 500
    nul_id = "conversation\x00one"
    scripted.enqueue(Script(text=["a"], usage=Usage(input_tokens=3, output_tokens=1)))
    scripted.enqueue(Script(text=["b"], usage=Usage(input_tokens=5, output_tokens=1)))
    openai = openai_client(gateway.url, api_key=STATIC)
    messages = [{"role": "user", "content": "hi"}]
    openai.chat.completions.create(
        model="priced-model", messages=messages, extra_headers={"session-id": long_id}
    )
    openai.chat.completions.create(model="priced-model", messages=messages, prompt_cache_key=nul_id)
    by_session = _by_session(gateway, 2)
    assert set(by_session) == {"s" * SESSION_ID_LENGTH, "conversation\ufffdone"}
    for sent, tokens in ((long_id, 3), (nul_id, 5)):
        (line,) = _usage(gateway, group_by="session", session=sent)["data"]
        assert line["input_tokens"] == tokens


# -- the ledger and its rollups, on the database directly -------------------------------


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    made = make_engine(db_url)
    await migrate(made)
    yield made
    await made.dispose()


def test_a_clean_session_id_is_kept_and_a_hostile_one_cleaned() -> None:
    clean = UsageRecord("req_1", "m", 200, session_id=CLAUDE)
    assert storable_record(clean) is clean
    hostile = storable_record(UsageRecord("req_2", "m", 200, session_id="\ud800x" * 200))
    assert hostile.session_id == ("\ufffdx" * 200)[:SESSION_ID_LENGTH]


async def test_rolled_up_days_count_under_no_session_and_totals_stay(engine: AsyncEngine) -> None:
    """Rollups keep a day, key and model, not a session: after a cleanup a session's old
    rows count under ``None``, every total is unchanged, and a session filter sees only
    the rows still kept."""
    now = datetime.now(UTC)
    old = now - timedelta(days=100)
    assert await usage_report(engine, "session") == []
    ledger = UsageLedger(Database(engine), flush_interval_s=3600)
    records = [
        UsageRecord("old_1", "m", 200, created_at=old, input_tokens=3, session_id="s-old"),
        UsageRecord("old_2", "m", 200, created_at=old, input_tokens=4),
        UsageRecord("new_1", "m", 200, created_at=now, input_tokens=5, session_id="s-old"),
        UsageRecord("new_2", "m", 200, created_at=now, input_tokens=6, session_id="s-new"),
    ]
    for record in records:
        ledger.record(record)
    assert await ledger.flush()
    await ledger.aclose()

    def sums(groups: list[Any]) -> dict[str | None, tuple[int, int]]:
        return {g.group: (g.requests, g.input_tokens) for g in groups}

    before = sums(await usage_report(engine, "session"))
    assert before == {"s-old": (2, 8), "s-new": (1, 6), None: (1, 4)}
    assert await roll_up_batch(engine, now - timedelta(days=90)) == 2
    after = sums(await usage_report(engine, "session"))
    assert after == {"s-old": (1, 5), "s-new": (1, 6), None: (2, 7)}
    assert sum(r for r, _ in after.values()) == sum(r for r, _ in before.values())
    assert sums(await usage_report(engine, "model", session="s-old")) == {"m": (1, 5)}
    # No row and no rollup in the range: no line at all, not a line of zeros.
    assert await usage_report(engine, "session", since=now + timedelta(days=2)) == []


# -- the migration --------------------------------------------------------------------


async def test_migration_0007_adds_the_column_and_its_index_to_a_filled_ledger(
    db_url: str,
) -> None:
    """A ledger at 0006 with rows upgrades in place: the rows keep their values and
    name no session, new rows name theirs, the partial index exists; and 0007 goes back
    down to 0006."""
    engine = make_engine(db_url)
    try:
        await _to_revision(engine, "0006")
        async with engine.begin() as conn:  # a row as 0006 wrote it: no session column
            await conn.exec_driver_sql(
                "INSERT INTO usage (request_id, created_at, model, status, input_tokens) "
                "VALUES ('before', CURRENT_TIMESTAMP, 'm', 200, 7)"
            )
        await migrate(engine)
        assert await current_revision(engine) == head_revision()  # 0007 or later
        ledger = UsageLedger(Database(engine), flush_interval_s=3600)
        ledger.record(UsageRecord("after", "m", 200, input_tokens=2, session_id=CODEX))
        assert await ledger.flush()
        await ledger.aclose()
        groups = {g.group: g.input_tokens for g in await usage_report(engine, "session")}
        assert groups == {None: 7, CODEX: 2}
        async with engine.connect() as conn:
            indexes = await conn.run_sync(lambda sync: inspect(sync).get_indexes("usage"))
        (index,) = [i for i in indexes if i["name"] == "ix_usage_session_id"]
        assert index["column_names"] == ["session_id"]
        await _to_revision(engine, "0006", down=True)
        async with engine.connect() as conn:
            columns = await conn.run_sync(lambda sync: inspect(sync).get_columns("usage"))
        assert "session_id" not in {c["name"] for c in columns}
    finally:
        await engine.dispose()


async def _to_revision(engine: AsyncEngine, revision: str, *, down: bool = False) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(
            lambda sync: (command.downgrade if down else command.upgrade)(
                alembic_config(sync), revision
            )
        )

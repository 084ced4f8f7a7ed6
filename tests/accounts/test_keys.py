"""API keys in the database (accounts/keys.py) on SQLite and PostgreSQL: created keys
are stored only as hashes and found by key, names are unique, revoking is seen through
the per-process cache within its lifetime; and ``llmbridge keys`` (cli/keys.py) on a
``--db`` of each kind."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from sqlalchemy import event, text

from llmbridge.accounts.keys import KEY_PREFIX, KeyStore, hash_key
from llmbridge.cli import cli
from llmbridge.core.errors import ConflictError, InvalidRequestError, NotFoundError
from llmbridge.web.auth import key_identity
from tests.waiting import until

KEY_SHAPE = re.compile(r"^llmb-[A-Za-z0-9_-]{43}$")
"""``llmb-`` and 32 random bytes in URL-safe base64 without padding."""


@pytest.fixture
async def keys(db_url: str) -> AsyncIterator[KeyStore]:
    store = await KeyStore.open(db_url)
    yield store
    await store.close()


async def test_a_created_key_is_stored_as_its_hash_only(keys: KeyStore) -> None:
    record, key = await keys.create(
        "team-a", rpm=3, tpm=1000, max_parallel=2, budget_usd=1.5, models=["gpt-4o*", "qwen3"]
    )
    assert KEY_SHAPE.match(key) and key.startswith(KEY_PREFIX)
    assert record.name == "team-a" and record.id.startswith("key_")
    assert (record.rpm, record.tpm, record.max_parallel, record.budget_usd) == (3, 1000, 2, 1.5)
    assert record.models == ("gpt-4o*", "qwen3") and record.spent_usd == 0.0
    assert record.identity == key_identity(key) and not record.revoked
    assert key.startswith(record.prefix) and len(record.prefix) < 16
    async with keys.engine.connect() as conn:
        rows = (await conn.execute(text("SELECT * FROM api_keys"))).mappings().all()
    assert len(rows) == 1
    assert rows[0]["key_hash"] == hashlib.sha256(key.encode()).hexdigest() == hash_key(key)
    assert all(key not in str(value) for value in rows[0].values())
    found = await keys.find_by_key(key)
    assert found == record
    assert await keys.find_by_key(key + "x") is None
    assert await keys.find_by_key("llmb-" + "A" * 43) is None


async def test_globs_say_which_models_a_key_may_use(keys: KeyStore) -> None:
    some, _ = await keys.create("some", models=["gpt-4o*", "qwen3"])
    every, _ = await keys.create("every")
    assert some.allows("gpt-4o-mini") and some.allows("qwen3")
    assert not some.allows("qwen3:8b") and not some.allows("claude-sonnet-4")
    assert every.models is None and every.allows("anything")


async def test_names_are_unique_and_values_are_checked(keys: KeyStore) -> None:
    await keys.create("dup")
    with pytest.raises(ConflictError, match="a key named 'dup' exists"):
        await keys.create("dup")
    with pytest.raises(InvalidRequestError, match="rpm must be at least 1"):
        await keys.create("zero", rpm=0)
    with pytest.raises(InvalidRequestError, match="budget_usd"):
        await keys.create("neg", budget_usd=-1)
    with pytest.raises(InvalidRequestError, match="name"):
        await keys.create("   ")
    assert [r.name for r in await keys.list()] == ["dup"]


async def test_revoke_and_the_cache(keys: KeyStore) -> None:
    record, key = await keys.create("soon-gone")
    assert await keys.cached(key) == record
    revoked = await keys.revoke("soon-gone")
    assert revoked.revoked_at is not None
    # The revoking process forgets the key at once ...
    cached = await keys.cached(key)
    assert cached is not None and cached.revoked
    assert (await keys.revoke("soon-gone")).revoked_at == revoked.revoked_at  # idempotent
    with pytest.raises(NotFoundError, match="no key named 'nobody'"):
        await keys.revoke("nobody")


async def test_another_process_sees_a_revoke_once_its_cache_expires(db_url: str) -> None:
    # Two stores on one database stand for two gateway processes.
    admin = await KeyStore.open(db_url)
    # The cache's expiry is the test's to decide, not the clock's: a revoke on a busy
    # machine can take longer than a short cache_s, which then expired before the
    # "still cached" check ran.
    gateway = await KeyStore.open(db_url, cache_s=3600)
    try:
        _, key = await admin.create("shared")
        first = await gateway.cached(key)
        assert first is not None and not first.revoked
        await admin.revoke("shared")
        still = await gateway.cached(key)
        assert still is not None and not still.revoked  # within cache_s: the cached record
        gateway.cache_s = 0.2  # the cached record is now past its time

        async def revoked() -> bool:
            now = await gateway.cached(key)
            return now is not None and now.revoked

        await until(revoked, "the revoke reaching the other store")
    finally:
        await admin.close()
        await gateway.close()


# -- the CLI --------------------------------------------------------------------------


def test_cli_create_list_revoke(db_url: str) -> None:
    runner = CliRunner()
    limits = ["--rpm", "3", "--budget-usd", "2.5", "--models", "qwen*", "--models", "gpt-4o"]
    created = runner.invoke(cli, ["keys", "create", "ci", *limits, "--db", db_url])
    assert created.exit_code == 0, created.output
    key = created.stdout.strip()
    assert KEY_SHAPE.match(key), created.stdout  # the key alone on stdout
    assert "'ci'" in created.stderr and "rpm 3" in created.stderr
    assert key not in created.stderr

    listed = runner.invoke(cli, ["keys", "list", "--db", db_url])
    assert listed.exit_code == 0, listed.output
    assert key not in listed.output
    header, row = listed.stdout.splitlines()
    assert header.split()[:3] == ["NAME", "PREFIX", "LIMITS"]
    assert row.startswith("ci ") and key[:12] in row and "rpm 3" in row and "$2.5" in row
    assert row.rstrip().endswith("-")  # not revoked

    as_json = runner.invoke(cli, ["keys", "list", "--json", "--db", db_url])
    (view,) = orjson.loads(as_json.stdout)
    assert view["name"] == "ci" and view["models"] == ["qwen*", "gpt-4o"] and "key" not in view

    revoked = runner.invoke(cli, ["keys", "revoke", "ci", "--db", db_url])
    assert revoked.exit_code == 0 and "revoked key 'ci'" in revoked.stdout
    (view,) = orjson.loads(runner.invoke(cli, ["keys", "list", "--json", "--db", db_url]).stdout)
    assert view["revoked_at"] is not None

    again = runner.invoke(cli, ["keys", "create", "ci", "--db", db_url])
    assert again.exit_code == 1 and "a key named 'ci' exists" in again.stderr
    missing = runner.invoke(cli, ["keys", "revoke", "nobody", "--db", db_url])
    assert missing.exit_code == 1 and "no key named 'nobody'" in missing.stderr
    bad = runner.invoke(cli, ["keys", "create", "x", "--rpm", "0", "--db", db_url])
    assert bad.exit_code == 2 and "--rpm" in bad.stderr


def test_cli_reads_the_database_from_the_environment(tmp_path: Path) -> None:
    db = tmp_path / "keys.db"
    runner = CliRunner(env={"LLMBRIDGE_DB": str(db)})
    assert runner.invoke(cli, ["keys", "create", "env"]).exit_code == 0
    assert db.exists()
    assert "env " in runner.invoke(cli, ["keys", "list"]).stdout


async def test_requests_that_find_an_entry_expired_share_one_query(keys: KeyStore) -> None:
    _, key = await keys.create("busy")
    queries: list[str] = []

    def seen(conn: object, cursor: object, statement: str, *args: object) -> None:
        if "api_keys" in statement:
            queries.append(statement)

    event.listen(keys.engine.sync_engine, "before_cursor_execute", seen)
    try:
        # Unseen (within the bucket of unseen keys), then seen and expired: each time,
        # the requests at once ask one query.
        for at_once, cache_s in ((10, 60.0), (32, 0.0)):
            keys.cache_s = cache_s
            before = len(queries)
            records = await asyncio.gather(*(keys.cached(key) for _ in range(at_once)))
            assert [record.name if record else None for record in records] == ["busy"] * at_once
            assert len(queries) - before == 1
        keys.cache_s = 60.0
        before = len(queries)
        assert (await keys.cached(key)) is not None
        assert len(queries) == before  # fresh: answered from the cache
    finally:
        event.remove(keys.engine.sync_engine, "before_cursor_execute", seen)


async def test_a_waiter_cancelled_leaves_the_query_to_the_others(keys: KeyStore) -> None:
    _, key = await keys.create("patient")
    first = asyncio.ensure_future(keys.cached(key))
    second = asyncio.ensure_future(keys.cached(key))
    await asyncio.sleep(0)  # both are waiting on the one query
    first.cancel()
    record = await second
    assert record is not None and record.name == "patient"
    with pytest.raises(asyncio.CancelledError):
        await first

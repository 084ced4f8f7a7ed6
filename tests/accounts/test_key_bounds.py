"""What a key may hold, refused alike by ``llmbridge keys create``, ``POST /admin/keys``
and the console's form (accounts/key_fields.py), on SQLite and PostgreSQL:

- at most ``MAX_GLOBS`` (256) model globs of at most ``MAX_GLOB_CHARS`` (200)
  characters each: 50,001 globs once made every request of that key take 14 s on the
  event loop;
- a printable name: no control or format character (U+202E, the right-to-left
  override, or U+200B, the zero-width space, make one name look like another);
- a key's globs compiled once, with its record: a request costs no glob compilation
  however many globs a key holds (a key stored before the bound, with 40,000 of them,
  recompiled every one on each request: fnmatch's cache holds 32,768 patterns).
"""

from __future__ import annotations

import asyncio
import fnmatch
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from sqlalchemy import update

from llmbridge.accounts.keys import KeyStore
from llmbridge.backends.scripted import ScriptedBackend
from llmbridge.cli import cli
from llmbridge.store.tables import ApiKeyRow
from llmbridge.web.render import Dialect
from tests.conftest import RunningServer, running_gateway
from tests.console.conftest import MASTER, csrf_of, sign_in
from tests.fuzz.shapes import assert_error_shape

AUTH = {"Authorization": f"Bearer {MASTER}"}
TOO_MANY = [f"model-{i}-*" for i in range(257)]
LONGEST = ["m" * 199 + "*"] * 256
"""The most a key may hold: 256 globs of 200 characters."""
LOOKALIKES = ["rtl\u202eevil", "zero\u200bwidth", "bom\ufeffname", "bell\x07", "sep\u2028line"]


@pytest.fixture
def gateway(db_url: str) -> Iterator[RunningServer]:
    with running_gateway(
        {"scripted": ScriptedBackend("scripted", models=("scripted",))},
        server={"master_key": MASTER},
        agent={"database": db_url},
    ) as server:
        yield server


def _admin_create(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(url + "/admin/keys", headers=AUTH, json=body, timeout=60)


def test_the_admin_api_bounds_a_keys_globs_and_wants_a_printable_name(
    gateway: RunningServer,
) -> None:
    cases = [
        ({"name": "many", "models": TOO_MANY}, "models", "at most 256 globs"),
        ({"name": "long", "models": ["m" * 201]}, "models", "at most 200 characters"),
        ({"name": "hidden", "models": ["gpt\u200b-4o"]}, "models", "U+200B"),
        *(({"name": name}, "name", "printable") for name in LOOKALIKES),
    ]
    for body, param, said in cases:
        reply = _admin_create(gateway.url, body)
        assert reply.status_code == 400, (body, reply.text)
        message = assert_error_shape(Dialect.OPENAI, 400, reply.content)
        assert reply.json()["error"]["param"] == param and said in message, (body, message)
    assert "U+202E" in _admin_create(gateway.url, {"name": "rtl\u202eevil"}).text
    most = _admin_create(gateway.url, {"name": "most", "models": LONGEST})
    assert most.status_code == 201, most.text
    assert most.json()["models"] == LONGEST
    names = [k["name"] for k in httpx.get(gateway.url + "/admin/keys", headers=AUTH).json()["data"]]
    assert names == ["most"]


def test_the_console_form_refuses_them_too(gateway: RunningServer) -> None:
    with httpx.Client(base_url=gateway.url, follow_redirects=False, timeout=60) as client:
        sign_in(client)
        token = csrf_of(client.get("/ui/keys"))
        many = client.post(
            "/ui/keys", data={"name": "many", "models": ", ".join(TOO_MANY), "csrf": token}
        )
        assert many.status_code == 400 and "at most 256 globs" in many.text, many.text
        for name in ("rtl\u202eevil", "zero\u200bwidth"):
            shown = client.post("/ui/keys", data={"name": name, "csrf": token})
            assert shown.status_code == 400 and "printable" in shown.text, shown.text
        assert "No keys yet." in client.get("/ui/keys").text


def test_the_cli_refuses_them_too(db_url: str) -> None:
    runner = CliRunner()
    globs = [arg for glob in TOO_MANY for arg in ("--models", glob)]
    many = runner.invoke(cli, ["keys", "create", "many", *globs, "--db", db_url])
    assert many.exit_code == 1 and "at most 256 globs" in many.stderr, many.output
    long = runner.invoke(cli, ["keys", "create", "long", "--models", "m" * 201, "--db", db_url])
    assert long.exit_code == 1 and "at most 200 characters" in long.stderr, long.output
    for name in LOOKALIKES:
        refused = runner.invoke(cli, ["keys", "create", name, "--db", db_url])
        assert refused.exit_code == 1 and "printable" in refused.stderr, refused.output
    listed = runner.invoke(cli, ["keys", "list", "--json", "--db", db_url])
    assert listed.exit_code == 0 and listed.stdout.strip() == "[]"


def test_a_name_stored_before_the_rule_can_still_be_revoked(db_url: str) -> None:
    async def check() -> None:
        keys = await KeyStore.open(db_url)
        try:
            record, _ = await keys.create("plain")
            async with keys._writes() as session, session.begin():
                await session.execute(
                    update(ApiKeyRow).where(ApiKeyRow.id == record.id).values(name="rtl\u202eold")
                )
            assert (await keys.revoke("rtl\u202eold")).revoked
        finally:
            await keys.close()

    asyncio.run(check())


def test_a_keys_globs_are_compiled_once_with_its_cached_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key an older gateway stored with 40,000 globs (before the bound): matching a
    model against them compiles nothing per request."""
    legacy = [f"team-{i}-*" for i in range(40_000)]

    async def looked_up() -> Any:
        keys = await KeyStore.open(tmp_path / "keys.db")
        try:
            record, key = await keys.create("legacy", models=["placeholder"])
            async with keys._writes() as session, session.begin():
                await session.execute(
                    update(ApiKeyRow).where(ApiKeyRow.id == record.id).values(models=legacy)
                )
            return await keys.cached(key)
        finally:
            await keys.close()

    record = asyncio.run(looked_up())
    translated: list[str] = []
    original = fnmatch.translate
    monkeypatch.setattr(fnmatch, "translate", lambda p: translated.append(p) or original(p))
    for _ in range(3):  # three requests of that key
        assert record.allows("team-39999-large")
        assert not record.allows("other-model")
    assert translated == []

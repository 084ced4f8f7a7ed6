"""Keys that are enforced, guessing that costs nothing, inputs refused the same on every
database (accounts/service.py, accounts/keys.py,
web/auth.py, cli/serve.py).

- A database that holds keys turns auth on: ``llmbridge serve --db F`` after ``llmbridge
  keys create demo --rpm 2 --db F`` refuses a request without a key (401), serves the key,
  enforces its rpm, and says so in its banner; ``--no-auth`` runs open on purpose; a first
  key created while a gateway runs turns auth on (and the ledger) within the cache time.
- Wrong keys cost the database one query per cache time, not one per request.
- ``?%6Bey=KEY`` authenticates as ``?key=`` does, and is redacted from the access log.
- NUL in a name, a limit past 2^31 - 1, an empty glob: the same 400 (and CLI error) on
  SQLite and PostgreSQL.
- A key lookup that raises is answered in the caller's dialect with its status.
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from click.testing import CliRunner
from sqlalchemy import event
from starlette.applications import Starlette

from llmbridge.accounts.keys import KeyStore
from llmbridge.backends.scripted import ScriptedBackend
from llmbridge.cli import cli
from llmbridge.core.errors import ServiceUnavailableError
from llmbridge.gateway.app import create_app, http_protocol
from llmbridge.gateway.config import GatewayConfig
from llmbridge.web.render import Dialect
from tests.conftest import RunningServer, anthropic_client, openai_client
from tests.fuzz.shapes import assert_error_shape
from tests.waiting import serving, wait_until

STATIC = "sk-static-0123456789"
MASTER = "sk-master-0123456789"
HI = [{"role": "user", "content": "hi"}]


def _create_key(database: str, name: str, *limits: str) -> str:
    """``llmbridge keys create`` as an operator runs it: the key alone on stdout."""
    created = CliRunner().invoke(cli, ["keys", "create", name, *limits, "--db", database])
    assert created.exit_code == 0, created.output
    return created.stdout.strip()


@contextmanager
def _gateway(
    database: str, *, cache_s: float = 5.0, **server: Any
) -> Iterator[tuple[RunningServer, Starlette]]:
    """The gateway on ``database`` over a scripted backend, its key cache lasting
    ``cache_s`` (the tests' stand-in for 5 s, so nothing sleeps long)."""
    config = GatewayConfig.model_validate(
        {
            "backends": {"scripted": {"type": "scripted"}},
            "default_backend": "scripted",
            "server": server,
            "agent": {"database": database, "enabled": False},
        }
    )
    app = create_app(config, backends={"scripted": ScriptedBackend("scripted")})
    app.state.accounts.cache_s = cache_s  # read when the key store opens, in the lifespan
    with RunningServer(app, http=http_protocol(app)) as running:
        yield running, app


def _chat(url: str, key: str) -> Any:
    return openai_client(url, key).chat.completions.create(model="scripted", messages=HI)


# -- item 1: database keys are enforced ----------------------------------------------------


@contextmanager
def _serve(tmp_path: Path, *args: str) -> Iterator[tuple[str, list[str]]]:
    """A real ``llmbridge serve`` subprocess (scripted backend, access log on): its base
    URL, and its output (whole once the block ends: the process has stopped)."""
    config = tmp_path / "llmbridge.yaml"
    config.write_text("backends: {scripted: {type: scripted}}\ndefault_backend: scripted\n")
    sock = RunningServer.reserve()
    port = sock.getsockname()[1]
    sock.close()
    command = [sys.executable, "-m", "llmbridge", "serve", "--config", str(config)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--access-log", *args]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path
    )
    output: list[str] = []
    try:
        base = f"http://127.0.0.1:{port}"
        serving(base, process)
        yield base, output
    finally:
        process.terminate()
        output.extend(process.communicate(timeout=30)[0].splitlines())


def test_a_database_with_keys_turns_auth_on_and_enforces_them(tmp_path: Path) -> None:
    database = str(tmp_path / "keys.db")
    key = _create_key(database, "demo", "--rpm", "2")
    gemini = _create_key(database, "gemini")
    with _serve(tmp_path, "--db", database) as (base, output):
        with pytest.raises(openai.AuthenticationError):
            _chat(base, "no-key-at-all")
        with pytest.raises(openai.AuthenticationError):
            _chat(base, "llmb-" + secrets.token_urlsafe(32))
        # Anthropic's client too: the 401 is in the caller's dialect.
        with pytest.raises(anthropic.AuthenticationError):
            anthropic_client(base, "no-key").messages.create(
                model="scripted", max_tokens=16, messages=HI
            )
        assert _chat(base, key).choices[0].message.content
        assert _chat(base, key).choices[0].message.content
        with pytest.raises(openai.RateLimitError):
            _chat(base, key)  # rpm 2

        # Item 12: a percent-encoded name is the same parameter to the auth ...
        listed = httpx.get(base + "/v1beta/models?monkey=1&%6Bey=" + gemini)
        assert listed.status_code == 200, listed.text
        alone = httpx.get(base + "/v1beta/models?%6b%65%79=" + gemini)
        assert alone.status_code == 200, alone.text
    # ... and to the access log's redaction.
    text = "\n".join(output)
    assert gemini not in text and key not in text
    logged = [line for line in output if "/v1beta/models" in line]
    assert len(logged) == 2, output
    assert "?monkey=1&%6Bey=REDACTED" in logged[0] and '" 200' in logged[0], logged
    assert "?%6b%65%79=REDACTED" in logged[1], logged
    (banner,) = [line for line in output if line.startswith("  auth:")]
    assert f"on: 2 database keys ({database})" in banner, banner


def test_the_banner_counts_static_keys_and_hides_a_database_password(tmp_path: Path) -> None:
    from llmbridge.accounts.service import auth_summary

    line = auth_summary(
        auth=None,
        static_keys=1,
        master_key=True,
        database_keys=3,
        database="postgresql://llmbridge:s3cret@db/llmbridge",
    )
    assert line.startswith("on: 3 database keys (postgresql://llmbridge:***@db/llmbridge)")
    assert "1 static key" in line and "s3cret" not in line


def test_no_auth_runs_open_on_purpose(tmp_path: Path) -> None:
    database = str(tmp_path / "keys.db")
    _create_key(database, "demo", "--rpm", "1")
    with _serve(tmp_path, "--db", database, "--no-auth") as (base, output):
        for _ in range(3):  # no key, and no rpm: the database's keys are not read
            assert _chat(base, "anything").choices[0].message.content
    (banner,) = [line for line in output if line.startswith("  auth:")]
    assert "off on purpose" in banner and "--no-auth" in banner, banner


def test_no_auth_with_static_keys_is_a_configuration_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["serve", "--no-auth", "--api-key", STATIC, "--port", "1"])
    assert result.exit_code == 1 and "--no-auth" in result.output, result.output


def test_the_first_key_created_while_running_turns_auth_and_the_ledger_on(
    tmp_path: Path,
) -> None:
    database = str(tmp_path / "gateway.db")
    with _gateway(database, cache_s=0.2) as (server, app):
        assert _chat(server.url, "anything").choices[0].message.content  # open: no keys
        assert app.state.gateway.ledger is None
        key = _create_key(database, "first")  # another process, as an operator would

        def refused() -> bool:  # the gateway looks again every 0.2 s
            try:
                _chat(server.url, "anything")
            except openai.AuthenticationError:
                return True
            return False

        wait_until(refused, "the first database key turning auth on")
        assert _chat(server.url, key).choices[0].message.content
        wait_until(  # opened right after auth turned on
            lambda: app.state.gateway.ledger is not None, "the ledger started with the first key"
        )
        # Revoking every key does not open the gateway again.
        assert CliRunner().invoke(cli, ["keys", "revoke", "first", "--db", database]).exit_code == 0
        with pytest.raises(openai.AuthenticationError):
            _chat(server.url, "anything")


# -- item 10: guessing costs nothing ----------------------------------------------------------


class _KeyQueries:
    """Statements on ``api_keys`` an engine sends (a real count, from SQLAlchemy's event)."""

    def __init__(self, store: KeyStore) -> None:
        self.count = 0
        self._lock = threading.Lock()
        event.listen(store.engine.sync_engine, "before_cursor_execute", self._seen)

    def _seen(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "api_keys" in statement:
            with self._lock:
                self.count += 1


def test_wrong_keys_cost_one_query_per_cache_time(db_url: str) -> None:
    async def create() -> str:
        store = await KeyStore.open(db_url)
        try:
            return (await store.create("real"))[1]
        finally:
            await store.close()

    key = asyncio.run(create())
    guesses = ["llmb-" + secrets.token_urlsafe(32) for _ in range(40)]
    # cache_s 60: nothing expires during the test, however loaded the machine.
    with (
        _gateway(db_url, cache_s=60, master_key=MASTER) as (server, app),
        httpx.Client() as client,
    ):
        store = app.state.accounts.keys
        queries = _KeyQueries(store)

        def refused(guesses: list[str]) -> None:
            for guess in guesses:
                reply = client.get(server.url + "/v1/models", headers={"x-api-key": guess})
                assert reply.status_code == 401
                assert "invalid API key" in assert_error_shape(Dialect.OPENAI, 401, reply.content)

        for _ in range(2):
            refused(guesses)
            for _ in range(20):
                served = client.get(server.url + "/v1/models", headers={"x-api-key": key})
                assert served.status_code == 200
        # Each wrong key at most once (its absence is cached), the real key's row once,
        # the directory at most once: never one query per request (40 * 2 + 40).
        assert queries.count <= len(guesses) + 2, queries.count

        # A flood of different keys: past the bucket, the directory answers.
        store.miss_burst, store.miss_rate = 5, 0.0  # no refill: nothing depends on time
        before = queries.count
        refused(["llmb-" + secrets.token_urlsafe(32) for _ in range(200)])
        assert queries.count - before <= 5 + 1, queries.count - before  # bucket + directory


def test_during_a_flood_a_new_key_works_within_the_cache_time(db_url: str) -> None:
    with _gateway(db_url, cache_s=0.3, master_key=MASTER) as (server, app):
        store = app.state.accounts.keys
        store.miss_burst, store.miss_rate = 0, 0.0  # as in a flood: the directory decides
        guess = "llmb-" + secrets.token_urlsafe(32)
        with pytest.raises(openai.AuthenticationError):
            _chat(server.url, guess)  # the directory is read now, without the key below
        key = _create_key(db_url, "late")

        def accepted() -> bool:  # the directory is read again after 0.3 s
            try:
                return bool(_chat(server.url, key).choices[0].message.content)
            except openai.AuthenticationError:
                return False

        wait_until(accepted, "a key created after a miss being accepted")


# -- item 12: the same answer on SQLite and PostgreSQL ------------------------------------


def test_values_postgresql_refuses_are_refused_alike(db_url: str) -> None:
    with _gateway(db_url, master_key=MASTER) as (server, _):
        cases = [
            ({"name": "nul\x00name"}, "name", "control characters"),
            ({"name": "x", "rpm": 2**31}, "rpm", "2147483647"),
            ({"name": "x", "tpm": 2**40}, "tpm", "2147483647"),
            ({"name": "x", "max_parallel": 2**31}, "max_parallel", "2147483647"),
            ({"name": "x", "models": [""]}, "models", "empty glob"),
            ({"name": "x", "models": ["qwen*", " "]}, "models", "empty glob"),
            ({"name": "x", "models": []}, "models", "no model"),
            ({"name": "x", "models": ["a\x00b"]}, "models", "control characters"),
        ]
        auth = {"Authorization": f"Bearer {MASTER}"}
        for body, field, said in cases:
            reply = httpx.post(server.url + "/admin/keys", headers=auth, json=body)
            assert reply.status_code == 400, (body, reply.text)
            message = assert_error_shape(Dialect.OPENAI, 400, reply.content)
            assert reply.json()["error"]["param"] == field and said in message, (body, message)
        most = {"name": "most", "rpm": 2**31 - 1, "tpm": 2**31 - 1, "max_parallel": 2**31 - 1}
        created = httpx.post(server.url + "/admin/keys", headers=auth, json=most)
        assert created.status_code == 201 and created.json()["rpm"] == 2**31 - 1
        gone = httpx.delete(server.url + "/admin/keys/nul%00name", headers=auth)
        assert gone.status_code == 404, gone.text
        listed = httpx.get(server.url + "/admin/keys", headers=auth).json()["data"]
        assert [k["name"] for k in listed] == ["most"]


def test_the_cli_refuses_them_too(db_url: str) -> None:
    runner = CliRunner()
    empty = runner.invoke(cli, ["keys", "create", "e", "--models", "", "--db", db_url])
    assert empty.exit_code == 1 and "empty glob" in empty.stderr, empty.output
    nul = runner.invoke(cli, ["keys", "create", "n\x00ul", "--db", db_url])
    assert nul.exit_code == 1 and "control characters" in nul.stderr, nul.output
    big = runner.invoke(cli, ["keys", "create", "b", "--rpm", str(2**31), "--db", db_url])
    assert big.exit_code == 2 and "2147483647" in big.stderr, big.output
    listed = runner.invoke(cli, ["keys", "list", "--json", "--db", db_url])
    assert listed.exit_code == 0 and listed.stdout.strip() == "[]"


# -- coordination: a lookup that raises ----------------------------------------------------


def test_a_key_lookup_that_raises_is_answered_in_the_callers_dialect(tmp_path: Path) -> None:
    database = str(tmp_path / "gateway.db")
    key = _create_key(database, "frozen")
    with _gateway(database, master_key=MASTER) as (server, app):
        keys = app.state.accounts.keys

        async def frozen(presented: str) -> None:
            raise ServiceUnavailableError("the key database is unavailable")

        keys.cached = frozen
        with pytest.raises(openai.InternalServerError) as caught:
            _chat(server.url, key)
        assert caught.value.status_code == 503 and "unavailable" in caught.value.message
        with pytest.raises(anthropic.InternalServerError) as anthropic_caught:
            anthropic_client(server.url, key).messages.create(
                model="scripted", max_tokens=16, messages=HI
            )
        assert anthropic_caught.value.status_code == 503
        ollama = httpx.post(server.url + "/api/chat", headers={"x-api-key": key}, json={})
        assert_error_shape(Dialect.OLLAMA, 503, ollama.content)
        gemini = httpx.get(server.url + "/v1beta/models", headers={"x-goog-api-key": key})
        assert_error_shape(Dialect.GEMINI, 503, gemini.content)

        async def broken(presented: str) -> None:
            raise RuntimeError("a bug, not an answer")

        keys.cached = broken
        reply = httpx.post(
            server.url + "/v1/chat/completions",
            headers={"Authorization": f"Bearer {key}"},
            json={"model": "scripted", "messages": HI},
        )
        assert "RuntimeError" in assert_error_shape(Dialect.OPENAI, 503, reply.content)


def test_the_access_log_reads_a_query_as_the_auth_does() -> None:
    """Every spelling of ``key`` the auth reads is redacted; other names are kept."""
    import logging

    from llmbridge.cli.serve import RedactQueryKeys
    from llmbridge.web.auth import query_key

    target = "/v1beta/models?monkey=1&%6Bey=ONE&k%65y=TWO&key=THREE&a+key=kept&keys=kept"
    assert query_key(target.partition("?")[2]) == "THREE"
    assert query_key("monkey=1&%6Bey=ONE") == "ONE" and query_key("%6b%65%79=x+y") == "x y"
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:50000", "GET", target, "1.1", 200),
        None,
    )
    assert RedactQueryKeys().filter(record)
    line = record.getMessage()
    assert not any(secret in line for secret in ("ONE", "TWO", "THREE")), line
    assert "%6Bey=REDACTED&k%65y=REDACTED&key=REDACTED&a+key=kept&keys=kept" in line, line

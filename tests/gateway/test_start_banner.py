"""What a person sees first: ``llmbridge serve`` as ``make run`` starts it (no flags, the
embedded model, a fresh home) prints its banner and little else before it serves.

The real command runs as a subprocess with its output in a file; the lines before
uvicorn says it is listening are what a newcomer reads. They name every client API with
the base URL its clients take, say the database in one line (never the migration tool's
own lines), and, with a master key, where the console is.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from llmbridge.cli.serve import CLIENT_APIS, _banner
from llmbridge.gateway.config import GatewayConfig
from llmbridge.store.migrate import head_revision
from tests.conftest import RunningServer
from tests.waiting import scaled, wait_until

MAX_LINES = 20
LISTENING = "Uvicorn running on"
FIVE_APIS = (
    "Ollama API",
    "OpenAI chat, completions",
    "OpenAI Responses",
    "Anthropic API",
    "Gemini API",
)


@contextmanager
def started(home: Path, *args: str) -> Iterator[tuple[str, list[str]]]:
    """``llmbridge serve`` with a fresh home (its database there), running until the
    block ends: its base URL and the lines it printed before it was listening."""
    sock = RunningServer.reserve()
    port = sock.getsockname()[1]
    sock.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMBRIDGE_")}
    env |= {"HOME": str(home), "XDG_DATA_HOME": str(home / "data")}
    env["LLMBRIDGE_EMBEDDED_THREADS"] = "1"  # loads the model; never generates here
    log = home / "serve.log"
    command = [sys.executable, "-m", "llmbridge", "serve", "--port", str(port), *args]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:

        def listening() -> bool:
            assert process.poll() is None, log.read_text(errors="replace")
            return LISTENING in log.read_text(errors="replace")

        wait_until(listening, "llmbridge serve listening")
        lines = log.read_text(errors="replace").splitlines()
        before = lines[: next(i for i, line in enumerate(lines) if LISTENING in line) + 1]
        yield f"http://127.0.0.1:{port}", before
    finally:
        process.terminate()
        try:
            process.wait(timeout=scaled(60))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=scaled(60))


def _check_banner(base: str, lines: list[str], database: str) -> None:
    text = "\n".join(lines)
    assert len(lines) <= MAX_LINES, f"{len(lines)} lines before serving:\n{text}"
    paths = {name: path for name, path, _ in CLIENT_APIS}
    for name in FIVE_APIS:
        (line,) = [line for line in lines if line.strip().startswith(name)]
        assert f"{base}{paths[name]} " in line, line
    assert not [line for line in lines if "alembic" in line.lower()], text
    (said,) = [line for line in lines if "database: " in line]
    assert f"database: sqlite:///{database}" in said, said
    assert f"schema {head_revision()}" in said, said


def test_a_default_start_is_the_banner_and_one_database_line(tmp_path: Path) -> None:
    database = tmp_path / "data" / "llmbridge"
    with started(tmp_path) as (base, lines):
        _check_banner(base, lines, str(database))
        (said,) = [line for line in lines if "database: " in line]
        assert f"database: sqlite:///{database / 'llmbridge.db'}, " in said, said
        assert said.endswith(", created"), said
        assert "/ui/" not in "\n".join(lines)  # no master key, no console
    with started(tmp_path) as (base, lines):  # the same database, already migrated
        _check_banner(base, lines, str(database))
        (said,) = [line for line in lines if "database: " in line]
        assert said.endswith(", up to date"), said


def test_with_a_master_key_the_banner_says_where_the_console_is(tmp_path: Path) -> None:
    with started(tmp_path, "--master-key", "m" * 32) as (base, lines):
        _check_banner(base, lines, str(tmp_path / "data" / "llmbridge"))
        (console,) = [line for line in lines if "/ui/" in line]
        assert f"{base}/ui/" in console, console
        assert "m" * 32 not in "\n".join(lines)  # the key itself is never printed


def test_a_start_keeps_the_older_default_file_and_names_it(tmp_path: Path) -> None:
    """A home whose data is in ``agent.db`` (the default file before the database had a
    section of its own) and no ``llmbridge.db``: the start uses it, and says so."""
    older = tmp_path / "data" / "llmbridge" / "agent.db"
    older.parent.mkdir(parents=True)
    with sqlite3.connect(older) as db:  # a database of the older name, with data in it
        db.execute("CREATE TABLE kept (note TEXT)")
        db.execute("INSERT INTO kept VALUES ('still here')")
    config = tmp_path / "scripted.yaml"  # no model to load: only the start is looked at
    config.write_text("backends: {scripted: {type: scripted}}\ndefault_backend: scripted\n")
    with started(tmp_path, "--config", str(config)) as (_, lines):
        (said,) = [line for line in lines if "database: " in line]
        assert f"database: sqlite:///{older}, schema {head_revision()}, " in said, said
    assert not (older.parent / "llmbridge.db").exists()
    with sqlite3.connect(older) as db:
        assert db.execute("SELECT note FROM kept").fetchall() == [("still here",)]
        assert db.execute("SELECT count(*) FROM api_keys").fetchone() == (0,)  # migrated


def test_with_mcp_servers_the_banner_names_the_mcp_endpoint() -> None:
    servers = {"files": {"command": ["true"]}, "search": {"url": "http://127.0.0.1:9/mcp"}}
    with_mcp = _banner(GatewayConfig.model_validate({"mcp": {"servers": servers}}), "h", 1, "off")
    (line,) = [line for line in with_mcp.splitlines() if "MCP" in line]
    assert "http://h:1/mcp " in line and "/mcp/<server> (files, search)" in line
    without = _banner(GatewayConfig(), "h", 1, "off")
    assert "/mcp" not in without

"""The agent CLIs' own session ids in the usage ledger: the pinned Claude
Code, Codex and Gemini CLI (tests/e2e/package.json) against a gateway that records
usage in SQLite, each request's ledger row naming the session the CLI sent.

What each sends (seen here, recorded by tests/e2e/recording.py): Claude Code 2.1.330
``x-claude-code-session-id`` on every request; Codex 0.169.0 ``session-id`` (and
``thread-id``, the same id); Gemini CLI 0.61.0 with an API key no session id at all,
so it is given one as a user would, through ``GEMINI_CLI_CUSTOM_HEADERS``
(``x-llmbridge-session-id: ...``). Missing or stale CLIs fail, never skip, as in
tests/e2e.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from tests.conftest import RunningServer
from tests.e2e import cli_harness, test_claude_code, test_codex, test_gemini_cli
from tests.e2e.cli_harness import CliRun, check_installed, failure_report
from tests.e2e.recording import Recorder

ANSWER = ["The session", " is recorded."]


@contextmanager
def _recorded(model: str, database: Path) -> Iterator[tuple[RunningServer, Recorder]]:
    """The recorded gateway (tests/e2e/cli_harness.py) with the usage ledger on."""
    backend = ScriptedBackend("scripted", default=Script(text=ANSWER))
    with cli_harness.recorded_gateway(
        backend,
        model,
        server={"ledger": True},
        agent={"database": str(database), "summaries": False},
    ) as served:
        yield served


def _ledger(database: Path, request_ids: list[str]) -> dict[str, str | None]:
    """``request_id -> session_id`` of the ledger's rows, once every one of
    ``request_ids`` is written (the ledger writes every second): a bounded poll."""
    waited = threading.Event()
    rows: dict[str, str | None] = {}
    for _ in range(150):
        with sqlite3.connect(database) as db:
            rows = dict(db.execute("SELECT request_id, session_id FROM usage").fetchall())
        if all(request_id in rows for request_id in request_ids):
            return rows
        waited.wait(0.1)
    raise AssertionError(f"the ledger has {sorted(rows)}, not all of {request_ids}")


def _check(run: CliRun, recorder: Recorder, database: Path, header: str) -> set[str]:
    """Every model request of ``run`` carried ``header``, and its ledger row names that
    session; the sessions seen."""
    exchanges = [e for e in recorder.exchanges if "x-request-id" in e.response_headers]
    report = failure_report(run, exchanges=[(e.method, e.path, e.status) for e in exchanges])
    assert run.returncode == 0, report
    assert exchanges, report
    rows = _ledger(database, [e.response_headers["x-request-id"] for e in exchanges])
    sessions = set()
    for exchange in exchanges:
        sent = exchange.headers.get(header)
        assert sent, f"{exchange.method} {exchange.path} came without {header}\n{report}"
        assert rows[exchange.response_headers["x-request-id"]] == sent, report
        sessions.add(sent)
    return sessions


def test_claude_codes_session_header_is_in_each_ledger_row(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    claude = test_claude_code._installed(test_claude_code.PINNED, tmp_path_factory)
    database = tmp_path / "ledger.db"
    with _recorded("claude-*", database) as (server, recorder):
        run = test_claude_code.run_claude(claude.path, tmp_path, server.url, ["-p", "Say hi"])
        sessions = _check(run, recorder, database, "x-claude-code-session-id")
    assert len(sessions) == 1  # one run, one session


def test_codexs_session_header_is_in_each_ledger_row(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    check_installed(
        "Codex CLI",
        test_codex.CODEX,
        pinned=f"@openai/codex {test_codex.PINNED}",
        accepts=lambda printed: printed.strip() == f"codex-cli {test_codex.PINNED}",
        env=test_codex._environment(home),
        cwd=home,
    )
    workdir = tmp_path / "work"
    workdir.mkdir()
    database = tmp_path / "ledger.db"
    with _recorded(test_codex.MODEL, database) as (server, recorder):
        run = test_codex.run_codex(test_codex.CODEX, home, workdir, server.url, ["Say hi"])
        (session,) = _check(run, recorder, database, "session-id")
    # Codex's session header is its conversation's id, its prompt_cache_key too.
    assert all(e.body()["prompt_cache_key"] == session for e in recorder.exchanges)


def test_gemini_clis_custom_session_header_is_in_each_ledger_row(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    check_installed(
        "Gemini CLI",
        test_gemini_cli.GEMINI,
        pinned=f"@google/gemini-cli {test_gemini_cli.PINNED}",
        accepts=lambda printed: printed.strip() == test_gemini_cli.PINNED,
        env=test_gemini_cli._environment(home, "http://127.0.0.1:9"),
        cwd=home,
    )
    workdir = tmp_path / "work"
    workdir.mkdir()
    database = tmp_path / "ledger.db"
    with _recorded(test_gemini_cli.MODEL, database) as (server, recorder):
        run = test_gemini_cli.run_gemini(
            test_gemini_cli.GEMINI,
            home,
            workdir,
            server.url,
            ["-p", "Say hi"],
            test_gemini_cli._settings(),
            GEMINI_CLI_CUSTOM_HEADERS="x-llmbridge-session-id: gemini-run-42",
        )
        sessions = _check(run, recorder, database, "x-llmbridge-session-id")
    assert sessions == {"gemini-run-42"}

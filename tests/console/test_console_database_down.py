"""The console on a database that is down: a real PostgreSQL frozen for real (SIGSTOP on
every process of it, tests/agent/postgres_faults.py), a real gateway on loopback, short
deadlines set in the database URL as an operator sets them (store/engine.py).

Every page that reads the database answers the console's "database unavailable" page
(503, HTML, its security headers) once the deadline passes, never a 500; the request
list's 2-second poll gets its 503 fragment; the log says so once for the outage (not
once per poll, and no traceback), and once more when the database answers again.
Each wait is bounded generously so a hang fails the test; no timing is asserted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import pytest

from llmbridge.backends.scripted import ScriptedBackend
from tests.agent.postgres_faults import SHORT_DEADLINES, frozen
from tests.conftest import RunningServer, running_gateway
from tests.console.conftest import MASTER, sign_in
from tests.console.test_console_hardening import _is_console_page
from tests.servers import PostgresServer
from tests.waiting import scaled, wait_until

PAGES = (
    "/ui/",
    "/ui/requests",
    "/ui/requests/req_123",
    "/ui/sessions",
    "/ui/sessions/one-session",
    "/ui/keys",
)


def frozen_console(url: str) -> Iterator[RunningServer]:
    with running_gateway(
        {"scripted": ScriptedBackend("scripted", models=("scripted",))},
        server={"master_key": MASTER},
        agent={"database": f"{url}?{SHORT_DEADLINES}", "enabled": False},
    ) as server:
        yield server


@pytest.fixture
def gateway(pg_url: str) -> Iterator[RunningServer]:
    yield from frozen_console(pg_url)


def test_pages_on_a_frozen_database_are_the_unavailable_page_said_once_in_the_log(
    gateway: RunningServer, postgres_server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with httpx.Client(base_url=gateway.url, follow_redirects=False, timeout=scaled(120)) as client:
        sign_in(client)
        for path in PAGES[:2]:
            assert client.get(path).status_code == 200, path
        caplog.clear()
        with frozen(postgres_server):
            for path in PAGES:
                page = client.get(path)
                assert page.status_code == 503, (path, page.status_code, page.text[:300])
                _is_console_page(page)
                assert "The database is unavailable" in page.text, path
                assert "did not answer in time" in page.text or "no connection" in page.text
            for _ in range(5):  # the request list's polls
                rows = client.get("/ui/requests/rows")
                assert rows.status_code == 503
                assert "database is unavailable" in rows.text and "<tr" in rows.text
            during = list(caplog.records)
        wait_until(
            lambda: client.get("/ui/requests").status_code == 200, "the console answering again"
        )
        for path in PAGES[:2]:
            assert client.get(path).status_code == 200, path
    tracebacks = [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert tracebacks == [], [r.getMessage() for r in tracebacks]
    said = [r.getMessage() for r in during if "unavailable" in r.getMessage()]
    assert len(said) == 1, said
    assert "console" in said[0] and "503" in said[0]
    back = [m for r in caplog.records if "database answers again" in (m := r.getMessage())]
    assert len(back) == 1, back

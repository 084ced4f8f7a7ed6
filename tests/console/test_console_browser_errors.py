"""The console's error pages and sign-out as a person's browser meets them: Playwright
for Python driving Debian's Chromium (``/usr/bin/chromium``) against a real gateway.

- A page that does not exist, a filter out of range, a bug in a page: each is the
  console's own page (its stylesheet, its navigation, a heading saying what happened),
  with no Content-Security-Policy violation in the browser's console.
- Signing out: the button ends the session, and a copy of its cookie taken before
  (another browser given it) opens nothing.
- The database frozen under an open request list (real PostgreSQL, SIGSTOP): the
  polled table says the database is unavailable, a reload is the 503 page, and the
  table comes back once the database answers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llmbridge.accounts import request_log
from llmbridge.gateway.console.session import COOKIE
from tests.agent.postgres_faults import frozen
from tests.conftest import RunningServer
from tests.console.conftest import CHROMIUM, console_gateway, type_master_key
from tests.console.test_console_browser import WAIT_MS, _watched
from tests.console.test_console_database_down import frozen_console
from tests.servers import PostgresServer

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="Chromium is not installed (make chromium installs Debian's, as make test does)",
)

sync_api = pytest.importorskip("playwright.sync_api")


def _sign_in(page: Any, url: str) -> None:
    page.goto(url + "/ui/sign-in")
    type_master_key(page, WAIT_MS)
    page.wait_for_url("**/ui/", timeout=WAIT_MS)


def _violations(errors: list[str]) -> list[str]:
    """The console errors that are not the failed load of the page itself (Chromium
    logs 'Failed to load resource' for every 4xx and 5xx, the error pages' own)."""
    return [e for e in errors if not e.startswith("Failed to load resource")]


def _styled(page: Any) -> bool:
    """Whether the console's stylesheet applied (its header bar is a flex box)."""
    return bool(
        page.evaluate("getComputedStyle(document.querySelector('header')).display") == "flex"
    )


def test_error_pages_are_the_consoles_own_and_signing_out_ends_the_session(
    browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with console_gateway(tmp_path) as gateway:
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        errors = _watched(page)

        missing = page.goto(gateway.url + "/ui/nonexistent")
        assert missing is not None and missing.status == 404
        assert page.locator("h1").inner_text() == "Not found"
        assert "/ui/nonexistent" in page.locator("main").inner_text()
        assert _styled(page)

        _sign_in(page, gateway.url)
        bad = page.goto(gateway.url + "/ui/requests?status=99999999999999999999999")
        assert bad is not None and bad.status == 400
        assert page.locator("h1").inner_text() == "Bad request"
        assert "status" in page.locator("main").inner_text()
        assert page.locator("nav a", has_text="Requests").count() == 1  # still signed in

        async def broken(*args: object, **kwargs: object) -> object:
            raise RuntimeError("an injected bug")

        monkeypatch.setattr(request_log, "sessions", broken)
        failed = page.goto(gateway.url + "/ui/sessions")
        assert failed is not None and failed.status == 500
        assert page.locator("h1").inner_text() == "Internal error"
        assert _styled(page)
        monkeypatch.undo()

        copied = [c for c in context.cookies() if c["name"] == COOKIE]
        assert len(copied) == 1
        page.goto(gateway.url + "/ui/keys")
        page.click("text=Sign out")
        page.wait_for_url("**/ui/sign-in", timeout=WAIT_MS)
        assert _violations(errors) == []

        # Another browser given the cookie as it was before signing out: nothing opens.
        thief = browser.new_context()
        thief.add_cookies(copied)
        stolen = thief.new_page()
        stolen.goto(gateway.url + "/ui/keys")
        assert stolen.url.endswith("/ui/sign-in")
        thief.close()
        context.close()


def test_the_request_list_says_when_the_database_is_down(
    browser: Any, pg_url: str, postgres_server: PostgresServer
) -> None:
    for gateway in frozen_console(pg_url):
        _database_down_in_the_browser(browser, gateway, postgres_server)


def _database_down_in_the_browser(
    browser: Any, gateway: RunningServer, postgres_server: PostgresServer
) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    errors = _watched(page)
    _sign_in(page, gateway.url)
    page.goto(gateway.url + "/ui/requests")
    rows = page.locator("#rows")
    assert "No requests" in rows.inner_text()
    with frozen(postgres_server):
        # The next polls (every 2 s) get the 503 fragment: the table says why.
        page.locator("#rows td.error").wait_for(timeout=WAIT_MS)
        assert "database is unavailable" in rows.inner_text()
        shown = page.reload(timeout=WAIT_MS)
        assert shown is not None and shown.status == 503
        assert page.locator("h1").inner_text() == "The database is unavailable"
        assert _styled(page)
    page.goto(gateway.url + "/ui/requests")
    page.locator("#rows td.empty").wait_for(timeout=WAIT_MS)
    assert _violations(errors) == []
    page.close()

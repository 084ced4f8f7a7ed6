"""The console in a real browser: Playwright for Python driving Debian's Chromium
(``/usr/bin/chromium``; no browser is downloaded) against a real gateway.

An operator signs in (with the keyboard), creates a key, and a client sends a request
with that key through the official openai client; the request appears in the live log
(htmx polls it: the wait is bounded, on the row appearing) with its tokens and cost;
its detail page shows every column; the key is revoked, and the API then refuses it.
Screenshots are decoded and checked for what they must show (the bars of the charts,
the colours of the light and dark themes); the browser's console holds no error (a
Content-Security-Policy violation is one); at phone width (390 px) nothing overflows
sideways.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.response import Usage
from tests.conftest import RunningServer, running_gateway
from tests.console.conftest import CHROMIUM, MASTER, type_master_key
from tests.profiler.test_report_browser import _pixels, _rgb
from tests.waiting import scaled

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="Chromium is not installed (make chromium installs Debian's, as make test does)",
)

sync_api = pytest.importorskip("playwright.sync_api")

USAGE = Usage(input_tokens=1234, output_tokens=567, cache_read_input_tokens=200)
"""What the scripted backend reports: 1,234 in (200 cached), 567 out."""
PRICES = {"scripted": {"input": 3.0, "output": 15.0}}
COST = "$0.012207"
"""1,234 x $3 + 567 x $15, per million tokens (cached input costs ``input``)."""
WAIT_MS = scaled(30) * 1000
"""The bound on a wait for the page (a row appearing): a hang stopper, not a timing."""
LIGHT_BAR, DARK_BAR, DARK_BG = _rgb("#3b82c4"), _rgb("#4c9be8"), _rgb("#0d1117")


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[RunningServer]:
    backend = ScriptedBackend("scripted", default=Script(usage=USAGE), models=("scripted",))
    with running_gateway(
        {"scripted": backend},
        server={"master_key": MASTER},
        agent={"database": str(tmp_path / "llmbridge.db")},
        prices=PRICES,
    ) as server:
        yield server


def _watched(page: Any) -> list[str]:
    """The page's console errors and uncaught exceptions, as they happen."""
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return errors


def _colours(page: Any) -> set[tuple[int, int, int]]:
    return _pixels(page.screenshot(full_page=False))[2]


def _no_overflow(page: Any) -> None:
    overflow = page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0, f"{page.url} is {overflow} px wider than the phone"


def _ask(url: str, key: str) -> openai.types.chat.ChatCompletion:
    client = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=30)
    with client:
        return client.chat.completions.create(
            model="scripted",
            messages=[{"role": "user", "content": "hello"}],
            extra_headers={"x-llmbridge-session-id": "console-test-session"},
        )


def test_an_operator_signs_in_creates_a_key_sees_its_request_and_revokes_it(
    gateway: RunningServer, browser: Any, tmp_path: Path
) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    errors = _watched(page)

    page.goto(gateway.url + "/ui/")
    assert page.url.endswith("/ui/sign-in")  # no session: the sign-in page
    type_master_key(page, WAIT_MS)  # the key field has the focus
    page.wait_for_url("**/ui/", timeout=WAIT_MS)
    assert page.locator("h1").inner_text() == "Overview"
    assert page.evaluate("document.cookie") == ""  # HttpOnly: no script sees it
    assert page.evaluate("localStorage.length") == 0

    page.goto(gateway.url + "/ui/keys")
    page.fill("input[name=name]", "browser-key")
    page.fill("input[name=rpm]", "100")
    page.click("text=Create key")
    key = page.locator("#new-key").inner_text().strip()
    assert key.startswith("llmb-")
    assert page.url.endswith("/ui/keys")  # a POST's answer: the key is in no URL

    reply = _ask(gateway.url, key)
    assert reply.usage is not None and reply.usage.prompt_tokens == 1234

    page.goto(gateway.url + "/ui/requests")
    row = page.locator("#rows tr", has_text="browser-key")
    row.wait_for(timeout=WAIT_MS)  # the ledger flushes within a second; htmx polls
    text = row.inner_text()
    for shown in ("scripted", "200", "1,234", "567", "200 /", COST, "openai", "/v1/chat/"):
        assert shown in text, (shown, text)
    shot = _colours(page)
    assert _rgb("#1a7f37") in shot  # the status in the "good" colour

    row.locator("a").first.click()
    page.wait_for_url("**/ui/requests/*", timeout=WAIT_MS)
    detail = page.locator("main").inner_text()
    for shown in ("browser-key", "Model served", "1,234", "567", COST, "Trace id", "Bodies"):
        assert shown in detail, shown

    page.goto(gateway.url + "/ui/")
    assert LIGHT_BAR in _colours(page)  # the overview's charts were drawn
    page.emulate_media(color_scheme="dark")
    dark = _colours(page)
    assert DARK_BG in dark and DARK_BAR in dark
    page.emulate_media(color_scheme="light")

    page.goto(gateway.url + "/ui/sessions")
    page.click("text=console-test-session")
    assert "1. scripted" in page.locator("svg.timeline").inner_html()

    page.goto(gateway.url + "/ui/backends")
    assert "closed" in page.locator("main").inner_text()

    page.goto(gateway.url + "/ui/keys")
    page.click("button[aria-label='Revoke browser-key']")
    page.wait_for_url("**/ui/keys", timeout=WAIT_MS)
    assert "revoked" in page.locator("tr", has_text="browser-key").inner_text()
    with pytest.raises(openai.AuthenticationError):
        _ask(gateway.url, key)

    # Phone width: every page fits, the tables scroll inside their own box.
    page.set_viewport_size({"width": 390, "height": 844})
    for path in ("/ui/", "/ui/requests", "/ui/sessions", "/ui/keys", "/ui/backends"):
        page.goto(gateway.url + path)
        _no_overflow(page)
    # Keyboard: the first Tab reaches the skip link, and focus is drawn.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip"

    assert errors == []

    # The session ends under a polling page (signed out elsewhere, expired, a new
    # master key): its next poll is a 401, and the page goes to the sign-in page.
    page.goto(gateway.url + "/ui/requests")
    page.context.clear_cookies()
    page.wait_for_url("**/ui/sign-in", timeout=WAIT_MS)
    page.close()

"""A gateway with a master key, a browser-like client signed in to its console, and
for the browser tests Debian's Chromium driven by Playwright (``browser``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmbridge.backends.scripted import ScriptedBackend
from tests.conftest import RunningServer, running_gateway

MASTER = "mk-console-test-7f3a9c2e51"
"""The master key of the tests' gateways: no page, header or log line may hold it."""
CHROMIUM = Path("/usr/bin/chromium")
"""Debian's Chromium (``make chromium``): the browser tests skip without it."""


def console_gateway(tmp: Path, master: str | None = MASTER, **config: Any) -> Any:
    """A gateway over a scripted backend, its database in ``tmp``, with ``master`` as
    its master key (none when ``None``)."""
    server: dict[str, Any] = {"master_key": master} if master else {}
    server.update(config.pop("server", {}))
    return running_gateway(
        {"scripted": ScriptedBackend("scripted", models=("scripted",))},
        server=server,
        agent={"database": str(tmp / "llmbridge.db")},
        **config,
    )


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with console_gateway(tmp_path_factory.mktemp("console")) as server:
        yield server


@pytest.fixture
def browser() -> Iterator[Any]:
    """Chromium launched by Playwright (no browser is downloaded), resolving no host
    name but the loopback address: a page that fetched from anywhere else would fail."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            ],
        )
        try:
            yield launched
        finally:
            launched.close()


def sign_in(client: httpx.Client, master: str = MASTER) -> httpx.Response:
    return client.post("/ui/sign-in", data={"master_key": master})


def csrf_of(page: httpx.Response) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text
    return found.group(1)


def type_master_key(page: Any, timeout_ms: float, key: str = MASTER) -> None:
    """Type ``key`` (the master key) into the sign-in page and press Enter, as a person
    does: once the key field has the focus its ``autofocus`` gives it, waited for up to
    ``timeout_ms`` (a keystroke sent before the page gave it would go nowhere on a busy
    machine, and the form, its field required and empty, would not be sent)."""
    page.wait_for_function(
        "document.activeElement && document.activeElement.id === 'master_key'",
        timeout=timeout_ms,
    )
    page.keyboard.type(key)
    page.keyboard.press("Enter")

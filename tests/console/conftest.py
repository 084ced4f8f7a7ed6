"""A gateway with a master key, and a browser-like client signed in to its console."""

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


def sign_in(client: httpx.Client, master: str = MASTER) -> httpx.Response:
    return client.post("/ui/sign-in", data={"master_key": master})


def csrf_of(page: httpx.Response) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text
    return found.group(1)

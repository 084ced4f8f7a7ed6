"""Fixtures for the ``opencode`` backend's fault tests: the fake server (one per
module, reset for each test) and a backend started against it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from llmbridge.backends.opencode import OpenCodeBackend
from tests.backends.opencode_fake import FakeOpenCode, make_backend


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeOpenCode]:
    with FakeOpenCode() as server:
        yield server


@pytest.fixture
def fake(fake_server: FakeOpenCode) -> FakeOpenCode:
    fake_server.reset()
    return fake_server


@pytest.fixture
async def backend(fake: FakeOpenCode) -> AsyncIterator[OpenCodeBackend]:
    opencode = make_backend(fake.url)
    await opencode.start()
    try:
        yield opencode
    finally:
        await opencode.aclose()

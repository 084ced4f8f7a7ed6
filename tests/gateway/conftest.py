"""Gateway fixtures: ``upstream``, a fake Ollama / OpenAI-compatible server on a
loopback port (tests/upstream.py) that answers with the canned replies a test queues
and records what it was sent, one per module (a module's ``gateway`` fixture points its
HTTP backends at it, and sets what it lists or shows before the first request)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import RunningServer
from tests.upstream import FakeUpstream


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[FakeUpstream, RunningServer]]:
    fake = FakeUpstream()
    with RunningServer(fake.app) as server:
        yield fake, server

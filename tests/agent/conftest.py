"""Agent fixtures: a migrated SQLite store per test, and a store on SQLite then on
PostgreSQL (``any_store``). The PostgreSQL server itself, ``pg_url`` and ``db_url``
are the session's, in tests/servers.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from llmbridge.agent.store import AgentStore


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[AgentStore]:
    """A migrated SQLite store in a file of its own."""
    opened = await AgentStore.open(tmp_path / "agent.db")
    yield opened
    await opened.close()


@pytest.fixture
async def any_store(db_url: str) -> AsyncIterator[AgentStore]:
    """A migrated store on SQLite, then on PostgreSQL."""
    opened = await AgentStore.open(db_url)
    yield opened
    await opened.close()

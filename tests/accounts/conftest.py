"""Accounts fixtures. Keys and the usage ledger are tested on SQLite and on PostgreSQL
alike (``db_url``), and replicas share their limits through Redis (``redis_url``): the
session's servers, in tests/servers.py. ``database`` is the product's database opened
on ``db_url`` (a module that wants a file for a gateway's SQLite defines its own)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from llmbridge.store import Database


@pytest.fixture
async def database(db_url: str) -> AsyncIterator[Database]:
    handle = await Database.open(db_url)
    try:
        yield handle
    finally:
        await handle.close()

"""Accounts fixtures: the agent tests' PostgreSQL server (tests/agent/conftest.py),
so keys and the usage ledger are tested on SQLite and on PostgreSQL alike, and the
state tests' Redis (tests/state/conftest.py) for replicas sharing their limits."""

from __future__ import annotations

from tests.agent.conftest import db_url, pg_url, postgres_server
from tests.state.conftest import redis_server, redis_url

__all__ = ["db_url", "pg_url", "postgres_server", "redis_server", "redis_url"]

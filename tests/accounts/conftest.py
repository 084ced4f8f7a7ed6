"""Accounts fixtures: the agent tests' PostgreSQL server (tests/agent/conftest.py),
so keys and the usage ledger are tested on SQLite and on PostgreSQL alike."""

from __future__ import annotations

from tests.agent.conftest import db_url, pg_url, postgres_server

__all__ = ["db_url", "pg_url", "postgres_server"]

"""Accounts fixtures: none of their own. Keys and the usage ledger are tested on SQLite
and on PostgreSQL alike (``db_url``), and replicas share their limits through Redis
(``redis_url``): the session's servers, in tests/servers.py."""

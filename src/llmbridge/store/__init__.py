"""The product's database: SQLAlchemy 2 (async) over SQLite or PostgreSQL.

``database`` (``Database``, the one handle a process opens: engine, write engine,
deadlines, migrated once, closed once; ``OpenOnce``, the gateway's), ``engine`` (URLs,
the engine, its deadlines, SQLite's set-up), ``migrate`` (Alembic, in process, with the
scripts in ``migrations/``), ``tables`` (every product's tables; an agent domain declares
its own on the same ``Base``), ``values`` (what the databases can hold) and ``errors``
(the boundary: every database failure raised as a ``core.errors`` class, so no caller
sees SQLAlchemy's exceptions).

Each product owns the repository of its tables on a ``Database``: the agent's
``agent.store.AgentStore``, the keys' ``accounts.keys.KeyStore``, the ledger's
``accounts.ledger.UsageLedger``, the stored Responses'
``gateway.stored_responses.ResponseStore``.
"""

from llmbridge.store.database import Database, OpenOnce
from llmbridge.store.engine import make_engine, resolve_url, shown_url
from llmbridge.store.errors import mapped_errors
from llmbridge.store.migrate import current_revision, head_revision, migrate
from llmbridge.store.values import MAX_ID

__all__ = [
    "MAX_ID",
    "Database",
    "OpenOnce",
    "current_revision",
    "head_revision",
    "make_engine",
    "mapped_errors",
    "migrate",
    "resolve_url",
    "shown_url",
]

"""The agent's persistent store: SQLAlchemy 2 (async) over SQLite or PostgreSQL.

``models`` (the tables), ``engine`` (URLs, the engine, SQLite setup), ``migrate``
(Alembic, in process), ``records`` (the plain values callers get),
``repository.AgentStore`` (reads and writes of the conversation tables),
``responses.ResponseStore`` (the Responses API's stored responses), ``access``
(who may see and change what: the ``owner`` of a row), ``values`` (what the
databases can hold) and ``errors`` (the store's boundary: every database failure
raised as a ``core.errors`` class, so callers never see SQLAlchemy's exceptions).
Lookups follow one rule: ``find_*`` returns ``None`` for a row that is not there
(or not the caller's), ``get_*`` raises ``core.errors.NotFoundError``.
"""

from llmbridge.agent.store.engine import make_engine, resolve_url
from llmbridge.agent.store.migrate import current_revision, head_revision, migrate
from llmbridge.agent.store.records import (
    MessageStatus,
    PersonaRecord,
    PinRecord,
    ResponseRecord,
    SessionRecord,
    StoredMessage,
    SummaryRecord,
)
from llmbridge.agent.store.repository import AgentStore
from llmbridge.agent.store.responses import ResponseStore
from llmbridge.agent.store.values import MAX_ID

__all__ = [
    "MAX_ID",
    "AgentStore",
    "MessageStatus",
    "PersonaRecord",
    "PinRecord",
    "ResponseRecord",
    "ResponseStore",
    "SessionRecord",
    "StoredMessage",
    "SummaryRecord",
    "current_revision",
    "head_revision",
    "make_engine",
    "migrate",
    "resolve_url",
]

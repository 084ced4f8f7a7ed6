"""The agent's persistent store: SQLAlchemy 2 (async) over SQLite or PostgreSQL.

``models`` (the tables), ``engine`` (URLs, the engine, SQLite setup), ``migrate``
(Alembic, in process), ``records`` (the plain values callers get),
``repository.AgentStore`` (reads and writes of the conversation tables), ``access``
(who may see and change what: the ``owner`` of a row) and ``values`` (what the
databases can hold, and their refusals mapped to ``UnstorableValueError``).
"""

from llmbridge.agent.store.access import ConflictError, SharedRecordError
from llmbridge.agent.store.engine import DB_ENV, default_sqlite_path, make_engine, resolve_url
from llmbridge.agent.store.migrate import current_revision, head_revision, migrate
from llmbridge.agent.store.records import (
    MessageStatus,
    PersonaRecord,
    PinRecord,
    SessionRecord,
    StoredMessage,
    SummaryRecord,
)
from llmbridge.agent.store.repository import AgentStore, NotFoundError
from llmbridge.agent.store.values import MAX_ID, UnstorableValueError

__all__ = [
    "DB_ENV",
    "MAX_ID",
    "AgentStore",
    "ConflictError",
    "MessageStatus",
    "NotFoundError",
    "PersonaRecord",
    "PinRecord",
    "SessionRecord",
    "SharedRecordError",
    "StoredMessage",
    "SummaryRecord",
    "UnstorableValueError",
    "current_revision",
    "default_sqlite_path",
    "head_revision",
    "make_engine",
    "migrate",
    "resolve_url",
]

"""The agent's repository on the product's database (``llmbridge.store``).

``repository.AgentStore`` (reads and writes of the conversation tables: personas,
sessions, messages, summaries, pins; ``agent.documents`` and the domains' records
(``agent.domains``) write theirs through its transactions; ``AgentStore.memory``, a
``memory_rows.MemoryRows``: memory's long-range summary, facts and extraction cursor),
``records`` (the plain values callers get) and ``access`` (who may see and change what:
the ``owner`` of a row). The engine, the migrations, the tables, what a database can
hold and the error boundary are the product's, in ``llmbridge.store``. Lookups follow
one rule: ``find_*`` returns ``None`` for a row that is not there (or not the caller's),
``get_*`` raises ``core.errors.NotFoundError``.
"""

from llmbridge.agent.store.memory_rows import MemoryRows
from llmbridge.agent.store.records import (
    FactRecord,
    FactSource,
    LongSummaryRecord,
    MessageStatus,
    PersonaRecord,
    PinRecord,
    SessionRecord,
    StoredMessage,
    SummaryRecord,
)
from llmbridge.agent.store.repository import AgentStore

__all__ = [
    "AgentStore",
    "FactRecord",
    "FactSource",
    "LongSummaryRecord",
    "MemoryRows",
    "MessageStatus",
    "PersonaRecord",
    "PinRecord",
    "SessionRecord",
    "StoredMessage",
    "SummaryRecord",
]

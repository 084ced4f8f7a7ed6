"""The product's tables, as SQLAlchemy 2 mapped classes (ORM tables): the schema is the
product's, one set for every repository on the ``Database`` (store/database.py).

The agent's (``agent.store``, ``agent.documents``):

Conversation: ``personas`` (a system prompt plus generation settings), ``sessions``,
``messages`` (ordered by their autoincrement ``id``, which also serves as the
"sequence" summaries refer to), ``summaries`` (LLM-written, with the ids of the
messages they cover), ``pins`` (facts re-injected word for word). A session and its
facts carry a ``subject_id``: what the conversation is about, an id in the table of the
domain that owns subjects (``agent.domains``), with no foreign key here, since the
domain may be off and store knows no domain; the domain checks it (since 0010).
Retrieval: ``documents``, split into ``document_chunks`` with an inverted index of
their terms in ``document_terms`` (portable keyword search, see ``agent.documents``).
Responses API: ``responses`` (what ``POST /v1/responses`` kept with ``store``, see
``gateway.stored_responses``).
Accounts (``llmbridge.accounts``): ``api_keys`` (keys kept as sha256 hashes,
with their limits), ``usage`` (the ledger: one row per request, with the client's
session id since 0007, and what the console's request log shows since 0008),
``usage_bodies`` (the bodies of requests, when an operator keeps them) and
``usage_daily`` (the ledger's rows past its retention, summed per day, key and model).

A domain's tables are declared on this ``Base`` by the domain itself (the eldercare
domain's ``patients``, ``caregivers``, ``medications``, ``vitals`` and
``appointments`` in ``agent/domains/eldercare/tables.py``), so ``Base.metadata`` holds
them once that module is imported; their schema is made by the same migrations.

Personas, sessions, documents and patients carry an ``owner`` (a hash of the API key
that created them; ``agent.store.access`` has the rules).

The schema itself is created and changed only by the migrations in
``store/migrations``; a test checks that these tables and the migrations agree.
Timestamps are stored in UTC; ``UTCDateTime`` gives them back timezone-aware on every
database (SQLite keeps no offset).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "ERROR_LENGTH",
    "FACTS_LENGTH",
    "SESSION_ID_LENGTH",
    "ApiKeyRow",
    "Base",
    "BigId",
    "Document",
    "DocumentChunk",
    "DocumentTerm",
    "Fact",
    "LongSummary",
    "MemoryCursor",
    "MessageRow",
    "Persona",
    "Pin",
    "ResponseRow",
    "SessionRow",
    "Summary",
    "UTCDateTime",
    "UsageBodyRow",
    "UsageRow",
    "utcnow",
]

# SQLite makes only INTEGER PRIMARY KEY an alias of the autoincrementing rowid;
# PostgreSQL gets a 64-bit identity so a long-lived store never runs out of ids.
BigId = BigInteger().with_variant(Integer(), "sqlite")
"""A row id: ``INTEGER PRIMARY KEY`` on SQLite, ``BIGINT`` on PostgreSQL."""

# Named constraints, so migrations can refer to them on every database.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp stored in UTC and always returned timezone-aware."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        value = value.astimezone(UTC)
        # SQLite has no timestamp type: store the naive UTC value so text order is time order.
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime(),
        dict[str, Any]: JSON(),
        list[Any]: JSON(),
    }


# -- conversation -------------------------------------------------------------------


class Persona(Base):
    """A system prompt plus generation settings (``agent.persona_settings.AgentSettings``)."""

    __tablename__ = "personas"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    prompt: Mapped[str] = mapped_column(Text, default="")
    settings: Mapped[dict[str, Any]] = mapped_column(default=dict)
    """Only the settings that were set (``None`` means unset and is not stored)."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    owner: Mapped[str | None] = mapped_column(String(64), default=None, index=True)
    """The API key that created it (``agent.store.access``); ``None``: shared."""


class SessionRow(Base):
    """A conversation."""

    __tablename__ = "sessions"
    __table_args__ = (
        # A key's sessions, newest first, without reading anyone else's.
        Index("ix_sessions_owner_created_at", "owner", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    persona_id: Mapped[str | None] = mapped_column(
        ForeignKey("personas.id", ondelete="SET NULL"), default=None
    )
    subject_id: Mapped[int | None] = mapped_column(BigId, default=None)
    """What the conversation is about: an id the subject-owning domain checks (a patient,
    for eldercare; ``agent.domains``). No foreign key: module docstring."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    owner: Mapped[str | None] = mapped_column(String(64), default=None)
    """The API key that created it (``agent.store.access``): only that key sees it."""


class MessageRow(Base):
    """One stored turn. ``id`` orders a session's messages (it only ever grows)."""

    __tablename__ = "messages"
    __table_args__ = (
        # "The last N messages of a session" and "messages after id X" are index range
        # scans, so assembling a context never reads the whole history.
        Index("ix_messages_session_id_id", "session_id", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    token_count: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[str] = mapped_column(String(16), default="complete")
    """``complete``, or ``incomplete`` for an answer whose stream broke."""
    tool_data: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    """Tool calls and results of the turn, as JSON."""
    model: Mapped[str | None] = mapped_column(String(200), default=None)
    input_tokens: Mapped[int | None] = mapped_column(Integer, default=None)
    output_tokens: Mapped[int | None] = mapped_column(Integer, default=None)


class Summary(Base):
    """An LLM-written summary of a run of older messages."""

    __tablename__ = "summaries"
    __table_args__ = (
        # Two summarisers racing on one session cannot both store the same run.
        UniqueConstraint("session_id", "first_message_id"),
        Index("ix_summaries_session_id_id", "session_id", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    content: Mapped[str] = mapped_column(Text)
    message_ids: Mapped[list[Any]] = mapped_column(JSON)
    """The ids of the messages this summary covers, in order."""
    first_message_id: Mapped[int] = mapped_column(BigInteger)
    last_message_id: Mapped[int] = mapped_column(BigInteger)
    token_count: Mapped[int] = mapped_column(Integer, default=0)
    model: Mapped[str | None] = mapped_column(String(200), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Pin(Base):
    """A fact kept word for word in every context of its session."""

    __tablename__ = "pins"
    __table_args__ = (Index("ix_pins_session_id_id", "session_id", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    content: Mapped[str] = mapped_column(Text)
    message_id: Mapped[int | None] = mapped_column(
        ForeignKey("messages.id", ondelete="SET NULL"), default=None
    )
    """The message the fact was pinned from, if any."""
    token_count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class LongSummary(Base):
    """The rolling long-range summary of a session (``agent.memory``): each
    row folds the previous one and the oldest ordinary summaries into one; the newest
    row is the one in use, and it covers every message up to ``last_message_id``."""

    __tablename__ = "long_summaries"
    __table_args__ = (
        # Two compactions racing on one session cannot both store the same fold.
        UniqueConstraint("session_id", "last_message_id"),
        Index("ix_long_summaries_session_id_id", "session_id", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    content: Mapped[str] = mapped_column(Text)
    first_message_id: Mapped[int] = mapped_column(BigInteger)
    last_message_id: Mapped[int] = mapped_column(BigInteger)
    folded: Mapped[int] = mapped_column(Integer, default=0)
    """How many ordinary summaries this row folded in (the previous long one aside)."""
    token_count: Mapped[int] = mapped_column(Integer, default=0)
    model: Mapped[str | None] = mapped_column(String(200), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Fact(Base):
    """A durable fact about the person a session is with: extracted in the
    background or written through the API, kept in every context like a pin."""

    __tablename__ = "facts"
    __table_args__ = (
        Index("ix_facts_session_id_id", "session_id", "id"),
        Index("ix_facts_subject_id_id", "subject_id", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    subject_id: Mapped[int | None] = mapped_column(BigId, default=None)
    """The subject the session was about: the fact is shown in its other sessions too."""
    content: Mapped[str] = mapped_column(Text)
    message_id: Mapped[int | None] = mapped_column(
        ForeignKey("messages.id", ondelete="SET NULL"), default=None
    )
    """The message the fact was extracted from, if any."""
    source: Mapped[str] = mapped_column(String(16), default="extracted")
    """``extracted`` (the model), ``user`` (written or corrected through the API)."""
    token_count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class MemoryCursor(Base):
    """How far fact extraction has read a session (the newest message id it read)."""

    __tablename__ = "memory_cursors"

    session_id: Mapped[str] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True
    )
    facts_upto: Mapped[int] = mapped_column(BigInteger)


# -- documents ----------------------------------------------------------------------


class Document(Base):
    __tablename__ = "documents"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    title: Mapped[str] = mapped_column(String(500))
    source: Mapped[str | None] = mapped_column(String(1000), default=None)
    content: Mapped[str] = mapped_column(Text)
    token_count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    owner: Mapped[str | None] = mapped_column(String(64), default=None, index=True)
    """The API key that created it (``agent.store.access``); ``None``: shared."""


class DocumentChunk(Base):
    """A passage of a document: the unit keyword search ranks and returns."""

    __tablename__ = "document_chunks"
    __table_args__ = (UniqueConstraint("document_id", "ordinal"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("documents.id", ondelete="CASCADE"))
    ordinal: Mapped[int] = mapped_column(Integer)
    content: Mapped[str] = mapped_column(Text)
    token_count: Mapped[int] = mapped_column(Integer, default=0)
    term_count: Mapped[int] = mapped_column(Integer, default=0)
    """Indexed terms in the chunk: BM25's document length."""


class DocumentTerm(Base):
    """Inverted index: how often ``term`` occurs in a chunk."""

    __tablename__ = "document_terms"
    __table_args__ = (Index("ix_document_terms_chunk_id", "chunk_id"),)

    term: Mapped[str] = mapped_column(String(64), primary_key=True)
    chunk_id: Mapped[int] = mapped_column(
        ForeignKey("document_chunks.id", ondelete="CASCADE"), primary_key=True
    )
    tf: Mapped[int] = mapped_column(Integer)


# -- Responses API ------------------------------------------------------------------


class ResponseRow(Base):
    """A response ``POST /v1/responses`` stored, or an interaction of Google's Interactions
    API (``gateway.stored_responses``): the conversation it answered and what it
    answered, private to the key that created it."""

    __tablename__ = "responses"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    """The response's id as the client got it (``resp_...``, ``int_...``)."""
    api: Mapped[str] = mapped_column(String(20), default="responses", server_default="responses")
    """The API that stored it (migration 0012): ``responses`` or ``interactions``; each
    API reads only its own."""
    owner: Mapped[str | None] = mapped_column(String(64), default=None)
    """The API key that created it (``agent.store.access``): only that key sees it."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    model: Mapped[str] = mapped_column(String(200))
    instructions: Mapped[str | None] = mapped_column(Text, default=None)
    """The request's ``instructions`` (not carried into a continuation, as OpenAI does)."""
    input: Mapped[list[Any]] = mapped_column(JSON)
    """The conversation so far: every input item, a continued response's included."""
    output: Mapped[list[Any]] = mapped_column(JSON)
    """The response's output items."""
    usage: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    response: Mapped[dict[str, Any]] = mapped_column(JSON)
    """The rest of the response object as created (status, the echoed request fields)."""
    # The chain's running totals (migration 0006), so a continuation beyond
    # ``server.limits.max_chain_*`` is refused without loading the conversation.
    chain_turns: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    """Stored responses in the ``previous_response_id`` chain ending with this one."""
    conversation_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    """JSON bytes of ``input`` and ``output``: what a continuation of this one loads."""
    chain_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    """JSON bytes stored for the chain: this response's and every earlier one's."""


# -- accounts (llmbridge.accounts) ---------------------------------------------------


class ApiKeyRow(Base):
    """An API key kept in the database (``accounts.keys``): its sha256, never the key."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    """``key_...`` (``core.ids.new_id``)."""
    name: Mapped[str] = mapped_column(String(200), unique=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    """sha256 hex of the key: the lookup is by hash, so no key is compared in Python."""
    identity: Mapped[str] = mapped_column(String(64))
    """``web.auth.key_identity(key)``: the owner of agent rows the key creates."""
    prefix: Mapped[str | None] = mapped_column(String(16), default=None)
    """The key's first characters, for lists (``llmb-AbCd``)."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)
    rpm: Mapped[int | None] = mapped_column(Integer, default=None)
    tpm: Mapped[int | None] = mapped_column(Integer, default=None)
    max_parallel: Mapped[int | None] = mapped_column(Integer, default=None)
    budget_usd: Mapped[float | None] = mapped_column(Float, default=None)
    models: Mapped[list[Any] | None] = mapped_column(JSON, default=None)
    """Globs of the public model names the key may use; ``None``: every model."""
    mcp_tools: Mapped[list[Any] | None] = mapped_column(JSON, default=None)
    """Globs of the MCP tool names (``<server>__<tool>``) the key may list and call
    (migration 0011); ``None``: every tool."""
    spent_usd: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    """What the ledger has flushed for the key (``accounts`` adds the unflushed part)."""


SESSION_ID_LENGTH = 128
"""``usage.session_id``'s length: a client's session id is a UUID (36 characters); a
longer one is cut (accounts/usage_record.py)."""


FACTS_LENGTH = 2000
"""``usage.facts``' length: the ``x-llmbridge-*`` headers of one reply, as JSON."""
ERROR_LENGTH = 500
"""``usage.error``'s length: a failed request's message is cut to it."""


class UsageRow(Base):
    """One request in the usage ledger."""

    __tablename__ = "usage"
    __table_args__ = (
        # Partial: most rows of a gateway without agents name no session, and cost the
        # index nothing. A session's rows are read through it (``usage --session``).
        Index(
            "ix_usage_session_id",
            "session_id",
            sqlite_where=text("session_id IS NOT NULL"),
            postgresql_where=text("session_id IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    request_id: Mapped[str] = mapped_column(String(64), unique=True)
    """Unique, so a retried flush never records a request twice."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    key_id: Mapped[str | None] = mapped_column(String(40), default=None, index=True)
    """``api_keys.id``; ``None`` for a static key or no key."""
    key_name: Mapped[str | None] = mapped_column(String(200), default=None)
    model: Mapped[str] = mapped_column(String(200))
    """The public model name the caller asked for."""
    backend: Mapped[str | None] = mapped_column(String(100), default=None)
    """The backend's kind."""
    deployment: Mapped[str | None] = mapped_column(String(200), default=None)
    """The configured backend that served it (after fallbacks and balancing)."""
    endpoint: Mapped[str | None] = mapped_column(String(100), default=None)
    status: Mapped[int] = mapped_column(Integer)
    input_tokens: Mapped[int | None] = mapped_column(Integer, default=None)
    output_tokens: Mapped[int | None] = mapped_column(Integer, default=None)
    reasoning_tokens: Mapped[int | None] = mapped_column(Integer, default=None)
    cached_tokens: Mapped[int | None] = mapped_column(Integer, default=None)
    cost_usd: Mapped[float | None] = mapped_column(Float, default=None)
    latency_ms: Mapped[float | None] = mapped_column(Float, default=None)
    ttft_ms: Mapped[float | None] = mapped_column(Float, default=None)
    streamed: Mapped[bool | None] = mapped_column(Boolean, default=None)
    replica: Mapped[str | None] = mapped_column(String(100), default=None)
    session_id: Mapped[str | None] = mapped_column(String(SESSION_ID_LENGTH), default=None)
    """The client's session (``serving.deployments.client_session``: Claude Code's,
    Codex's, ``x-llmbridge-session-id``...); ``None`` when it named none."""
    # The request log (migration 0008): what the operator console shows.
    dialect: Mapped[str | None] = mapped_column(String(20), default=None)
    """The API the client spoke: ``openai``, ``responses``, ``completions``,
    ``anthropic``, ``gemini``, ``ollama``, ``agent``."""
    served_model: Mapped[str | None] = mapped_column(String(200), default=None)
    """The model name the backend was asked for, after aliases, routes and fallbacks."""
    retries: Mapped[int | None] = mapped_column(Integer, default=None)
    """Tries of the same target again before the first event."""
    fallbacks: Mapped[int | None] = mapped_column(Integer, default=None)
    """Fallback targets tried before the first event."""
    facts: Mapped[str | None] = mapped_column(String(FACTS_LENGTH), default=None)
    """The reply's ``x-llmbridge-*`` headers (what the gateway changed), a JSON object."""
    trace_id: Mapped[str | None] = mapped_column(String(32), default=None)
    """The request's OpenTelemetry trace id when tracing is on."""
    overhead_ms: Mapped[float | None] = mapped_column(Float, default=None)
    """Time spent in the gateway, the backend excluded (``x-llmbridge-overhead-ms``)."""
    finish_reason: Mapped[str | None] = mapped_column(String(40), default=None)
    error: Mapped[str | None] = mapped_column(String(ERROR_LENGTH), default=None)
    """A failed request's message, cut to ``ERROR_LENGTH``."""


class UsageBodyRow(Base):
    """A request's and its reply's bodies, kept when ``ledger.keep_bodies`` is on:
    bounded and redacted before they are written (accounts/kept_bodies.py), deleted
    after ``ledger.body_retention_days`` (accounts/rollups.py)."""

    __tablename__ = "usage_bodies"

    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    """``usage.request_id`` of the request (no foreign key: module docstring of 0008)."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    request: Mapped[str | None] = mapped_column(Text, default=None)
    response: Mapped[str | None] = mapped_column(Text, default=None)


class UsageDailyRow(Base):
    """Ledger rows past the retention (``ledger.retention_days``), summed per UTC day,
    key and model (accounts/rollups.py). A group may have several rows (two replicas
    cleaning up the same day at once each add one): readers sum them."""

    __tablename__ = "usage_daily"
    __table_args__ = (Index("ix_usage_daily_day_key_id_model", "day", "key_id", "model"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    day: Mapped[str] = mapped_column(String(10))
    """The UTC day, ``YYYY-MM-DD`` (text, compared as text on every database)."""
    key_id: Mapped[str | None] = mapped_column(String(40), default=None)
    key_name: Mapped[str | None] = mapped_column(String(200), default=None)
    model: Mapped[str] = mapped_column(String(200))
    requests: Mapped[int] = mapped_column(BigInteger, default=0)
    errors: Mapped[int] = mapped_column(BigInteger, default=0)
    """Requests answered with a status of 400 or more."""
    priced: Mapped[int] = mapped_column(BigInteger, default=0)
    """Requests whose cost was known (``usage.cost_usd`` not NULL)."""
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    reasoning_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cached_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)

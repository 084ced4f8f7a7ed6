"""``AgentStore``: the agent's reads and writes, each in its own short transaction, on
the product's ``Database`` (store/database.py: the engine, the migrations, the errors).

Every method opens one transaction, does its work and commits, so a caller never
holds a transaction open across a model call (an agent turn takes seconds; a
transaction held that long would block other writers on SQLite). Writes go
through ``write_engine`` (``BEGIN IMMEDIATE`` on SQLite). Reads that must agree
with each other (assembling a context) share one connection via ``reader()``.

Queries that feed a context are bounded by ``LIMIT`` on the ``(session_id, id)``
indexes, so their cost depends on the budget, never on the length of the history.

Values (``store.values``): the text of messages, summaries and pins is stored with
U+0000 and unpaired surrogates replaced by U+FFFD (a model's answer is never lost
to an encoding).

Errors (``store.errors``): every transaction raises only ``core.errors``: a refused
value is an ``InvalidRequestError``, an id in use a ``ConflictError``, a row that
refers to one not there a ``NotFoundError``, a database that is down a
``ServiceUnavailableError``. Lookups: ``find_*`` returns ``None`` when the row is
not there or not the caller's; ``get_*`` raises ``NotFoundError`` then.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from sqlalchemy import Row, delete, func, select, update
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from llmbridge.agent.store.access import (
    check_writable,
    private_to,
    sees,
    visible_to,
)
from llmbridge.agent.store.memory_rows import SUMMARY_COLUMNS, MemoryRows
from llmbridge.agent.store.records import (
    MessageStatus,
    PersonaRecord,
    PinRecord,
    SessionRecord,
    StoredMessage,
    SummaryRecord,
)
from llmbridge.core.errors import ConflictError, NotFoundError
from llmbridge.features.token_count import count_text_tokens
from llmbridge.store.database import Database
from llmbridge.store.tables import MessageRow, Persona, Pin, SessionRow, Summary, utcnow
from llmbridge.store.values import storable, storable_text

__all__ = ["AgentStore"]

_MESSAGE_COLUMNS = (
    MessageRow.id,
    MessageRow.session_id,
    MessageRow.role,
    MessageRow.content,
    MessageRow.created_at,
    MessageRow.token_count,
    MessageRow.status,
    MessageRow.tool_data,
    MessageRow.model,
    MessageRow.input_tokens,
    MessageRow.output_tokens,
)
_PIN_COLUMNS = (
    Pin.id,
    Pin.session_id,
    Pin.content,
    Pin.token_count,
    Pin.created_at,
    Pin.message_id,
)


class AgentStore:
    """The agent's tables on the product's ``Database`` (store/database.py). The
    gateway hands it the one it opened; ``await AgentStore.open(url)`` opens one of
    its own (the CLI, the tests), closed with the store."""

    def __init__(self, database: Database, *, owns_database: bool = False) -> None:
        self.database = database
        self.engine = database.engine
        self.dialect = database.dialect
        self._owns_database = owns_database
        self.memory = MemoryRows(self)
        """Memory's own tables: the long-range summary, facts, the extraction cursor."""

    @classmethod
    async def open(
        cls, url: str | Path | URL | None = None, *, run_migrations: bool = True
    ) -> AgentStore:
        """A store on a ``Database`` of its own at ``url`` (see ``engine.resolve_url``),
        migrated to the newest schema. A database that cannot be reached is a
        ``ServiceUnavailableError`` like any other store failure (store/errors.py), not
        the driver's own exception."""
        database = await Database.open(url, run_migrations=run_migrations)
        return cls(database, owns_database=True)

    async def close(self) -> None:
        """Close the database if the store opened it (a handed one is its opener's)."""
        if self._owns_database:
            await self.database.close()

    # -- transactions (the Database's, inside the error boundary) ---------------------

    def reading(self) -> AbstractAsyncContextManager[AsyncSession]:
        """A read transaction (one snapshot on SQLite WAL and PostgreSQL)."""
        return self.database.reading()

    def writing(
        self, *, conflict: str | None = None, missing: str | None = None
    ) -> AbstractAsyncContextManager[AsyncSession]:
        """A write transaction, committed on exit (rolled back on an exception).
        ``conflict`` and ``missing`` word the ``ConflictError`` of a unique violation
        and the ``NotFoundError`` of a foreign-key one (``store.errors``)."""
        return self.database.writing(conflict=conflict, missing=missing)

    def reader(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """A raw connection in one read transaction, for several consistent reads."""
        return self.database.reader()

    # -- personas ---------------------------------------------------------------------
    # ``owner`` (``store.access``): ``None`` is unscoped; a key sees its own and the
    # shared personas and changes only its own.

    async def put_persona(
        self,
        persona_id: str,
        *,
        name: str,
        prompt: str = "",
        settings: dict[str, Any] | None = None,
        owner: str | None = None,
    ) -> PersonaRecord:
        """Create or replace a persona. ``settings`` should hold set values only. A
        replaced persona keeps its owner; ``owner`` may replace only its own."""
        async with self.writing() as db:
            row = await db.get(Persona, persona_id)
            if row is None:
                row = Persona(
                    id=persona_id,
                    name=name,
                    prompt=prompt,
                    settings=settings or {},
                    owner=owner,
                )
                db.add(row)
            else:
                if owner is not None and row.owner not in (owner, None):
                    raise ConflictError(f"persona id {persona_id!r} is taken")
                check_writable(row.owner, owner, f"persona {persona_id!r}")
                row.name, row.prompt, row.settings = name, prompt, settings or {}
                row.updated_at = utcnow()
            await db.flush()
            return _persona(row)

    async def create_persona(
        self,
        persona_id: str | None = None,
        *,
        name: str,
        prompt: str = "",
        settings: dict[str, Any] | None = None,
        owner: str | None = None,
    ) -> PersonaRecord:
        """Create a persona (a new id when ``persona_id`` is ``None``); an id already
        in use raises ``ConflictError``."""
        now = utcnow()
        row = Persona(
            id=persona_id or uuid.uuid4().hex,
            name=name,
            prompt=prompt,
            settings=settings or {},
            owner=owner,
            created_at=now,
            updated_at=now,
        )
        async with self.writing(conflict=f"persona id {row.id!r} is taken") as db:
            db.add(row)
        return _persona(row)

    async def update_persona(
        self,
        persona_id: str,
        *,
        owner: str | None = None,
        name: str | None = None,
        prompt: str | None = None,
        settings: dict[str, Any] | None = None,
    ) -> PersonaRecord:
        """Change the given fields of a persona ``owner`` may write."""
        async with self.writing() as db:
            row = await db.get(Persona, persona_id)
            if row is None or not sees(row.owner, owner, shared=True):
                raise NotFoundError(f"no persona {persona_id!r}")
            check_writable(row.owner, owner, f"persona {persona_id!r}")
            if name is not None:
                row.name = name
            if prompt is not None:
                row.prompt = prompt
            if settings is not None:
                row.settings = settings
            row.updated_at = utcnow()
            await db.flush()
            return _persona(row)

    async def find_persona(
        self, persona_id: str, *, owner: str | None = None
    ) -> PersonaRecord | None:
        """The persona, or ``None`` when it does not exist or ``owner`` may not see it."""
        async with self.reading() as db:
            row = await db.get(Persona, persona_id)
            if row is None or not sees(row.owner, owner, shared=True):
                return None
            return _persona(row)

    async def get_persona(self, persona_id: str, *, owner: str | None = None) -> PersonaRecord:
        """The persona, or ``NotFoundError`` when ``find_persona`` finds none."""
        found = await self.find_persona(persona_id, owner=owner)
        if found is None:
            raise NotFoundError(f"no persona {persona_id!r}")
        return found

    async def list_personas(self, *, owner: str | None = None) -> list[PersonaRecord]:
        query = (
            select(Persona)
            .where(visible_to(Persona.owner, owner))
            .order_by(Persona.name, Persona.id)
        )
        async with self.reading() as db:
            return [_persona(r) for r in await db.scalars(query)]

    async def delete_persona(self, persona_id: str, *, owner: str | None = None) -> bool:
        """Delete a persona ``owner`` may write (sessions using it keep going without
        it); ``False`` when it is not there."""
        async with self.writing() as db:
            row = await db.get(Persona, persona_id)
            if row is None or not sees(row.owner, owner, shared=True):
                return False
            check_writable(row.owner, owner, f"persona {persona_id!r}")
            await db.delete(row)
            return True

    # -- sessions ---------------------------------------------------------------------
    # Private to their ``owner``: another key's session does not exist for a key.

    async def create_session(
        self,
        session_id: str | None = None,
        *,
        name: str = "",
        persona_id: str | None = None,
        subject_id: int | None = None,
        owner: str | None = None,
    ) -> SessionRecord:
        now = utcnow()
        row = SessionRow(
            id=session_id or uuid.uuid4().hex,
            name=name,
            persona_id=persona_id,
            subject_id=subject_id,
            owner=owner,
            created_at=now,
            updated_at=now,
        )
        taken = f"session id {row.id!r} is taken"
        async with self.writing(conflict=taken, missing="no such persona") as db:
            db.add(row)
        return _session(row)

    async def find_session(
        self, session_id: str, *, owner: str | None = None
    ) -> SessionRecord | None:
        """The session, or ``None`` when it does not exist or is not ``owner``'s."""
        async with self.reading() as db:
            row = await db.get(SessionRow, session_id)
            if row is None or not sees(row.owner, owner, shared=False):
                return None
            return _session(row)

    async def get_session(self, session_id: str, *, owner: str | None = None) -> SessionRecord:
        """The session, or ``NotFoundError`` when ``find_session`` finds none (another
        owner's session answers exactly like one that does not exist)."""
        found = await self.find_session(session_id, owner=owner)
        if found is None:
            raise NotFoundError(f"no session {session_id!r}")
        return found

    async def ensure_session(
        self,
        session_id: str,
        *,
        name: str = "",
        persona_id: str | None = None,
        subject_id: int | None = None,
        owner: str | None = None,
    ) -> SessionRecord:
        """The session ``session_id``, created first if it does not exist yet (two
        callers creating it at once both get the one row). Another owner's session
        raises ``NotFoundError``."""
        existing = await self._find_any_session(session_id)
        if existing is None:
            try:
                return await self.create_session(
                    session_id, name=name, persona_id=persona_id, subject_id=subject_id, owner=owner
                )
            except ConflictError:  # created meanwhile by another caller
                existing = await self._find_any_session(session_id)
                if existing is None:
                    raise
        if not sees(existing.owner, owner, shared=False):
            raise NotFoundError(f"no session {session_id!r}")
        return existing

    async def _find_any_session(self, session_id: str) -> SessionRecord | None:
        async with self.reading() as db:
            row = await db.get(SessionRow, session_id)
            return _session(row) if row is not None else None

    async def update_session(
        self, session_id: str, *, owner: str | None = None, **fields: Any
    ) -> SessionRecord:
        """Set ``name``, ``persona_id`` and/or ``subject_id`` (``None`` clears the
        last two) of ``owner``'s session."""
        unknown = set(fields) - {"name", "persona_id", "subject_id"}
        if unknown:
            raise ValueError(f"sessions have no field(s) {sorted(unknown)}")
        # A persona deleted meanwhile: a foreign-key violation.
        async with self.writing(missing="no such persona") as db:
            row = await db.get(SessionRow, session_id)
            if row is None or not sees(row.owner, owner, shared=False):
                raise NotFoundError(f"no session {session_id!r}")
            for name, value in fields.items():
                setattr(row, name, value)
            row.updated_at = utcnow()
            await db.flush()
            return _session(row)

    async def list_sessions(
        self, limit: int = 100, offset: int = 0, *, owner: str | None = None
    ) -> list[SessionRecord]:
        """Sessions, newest first (the seed's ``getAllSessions``): ``owner``'s only."""
        query = (
            select(SessionRow)
            .where(private_to(SessionRow.owner, owner))
            .order_by(SessionRow.created_at.desc(), SessionRow.id)
            .limit(limit)
            .offset(offset)
        )
        async with self.reading() as db:
            return [_session(r) for r in await db.scalars(query)]

    async def delete_session(self, session_id: str, *, owner: str | None = None) -> bool:
        """Delete ``owner``'s session with its messages, summaries and pins."""
        query = delete(SessionRow).where(
            SessionRow.id == session_id, private_to(SessionRow.owner, owner)
        )
        async with self.writing() as db:
            result = await db.execute(query)
            return bool(getattr(result, "rowcount", 0))

    # -- messages ---------------------------------------------------------------------

    async def add_message(
        self,
        session_id: str,
        role: str,
        content: str,
        *,
        status: MessageStatus = "complete",
        tool_data: dict[str, Any] | None = None,
        model: str | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> StoredMessage:
        """Append a message to a session (committed when this returns); U+0000 and
        unpaired surrogates are stored as U+FFFD (``store.values``)."""
        now = utcnow()
        content = storable_text(content)
        row = MessageRow(
            session_id=session_id,
            role=role,
            content=content,
            created_at=now,
            token_count=count_text_tokens(content),
            status=status,
            tool_data=storable(tool_data),
            model=storable_text(model) if model is not None else None,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
        )
        async with self.writing(missing=f"no session {session_id!r}") as db:
            db.add(row)
            await db.flush()
            await db.execute(
                update(SessionRow).where(SessionRow.id == session_id).values(updated_at=now)
            )
        return _message_from_row(row)

    async def last_messages(
        self,
        session_id: str,
        limit: int,
        *,
        before_id: int | None = None,
        after_id: int | None = None,
        conn: AsyncConnection | None = None,
    ) -> list[StoredMessage]:
        """Up to ``limit`` newest messages with ``after_id < id < before_id``, oldest
        first. An index range scan: the cost does not grow with the history."""
        query = select(*_MESSAGE_COLUMNS).where(MessageRow.session_id == session_id)
        if before_id is not None:
            query = query.where(MessageRow.id < before_id)
        if after_id is not None:
            query = query.where(MessageRow.id > after_id)
        query = query.order_by(MessageRow.id.desc()).limit(limit)
        rows = await self._rows(query, conn)
        return [_message(r) for r in reversed(rows)]

    async def find_message(self, session_id: str, message_id: int) -> StoredMessage | None:
        """Message ``message_id`` if it belongs to ``session_id``, else ``None``."""
        query = select(*_MESSAGE_COLUMNS).where(
            MessageRow.session_id == session_id, MessageRow.id == message_id
        )
        rows = await self._rows(query, None)
        return _message(rows[0]) if rows else None

    async def get_message(self, session_id: str, message_id: int) -> StoredMessage:
        """Message ``message_id`` of ``session_id``, or ``NotFoundError``."""
        found = await self.find_message(session_id, message_id)
        if found is None:
            raise NotFoundError(f"no message {message_id} in session {session_id!r}")
        return found

    async def first_messages(
        self, session_id: str, limit: int, *, after_id: int | None = None
    ) -> list[StoredMessage]:
        """Up to ``limit`` oldest messages with ``id > after_id``, oldest first."""
        query = select(*_MESSAGE_COLUMNS).where(MessageRow.session_id == session_id)
        if after_id is not None:
            query = query.where(MessageRow.id > after_id)
        rows = await self._rows(query.order_by(MessageRow.id).limit(limit), None)
        return [_message(r) for r in rows]

    async def count_messages(
        self, session_id: str, *, after_id: int | None = None, cap: int | None = None
    ) -> int:
        """How many messages the session has after ``after_id``; with ``cap``, counting
        stops there (a bounded scan, for threshold checks)."""
        inner = select(MessageRow.id).where(MessageRow.session_id == session_id)
        if after_id is not None:
            inner = inner.where(MessageRow.id > after_id)
        if cap is not None:
            inner = inner.order_by(MessageRow.id).limit(cap)
        query = select(func.count()).select_from(inner.subquery())
        async with self.reading() as db:
            return int((await db.execute(query)).scalar_one())

    # -- summaries --------------------------------------------------------------------

    async def add_summary(
        self,
        session_id: str,
        content: str,
        message_ids: Sequence[int],
        *,
        model: str | None = None,
    ) -> SummaryRecord | None:
        """Store a summary of ``message_ids`` (ascending). ``None`` when another writer
        already summarised a run starting at the same message."""
        if not message_ids:
            raise ValueError("a summary covers at least one message")
        ids = sorted(message_ids)
        content = storable_text(content)
        row = Summary(
            session_id=session_id,
            content=content,
            message_ids=ids,
            first_message_id=ids[0],
            last_message_id=ids[-1],
            token_count=count_text_tokens(content),
            model=model,
            created_at=utcnow(),
        )
        try:
            async with self.writing() as db:
                db.add(row)
        except (ConflictError, NotFoundError):  # summarised meanwhile, or session deleted
            return None
        return _summary_from_row(row)

    async def last_summaries(
        self, session_id: str, limit: int, *, conn: AsyncConnection | None = None
    ) -> list[SummaryRecord]:
        """Up to ``limit`` newest summaries, oldest first."""
        query = (
            select(*SUMMARY_COLUMNS)
            .where(Summary.session_id == session_id)
            .order_by(Summary.id.desc())
            .limit(limit)
        )
        rows = await self._rows(query, conn)
        return [_summary(r) for r in reversed(rows)]

    async def summarised_upto(
        self, session_id: str, *, conn: AsyncConnection | None = None
    ) -> int | None:
        """The newest message id any summary of the session covers."""
        query = (
            select(Summary.last_message_id)
            .where(Summary.session_id == session_id)
            .order_by(Summary.id.desc())
            .limit(1)
        )
        rows = await self._rows(query, conn)
        return int(rows[0][0]) if rows else None

    # -- pins -------------------------------------------------------------------------

    async def add_pin(
        self, session_id: str, content: str, *, message_id: int | None = None
    ) -> PinRecord:
        content = storable_text(content)
        row = Pin(
            session_id=session_id,
            content=content,
            message_id=message_id,
            token_count=count_text_tokens(content),
            created_at=utcnow(),
        )
        missing = f"no session {session_id!r} (or message {message_id})"
        async with self.writing(missing=missing) as db:
            db.add(row)
        return PinRecord(
            row.id, row.session_id, row.content, row.token_count, row.created_at, row.message_id
        )

    async def pins(
        self, session_id: str, limit: int = 1000, *, conn: AsyncConnection | None = None
    ) -> list[PinRecord]:
        """Up to ``limit`` newest pins, oldest first."""
        query = (
            select(*_PIN_COLUMNS)
            .where(Pin.session_id == session_id)
            .order_by(Pin.id.desc())
            .limit(limit)
        )
        rows = await self._rows(query, conn)
        return [PinRecord(**r._asdict()) for r in reversed(rows)]

    async def delete_pin(self, pin_id: int, *, session_id: str | None = None) -> bool:
        """Delete a pin (of ``session_id`` only, when given)."""
        query = delete(Pin).where(Pin.id == pin_id)
        if session_id is not None:
            query = query.where(Pin.session_id == session_id)
        async with self.writing() as db:
            result = await db.execute(query)
            return bool(getattr(result, "rowcount", 0))

    # -- helpers ----------------------------------------------------------------------

    async def _rows(self, query: Any, conn: AsyncConnection | None) -> Sequence[Row[Any]]:
        if conn is not None:
            return (await conn.execute(query)).all()
        async with self.reader() as own:
            return (await own.execute(query)).all()


def _persona(row: Persona) -> PersonaRecord:
    return PersonaRecord(
        row.id,
        row.name,
        row.prompt,
        dict(row.settings or {}),
        row.created_at,
        row.updated_at,
        row.owner,
    )


def _session(row: SessionRow) -> SessionRecord:
    return SessionRecord(
        row.id,
        row.name,
        row.persona_id,
        row.subject_id,
        row.created_at,
        row.updated_at,
        row.owner,
    )


def _message(row: Row[Any]) -> StoredMessage:
    return StoredMessage(**row._asdict())


def _message_from_row(row: MessageRow) -> StoredMessage:
    return StoredMessage(
        id=row.id,
        session_id=row.session_id,
        role=row.role,
        content=row.content,
        created_at=row.created_at,
        token_count=row.token_count,
        status="incomplete" if row.status == "incomplete" else "complete",
        tool_data=row.tool_data,
        model=row.model,
        input_tokens=row.input_tokens,
        output_tokens=row.output_tokens,
    )


def _summary(row: Row[Any]) -> SummaryRecord:
    values = row._asdict()
    values["message_ids"] = tuple(int(i) for i in values["message_ids"] or ())
    return SummaryRecord(**values)


def _summary_from_row(row: Summary) -> SummaryRecord:
    return SummaryRecord(
        id=row.id,
        session_id=row.session_id,
        content=row.content,
        first_message_id=row.first_message_id,
        last_message_id=row.last_message_id,
        token_count=row.token_count,
        created_at=row.created_at,
        message_ids=tuple(row.message_ids),
        model=row.model,
    )

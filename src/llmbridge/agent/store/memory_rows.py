"""``MemoryRows``: the reads and writes of memory's own tables, on the agent
store's transactions: the rolling long-range summary (``long_summaries``), the facts
(``facts``) and how far fact extraction has read a session (``memory_cursors``).

``AgentStore.memory`` is one. Reads that feed a context take a ``conn`` (the builder's
one read transaction) and a ``LIMIT`` on an index, as the store's other reads do, so
their cost follows the budget, never the length of the history.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from sqlalchemy import Row, delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from llmbridge.agent.store.records import (
    FactRecord,
    FactSource,
    LongSummaryRecord,
    SummaryRecord,
)
from llmbridge.core.errors import ConflictError, NotFoundError
from llmbridge.features.token_count import count_text_tokens
from llmbridge.store.tables import Fact, LongSummary, MemoryCursor, SessionRow, Summary, utcnow
from llmbridge.store.values import storable_text


class RowSource(Protocol):
    """What memory's rows need of the agent's store (``AgentStore``, repository.py,
    which holds a ``MemoryRows``: a protocol, so the two modules do not import each
    other)."""

    def writing(
        self, *, conflict: str | None = None, missing: str | None = None
    ) -> AbstractAsyncContextManager[AsyncSession]: ...

    async def _rows(self, query: Any, conn: AsyncConnection | None) -> Sequence[Row[Any]]: ...


__all__ = ["SUMMARY_COLUMNS", "MemoryRows", "RowSource"]

_LONG_COLUMNS = (
    LongSummary.id,
    LongSummary.session_id,
    LongSummary.content,
    LongSummary.first_message_id,
    LongSummary.last_message_id,
    LongSummary.folded,
    LongSummary.token_count,
    LongSummary.created_at,
    LongSummary.model,
)
_FACT_COLUMNS = (
    Fact.id,
    Fact.session_id,
    Fact.content,
    Fact.token_count,
    Fact.created_at,
    Fact.updated_at,
    Fact.source,
    Fact.message_id,
    Fact.subject_id,
)
SUMMARY_COLUMNS = (
    Summary.id,
    Summary.session_id,
    Summary.content,
    Summary.first_message_id,
    Summary.last_message_id,
    Summary.token_count,
    Summary.created_at,
    Summary.message_ids,
    Summary.model,
)


class MemoryRows:
    """Memory's tables through ``store``'s transactions (module docstring)."""

    def __init__(self, store: RowSource) -> None:
        self.store = store

    # -- the long-range summary ---------------------------------------------------------

    async def long_summary(
        self, session_id: str, *, conn: AsyncConnection | None = None
    ) -> LongSummaryRecord | None:
        """The session's newest long-range summary (the one in use)."""
        query = (
            select(*_LONG_COLUMNS)
            .where(LongSummary.session_id == session_id)
            .order_by(LongSummary.id.desc())
            .limit(1)
        )
        rows = await self.store._rows(query, conn)
        return LongSummaryRecord(**rows[0]._asdict()) if rows else None

    async def add_long_summary(
        self,
        session_id: str,
        content: str,
        *,
        first_message_id: int,
        last_message_id: int,
        folded: int,
        model: str | None = None,
    ) -> LongSummaryRecord | None:
        """Store a new long-range summary of every message up to ``last_message_id``.
        ``None`` when another compaction stored that fold already (or the session is
        gone)."""
        content = storable_text(content)
        row = LongSummary(
            session_id=session_id,
            content=content,
            first_message_id=first_message_id,
            last_message_id=last_message_id,
            folded=folded,
            token_count=count_text_tokens(content),
            model=model,
            created_at=utcnow(),
        )
        try:
            async with self.store.writing() as db:
                db.add(row)
        except (ConflictError, NotFoundError):
            return None
        return LongSummaryRecord(
            row.id,
            row.session_id,
            row.content,
            row.first_message_id,
            row.last_message_id,
            row.folded,
            row.token_count,
            row.created_at,
            row.model,
        )

    async def summaries_after(
        self,
        session_id: str,
        after_id: int | None,
        limit: int,
        *,
        newest: bool = True,
        conn: AsyncConnection | None = None,
    ) -> list[SummaryRecord]:
        """Up to ``limit`` summaries that start after message ``after_id`` (those the
        long-range summary has not folded in), the newest ``limit`` (or with
        ``newest=False`` the oldest), oldest first."""
        query = select(*SUMMARY_COLUMNS).where(Summary.session_id == session_id)
        if after_id is not None:
            query = query.where(Summary.first_message_id > after_id)
        order = Summary.id.desc() if newest else Summary.id
        rows = list(await self.store._rows(query.order_by(order).limit(limit), conn))
        if newest:
            rows.reverse()
        return [_summary(r) for r in rows]

    # -- facts ----------------------------------------------------------------------------

    async def facts(
        self,
        session_id: str,
        limit: int = 1000,
        *,
        subject_id: int | None = None,
        with_subject: bool = False,
        conn: AsyncConnection | None = None,
    ) -> list[FactRecord]:
        """Up to ``limit`` newest facts of the session (and, with ``subject_id``, of
        every session about that subject; with ``with_subject``, about the session's
        own subject, read in the same query), oldest first."""
        where = Fact.session_id == session_id
        if subject_id is not None:
            where = or_(where, Fact.subject_id == subject_id)
        elif with_subject:
            subject = select(SessionRow.subject_id).where(SessionRow.id == session_id)
            where = or_(where, Fact.subject_id == subject.scalar_subquery())
        query = select(*_FACT_COLUMNS).where(where).order_by(Fact.id.desc()).limit(limit)
        rows = await self.store._rows(query, conn)
        return [_fact(r) for r in reversed(rows)]

    async def add_fact(
        self,
        session_id: str,
        content: str,
        *,
        source: FactSource = "extracted",
        message_id: int | None = None,
        subject_id: int | None = None,
    ) -> FactRecord:
        content = storable_text(content.strip())
        now = utcnow()
        row = Fact(
            session_id=session_id,
            subject_id=subject_id,
            content=content,
            message_id=message_id,
            source=source,
            token_count=count_text_tokens(content),
            created_at=now,
            updated_at=now,
        )
        async with self.store.writing(missing=f"no session {session_id!r}") as db:
            db.add(row)
        return FactRecord(
            row.id,
            row.session_id,
            row.content,
            row.token_count,
            row.created_at,
            row.updated_at,
            source,
            row.message_id,
            row.subject_id,
        )

    async def update_fact(self, session_id: str, fact_id: int, content: str) -> FactRecord | None:
        """Correct a fact (it becomes the user's: ``source`` ``user``). ``None`` when
        the session has no such fact."""
        content = storable_text(content.strip())
        query = (
            update(Fact)
            .where(Fact.id == fact_id, Fact.session_id == session_id)
            .values(
                content=content,
                token_count=count_text_tokens(content),
                source="user",
                updated_at=utcnow(),
            )
        )
        async with self.store.writing() as db:
            result = await db.execute(query)
            if not getattr(result, "rowcount", 0):
                return None
        rows = await self.store._rows(select(*_FACT_COLUMNS).where(Fact.id == fact_id), None)
        return _fact(rows[0]) if rows else None

    async def delete_fact(self, session_id: str, fact_id: int) -> bool:
        query = delete(Fact).where(Fact.id == fact_id, Fact.session_id == session_id)
        async with self.store.writing() as db:
            result = await db.execute(query)
            return bool(getattr(result, "rowcount", 0))

    async def session_subject(
        self, session_id: str, *, conn: AsyncConnection | None = None
    ) -> int | None:
        """The subject the session is about, if any."""
        query = select(SessionRow.subject_id).where(SessionRow.id == session_id)
        rows = await self.store._rows(query, conn)
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    # -- the extraction cursor ------------------------------------------------------------

    async def facts_upto(self, session_id: str) -> int | None:
        """The newest message id fact extraction has read in the session."""
        query = select(MemoryCursor.facts_upto).where(MemoryCursor.session_id == session_id)
        rows = await self.store._rows(query, None)
        return int(rows[0][0]) if rows else None

    async def set_facts_upto(self, session_id: str, message_id: int) -> None:
        """Move the cursor forward to ``message_id`` (never back)."""
        async with self.store.writing(missing=f"no session {session_id!r}") as db:
            cursor = await db.get(MemoryCursor, session_id)
            if cursor is None:
                db.add(MemoryCursor(session_id=session_id, facts_upto=message_id))
            elif cursor.facts_upto < message_id:
                cursor.facts_upto = message_id


def _summary(row: Any) -> SummaryRecord:
    values = row._asdict()
    values["message_ids"] = tuple(int(i) for i in values["message_ids"] or ())
    return SummaryRecord(**values)


def _fact(row: Any) -> FactRecord:
    values = row._asdict()
    values["source"] = "user" if values["source"] == "user" else "extracted"
    return FactRecord(**values)

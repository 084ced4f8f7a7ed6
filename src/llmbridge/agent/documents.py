"""The document store: documents split into passages, found again by keywords.

The seed's ``getDocumentContext`` was a placeholder; this is the real thing, kept
portable: the same SQL runs on SQLite and PostgreSQL (no FTS5 or ``tsvector``), so
a database switch changes no result.

- **Indexing.** A document is split into chunks of about ``CHUNK_TOKENS`` tokens at
  paragraph boundaries (a longer paragraph is split by words). Each chunk's terms go
  to an inverted index (``document_terms``: term, chunk, frequency).
- **Terms.** Lower-cased runs of letters and digits (any script), stop words
  removed, and a light plural fold (``medications`` -> ``medication``,
  ``allergies`` -> ``allergy``) so the commonest inflection still matches. No
  stemming beyond that: a wrong stem costs more precision than it gains recall.
- **Ranking.** Okapi BM25 (``k1 = 1.2``, ``b = 0.75``) over chunks, with the
  statistics (chunk count, average length, document frequencies) read from the
  index at query time, so adding a document needs no re-indexing of the others.
- **Size and the event loop.** A document's content is at most ``max_bytes``
  (UTF-8; ``agent.max_document_bytes``, default ``MAX_DOCUMENT_BYTES``), else
  ``DocumentTooLargeError`` (a ``core.errors.RequestTooLargeError``, HTTP 413
  naming the limit): indexing costs time in
  proportion to the words, and SQLite holds its one write lock meanwhile. The
  CPU-bound part (splitting, counting terms: ``prepare_index``) runs in a worker
  thread before the write transaction opens, and the rows go in as Core
  ``executemany`` batches of ``INSERT_BATCH``, each awaited, so the event loop keeps
  serving other requests (``/health``, turns) while a large document is indexed.
- **Text.** U+0000 and unpaired surrogates (from the CLI; the HTTP API refuses
  them) are stored as U+FFFD (``store.values``).
- **Owners.** Every read and write takes the caller's ``owner`` (``store.access``):
  a key searches and lists its own documents and the shared ones, and changes only
  its own; ``None`` (auth off, the CLI) is unscoped. ``find`` returns ``None`` for a
  document the caller cannot see, ``get`` raises ``NotFoundError``.
- **Context.** ``document_context`` gives the best passages within a token budget,
  labelled with their document's title; documents named explicitly (the seed's
  ``fileIds``) are searched alone, and when nothing in them matches, their opening
  passages are used, because the user attached them for a reason.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import Any

from sqlalchemy import Row, delete, func, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmbridge.agent.store import AgentStore
from llmbridge.agent.store.access import check_writable, sees, visible_to
from llmbridge.core.errors import NotFoundError, RequestTooLargeError
from llmbridge.features.token_count import count_text_tokens
from llmbridge.store.tables import Document, DocumentChunk, DocumentTerm, utcnow
from llmbridge.store.values import storable_text

__all__ = [
    "CHUNK_TOKENS",
    "INSERT_BATCH",
    "MAX_DOCUMENT_BYTES",
    "DocumentHit",
    "DocumentRecord",
    "DocumentStore",
    "DocumentTooLargeError",
    "PreparedIndex",
    "chunk_text",
    "prepare_index",
    "terms",
]

CHUNK_TOKENS = 200
MAX_DOCUMENT_BYTES = 2_000_000
"""The default largest document content, in UTF-8 bytes (``agent.max_document_bytes``)."""
INSERT_BATCH = 2000
"""Rows per ``executemany`` while indexing: the event loop runs between batches."""
MAX_QUERY_TERMS = 32
BM25_K1 = 1.2
BM25_B = 0.75
TERM_CHARS = 64
"""Longer terms are cut to fit the index column (and are rarely useful)."""

_STOP_WORDS_TEXT = """a about above after again against all am an and any are as at be because been
    before being below between both but by can could did do does doing down during each
    few for from further had has have having he her here hers herself him himself his how
    i if in into is it its itself just me more most my myself no nor not now of off on
    once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with
    would you your yours yourself yourselves"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def _fold(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def terms(text: str) -> list[str]:
    """The index terms of ``text``, in order, repeats kept."""
    out = []
    for word in _WORD.findall(text.lower()):
        if word in STOP_WORDS or (len(word) < 2 and not word.isdigit()):
            continue
        out.append(_fold(word)[:TERM_CHARS])
    return out


def chunk_text(text: str, max_tokens: int = CHUNK_TOKENS) -> list[str]:
    """``text`` in passages of at most ``max_tokens`` tokens, split at blank lines
    where possible, else between words."""
    pieces: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        if count_text_tokens(paragraph) <= max_tokens:
            pieces.append(paragraph)
            continue
        words: list[str] = []
        used = 0
        for word in paragraph.split():
            cost = (len(word) + 3) // 4
            if words and used + cost > max_tokens:
                pieces.append(" ".join(words))
                words, used = [], 0
            words.append(word)
            used += cost
        if words:
            pieces.append(" ".join(words))
    chunks: list[str] = []
    current: list[str] = []
    used = 0
    for piece in pieces:
        cost = count_text_tokens(piece)
        if current and used + cost > max_tokens:
            chunks.append("\n\n".join(current))
            current, used = [], 0
        current.append(piece)
        used += cost
    if current:
        chunks.append("\n\n".join(current))
    return chunks


@dataclass(frozen=True, slots=True)
class DocumentHit:
    """One passage found by a search."""

    document_id: int
    title: str
    chunk_id: int
    ordinal: int
    content: str
    token_count: int
    score: float


@dataclass(frozen=True, slots=True)
class DocumentRecord:
    """A stored document (``content`` is ``None`` in listings)."""

    id: int
    title: str
    source: str | None
    token_count: int
    created_at: datetime
    owner: str | None
    content: str | None = None


class DocumentTooLargeError(RequestTooLargeError):
    """A document over the size limit (HTTP 413, naming ``content``)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"content: the document is {size} bytes (UTF-8), over the limit of {limit} "
            "bytes (agent.max_document_bytes)",
            param="content",
        )
        self.size = size
        self.limit = limit


@dataclass(frozen=True, slots=True)
class PreparedIndex:
    """A document split into passages with their term counts, ready to be written."""

    token_count: int
    """Tokens of the whole document."""
    passages: tuple[tuple[str, int, dict[str, int]], ...]
    """``(content, token_count, {term: frequency})`` of each passage, in order."""


def prepare_index(content: str, chunk_tokens: int = CHUNK_TOKENS) -> PreparedIndex:
    """Split ``content`` into passages and count their terms: pure CPU work, run in
    a worker thread (``asyncio.to_thread``) so the event loop is free meanwhile."""
    passages = tuple(
        (passage, count_text_tokens(passage), dict(Counter(terms(passage))))
        for passage in chunk_text(content, chunk_tokens)
    )
    return PreparedIndex(count_text_tokens(content), passages)


# The tables themselves: Core inserts, no ORM object per row.
_CHUNKS = Document.metadata.tables[DocumentChunk.__tablename__]
_TERMS = Document.metadata.tables[DocumentTerm.__tablename__]

_INFO_COLUMNS = (
    Document.id,
    Document.title,
    Document.source,
    Document.token_count,
    Document.created_at,
    Document.owner,
)


class DocumentStore:
    """Documents in the agent store, with keyword search (module docstring)."""

    def __init__(self, store: AgentStore, *, max_bytes: int = MAX_DOCUMENT_BYTES) -> None:
        self.store = store
        self.max_bytes = max_bytes
        """The largest content, in UTF-8 bytes (``DocumentTooLargeError`` above it)."""

    def check_size(self, content: str) -> None:
        """Raise ``DocumentTooLargeError`` when ``content`` is over ``max_bytes``."""
        # A character is 1 to 4 bytes: most texts are decided without encoding them.
        if len(content) <= self.max_bytes // 4:
            return
        size = len(content) if len(content) > self.max_bytes else len(content.encode())
        if size > self.max_bytes:
            raise DocumentTooLargeError(size, self.max_bytes)

    async def _prepare(self, content: str, chunk_tokens: int) -> tuple[str, PreparedIndex]:
        """The content as stored, and its index, made in a worker thread (both walk the
        whole text)."""
        return await asyncio.to_thread(_storable_and_indexed, content, chunk_tokens)

    async def add(
        self,
        title: str,
        content: str,
        *,
        source: str | None = None,
        chunk_tokens: int = CHUNK_TOKENS,
        owner: str | None = None,
    ) -> int:
        """Store and index a document; returns its id."""
        self.check_size(content)
        content, prepared = await self._prepare(content, chunk_tokens)
        async with self.store.writing() as db:
            document = Document(
                title=storable_text(title),
                source=storable_text(source) if source is not None else None,
                content=content,
                token_count=prepared.token_count,
                created_at=utcnow(),
                owner=owner,
            )
            db.add(document)
            await db.flush()
            await _index(db, document.id, prepared)
            return document.id

    async def update(
        self,
        document_id: int,
        *,
        owner: str | None = None,
        title: str | None = None,
        content: str | None = None,
        source: str | None = None,
        chunk_tokens: int = CHUNK_TOKENS,
    ) -> DocumentRecord:
        """Change a document ``owner`` may write; new ``content`` is indexed again
        (in the same transaction, so a search never sees it half indexed)."""
        prepared = None
        if content is not None:
            self.check_size(content)
            # Refuse a document the caller may not write before the costly part.
            async with self.store.reading() as db:
                await _writable(db, document_id, owner)
            content, prepared = await self._prepare(content, chunk_tokens)
        async with self.store.writing() as db:
            document = await _writable(db, document_id, owner)
            if title is not None:
                document.title = storable_text(title)
            if source is not None:
                document.source = storable_text(source)
            if content is not None and prepared is not None:
                document.content = content
                document.token_count = prepared.token_count
                # The chunks' terms go with them (ON DELETE CASCADE).
                await db.execute(
                    delete(DocumentChunk).where(DocumentChunk.document_id == document_id)
                )
                await _index(db, document_id, prepared)
            await db.flush()
            return _record(document)

    async def find(self, document_id: int, *, owner: str | None = None) -> DocumentRecord | None:
        """The document with its content, if ``owner`` may see it, else ``None``."""
        async with self.store.reading() as db:
            document = await db.get(Document, document_id)
            if document is None or not sees(document.owner, owner, shared=True):
                return None
            return _record(document)

    async def get(self, document_id: int, *, owner: str | None = None) -> DocumentRecord:
        """The document with its content, or ``NotFoundError`` when ``find`` finds none."""
        found = await self.find(document_id, owner=owner)
        if found is None:
            raise NotFoundError(f"no document {document_id}")
        return found

    async def documents(
        self, *, owner: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[DocumentRecord]:
        """The documents ``owner`` may see, oldest first, without their content."""
        query = (
            select(*_INFO_COLUMNS)
            .where(visible_to(Document.owner, owner))
            .order_by(Document.id)
            .limit(limit)
            .offset(offset)
        )
        async with self.store.reading() as db:
            return [DocumentRecord(*row) for row in (await db.execute(query)).all()]

    async def delete(self, document_id: int, *, owner: str | None = None) -> bool:
        """Delete a document ``owner`` may write; ``False`` when it is not there."""
        async with self.store.writing() as db:
            document = await db.get(Document, document_id)
            if document is None or not sees(document.owner, owner, shared=True):
                return False
            check_writable(document.owner, owner, f"document {document_id}")
            await db.execute(delete(Document).where(Document.id == document_id))
            return True

    async def list_documents(self) -> list[tuple[int, str, int]]:
        """``(id, title, token_count)`` of every document, oldest first."""
        query = select(Document.id, Document.title, Document.token_count).order_by(Document.id)
        async with self.store.reading() as db:
            return [(int(i), str(t), int(n)) for i, t, n in (await db.execute(query)).all()]

    async def search(
        self,
        query: str,
        *,
        limit: int = 5,
        document_ids: Sequence[int] | None = None,
        owner: str | None = None,
    ) -> list[DocumentHit]:
        """The best ``limit`` passages for ``query`` by BM25, best first, among the
        documents ``owner`` may see."""
        wanted = list(dict.fromkeys(terms(query)))[:MAX_QUERY_TERMS]
        if not wanted or limit <= 0:
            return []
        chunks = select(DocumentChunk.id)
        stats = select(func.count(DocumentChunk.id), func.avg(DocumentChunk.term_count))
        if document_ids is not None:
            chunks = chunks.where(DocumentChunk.document_id.in_(list(document_ids)))
            stats = stats.where(DocumentChunk.document_id.in_(list(document_ids)))
        if owner is not None:
            mine = select(Document.id).where(visible_to(Document.owner, owner))
            chunks = chunks.where(DocumentChunk.document_id.in_(mine.scalar_subquery()))
            stats = stats.where(DocumentChunk.document_id.in_(mine.scalar_subquery()))
        async with self.store.reading() as db:
            total, average = (await db.execute(stats)).one()
            if not total:
                return []
            postings = (
                await db.execute(
                    select(
                        DocumentTerm.term,
                        DocumentTerm.chunk_id,
                        DocumentTerm.tf,
                        DocumentChunk.term_count,
                    )
                    .join(DocumentChunk, DocumentChunk.id == DocumentTerm.chunk_id)
                    .where(DocumentTerm.term.in_(wanted))
                    .where(DocumentTerm.chunk_id.in_(chunks.scalar_subquery()))
                )
            ).all()
            scores = _bm25(postings, int(total), float(average or 1.0))
            best = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:limit]
            if not best:
                return []
            return await self._hits(db, dict(best))

    async def opening(
        self, document_ids: Sequence[int], limit: int, *, owner: str | None = None
    ) -> list[DocumentHit]:
        """The first passages of the given documents (those ``owner`` may see), in order."""
        async with self.store.reading() as db:
            query = (
                select(DocumentChunk.id)
                .join(Document, Document.id == DocumentChunk.document_id)
                .where(DocumentChunk.document_id.in_(list(document_ids)))
                .where(visible_to(Document.owner, owner))
                .order_by(DocumentChunk.document_id, DocumentChunk.ordinal)
                .limit(limit)
            )
            ids = [int(i) for i in (await db.scalars(query)).all()]
            return await self._hits(db, dict.fromkeys(ids, 0.0)) if ids else []

    @staticmethod
    async def _hits(db: AsyncSession, scores: dict[int, float]) -> list[DocumentHit]:
        rows = (
            await db.execute(
                select(
                    DocumentChunk.document_id,
                    Document.title,
                    DocumentChunk.id,
                    DocumentChunk.ordinal,
                    DocumentChunk.content,
                    DocumentChunk.token_count,
                )
                .join(Document, Document.id == DocumentChunk.document_id)
                .where(DocumentChunk.id.in_(list(scores)))
            )
        ).all()
        hits = [DocumentHit(*row, score=scores[int(row[2])]) for row in rows]
        order = {chunk_id: n for n, chunk_id in enumerate(scores)}
        return sorted(hits, key=lambda hit: order[hit.chunk_id])

    async def document_context(
        self,
        query: str,
        *,
        budget: int = 1000,
        document_ids: Sequence[int] | None = None,
        limit: int = 8,
        owner: str | None = None,
    ) -> str:
        """The passages for ``query`` as a system-prompt section within ``budget``
        tokens, or ``""`` when there are none (only ``owner``'s and shared documents)."""
        hits = await self.search(query, limit=limit, document_ids=document_ids, owner=owner)
        if not hits and document_ids:
            hits = await self.opening(document_ids, limit, owner=owner)
        header = "Reference documents (use them where they answer the question):"
        used = count_text_tokens(header)
        sections: list[str] = []
        for hit in hits:
            section = f"[{hit.title}]\n{hit.content}"
            cost = count_text_tokens(section)
            if used + cost > budget:
                continue
            used += cost
            sections.append(section)
        return "\n\n".join([header, *sections]) if sections else ""


async def _writable(db: AsyncSession, document_id: int, owner: str | None) -> Document:
    document = await db.get(Document, document_id)
    if document is None or not sees(document.owner, owner, shared=True):
        raise NotFoundError(f"no document {document_id}")
    check_writable(document.owner, owner, f"document {document_id}")
    return document


async def _index(db: AsyncSession, document_id: int, prepared: PreparedIndex) -> None:
    """Write a prepared document's chunks and terms (inside ``db``'s transaction), in
    batches of ``INSERT_BATCH`` rows (Core ``executemany``: no ORM object per row)."""
    chunks = (
        {
            "document_id": document_id,
            "ordinal": ordinal,
            "content": passage,
            "token_count": tokens,
            "term_count": sum(counted.values()),
        }
        for ordinal, (passage, tokens, counted) in enumerate(prepared.passages)
    )
    for batch in _batches(chunks):
        await db.execute(insert(_CHUNKS), batch)
    written = await db.execute(
        select(DocumentChunk.ordinal, DocumentChunk.id).where(
            DocumentChunk.document_id == document_id
        )
    )
    ids = {int(ordinal): int(chunk_id) for ordinal, chunk_id in written.all()}
    postings = (
        {"term": term, "chunk_id": ids[ordinal], "tf": tf}
        for ordinal, (_, _, counted) in enumerate(prepared.passages)
        for term, tf in counted.items()
    )
    for batch in _batches(postings):
        await db.execute(insert(_TERMS), batch)


def _batches(rows: Iterator[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    while batch := list(islice(rows, INSERT_BATCH)):
        yield batch


def _record(document: Document) -> DocumentRecord:
    return DocumentRecord(
        document.id,
        document.title,
        document.source,
        document.token_count,
        document.created_at,
        document.owner,
        document.content,
    )


def _bm25(
    postings: Sequence[Row[str, int, int, int]], total: int, average: float
) -> dict[int, float]:
    frequency = Counter(term for term, *_ in postings)
    scores: dict[int, float] = {}
    for term, chunk_id, tf, length in postings:
        idf = math.log(1 + (total - frequency[term] + 0.5) / (frequency[term] + 0.5))
        norm = tf + BM25_K1 * (1 - BM25_B + BM25_B * length / average)
        scores[chunk_id] = scores.get(chunk_id, 0.0) + idf * tf * (BM25_K1 + 1) / norm
    return scores


def _storable_and_indexed(content: str, chunk_tokens: int) -> tuple[str, PreparedIndex]:
    content = storable_text(content)
    return content, prepare_index(content, chunk_tokens)

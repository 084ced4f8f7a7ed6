"""API keys kept in the database (``api_keys``, migration 0004), with their limits.

A key is ``llmb-`` and 32 random bytes, URL-safe base64 (``secrets.token_urlsafe``):
the plaintext is shown once, when it is created, and stored only as its SHA-256
(``key_hash``). ``find_by_key`` looks a presented key up *by its hash*: the database
compares hashes of a random 256-bit secret, so nothing about a stored key can be
learnt from how long a lookup takes, and no key is compared in Python.

A key owns agent rows like a static key does: its ``identity`` is
``web.auth.key_identity(key)``, computed at creation, when the plaintext is at hand.

``KeyStore.cached`` is what the auth middleware calls on every request, and what it
costs the database:

- A key seen in the last ``cache_s`` (5 s): nothing, a dictionary lookup. So a revoked
  key stops working within ``cache_s`` on every replica (docs/DEPLOY.md, "Keys and
  limits"). The map is an LRU of at most ``_CACHE_MAX`` keys: a flood of wrong keys
  pushes out the oldest entries, never the keys in use.
- A key this process has not seen: one query, its answer cached like a found key's,
  absent included (a wrong key sent again costs nothing for ``cache_s``). So a key
  just created anywhere works at once. The requests that need a key while its query is
  out (many in flight when its entry expires) wait for that one answer.
- A flood of different wrong keys: lookups of unseen keys are limited to a token
  bucket (``miss_burst`` at once, ``miss_rate`` a second, per process); past it, an
  unseen key is checked against the *directory* instead, the set of every stored
  key's hash, read in one query at most once per ``cache_s``: a key missing from it is
  refused without a query. So guessing never becomes one query per request: at most
  ``miss_rate`` a second and one per ``cache_s``, however fast keys are tried. During
  such a flood, a key created by another process (``llmbridge keys create``, another
  replica) works within ``cache_s``; one created through this store (the admin API) at
  once. Past ``_DIRECTORY_MAX`` stored keys no directory is kept (its memory would grow
  with the table) and an unseen key past the bucket is one query.

Every value is checked here, once, before it reaches a database, so SQLite and
PostgreSQL give the same answer (accounts/key_fields.py has the rules): a name that is
not printable (a control character, which PostgreSQL refuses, or a format character
such as U+202E that makes one name look like another), more than 256 globs or one
longer than 200 characters, an empty glob (it would match no model: ``models`` left
out means every model), a limit past ``MAX_LIMIT`` (a PostgreSQL ``integer``) are
each a 400 naming the field. A record's globs (``models``, and ``mcp_tools``: the MCP
tools it may list and call, migration 0011) are compiled when it is read, so a request
matches its model or tool against them without compiling anything.
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import async_sessionmaker

from llmbridge.accounts.key_fields import (
    MAX_GLOBS,
    MAX_NAME,
    GlobSet,
    compiled_globs,
    has_control,
    validated_globs,
    validated_name,
)
from llmbridge.core.errors import InvalidRequestError, NotFoundError, ServiceUnavailableError
from llmbridge.core.ids import new_id
from llmbridge.store.database import Database
from llmbridge.store.errors import UNAVAILABLE, mapped_errors
from llmbridge.store.tables import ApiKeyRow
from llmbridge.web.auth import key_identity

__all__ = ["KEY_PREFIX", "MAX_LIMIT", "MAX_NAME", "KeyRecord", "KeyStore", "hash_key"]

KEY_PREFIX = "llmb-"
"""Every database key starts with it, so the middleware knows which keys to look up."""

_SHOWN_CHARS = 12
"""``prefix``: ``llmb-`` and 7 characters of the random part, enough to tell keys apart
in a list, far too few to guess the rest (32 bytes)."""

CACHE_S = 5.0
"""How long a process reuses a lookup (so how long a revoke takes to reach it)."""

_CACHE_MAX = 10_000
"""Keys the LRU holds; past it the least recently used goes (wrong keys must not grow it)."""

_DIRECTORY_MAX = 100_000
"""Stored keys up to which each process keeps the directory (about 10 MB at most)."""

MISS_BURST = 20
MISS_RATE = 5.0
"""Lookups of keys a process has not seen: ``MISS_BURST`` at once, then ``MISS_RATE`` a
second (a team's new keys come far slower; a flood of guesses far faster)."""

MAX_LIMIT = 2**31 - 1
"""The largest ``rpm``, ``tpm`` and ``max_parallel``: a PostgreSQL ``integer`` (SQLite
would store more, PostgreSQL refuses it; both get the same 400)."""


def hash_key(key: str) -> str:
    """The stored form of a key: its SHA-256, in hex."""
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """One key as stored (never its plaintext)."""

    id: str
    name: str
    prefix: str
    identity: str
    """``web.auth.key_identity`` of the key: the owner of the agent rows it creates."""
    created_at: datetime
    revoked_at: datetime | None
    rpm: int | None
    """Requests per minute (a sliding window); ``None``: no limit."""
    tpm: int | None
    """Tokens (prompt and reply) per minute."""
    max_parallel: int | None
    """Requests in flight at once."""
    budget_usd: float | None
    """Spending limit in US dollars (the usage ledger's costs)."""
    models: tuple[str, ...] | None
    """Globs of the public model names the key may use; ``None``: every model."""
    spent_usd: float
    """What the ledger has written to the database for this key so far."""
    mcp_tools: tuple[str, ...] | None = None
    """Globs of the MCP tool and prompt names (``<server>__<name>``) the key may list
    and use through the MCP gateway, which also say whose resources it reaches
    (mcp/permissions.py); ``None``: everything."""
    model_globs: GlobSet | None = field(default=None, compare=False, repr=False)
    """``models`` compiled, once, when the record is made (``None``: every model)."""
    tool_globs: GlobSet | None = field(default=None, compare=False, repr=False)
    """``mcp_tools`` compiled, once, when the record is made (``None``: every tool)."""

    def __post_init__(self) -> None:
        if self.models is not None and self.model_globs is None:
            object.__setattr__(self, "model_globs", compiled_globs(self.models))
        if self.mcp_tools is not None and self.tool_globs is None:
            object.__setattr__(self, "tool_globs", compiled_globs(self.mcp_tools))

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def allows(self, model: str) -> bool:
        """Whether the key may use the public model name ``model`` (no compiling: the
        globs were compiled with the record)."""
        return self.model_globs is None or self.model_globs.matches(model)

    def allows_tool(self, name: str) -> bool:
        """Whether the key may list and call the MCP tool ``name`` (``<server>__<tool>``;
        compiled with the record, as ``allows``)."""
        return self.tool_globs is None or self.tool_globs.matches(name)


def _record(row: ApiKeyRow) -> KeyRecord:
    return KeyRecord(
        id=row.id,
        name=row.name,
        prefix=row.prefix or "",
        identity=row.identity,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
        rpm=row.rpm,
        tpm=row.tpm,
        max_parallel=row.max_parallel,
        budget_usd=row.budget_usd,
        models=tuple(str(m) for m in row.models) if row.models is not None else None,
        spent_usd=float(row.spent_usd or 0.0),
        mcp_tools=tuple(str(t) for t in row.mcp_tools) if row.mcp_tools is not None else None,
    )


async def _records(rows: Iterable[ApiKeyRow]) -> list[KeyRecord]:
    """The records of ``rows``. The globs of a key stored before their bound (more
    than ``MAX_GLOBS``) are compiled in a worker thread first: tens of thousands take
    seconds, which the event loop must not wait (``compiled_globs`` keeps them, so the
    record then finds them compiled)."""
    rows = list(rows)
    for row in rows:
        for globs in (row.models, row.mcp_tools):
            if globs is not None and len(globs) > MAX_GLOBS:
                await asyncio.to_thread(compiled_globs, tuple(str(g) for g in globs))
    return [_record(row) for row in rows]


def _limit(name: str, value: int | None) -> int | None:
    if value is not None and value < 1:
        raise InvalidRequestError(f"{name} must be at least 1 (or unset for no limit)", param=name)
    if value is not None and value > MAX_LIMIT:
        raise InvalidRequestError(
            f"{name} must be at most {MAX_LIMIT} (2^31 - 1; unset for no limit)", param=name
        )
    return value


class KeyStore:
    """Create, list, revoke and find keys: the ``api_keys`` table's repository on the
    product's ``Database`` (store/database.py). The gateway hands it the one it
    opened; ``await KeyStore.open(url)`` opens one of its own (the CLI), closed with
    the store."""

    def __init__(
        self, database: Database, *, cache_s: float = CACHE_S, owns_database: bool = False
    ) -> None:
        self.database = database
        self.engine = database.engine
        self._owns_database = owns_database
        self._sessions = async_sessionmaker(database.engine, expire_on_commit=False)
        self._writes = async_sessionmaker(database.writer, expire_on_commit=False)
        self.cache_s = cache_s
        self._cache: OrderedDict[str, tuple[float, KeyRecord | None]] = OrderedDict()
        """Hash -> (when looked up, the record or ``None``), least recently used first."""
        self._looking_up: dict[str, asyncio.Future[KeyRecord | None]] = {}
        """Hash -> the query out for it: a request that needs the same key meanwhile
        waits for that answer."""
        self._directory: frozenset[str] | None = None
        """Every stored key's hash (``None``: not read yet, or past ``_DIRECTORY_MAX``)."""
        self._directory_at = -float("inf")
        self._directory_lock = asyncio.Lock()
        self.miss_burst = MISS_BURST
        self.miss_rate = MISS_RATE
        self._miss_tokens = float(MISS_BURST)
        self._miss_at = time.monotonic()
        self._directory_failed_at = -float("inf")
        """When the last directory read failed with the database unavailable."""

    @classmethod
    async def open(cls, url: str | Path | None, *, cache_s: float = CACHE_S) -> KeyStore:
        """The store on a ``Database`` of its own at ``url``, migrated to the newest
        schema."""
        return cls(await Database.open(url), cache_s=cache_s, owns_database=True)

    async def close(self) -> None:
        """Close the database if the store opened it (a handed one is its opener's)."""
        if self._owns_database:
            await self.database.close()

    async def create(
        self,
        name: str,
        *,
        rpm: int | None = None,
        tpm: int | None = None,
        max_parallel: int | None = None,
        budget_usd: float | None = None,
        models: Sequence[str] | None = None,
        mcp_tools: Sequence[str] | None = None,
    ) -> tuple[KeyRecord, str]:
        """A new key named ``name``: its record and its plaintext (shown once, never
        stored). ``ConflictError`` when the name is taken."""
        name = validated_name(name)
        if budget_usd is not None and not 0 <= budget_usd < float("inf"):  # NaN too
            raise InvalidRequestError("budget_usd must be 0 or more", param="budget_usd")
        globs = validated_globs("models", models, "model")
        tool_globs = validated_globs("mcp_tools", mcp_tools, "tool")
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        row = ApiKeyRow(
            id=new_id("key_"),
            name=name,
            key_hash=hash_key(key),
            identity=key_identity(key),
            prefix=key[:_SHOWN_CHARS],
            created_at=datetime.now(UTC),
            rpm=_limit("rpm", rpm),
            tpm=_limit("tpm", tpm),
            max_parallel=_limit("max_parallel", max_parallel),
            budget_usd=budget_usd,
            models=globs,
            mcp_tools=tool_globs,
            spent_usd=0.0,
        )
        with mapped_errors(conflict=f"a key named {name!r} exists"):
            async with self._writes() as session, session.begin():
                session.add(row)
        if self._directory is not None:
            # This process knows of the key at once (others within cache_s).
            self._directory = self._directory | {row.key_hash}
        self._cache.pop(row.key_hash, None)
        return _record(row), key

    async def list(self, *, log_unavailable: bool = True) -> builtins.list[KeyRecord]:
        """Every key, revoked ones included, oldest first. ``log_unavailable=False``:
        the caller logs a database that is down itself (store/outages.py)."""
        with mapped_errors(log_unavailable=log_unavailable):
            async with self._sessions() as session:
                rows = await session.scalars(
                    select(ApiKeyRow).order_by(ApiKeyRow.created_at, ApiKeyRow.id)
                )
                return await _records(rows)

    async def count_active(self) -> int:
        """How many keys are not revoked."""
        with mapped_errors():
            async with self._sessions() as session:
                count = await session.scalar(
                    select(func.count())
                    .select_from(ApiKeyRow)
                    .where(ApiKeyRow.revoked_at.is_(None))
                )
                return int(count or 0)

    async def find(self, name: str) -> KeyRecord | None:
        if has_control(name):
            return None  # never stored (``create`` refuses it); PostgreSQL would refuse it
        with mapped_errors():
            async with self._sessions() as session:
                row = await session.scalar(select(ApiKeyRow).where(ApiKeyRow.name == name))
                return (await _records([row]))[0] if row is not None else None

    async def revoke(self, name: str) -> KeyRecord:
        """Revoke the key named ``name`` (again: a no-op); ``NotFoundError`` if none is."""
        if has_control(name):
            raise NotFoundError(f"no key named {name!r}")
        with mapped_errors():
            async with self._writes() as session, session.begin():
                await session.execute(
                    update(ApiKeyRow)
                    .where(ApiKeyRow.name == name, ApiKeyRow.revoked_at.is_(None))
                    .values(revoked_at=datetime.now(UTC))
                )
                row = await session.scalar(select(ApiKeyRow).where(ApiKeyRow.name == name))
                if row is None:
                    raise NotFoundError(f"no key named {name!r}")
                record = _record(row)
        for digest, (_, cached) in list(self._cache.items()):
            if cached is not None and cached.id == record.id:
                del self._cache[digest]
        return record

    async def find_by_key(self, key: str) -> KeyRecord | None:
        """The record of the key ``key`` (revoked or not), ``None`` if there is none."""
        return await self._find_by_hash(hash_key(key))

    async def _find_by_hash(self, digest: str) -> KeyRecord | None:
        with mapped_errors():
            async with self._sessions() as session:
                row = await session.scalar(select(ApiKeyRow).where(ApiKeyRow.key_hash == digest))
                return (await _records([row]))[0] if row is not None else None

    async def cached(self, key: str) -> KeyRecord | None:
        """``find_by_key`` through the per-process cache, bucket and directory (module
        docstring): a query at most once per ``cache_s`` per key, and never one per
        request for keys nobody has."""
        digest = hash_key(key)
        now = time.monotonic()
        hit = self._cache.get(digest)
        if hit is not None and now - hit[0] < self.cache_s:
            self._cache.move_to_end(digest)
            return hit[1]
        if (hit is None or hit[1] is None) and not self._may_look_up(now):
            # Many unseen keys lately (guesses): the directory says whether any key has
            # this hash, without a query while it is fresh.
            directory = await self._fresh_directory()
            if directory is not None and digest not in directory:
                return None
        return await self._looked_up(digest)

    async def _looked_up(self, digest: str) -> KeyRecord | None:
        """``_find_by_hash`` of ``digest``, cached; one query at a time per key: the
        requests that find a key's entry expired while its query is out wait for its
        answer (64 requests in flight were 64 queries, each a round trip through the ORM
        and the database thread, every ``cache_s``). A waiter that is cancelled leaves
        the query to the others."""
        pending = self._looking_up.get(digest)
        if pending is None:
            pending = asyncio.ensure_future(self._find_and_cache(digest))
            self._looking_up[digest] = pending
            pending.add_done_callback(lambda done: self._lookup_done(digest, done))
        return await asyncio.shield(pending)

    async def _find_and_cache(self, digest: str) -> KeyRecord | None:
        asked = time.monotonic()  # the answer is as old as the query: cache_s from it
        record = await self._find_by_hash(digest)
        self._cache[digest] = (asked, record)
        self._cache.move_to_end(digest)
        if len(self._cache) > _CACHE_MAX:
            self._cache.popitem(last=False)
        return record

    def _lookup_done(self, digest: str, done: asyncio.Future[KeyRecord | None]) -> None:
        if self._looking_up.get(digest) is done:
            del self._looking_up[digest]
        if not done.cancelled():
            done.exception()  # its waiters raise it; none may be left to read it

    def _may_look_up(self, now: float) -> bool:
        """Take a token from the unseen keys' bucket, if one is left."""
        tokens = self._miss_tokens + (now - self._miss_at) * self.miss_rate
        self._miss_at = now
        self._miss_tokens = min(float(self.miss_burst), tokens)
        if self._miss_tokens < 1:
            return False
        self._miss_tokens -= 1
        return True

    async def _fresh_directory(self) -> frozenset[str] | None:
        """The directory, read again when older than ``cache_s``; requests that need
        it meanwhile wait for that one read (never one read each)."""
        if time.monotonic() - self._directory_at < self.cache_s:
            return self._directory
        waiting_since = time.monotonic()
        async with self._directory_lock:
            if time.monotonic() - self._directory_at < self.cache_s:
                return self._directory  # read while this request waited
            if self._directory_failed_at >= waiting_since:
                # The read this request waited for found the database down or frozen:
                # its 503 now, not one more deadline for each request in the queue.
                raise ServiceUnavailableError(UNAVAILABLE)
            started = time.monotonic()
            try:
                with mapped_errors():
                    async with self._sessions() as session:
                        hashes = (
                            await session.scalars(
                                select(ApiKeyRow.key_hash).limit(_DIRECTORY_MAX + 1)
                            )
                        ).all()
            except ServiceUnavailableError:
                self._directory_failed_at = time.monotonic()
                raise
            self._directory = frozenset(hashes) if len(hashes) <= _DIRECTORY_MAX else None
            self._directory_at = started
            return self._directory

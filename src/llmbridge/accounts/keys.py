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
  just created anywhere works at once.
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
PostgreSQL give the same answer: a name or a glob holding a control character
(PostgreSQL refuses U+0000 in text), a limit past ``MAX_LIMIT`` (a PostgreSQL
``integer``), an empty glob (it would match no model: ``models`` left out means every
model) are each a 400 naming the field.
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import secrets
import time
import unicodedata
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from pathlib import Path

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import async_sessionmaker

from llmbridge.core.errors import InvalidRequestError, NotFoundError, ServiceUnavailableError
from llmbridge.core.ids import new_id
from llmbridge.store.database import Database
from llmbridge.store.errors import UNAVAILABLE, mapped_errors
from llmbridge.store.models import ApiKeyRow
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

MAX_NAME = 200

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

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def allows(self, model: str) -> bool:
        """Whether the key may use the public model name ``model``."""
        return self.models is None or any(fnmatchcase(model, glob) for glob in self.models)


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
    )


def _limit(name: str, value: int | None) -> int | None:
    if value is not None and value < 1:
        raise InvalidRequestError(f"{name} must be at least 1 (or unset for no limit)", param=name)
    if value is not None and value > MAX_LIMIT:
        raise InvalidRequestError(
            f"{name} must be at most {MAX_LIMIT} (2^31 - 1; unset for no limit)", param=name
        )
    return value


def _has_control(text: str) -> bool:
    # U+0000 first of all: PostgreSQL refuses it in text, SQLite stores it.
    return any(unicodedata.category(c) == "Cc" for c in text)


def _validated_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > MAX_NAME:
        raise InvalidRequestError(
            f"a key's name must have 1 to {MAX_NAME} characters", param="name"
        )
    if _has_control(name):
        raise InvalidRequestError(
            "a key's name must not hold control characters (U+0000 to U+001F, U+007F to U+009F)",
            param="name",
        )
    return name


def _validated_globs(models: Sequence[str] | None) -> list[str] | None:
    """The globs as stored; ``None`` (every model) when ``models`` is ``None``."""
    if models is None:
        return None
    if not models:
        raise InvalidRequestError(
            "models is empty, which would allow no model: give at least one glob, or leave "
            "models out to allow every model",
            param="models",
        )
    for glob in models:
        if not glob.strip():
            raise InvalidRequestError(
                "models holds an empty glob, which matches no model: give a model name or "
                "glob (such as 'gpt-4o*'), or leave models out to allow every model",
                param="models",
            )
        if len(glob) > MAX_NAME or _has_control(glob):
            raise InvalidRequestError(
                f"a glob in models must have at most {MAX_NAME} characters and no control "
                "characters",
                param="models",
            )
    return list(models)


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
    ) -> tuple[KeyRecord, str]:
        """A new key named ``name``: its record and its plaintext (shown once, never
        stored). ``ConflictError`` when the name is taken."""
        name = _validated_name(name)
        if budget_usd is not None and not 0 <= budget_usd < float("inf"):  # NaN too
            raise InvalidRequestError("budget_usd must be 0 or more", param="budget_usd")
        globs = _validated_globs(models)
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

    async def list(self) -> builtins.list[KeyRecord]:
        """Every key, revoked ones included, oldest first."""
        with mapped_errors():
            async with self._sessions() as session:
                rows = await session.scalars(
                    select(ApiKeyRow).order_by(ApiKeyRow.created_at, ApiKeyRow.id)
                )
                return [_record(row) for row in rows]

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
        if _has_control(name):
            return None  # never stored (``create`` refuses it); PostgreSQL would refuse it
        with mapped_errors():
            async with self._sessions() as session:
                row = await session.scalar(select(ApiKeyRow).where(ApiKeyRow.name == name))
                return _record(row) if row is not None else None

    async def revoke(self, name: str) -> KeyRecord:
        """Revoke the key named ``name`` (again: a no-op); ``NotFoundError`` if none is."""
        if _has_control(name):
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
                return _record(row) if row is not None else None

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
        record = await self._find_by_hash(digest)
        self._cache[digest] = (now, record)
        self._cache.move_to_end(digest)
        if len(self._cache) > _CACHE_MAX:
            self._cache.popitem(last=False)
        return record

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

"""API keys kept in the database (``api_keys``, migration 0004), with their limits.

A key is ``llmb-`` and 32 random bytes, URL-safe base64 (``secrets.token_urlsafe``):
the plaintext is shown once, when it is created, and stored only as its SHA-256
(``key_hash``). ``find_by_key`` looks a presented key up *by its hash*: the database
compares hashes of a random 256-bit secret, so nothing about a stored key can be
learnt from how long a lookup takes, and no key is compared in Python.

A key owns agent rows like a static key does: its ``identity`` is
``web.auth.key_identity(key)``, computed at creation, when the plaintext is at hand.

``KeyStore.cached`` is what the auth middleware calls on every request: one
dictionary lookup, and a database query at most once per ``cache_s`` (5 s) per key
and process. So a revoked key stops working within ``cache_s`` on every replica
(docs/DEPLOY.md, "Keys and limits"), and a request never waits on the database
otherwise. A key nobody has (a wrong guess) is cached as absent for the same time, in a
bounded map, so guessing cannot turn into one query per request.
"""

from __future__ import annotations

import builtins
import hashlib
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from llmbridge.agent.store.engine import make_engine, write_engine
from llmbridge.agent.store.errors import mapped_errors
from llmbridge.agent.store.migrate import migrate
from llmbridge.agent.store.models import ApiKeyRow
from llmbridge.core.errors import InvalidRequestError, NotFoundError
from llmbridge.core.ids import new_id
from llmbridge.web.auth import key_identity

__all__ = ["KEY_PREFIX", "KeyRecord", "KeyStore", "hash_key"]

KEY_PREFIX = "llmb-"
"""Every database key starts with it, so the middleware knows which keys to look up."""

_SHOWN_CHARS = 12
"""``prefix``: ``llmb-`` and 7 characters of the random part, enough to tell keys apart
in a list, far too few to guess the rest (32 bytes)."""

CACHE_S = 5.0
"""How long a process reuses a lookup (so how long a revoke takes to reach it)."""

_CACHE_MAX = 10_000
"""Entries the cache holds before it starts over (wrong keys must not grow it)."""

MAX_NAME = 200


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


def _positive(name: str, value: int | None) -> int | None:
    if value is not None and value < 1:
        raise InvalidRequestError(f"{name} must be at least 1 (or unset for no limit)", param=name)
    return value


def _validated_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > MAX_NAME:
        raise InvalidRequestError(
            f"a key's name must have 1 to {MAX_NAME} characters", param="name"
        )
    return name


class KeyStore:
    """Create, list, revoke and find keys on the agent store's database."""

    def __init__(self, engine: AsyncEngine, *, cache_s: float = CACHE_S) -> None:
        self.engine = engine
        self._sessions = async_sessionmaker(engine, expire_on_commit=False)
        self._writes = async_sessionmaker(write_engine(engine), expire_on_commit=False)
        self.cache_s = cache_s
        self._cache: dict[str, tuple[float, KeyRecord | None]] = {}

    @classmethod
    async def open(cls, url: str | Path | None, *, cache_s: float = CACHE_S) -> KeyStore:
        """The store on the database at ``url``, migrated to the newest schema."""
        engine = make_engine(url)
        try:
            with mapped_errors():
                await migrate(engine)
        except BaseException:
            await engine.dispose()
            raise
        return cls(engine, cache_s=cache_s)

    async def close(self) -> None:
        await self.engine.dispose()

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
        if budget_usd is not None and not budget_usd >= 0:  # NaN too
            raise InvalidRequestError("budget_usd must be 0 or more", param="budget_usd")
        globs = [g for g in (models or ()) if g] if models is not None else None
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        row = ApiKeyRow(
            id=new_id("key_"),
            name=name,
            key_hash=hash_key(key),
            identity=key_identity(key),
            prefix=key[:_SHOWN_CHARS],
            created_at=datetime.now(UTC),
            rpm=_positive("rpm", rpm),
            tpm=_positive("tpm", tpm),
            max_parallel=_positive("max_parallel", max_parallel),
            budget_usd=budget_usd,
            models=globs,
            spent_usd=0.0,
        )
        with mapped_errors(conflict=f"a key named {name!r} exists"):
            async with self._writes() as session, session.begin():
                session.add(row)
        return _record(row), key

    async def list(self) -> builtins.list[KeyRecord]:
        """Every key, revoked ones included, oldest first."""
        with mapped_errors():
            async with self._sessions() as session:
                rows = await session.scalars(
                    select(ApiKeyRow).order_by(ApiKeyRow.created_at, ApiKeyRow.id)
                )
                return [_record(row) for row in rows]

    async def find(self, name: str) -> KeyRecord | None:
        with mapped_errors():
            async with self._sessions() as session:
                row = await session.scalar(select(ApiKeyRow).where(ApiKeyRow.name == name))
                return _record(row) if row is not None else None

    async def revoke(self, name: str) -> KeyRecord:
        """Revoke the key named ``name`` (again: a no-op); ``NotFoundError`` if none is."""
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
        self._cache = {h: v for h, v in self._cache.items() if v[1] is None or v[1].id != record.id}
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
        """``find_by_key`` through the per-process cache (module docstring)."""
        digest = hash_key(key)
        now = time.monotonic()
        hit = self._cache.get(digest)
        if hit is not None and now - hit[0] < self.cache_s:
            return hit[1]
        record = await self._find_by_hash(digest)
        if len(self._cache) >= _CACHE_MAX:
            self._cache.clear()
        self._cache[digest] = (now, record)
        return record

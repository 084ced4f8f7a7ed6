"""Probes for ``/health``: each backend's, and the database's; each last result reused
for a moment, one probe in flight per backend and one for the database.

``/health`` is polled by load balancers and orchestrators, and without a key anyone
may call it (it then says only up/degraded/down). Probing every backend on every call
would pass each caller's load on to the backends, and make ``/health`` as slow as the
slowest of them: a single-threaded backend busy reading a 32 MB request held it for
60-70 ms (``bench/health_under_load.py``). So a probe's result is reused for
``server.health_cache_s`` (1 s by default; 0 probes on every call), and callers that
arrive while a probe runs wait for that one instead of starting another.

The database (keys, the usage ledger, the agent's tables, stored responses) is
probed with ``SELECT 1`` on a connection of the probe's own, opened for the
probe and closed after it (no pool: nothing is held between probes, nothing to close
at shutdown, and a request pool that a frozen server has filled does not make the
probe wait behind it). It has short deadlines of its own (``DATABASE_PROBE``), well
under the request path's (``store/engine.py``), so ``/health`` says the
database is down within seconds, however the server fails.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.pool import NullPool

from llmbridge.backends.base import Backend, BackendHealth
from llmbridge.store.engine import Deadlines, make_engine, resolve_url, shown_url

__all__ = [
    "DATABASE_PROBE",
    "DATABASE_PROBE_TIMEOUT_S",
    "PROBE_TIMEOUT_S",
    "DatabaseProbe",
    "HealthProbes",
]

PROBE_TIMEOUT_S = 5.0
"""A backend that has not answered its probe by then is reported down."""

DATABASE_PROBE = Deadlines(connect_s=2.0, statement_s=2.0, pool_s=2.0)
"""The database probe's deadlines: a healthy server connects and answers ``SELECT 1``
in milliseconds; 2 s rides out a lost SYN's first retransmission (1 s)."""

DATABASE_PROBE_TIMEOUT_S = 8.0
"""The whole database probe's bound, a safety net over ``DATABASE_PROBE``: connect,
the statement, and the 2 s SQLAlchemy gives asyncpg to close a connection politely."""


@dataclass(slots=True)
class _Entry:
    result: BackendHealth | None = None
    taken_at: float = 0.0
    running: asyncio.Task[BackendHealth] | None = None


async def _cached(
    entry: _Entry, max_age_s: float, probe: Callable[[], Awaitable[BackendHealth]]
) -> BackendHealth:
    """``entry``'s last result if younger than ``max_age_s``, else the probe in
    flight, else a new ``probe()``."""
    now = time.monotonic()
    if entry.result is not None and now - entry.taken_at < max_age_s:
        return entry.result
    if entry.running is None:
        entry.running = asyncio.create_task(_run(entry, probe))
    # shield: a caller that leaves must not cancel the probe the others await
    return await asyncio.shield(entry.running)


async def _run(entry: _Entry, probe: Callable[[], Awaitable[BackendHealth]]) -> BackendHealth:
    try:
        result = await probe()
    finally:
        entry.running = None
    entry.result, entry.taken_at = result, time.monotonic()
    return result


async def _bounded(probe: Awaitable[BackendHealth], timeout_s: float) -> BackendHealth:
    """``probe``'s result; a probe that fails or takes longer than ``timeout_s`` is a
    result too (not ok, and why)."""
    try:
        return await asyncio.wait_for(probe, timeout_s)
    except TimeoutError:
        return BackendHealth(ok=False, detail=f"no answer within {timeout_s:g}s")
    except Exception as exc:  # noqa: BLE001 - a failing probe is a result, not an error
        return BackendHealth(ok=False, detail=f"{type(exc).__name__}: {exc}")


@dataclass(slots=True)
class DatabaseProbe:
    """The reachability of the database at ``url`` (module docstring)."""

    url: str | Path
    max_age_s: float
    _entry: _Entry = field(default_factory=_Entry)

    @property
    def shown(self) -> str:
        """``url`` without its password (``engine.shown_url``)."""
        return shown_url(self.url)

    @property
    def kind(self) -> str:
        """``sqlite`` or ``postgresql`` (``unknown`` for a URL the store refuses)."""
        try:
            return resolve_url(self.url).get_backend_name()
        except Exception:  # noqa: BLE001 - probing it says why
            return "unknown"

    async def probe(self) -> BackendHealth:
        """The database's health: the last result if younger than ``max_age_s``, else
        the probe in flight, else a new probe."""
        return await _cached(
            self._entry,
            self.max_age_s,
            lambda: _bounded(self._select_one(), DATABASE_PROBE_TIMEOUT_S),
        )

    async def _select_one(self) -> BackendHealth:
        started = time.perf_counter()
        engine = make_engine(self.url, deadlines=DATABASE_PROBE, poolclass=NullPool)
        try:
            async with engine.connect() as conn:
                await conn.exec_driver_sql("SELECT 1")
        except TimeoutError:
            # asyncpg's connect and statement deadlines (the builtin TimeoutError).
            longest = max(DATABASE_PROBE.connect_s, DATABASE_PROBE.statement_s)
            return BackendHealth(ok=False, detail=f"no answer within {longest:g}s")
        except Exception as exc:  # noqa: BLE001 - the kind of failure, never the URL
            return BackendHealth(ok=False, detail=f"unreachable ({type(exc).__name__})")
        finally:
            await engine.dispose()
        return BackendHealth(ok=True, latency_ms=(time.perf_counter() - started) * 1000)


@dataclass(slots=True)
class HealthProbes:
    """The probes of one gateway's backends."""

    max_age_s: float
    _entries: dict[str, _Entry] = field(default_factory=dict)
    _database: DatabaseProbe | None = None

    async def probe(self, name: str, backend: Backend) -> BackendHealth:
        """``backend``'s health: the last result if younger than ``max_age_s``, else
        the probe in flight, else a new probe."""
        entry = self._entries.setdefault(name, _Entry())
        return await _cached(
            entry, self.max_age_s, lambda: _bounded(backend.health(), PROBE_TIMEOUT_S)
        )

    def database(self, url: str | Path) -> DatabaseProbe:
        """The probe of the database at ``url`` (one per gateway: made on first use)."""
        if self._database is None or self._database.url != url:
            self._database = DatabaseProbe(url, self.max_age_s)
        return self._database

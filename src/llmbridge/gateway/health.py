"""Backend probes for ``/health``: each backend's last result reused for a moment,
one probe in flight per backend.

``/health`` is polled by load balancers and orchestrators, and without a key anyone
may call it (it then says only up/degraded/down). Probing every backend on every call
would pass each caller's load on to the backends, and make ``/health`` as slow as the
slowest of them: a single-threaded backend busy reading a 32 MB request held it for
60-70 ms (issue 13, ``bench/health_under_load.py``). So a probe's result is reused for
``server.health_cache_s`` (1 s by default; 0 probes on every call), and callers that
arrive while a probe runs wait for that one instead of starting another.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from llmbridge.backends.base import Backend, BackendHealth

__all__ = ["PROBE_TIMEOUT_S", "HealthProbes"]

PROBE_TIMEOUT_S = 5.0
"""A backend that has not answered its probe by then is reported down."""


@dataclass(slots=True)
class _Entry:
    result: BackendHealth | None = None
    taken_at: float = 0.0
    running: asyncio.Task[BackendHealth] | None = None


@dataclass(slots=True)
class HealthProbes:
    """The probes of one gateway's backends."""

    max_age_s: float
    _entries: dict[str, _Entry] = field(default_factory=dict)

    async def probe(self, name: str, backend: Backend) -> BackendHealth:
        """``backend``'s health: the last result if younger than ``max_age_s``, else
        the probe in flight, else a new probe."""
        entry = self._entries.setdefault(name, _Entry())
        now = time.monotonic()
        if entry.result is not None and now - entry.taken_at < self.max_age_s:
            return entry.result
        if entry.running is None:
            entry.running = asyncio.create_task(self._run(entry, backend))
        # shield: a caller that leaves must not cancel the probe the others await
        return await asyncio.shield(entry.running)

    @staticmethod
    async def _run(entry: _Entry, backend: Backend) -> BackendHealth:
        try:
            result = await asyncio.wait_for(backend.health(), PROBE_TIMEOUT_S)
        except TimeoutError:
            result = BackendHealth(ok=False, detail=f"no answer within {PROBE_TIMEOUT_S:g}s")
        except Exception as exc:  # noqa: BLE001 - a failing probe is a result, not an error
            result = BackendHealth(ok=False, detail=f"{type(exc).__name__}: {exc}")
        finally:
            entry.running = None
        entry.result, entry.taken_at = result, time.monotonic()
        return result

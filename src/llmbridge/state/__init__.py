"""Shared state: rate windows, in-flight counts, breakers and spend, in process or in Redis.

No HTTP here. ``open_state(redis_url)`` (coming with ``state.local`` and
``state.redis``) builds the state a gateway uses: ``LocalState`` with no URL,
else the Redis-backed state with a local fallback.
"""

from __future__ import annotations

from llmbridge.state.base import BreakerView, SharedState, WindowVerdict

__all__ = ["BreakerView", "SharedState", "WindowVerdict"]

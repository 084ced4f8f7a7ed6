"""Shared state: rate windows, in-flight counts, breakers and spend, in process or in Redis.

No HTTP here. ``open_state(redis_url)`` builds the state a gateway uses:
``LocalState`` with no URL, else the Redis-backed state with a local fallback.
"""

from __future__ import annotations

from llmbridge.state.base import BreakerView, SharedState, WindowVerdict

__all__ = ["BreakerView", "SharedState", "WindowVerdict", "open_state"]


def open_state(redis_url: str | None) -> SharedState:
    """``LocalState()`` when ``redis_url`` is empty, else Redis with a local fallback."""
    from llmbridge.state.local import LocalState

    if not redis_url:
        return LocalState()
    from llmbridge.state.failover import FailoverState

    return FailoverState(redis_url)

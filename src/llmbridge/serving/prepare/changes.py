"""What serving changed in a request, as data: ``Changes``.

``prepare`` (``fit.py``) says what it did to fit a request to its backend, and
``Models`` who answered when a fallback did; the gateway turns that into
``x-llmbridge-*`` response headers (``gateway/pipeline.py``) and the agent may log
it. It is data, never header names, so serving knows nothing of HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmbridge.core.context_edits import AppliedEdit

__all__ = ["UNCHANGED", "Changes"]


@dataclass(frozen=True, slots=True)
class Changes:
    """What serving changed in a request, or about who answered it."""

    thinking_dropped: bool = False
    """The model cannot think; the request was served without thinking."""
    tools_emulated: bool = False
    """The model has no native tools; tool calls are emulated by prompting."""
    max_tokens: int | None = None
    """``max_tokens`` was clamped to this (the model's or the route's limit)."""
    params: tuple[str, ...] = ()
    """Sampling parameters converted or dropped for this backend, and ``num_ctx=N``
    where serving set the context window (serving/prepare/context_size.py)."""
    fallback: str | None = None
    """``backend/model`` of the fallback that served the reply, if one did."""
    dropped_items: tuple[str, ...] = ()
    """What another backend carried in the history that this one cannot read, left
    out: ``kind=count`` entries (``reasoning=2``, ``compaction=1``;
    serving/prepare/carried_state.py)."""
    compaction: str | None = None
    """How a compaction was made: ``native`` (the backend compacted) or ``summary``
    (the backend was asked for a summary: features/compaction.py)."""
    context_edits: tuple[AppliedEdit, ...] = ()
    """What the client's context edits cleared (features/context_editing.py)."""


UNCHANGED = Changes()

"""Context providers: pluggable sources of domain context for the system prompt.

A provider looks at the user's input (and the session's persona and patient) and
returns a block of text for the system prompt, or ``""`` when it has nothing
relevant. The agent asks every provider at once, bounds each answer to the
request's token budget, and skips a provider that fails (logged), as the seed's
prompt assembly degrades rather than failing the turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

from llmbridge.agent.memory import truncate_to_tokens

__all__ = ["ContextProvider", "ContextRequest", "gather_context"]

log = logging.getLogger("llmbridge.agent.context")


@dataclass(frozen=True, slots=True)
class ContextRequest:
    """What a provider may base its context on."""

    user_input: str
    session_id: str | None = None
    persona_id: str | None = None
    patient_id: int | None = None
    """The patient the session is about, when it says so."""
    budget: int = 800
    """The most tokens (gateway counter) the provider's block may take."""
    owner: str | None = None
    """Whose turn it is (``store.access``): a provider shows only what they may see."""
    now: datetime = field(default_factory=lambda: datetime.now(UTC))


@runtime_checkable
class ContextProvider(Protocol):
    name: str

    async def context(self, request: ContextRequest) -> str:
        """A block of context for the system prompt, or ``""``."""
        ...


async def gather_context(
    providers: Sequence[ContextProvider], request: ContextRequest
) -> list[str]:
    """Every provider's non-empty block, in provider order, each within the budget."""

    async def one(provider: ContextProvider) -> str:
        try:
            text = await provider.context(request)
        except Exception:  # a provider's failure costs its block, not the turn
            log.exception("context provider %s failed", provider.name)
            return ""
        return truncate_to_tokens(text.strip(), request.budget)

    blocks = await asyncio.gather(*(one(p) for p in providers))
    return [b for b in blocks if b]

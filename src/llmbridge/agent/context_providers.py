"""Context providers: pluggable sources of domain context for a turn's prompt.

A provider looks at the user's input (and the session, its persona and its subject: what
the conversation is about, ``ContextRequest.subject_id``) and returns a block of text
for this turn's context, or ``""`` when it has nothing relevant. A domain
(``agent.domains``) brings its providers; the eldercare one adds the patient's record.
The agent asks every provider at once, bounds each answer to the request's token budget,
and skips a provider that fails (logged), as the seed's prompt assembly degrades rather
than failing the turn. The blocks, in provider order, go with the input at the end of
the prompt (``agent.prompt``), never in front of the stable system prompt: they follow
the input and the clock (``ContextRequest.now``).

The budget follows the model's capability, as the seed's ``EldercareContextService``
"checks model capabilities (token limits)": ``context_budget`` gives a provider
``CONTEXT_SHARE`` (a tenth) of the model's context window, between
``MIN_CONTEXT_BUDGET`` and ``MAX_CONTEXT_BUDGET``. A 2,048-token model gets 204 tokens
of domain data (a patient's record) and keeps room for the history, the question and the
answer; a 128k model gets the whole record (4,000); a model whose window is unknown gets
``DEFAULT_CONTEXT_BUDGET`` (800, a tenth of the embedded model's 8,192).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

from llmbridge.agent.memory import truncate_to_tokens

__all__ = [
    "CONTEXT_SHARE",
    "DEFAULT_CONTEXT_BUDGET",
    "MAX_CONTEXT_BUDGET",
    "MIN_CONTEXT_BUDGET",
    "ContextProvider",
    "ContextRequest",
    "context_budget",
    "gather_context",
]

log = logging.getLogger("llmbridge.agent.context_providers")

CONTEXT_SHARE = 0.1
"""The share of the model's context window one provider's block may take."""
MIN_CONTEXT_BUDGET = 100
"""Enough for a record's header and a few lines (a patient's), even on a tiny model."""
MAX_CONTEXT_BUDGET = 4000
"""More than a full record (a patient's overview): a larger window buys no more context."""
DEFAULT_CONTEXT_BUDGET = 800
"""When the model's window is unknown (the seed's budget for a 4k-8k model)."""


def context_budget(window: int | None) -> int:
    """The tokens a provider's block may take for a model with a ``window``-token
    context (``None``: unknown). See the module docstring."""
    if not window or window <= 0:
        return DEFAULT_CONTEXT_BUDGET
    return max(MIN_CONTEXT_BUDGET, min(MAX_CONTEXT_BUDGET, int(window * CONTEXT_SHARE)))


@dataclass(frozen=True, slots=True)
class ContextRequest:
    """What a provider may base its context on."""

    user_input: str
    session_id: str | None = None
    persona_id: str | None = None
    subject_id: int | None = None
    """What the session is about, when it says so (``SessionRecord.subject_id``: a
    patient, for eldercare)."""
    budget: int = DEFAULT_CONTEXT_BUDGET
    """The most tokens (gateway counter) the provider's block may take
    (``context_budget`` of the model's window)."""
    owner: str | None = None
    """Whose turn it is (``store.access``): a provider shows only what they may see."""
    now: datetime = field(default_factory=lambda: datetime.now(UTC))


@runtime_checkable
class ContextProvider(Protocol):
    name: str

    async def context(self, request: ContextRequest) -> str:
        """A block of context for this turn, or ``""``."""
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

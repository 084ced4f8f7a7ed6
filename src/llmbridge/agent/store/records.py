"""Plain values read from the agent's tables.

Rows never leave ``store``: callers get these frozen dataclasses, so nothing outside
the storage layer holds a live ORM object or can lazy-load through a closed session.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

__all__ = [
    "FactRecord",
    "FactSource",
    "LongSummaryRecord",
    "MessageStatus",
    "PersonaRecord",
    "PinRecord",
    "SessionRecord",
    "StoredMessage",
    "SummaryRecord",
]

MessageStatus = Literal["complete", "incomplete"]
FactSource = Literal["extracted", "user"]


@dataclass(frozen=True, slots=True)
class PersonaRecord:
    id: str
    name: str
    prompt: str
    settings: dict[str, Any]
    """The stored settings (only those that were set); see ``AgentSettings``."""
    created_at: datetime
    updated_at: datetime
    owner: str | None = None
    """The hash of the API key that created it; ``None``: shared (``store.access``)."""


@dataclass(frozen=True, slots=True)
class SessionRecord:
    id: str
    name: str
    persona_id: str | None
    subject_id: int | None
    """What the conversation is about: an id the subject-owning domain checks
    (``agent.domains``; a patient for eldercare), or ``None``."""
    created_at: datetime
    updated_at: datetime
    owner: str | None = None
    """The hash of the API key that created it (``store.access``)."""


@dataclass(frozen=True, slots=True)
class StoredMessage:
    id: int
    session_id: str
    role: str
    content: str
    created_at: datetime
    token_count: int = 0
    status: MessageStatus = "complete"
    tool_data: dict[str, Any] | None = None
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class SummaryRecord:
    id: int
    session_id: str
    content: str
    first_message_id: int
    last_message_id: int
    token_count: int
    created_at: datetime
    message_ids: tuple[int, ...] = field(default=())
    model: str | None = None


@dataclass(frozen=True, slots=True)
class PinRecord:
    id: int
    session_id: str
    content: str
    token_count: int
    created_at: datetime
    message_id: int | None = None


@dataclass(frozen=True, slots=True)
class LongSummaryRecord:
    """The rolling long-range summary: every message up to ``last_message_id``."""

    id: int
    session_id: str
    content: str
    first_message_id: int
    last_message_id: int
    folded: int
    token_count: int
    created_at: datetime
    model: str | None = None


@dataclass(frozen=True, slots=True)
class FactRecord:
    id: int
    session_id: str
    content: str
    token_count: int
    created_at: datetime
    updated_at: datetime
    source: FactSource = "extracted"
    message_id: int | None = None
    subject_id: int | None = None
    """The session's subject when it was stored: shown in its other sessions too."""

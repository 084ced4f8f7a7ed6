"""What a backend answers: usage, timings, stop reasons, the complete response.

A non-streaming response is always the accumulation of a stream of events (see
``accumulate``), so this module only defines the values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from llmbridge.core.frozen import faster_frozen_init
from llmbridge.core.messages import Message

__all__ = [
    "ChatResponse",
    "EmbedResponse",
    "StopReason",
    "Timings",
    "Usage",
]


class StopReason(StrEnum):
    """Why generation ended, in neutral terms (each dialect maps its own names)."""

    END_TURN = "end_turn"
    MAX_TOKENS = "max_tokens"
    STOP_SEQUENCE = "stop_sequence"
    TOOL_USE = "tool_use"
    CONTENT_FILTER = "content_filter"
    ERROR = "error"


@faster_frozen_init
@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts. ``None`` means the backend did not say."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    reasoning_tokens: int | None = None
    """Of ``output_tokens``, those spent reasoning, when the backend says (OpenAI's
    ``completion_tokens_details`` / ``output_tokens_details``)."""

    def merged(self, other: Usage) -> Usage:
        """``other``'s known values win; unknown ones keep ours."""
        return Usage(
            input_tokens=_pick(other.input_tokens, self.input_tokens),
            output_tokens=_pick(other.output_tokens, self.output_tokens),
            cache_read_input_tokens=_pick(
                other.cache_read_input_tokens, self.cache_read_input_tokens
            ),
            cache_creation_input_tokens=_pick(
                other.cache_creation_input_tokens, self.cache_creation_input_tokens
            ),
            reasoning_tokens=_pick(other.reasoning_tokens, self.reasoning_tokens),
        )

    def plus(self, other: Usage) -> Usage:
        """Both calls' tokens (two model calls spent on one request): each count
        summed where either knows it, unknown where neither does."""
        return Usage(
            input_tokens=_sum(self.input_tokens, other.input_tokens),
            output_tokens=_sum(self.output_tokens, other.output_tokens),
            cache_read_input_tokens=_sum(
                self.cache_read_input_tokens, other.cache_read_input_tokens
            ),
            cache_creation_input_tokens=_sum(
                self.cache_creation_input_tokens, other.cache_creation_input_tokens
            ),
            reasoning_tokens=_sum(self.reasoning_tokens, other.reasoning_tokens),
        )


def _pick(first: int | None, second: int | None) -> int | None:
    return first if first is not None else second


def _sum(first: int | None, second: int | None) -> int | None:
    return None if first is None and second is None else (first or 0) + (second or 0)


@dataclass(frozen=True, slots=True)
class Timings:
    """Durations in nanoseconds, as Ollama reports them. ``None`` when unknown."""

    total_ns: int | None = None
    load_ns: int | None = None
    prompt_eval_ns: int | None = None
    eval_ns: int | None = None


@faster_frozen_init
@dataclass(frozen=True, slots=True)
class ChatResponse:
    """A complete assistant reply."""

    id: str
    model: str
    message: Message
    stop_reason: StopReason = StopReason.END_TURN
    stop_sequence: str | None = None
    usage: Usage = field(default_factory=Usage)
    timings: Timings = field(default_factory=Timings)
    created: float = 0.0
    """Unix time the response was created."""
    provider_details: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class EmbedResponse:
    """One vector per input, in input order."""

    model: str
    embeddings: tuple[tuple[float, ...], ...]
    input_tokens: int | None = None
    timings: Timings = field(default_factory=Timings)

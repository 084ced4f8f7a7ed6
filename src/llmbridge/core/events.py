"""Stream events: the neutral form of a streamed response.

A well-formed stream is::

    ResponseStart, (PartStart, PartDelta*, PartEnd)*, UsageUpdate*, (ResponseEnd | StreamError)

Exactly one part is open at a time and parts are numbered from 0 in order, which is
what Anthropic's content blocks need and what every other dialect can flatten.
``PartEnd`` carries the finished part, so encoders that emit whole items (Ollama tool
calls, OpenAI non-streamed messages) never re-accumulate deltas themselves.
Streams are produced by ``parts_manager.PartsManager`` and consumed by the dialect
stream encoders and by ``accumulate.accumulate``.

Events are plain (not frozen) slotted dataclasses: one or two are created per
streamed token, and a frozen dataclass's ``__init__`` goes through
``object.__setattr__`` per field, which showed up in the gateway's profile. Treat
them as immutable all the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from llmbridge.core.errors import LLMBridgeError
from llmbridge.core.messages import Part
from llmbridge.core.response import StopReason, Timings, Usage

__all__ = [
    "Delta",
    "PartDelta",
    "PartEnd",
    "PartStart",
    "Relayed",
    "ResponseEnd",
    "ResponseStart",
    "SignatureDelta",
    "StreamError",
    "StreamEvent",
    "TextDelta",
    "ThinkingDelta",
    "ToolArgsDelta",
    "UsageUpdate",
]


@dataclass(slots=True)
class TextDelta:
    text: str
    kind: Literal["text"] = "text"


@dataclass(slots=True)
class ThinkingDelta:
    text: str
    kind: Literal["thinking"] = "thinking"


@dataclass(slots=True)
class SignatureDelta:
    signature: str
    kind: Literal["signature"] = "signature"


@dataclass(slots=True)
class ToolArgsDelta:
    """A fragment of a tool call's JSON arguments; fragments concatenate."""

    json_fragment: str
    kind: Literal["tool_args"] = "tool_args"


Delta = TextDelta | ThinkingDelta | SignatureDelta | ToolArgsDelta


@dataclass(slots=True)
class ResponseStart:
    """The first event: identifies the response."""

    id: str
    model: str
    created: float
    """Unix time."""
    input_tokens: int | None = None
    """An estimate of the prompt size, for dialects that announce it up front."""
    event: Literal["response_start"] = "response_start"


@dataclass(slots=True)
class PartStart:
    """A new part opens. ``part`` is its initial value (empty text, tool name and id)."""

    index: int
    part: Part
    event: Literal["part_start"] = "part_start"


@dataclass(slots=True)
class PartDelta:
    index: int
    delta: Delta
    event: Literal["part_delta"] = "part_delta"


@dataclass(slots=True)
class PartEnd:
    """The part closes; ``part`` is its complete value."""

    index: int
    part: Part
    event: Literal["part_end"] = "part_end"


@dataclass(slots=True)
class UsageUpdate:
    """Token counts known so far (later values win)."""

    usage: Usage
    event: Literal["usage"] = "usage"


@dataclass(slots=True)
class ResponseEnd:
    """The last event of a successful stream."""

    stop_reason: StopReason
    usage: Usage = field(default_factory=Usage)
    timings: Timings = field(default_factory=Timings)
    stop_sequence: str | None = None
    provider_details: dict[str, Any] | None = None
    """What the backend said of the whole reply that the core does not model, by
    dialect, for a front of the same dialect (Anthropic's ``context_management``
    report); ``ChatResponse.provider_details`` once accumulated."""
    event: Literal["response_end"] = "response_end"


@dataclass(slots=True)
class StreamError:
    """The stream failed after it started; this is its last event."""

    error: LLMBridgeError
    event: Literal["error"] = "error"


@dataclass(slots=True)
class Relayed:
    """Bytes of a backend's reply relayed to a client of the backend's own dialect as
    they came (the pass-through path, core/relay.py): whole frames of a stream, or a
    whole reply. Between a ``ResponseStart`` and a ``ResponseEnd`` as any part's
    events are; what the client gets is these bytes alone."""

    data: bytes
    text: str = ""
    """The text the bytes carry (content, reasoning, tool arguments): a cut reply's
    bill counts it."""
    error: LLMBridgeError | None = None
    """The backend's in-band error the bytes carry (relayed as they are): the reply
    failed with it."""
    event: Literal["relayed"] = "relayed"


StreamEvent = (
    ResponseStart
    | PartStart
    | PartDelta
    | PartEnd
    | UsageUpdate
    | ResponseEnd
    | StreamError
    | Relayed
)

"""The adapter's event shape: ART-style ``StreamEvent`` values, metadata and errors.

Seed 003 (the ART framework's ``OllamaAdapter``) streams events whose ``type`` is
``TOKEN``, ``METADATA``, ``ERROR`` or ``END`` and whose ``data`` depends on the type:

    TOKEN     str (a text or thinking delta), or a list of ``{"type": "text", ...}`` /
              ``{"type": "tool_use", ...}`` items (the tool calls at the end of a
              stream; the whole reply when not streaming); ``token_type`` says which
    METADATA  ``LLMMetadata``: stop reason, token counts, timings
    ERROR     ``AdapterError``: ``code``, ``status``, ``message``
    END       ``None``; always the last event

These are the Python spellings (snake_case fields, ``StrEnum`` types). The neutral
events of ``llmbridge.core.events`` are what the adapter turns into these; people who
do not want ART's shape use them directly through ``OllamaAdapter.stream``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, Literal, TypeAlias, TypedDict

from llmbridge.core.errors import BackendHTTPError, LLMBridgeError

__all__ = [
    "AdapterError",
    "ErrorCode",
    "EventData",
    "EventType",
    "LLMMetadata",
    "StreamEvent",
    "TextItem",
    "TokenData",
    "TokenType",
    "ToolUseItem",
    "provider_error",
    "token_types",
]


class EventType(StrEnum):
    """What an event carries."""

    TOKEN = "TOKEN"
    METADATA = "METADATA"
    ERROR = "ERROR"
    END = "END"


class TokenType(StrEnum):
    """What a TOKEN is, ART's names: the phase of the agent and answer vs. reasoning.

    The adapter sets ``AGENT_THOUGHT_*`` when ``call_context == "AGENT_THOUGHT"`` and
    ``FINAL_SYNTHESIS_*`` otherwise, exactly as the seed's adapter does. The plain
    ``LLM_*`` names exist in ART's type and are kept for completeness.
    """

    LLM_THINKING = "LLM_THINKING"
    LLM_RESPONSE = "LLM_RESPONSE"
    AGENT_THOUGHT_LLM_THINKING = "AGENT_THOUGHT_LLM_THINKING"
    AGENT_THOUGHT_LLM_RESPONSE = "AGENT_THOUGHT_LLM_RESPONSE"
    FINAL_SYNTHESIS_LLM_THINKING = "FINAL_SYNTHESIS_LLM_THINKING"
    FINAL_SYNTHESIS_LLM_RESPONSE = "FINAL_SYNTHESIS_LLM_RESPONSE"


def token_types(call_context: str | None) -> tuple[TokenType, TokenType]:
    """``(response, thinking)`` token types for a call context."""
    if call_context == "AGENT_THOUGHT":
        return TokenType.AGENT_THOUGHT_LLM_RESPONSE, TokenType.AGENT_THOUGHT_LLM_THINKING
    return TokenType.FINAL_SYNTHESIS_LLM_RESPONSE, TokenType.FINAL_SYNTHESIS_LLM_THINKING


class ErrorCode(StrEnum):
    """ART's error codes, the ones this adapter produces."""

    INVALID_CONFIG = "INVALID_CONFIG"
    """No model resolved, a malformed tool schema, a bad parameter or runtime config."""
    PROMPT_TRANSLATION_FAILED = "PROMPT_TRANSLATION_FAILED"
    """A prompt message could not be translated (unknown role, tool result without id)."""
    LLM_PROVIDER_ERROR = "LLM_PROVIDER_ERROR"
    """The provider failed: an error status, unreachable, a timeout, malformed output,
    or an error reported inside the stream."""


class AdapterError(Exception):
    """An error the adapter reports, as ``ERROR`` event data or raised by the plain API.

    Attributes:
        code: an ``ErrorCode``.
        message: human-readable text.
        status: for provider errors, the HTTP status the provider answered with, or
            the status llmbridge gives a failure without one (502 malformed output or
            an in-band error, 503 unreachable, 504 timeout); ``None`` otherwise.
        cause: the underlying exception (also ``__cause__``), usually a
            ``llmbridge.core.errors.LLMBridgeError``.
    """

    def __init__(
        self,
        message: str,
        code: ErrorCode,
        *,
        status: int | None = None,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.cause = cause
        if cause is not None:
            self.__cause__ = cause

    def __repr__(self) -> str:
        return f"AdapterError({self.message!r}, code={self.code.value}, status={self.status})"


def provider_error(exc: BaseException) -> AdapterError:
    """Wrap a provider failure (normally a ``core.errors`` exception) as ``LLM_PROVIDER_ERROR``."""
    if isinstance(exc, BackendHTTPError):
        status: int | None = exc.backend_status
    elif isinstance(exc, LLMBridgeError):
        status = exc.status_code
    else:
        status = None
    message = exc.message if isinstance(exc, LLMBridgeError) else str(exc)
    return AdapterError(
        message or type(exc).__name__, ErrorCode.LLM_PROVIDER_ERROR, status=status, cause=exc
    )


class TextItem(TypedDict):
    """Text in a list-shaped TOKEN (non-streaming replies that also call tools)."""

    type: Literal["text"]
    text: str


class ToolUseItem(TypedDict):
    """One tool call; ``input`` is the parsed (and, if need be, healed) arguments."""

    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


TokenData: TypeAlias = str | list[TextItem | ToolUseItem]


@dataclass(frozen=True, slots=True)
class LLMMetadata:
    """The ``METADATA`` event's data: ART's ``LLMMetadata`` in snake_case."""

    stop_reason: str | None = None
    """Why the reply ended, as seed 003 says: the OpenAI ``finish_reason`` (``stop``,
    ``tool_calls``, ``length``, ``content_filter``) whatever the provider; with the
    adapter's ``neutral_stop_reasons=True``, llmbridge's neutral names (``end_turn``,
    ``tool_use``, ``max_tokens``, ``stop_sequence``, ``content_filter``)."""
    input_tokens: int | None = None
    """From the provider's usage when it reports it, otherwise estimated."""
    output_tokens: int | None = None
    """From the provider's usage when it reports it, otherwise estimated."""
    thinking_tokens: int | None = None
    """Estimated tokens of reasoning text; ``None`` when the model did not think."""
    time_to_first_token_ms: float | None = None
    """From the call to the first generated token (streaming only, as in the seed)."""
    total_generation_time_ms: float | None = None
    """From the call to the end of the reply."""
    tokens_estimated: bool = False
    """True when a token count was estimated because the provider did not report it."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


EventData: TypeAlias = TokenData | LLMMetadata | AdapterError | None


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One event of ``OllamaAdapter.call``."""

    type: EventType
    data: EventData = None
    token_type: TokenType | None = None
    """Set on TOKEN events only."""

    @property
    def is_thinking(self) -> bool:
        """A TOKEN of reasoning rather than of the answer."""
        return self.token_type is not None and self.token_type.endswith("_THINKING")

    @property
    def text(self) -> str:
        """The TOKEN's text when its data is a string, else ``""``."""
        return self.data if isinstance(self.data, str) else ""

    @property
    def tool_uses(self) -> list[ToolUseItem]:
        """The ``tool_use`` items of a list-shaped TOKEN, else ``[]``."""
        if not isinstance(self.data, list):
            return []
        return [item for item in self.data if item["type"] == "tool_use"]

    @property
    def metadata(self) -> LLMMetadata | None:
        return self.data if isinstance(self.data, LLMMetadata) else None

    @property
    def error(self) -> AdapterError | None:
        return self.data if isinstance(self.data, AdapterError) else None

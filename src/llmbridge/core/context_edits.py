"""Context editing in neutral terms: what a client asked to be cleared from its
conversation, and what was cleared (docs/ANTHROPIC.md, "Context editing").

Anthropic's Messages API takes ``context_management.edits`` (beta
``context-management-2025-06-27``; Claude Code sends them): the server clears old tool
results, or the thinking of earlier turns, from the prompt before the model reads it,
and says what it cleared in the reply's ``context_management.applied_edits``. The
Anthropic dialect decodes the edits it knows into these values, kept in the request's
``provider_details[CONTEXT_EDITS]`` (the original rides along for an Anthropic backend,
which applies them itself); for every other backend the gateway applies them
(features/context_editing.py) and the front reports what was cleared from
``provider_details[APPLIED_EDITS]``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from llmbridge.core.request import ChatRequest

__all__ = [
    "APPLIED_EDITS",
    "CONTEXT_EDITS",
    "AppliedEdit",
    "ClearThinking",
    "ClearToolUses",
    "ContextEdit",
    "context_edits_of",
    "with_applied_edits",
]

CONTEXT_EDITS = "context_edits"
"""``ChatRequest.provider_details`` key of the edits asked for: a tuple of
``ContextEdit``, in the order the client listed them."""
APPLIED_EDITS = "applied_context_edits"
"""``ChatRequest.provider_details`` key, on the request a front encodes its reply
for, of what the gateway cleared: a tuple of ``AppliedEdit``."""


@dataclass(frozen=True, slots=True)
class ClearToolUses:
    """Clear the results of old tool calls once the conversation is past a trigger.

    Anthropic's ``clear_tool_uses_20250919``: when the prompt is over
    ``trigger_input_tokens`` (or holds more than ``trigger_tool_uses`` tool calls),
    every tool call but the last ``keep_tool_uses`` has its result replaced by a
    placeholder, oldest first, unless its tool is in ``exclude_tools``; nothing is
    cleared when that would free fewer than ``clear_at_least`` tokens.
    """

    type: str
    """The edit's type as the client named it (reported back)."""
    trigger_input_tokens: int | None = 100_000
    """Clear once the prompt is over this many tokens (the API's default trigger)."""
    trigger_tool_uses: int | None = None
    """Or once it holds more than this many tool calls (then ``trigger_input_tokens``
    is ``None``)."""
    keep_tool_uses: int = 3
    """The most recent tool calls left as they are."""
    clear_at_least: int = 0
    """Tokens a clearing must free, or nothing is cleared."""
    exclude_tools: frozenset[str] = frozenset()
    """Tools whose calls are never cleared."""
    clear_inputs: bool | frozenset[str] = False
    """Clear the calls' arguments too: all of them (``True``) or those of these tools."""


@dataclass(frozen=True, slots=True)
class ClearThinking:
    """Anthropic's ``clear_thinking_20251015``: the thinking of all but the last
    ``keep_turns`` assistant turns that thought is removed; ``None`` keeps all."""

    type: str
    """The edit's type as the client named it (reported back)."""
    keep_turns: int | None = 1
    """The API's default keeps the last turn's thinking."""


ContextEdit = ClearToolUses | ClearThinking


@dataclass(frozen=True, slots=True)
class AppliedEdit:
    """What one edit cleared (Anthropic's ``applied_edits`` entry)."""

    type: str
    cleared_input_tokens: int
    """Tokens the cleared content held (the gateway's estimate, features/token_count)."""
    cleared_tool_uses: int | None = None
    """For a tool-use clearing: how many results were cleared."""
    cleared_thinking_turns: int | None = None
    """For a thinking clearing: how many turns lost their thinking."""


def context_edits_of(request: ChatRequest) -> tuple[ContextEdit, ...]:
    """The edits ``request`` asks for (none for most requests)."""
    edits = (request.provider_details or {}).get(CONTEXT_EDITS)
    return edits if isinstance(edits, tuple) else ()


def with_applied_edits(request: ChatRequest, applied: tuple[AppliedEdit, ...]) -> ChatRequest:
    """``request`` carrying ``applied`` for its front's reply encoder; ``request``
    itself when nothing was cleared."""
    if not applied:
        return request
    details = {**(request.provider_details or {}), APPLIED_EDITS: applied}
    return replace(request, provider_details=details)

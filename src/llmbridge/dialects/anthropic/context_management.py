"""``context_management``: Anthropic's context editing, decoded into the core's edits
and what was cleared encoded back (beta ``context-management-2025-06-27``).

A request's ``context_management.edits`` (platform.claude.com/docs/en/build-with-
claude/context-editing; the SDK's ``BetaContextManagementConfigParam``) is a list of
edits. Claude Code 2.1.330 sends ``{"type": "clear_thinking_20251015", "keep": "all"}``
whenever it thinks, and, when its tool-result clearing is on,
``{"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": N},
"keep": {"type": "tool_uses", "value": K}, "clear_at_least": {"type": "input_tokens",
"value": T}, "exclude_tools": [...], "clear_tool_inputs": [...]}``, and reads what the
reply's ``context_management.applied_edits`` says was cleared
(``cleared_tool_uses``, ``cleared_input_tokens``).

``decode_edits`` reads the edits this module knows into ``core.context_edits`` values
for the gateway to apply on other backends; the body's original rides along for an
Anthropic backend either way (request.py). An edit it does not know
(``compact_20260112``, a newer type) or cannot read is left out: the gateway does not
apply it, and never refuses a request over it (Anthropic's API, which does, sees it as
sent). ``applied_edits_body`` is the reply's ``context_management`` for what the gateway
cleared; ``reported_edits``, what an Anthropic backend's reply said it cleared, relayed
to the client (the stream decoder keeps it in the reply's ``provider_details``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from llmbridge.core.context_edits import (
    APPLIED_EDITS,
    AppliedEdit,
    ClearThinking,
    ClearToolUses,
    ContextEdit,
)
from llmbridge.core.request import ChatRequest
from llmbridge.dialects.anthropic.types import PROVIDER

__all__ = [
    "CLEAR_THINKING",
    "CLEAR_TOOL_USES",
    "applied_edits_body",
    "decode_edits",
    "reported_edits",
]

CLEAR_TOOL_USES = "clear_tool_uses_"
"""The tool-result clearing's type, up to its date (``clear_tool_uses_20250919``)."""
CLEAR_THINKING = "clear_thinking_"
"""The thinking clearing's type, up to its date (``clear_thinking_20251015``)."""


def decode_edits(context_management: object) -> tuple[ContextEdit, ...]:
    """The edits of a request's ``context_management`` the gateway can apply."""
    if not isinstance(context_management, dict):
        return ()
    edits = context_management.get("edits")
    decoded: list[ContextEdit] = []
    for edit in edits if isinstance(edits, list) else ():
        if not isinstance(edit, dict) or not isinstance(edit.get("type"), str):
            continue
        kind: str = edit["type"]
        if kind.startswith(CLEAR_TOOL_USES):
            tool_uses = _clear_tool_uses(kind, edit)
            if tool_uses is not None:
                decoded.append(tool_uses)
        elif kind.startswith(CLEAR_THINKING):
            thinking = _clear_thinking(kind, edit.get("keep", _MISSING))
            # keep "all" (what Claude Code sends) clears nothing: not worth carrying.
            if thinking is not None and thinking.keep_turns is not None:
                decoded.append(thinking)
    return tuple(decoded)


_MISSING = object()


def _count(value: object, kind: str) -> int | None:
    """``value`` of a ``{"type": kind, "value": N}`` setting, else ``None``."""
    if not isinstance(value, dict) or value.get("type") != kind:
        return None
    number = value.get("value")
    if isinstance(number, bool) or not isinstance(number, int) or number < 0:
        return None
    return number


def _names(value: object) -> frozenset[str] | None:
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        return None
    return frozenset(value)


def _clear_tool_uses(kind: str, edit: dict[str, Any]) -> ClearToolUses | None:
    result = ClearToolUses(type=kind)
    trigger = edit.get("trigger")
    if trigger is not None:
        tokens, uses = _count(trigger, "input_tokens"), _count(trigger, "tool_uses")
        if tokens is None and uses is None:
            return None
        result = ClearToolUses(type=kind, trigger_input_tokens=tokens, trigger_tool_uses=uses)
    keep = edit.get("keep")
    if keep is not None:
        kept = _count(keep, "tool_uses")
        if kept is None:
            return None
        result = replace(result, keep_tool_uses=kept)
    at_least = edit.get("clear_at_least")
    if at_least is not None:
        least = _count(at_least, "input_tokens")
        if least is None:
            return None
        result = replace(result, clear_at_least=least)
    excluded = edit.get("exclude_tools")
    if excluded is not None:
        names = _names(excluded)
        if names is None:
            return None
        result = replace(result, exclude_tools=names)
    inputs = edit.get("clear_tool_inputs")
    if isinstance(inputs, bool):
        result = replace(result, clear_inputs=inputs)
    elif inputs is not None:
        names = _names(inputs)
        if names is None:
            return None
        result = replace(result, clear_inputs=names)
    return result


def _clear_thinking(kind: str, keep: object) -> ClearThinking | None:
    if keep is _MISSING:
        return ClearThinking(type=kind)
    if keep == "all" or (isinstance(keep, dict) and keep.get("type") == "all"):
        return ClearThinking(type=kind, keep_turns=None)
    turns = _count(keep, "thinking_turns")
    return None if turns is None else ClearThinking(type=kind, keep_turns=turns)


def applied_edits_body(request: ChatRequest) -> dict[str, Any] | None:
    """The reply's ``context_management`` for what the gateway cleared from
    ``request``'s conversation; ``None`` when it cleared nothing."""
    applied = (request.provider_details or {}).get(APPLIED_EDITS)
    if not applied:
        return None
    return {"applied_edits": [_applied(edit) for edit in applied]}


def _applied(edit: AppliedEdit) -> dict[str, Any]:
    body: dict[str, Any] = {"type": edit.type}
    if edit.cleared_tool_uses is not None:
        body["cleared_tool_uses"] = edit.cleared_tool_uses
    if edit.cleared_thinking_turns is not None:
        body["cleared_thinking_turns"] = edit.cleared_thinking_turns
    body["cleared_input_tokens"] = edit.cleared_input_tokens
    return body


def reported_edits(details: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``context_management`` an Anthropic backend's reply carried (kept in the
    reply's ``provider_details`` by the stream decoder), for its client."""
    reported = ((details or {}).get(PROVIDER) or {}).get("context_management")
    return reported if isinstance(reported, dict) else None

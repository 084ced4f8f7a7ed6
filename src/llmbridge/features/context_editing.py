"""Context editing applied by the gateway, for a backend that is not Anthropic's API.

A client that asks Anthropic to clear old tool results or old thinking from its prompt
(``context_management.edits``, decoded into ``core.context_edits``) expects the model
not to read them. Anthropic's API does that itself; a local model behind the gateway
would read the whole history, so ``apply_context_edits`` makes the same edits on the
neutral conversation before the backend sees it, and says what it cleared (the front
reports it as ``context_management.applied_edits``, which Claude Code reads):

- ``clear_tool_uses``: once the prompt's estimated size (features/token_count) is over
  the trigger, or it holds more tool calls than the trigger's count, every tool call
  but the last ``keep`` has its result's text replaced by ``CLEARED_RESULT`` (its
  arguments by ``{}`` too, where ``clear_tool_inputs`` says so), oldest first, skipping
  ``exclude_tools``; nothing is cleared when that frees fewer than ``clear_at_least``
  tokens. The calls stay, so every result still answers its call.
- ``clear_thinking``: the thinking of all but the last ``keep`` assistant turns that
  thought is removed. A signed thinking part keeps its signature and loses its text:
  the signature may be the backend's own token (a Gemini model's ``thoughtSignature``),
  which it wants back, and the text is what costs context.

The edits are as stateless as Anthropic's: each request is edited from the history the
client sent. What stays in place is cleared alike on every request, so the prompt's
prefix up to the newest clearing is the same from one turn to the next (DESIGN.md rule
7); ``clear_at_least`` is how a client makes clearings rarer and larger.
"""

from __future__ import annotations

from dataclasses import replace

import orjson

from llmbridge.core.context_edits import (
    AppliedEdit,
    ClearThinking,
    ClearToolUses,
    context_edits_of,
)
from llmbridge.core.messages import Message, Part, ThinkingPart, ToolCallPart, ToolResultPart
from llmbridge.core.request import ChatRequest
from llmbridge.features.token_count import count_request_tokens, count_text_tokens

__all__ = ["CLEARED_INPUT", "CLEARED_RESULT", "apply_context_edits"]

CLEARED_RESULT = "[This tool result was cleared to save context.]"
"""What a cleared tool result reads: the model knows something was there."""
CLEARED_INPUT: dict[str, object] = {}
"""A cleared call's arguments."""


def apply_context_edits(request: ChatRequest) -> tuple[ChatRequest, tuple[AppliedEdit, ...]]:
    """``request`` with its context edits applied, in the order asked, and what each
    one cleared (an edit that cleared nothing is not listed)."""
    edits = context_edits_of(request)
    if not edits:
        return request, ()
    applied: list[AppliedEdit] = []
    for edit in edits:
        if isinstance(edit, ClearToolUses):
            request, done = _clear_tool_uses(request, edit)
        else:
            request, done = _clear_thinking(request, edit)
        if done is not None:
            applied.append(done)
    return request, tuple(applied)


# -- tool results ---------------------------------------------------------------------


def _clear_tool_uses(
    request: ChatRequest, edit: ClearToolUses
) -> tuple[ChatRequest, AppliedEdit | None]:
    calls = [part for message in request.messages for part in message.tool_calls]
    if not _triggered(request, edit, len(calls)):
        return request, None
    older = calls[: max(len(calls) - edit.keep_tool_uses, 0)]
    cleared = {call.id: call for call in older if call.name not in edit.exclude_tools}
    if not cleared:
        return request, None
    messages: list[Message] = []
    freed = uses = 0
    for message in request.messages:
        if not any(_clearable(part, cleared) for part in message.parts):
            messages.append(message)
            continue
        parts: list[Part] = []
        for part in message.parts:
            if isinstance(part, ToolResultPart) and part.tool_call_id in cleared:
                freed += count_text_tokens(part.content) - count_text_tokens(CLEARED_RESULT)
                part = replace(part, content=CLEARED_RESULT)
                uses += 1
            elif isinstance(part, ToolCallPart) and _clears_input(edit, part, cleared):
                freed += count_text_tokens(orjson.dumps(part.arguments).decode())
                part = replace(part, arguments=dict(CLEARED_INPUT), raw_arguments=None)
            parts.append(part)
        messages.append(replace(message, parts=tuple(parts)))
    if uses == 0 or freed < edit.clear_at_least:
        return request, None  # too little to be worth a changed prompt
    edited = replace(request, messages=tuple(messages))
    return edited, AppliedEdit(
        edit.type, cleared_input_tokens=max(freed, 0), cleared_tool_uses=uses
    )


def _triggered(request: ChatRequest, edit: ClearToolUses, tool_uses: int) -> bool:
    if edit.trigger_tool_uses is not None:
        return tool_uses > edit.trigger_tool_uses
    if edit.trigger_input_tokens is None:
        return False
    return count_request_tokens(request) > edit.trigger_input_tokens


def _clearable(part: Part, cleared: dict[str, ToolCallPart]) -> bool:
    if isinstance(part, ToolResultPart):
        return part.tool_call_id in cleared
    return isinstance(part, ToolCallPart) and part.id in cleared


def _clears_input(
    edit: ClearToolUses, call: ToolCallPart, cleared: dict[str, ToolCallPart]
) -> bool:
    if call.id not in cleared:
        return False
    if isinstance(edit.clear_inputs, bool):
        return edit.clear_inputs
    return call.name in edit.clear_inputs


# -- thinking -------------------------------------------------------------------------


def _clear_thinking(
    request: ChatRequest, edit: ClearThinking
) -> tuple[ChatRequest, AppliedEdit | None]:
    if edit.keep_turns is None:
        return request, None
    thought = [
        index
        for index, message in enumerate(request.messages)
        if message.role == "assistant" and any(_holds_thinking(p) for p in message.parts)
    ]
    older = thought[: max(len(thought) - edit.keep_turns, 0)]
    if not older:
        return request, None
    messages = list(request.messages)
    freed = 0
    for index in older:
        kept: list[Part] = []
        for part in messages[index].parts:
            if not isinstance(part, ThinkingPart):
                kept.append(part)
                continue
            freed += count_text_tokens(part.text)
            if part.signature and not part.redacted:
                # A signature may be this backend's token (Gemini's), which it wants back;
                # no backend but Anthropic's (which edits for itself) reads a thought's
                # signature otherwise, so the text goes and the token stays.
                kept.append(replace(part, text=""))
        messages[index] = replace(messages[index], parts=tuple(kept))
    edited = replace(request, messages=tuple(messages))
    applied = AppliedEdit(edit.type, cleared_input_tokens=freed, cleared_thinking_turns=len(older))
    return edited, applied


def _holds_thinking(part: Part) -> bool:
    return isinstance(part, ThinkingPart) and bool(part.text or part.redacted)

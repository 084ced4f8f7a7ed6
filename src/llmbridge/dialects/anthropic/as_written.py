"""Whether an Anthropic client's body may go to an Anthropic backend as it was written
(the pass-through path, core/relay.py): ``sent_as_written`` reads the raw body for what
``request.encode_chat_request`` would rewrite for Anthropic's sake, without decoding it.
gateway/routes/anthropic.py asks it before keeping the body for the relay."""

from __future__ import annotations

from typing import Any

from llmbridge.dialects.anthropic.request import (
    MIN_THINKING_BUDGET,
    UNSAFE_ID_CHARS,
    tool_turn_lacks_thinking,
)
from llmbridge.dialects.carried import is_carried

__all__ = ["sent_as_written"]


def sent_as_written(body: dict[str, Any]) -> bool:
    """Whether an Anthropic backend may get ``body`` (a decoded ``/v1/messages`` body)
    as the client wrote it (the pass-through path, core/relay.py): it needs none of the
    rewriting ``encode_chat_request`` does for Anthropic's sake. False where in doubt:

    - no ``max_tokens`` (the default is sent), or thinking whose budget the API would
      refuse (under 1024, or not under ``max_tokens``: both are fixed);
    - two turns of one role in a row (merged), an empty turn or text block (dropped;
      but a ``system`` turn with no content and its per-turn settings, as Claude Code
      sends it to Anthropic, goes as written);
    - a thinking block that Anthropic did not sign (unsigned, another backend's
      carried token, or in a user turn: dropped), or, with thinking on, a last
      assistant turn with a tool call that does not start with thinking (sent without
      thinking);
    - a tool id the API refuses (rewritten), a ``tool_result`` after the turn's other
      blocks (moved first), an image given as a ``data:`` URL (sent inline);
    - the MCP connector's ``mcp_servers`` (the gateway's own loop runs them).

    What the translation only reshapes (a tool result's text blocks joined into one,
    a cache breakpoint moved to a turn's last block, a system turn's per-turn
    ``output_config`` moved to the request's) is no reason: the client's own spelling
    is what it meant, and what it would send Anthropic itself. Linear in the body's
    blocks, no copies."""
    max_tokens = body.get("max_tokens")
    if max_tokens.__class__ is not int or "mcp_servers" in body:
        return False
    system = body.get("system")
    if system is not None and not _blocks_as_written(system, "system"):
        return False
    thinking = body.get("thinking")
    thinking = thinking if isinstance(thinking, dict) else {}
    thinks = thinking.get("type") not in (None, "disabled")
    budget = thinking.get("budget_tokens")
    # A budget the API would refuse is fixed on the way out (``_encode_thinking``).
    if (
        thinks
        and budget is not None
        and (budget.__class__ is not int or not MIN_THINKING_BUDGET <= budget < max_tokens)
    ):
        return False
    messages = body.get("messages")
    if not isinstance(messages, list):
        return False
    role = None
    last_assistant: list[Any] | str | None = None
    for message in messages:
        if not isinstance(message, dict) or message.get("role") == role:
            return False
        role = message.get("role")
        content = message.get("content")
        if role == "system" and content == [] and len(message) > 2:
            continue  # per-turn settings alone (Claude Code's output_config): Anthropic's own
        if role not in _ROLES or not _blocks_as_written(content, role):
            return False
        if role == "assistant":
            last_assistant = content
    return not (thinks and tool_turn_lacks_thinking(last_assistant))


_ROLES = frozenset({"user", "assistant", "system"})
"""The roles of turns that may go as written (a ``system`` turn: per-turn control)."""


def _blocks_as_written(content: object, role: str) -> bool:
    """Whether one turn's content (or the system prompt's) goes out as written."""
    if isinstance(content, str):
        return bool(content)
    if not isinstance(content, list) or not content:
        return False
    results_done = False
    for block in content:
        if not isinstance(block, dict):
            return False
        if block.get("type") == "tool_result":
            if results_done or not _safe_id(block.get("tool_use_id")):
                return False
        elif not _block_as_written(block, role):
            return False
        else:
            results_done = True
    return True


def _block_as_written(block: dict[str, Any], role: str) -> bool:
    """Whether one block other than a ``tool_result`` goes out as written."""
    kind = block.get("type")
    if kind == "text":
        return bool(block.get("text"))
    if kind == "thinking":
        signature = block.get("signature")
        return role == "assistant" and bool(signature) and not is_carried(signature)
    if kind == "redacted_thinking":
        return role == "assistant"
    if kind == "tool_use":
        return _safe_id(block.get("id"))
    if kind == "image":
        source = block.get("source")
        url = source.get("url") if isinstance(source, dict) else None
        return not (isinstance(url, str) and url.startswith("data:"))
    return True


def _safe_id(call_id: object) -> bool:
    return isinstance(call_id, str) and bool(call_id) and not UNSAFE_ID_CHARS.search(call_id)

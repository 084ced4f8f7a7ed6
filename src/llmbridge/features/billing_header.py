"""Claude Code's billing-header line, kept out of prompts that only a local model reads.

Claude Code puts a first system text block ``x-anthropic-billing-header:
cc_version=2.1.330.440; cc_entrypoint=sdk-cli;`` in front of its stable system prompt
(shared/reference/captured/claude-code-2.1.330-messages-request.json); some versions add
a per-request hash, ``cch=...;``. Anthropic's API reads the line (and bills by it); for
any other backend it is prompt text, and one that changes per request sits in front of
everything else, so a local model's prefix cache (llama.cpp, Ollama, vLLM) misses on
the whole prompt every turn (DESIGN.md rule 7: prompts keep their prefix).

``drop_billing_header`` takes the line out of every system message for a backend
whose ``Capabilities.anthropic_api`` is false; an Anthropic backend gets the request as
sent. The Anthropic dialect joins a system prompt's blocks with a blank line, so the
line and the separator after it go together and the rest stays byte for byte.
"""

from __future__ import annotations

import re
from dataclasses import replace

from llmbridge.core.messages import Message, Part, TextPart
from llmbridge.core.request import ChatRequest

__all__ = ["BILLING_HEADER_PREFIX", "drop_billing_header"]

BILLING_HEADER_PREFIX = "x-anthropic-billing-header:"
"""How the line starts, in every Claude Code version seen (2.1.197 to 2.1.330)."""

# The whole line and the line breaks that end it (a block separator is "\n\n").
_LINE = re.compile(r"^x-anthropic-billing-header:[^\n]*(?:\n\n?|$)", re.MULTILINE)


def drop_billing_header(request: ChatRequest) -> ChatRequest:
    """``request`` without Claude Code's billing-header line in its system messages;
    ``request`` itself (no copy) when no system message has one, the common case."""
    if not any(_has_line(message) for message in request.messages):
        return request
    messages = tuple(_without_line(message) for message in request.messages)
    # A system message that was only the line is no message at all.
    kept = tuple(m for m in messages if m.role != "system" or m.parts)
    return replace(request, messages=kept)


def _has_line(message: Message) -> bool:
    return message.role == "system" and any(
        isinstance(part, TextPart) and BILLING_HEADER_PREFIX in part.text for part in message.parts
    )


def _without_line(message: Message) -> Message:
    if not _has_line(message):
        return message
    parts: list[Part] = []
    for part in message.parts:
        if isinstance(part, TextPart) and BILLING_HEADER_PREFIX in part.text:
            text = _LINE.sub("", part.text)
            if text:
                parts.append(TextPart(text))
        else:
            parts.append(part)
    # The Anthropic dialect's details (the system blocks as sent, the line with its
    # per-request hash among them) are for an Anthropic backend, which never gets here:
    # left in, the request would still differ from one turn to the next.
    details = {k: v for k, v in (message.provider_details or {}).items() if k != _ANTHROPIC}
    return replace(message, parts=tuple(parts), provider_details=details or None)


_ANTHROPIC = "anthropic"
"""The Anthropic dialect's ``provider_details`` key."""

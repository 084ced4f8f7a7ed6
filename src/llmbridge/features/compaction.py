"""Compaction by summary, for a backend that cannot compact a conversation itself.

A client that compacts remotely (Codex's ``compaction_trigger``, ``POST
/v1/responses/compact``) asks for a reply that stands for the whole conversation so far
(``ChatRequest.compaction``). A backend with ``Capabilities.compaction`` (a Responses
server) makes that itself; for any other, ``summary_request`` makes it an ordinary
request: the conversation, then one user message asking for a summary that a later turn
can go on from. Tools stay defined (some APIs refuse tool calls in a history without
them) but may not be called: the reply must be the summary's text. The front seals that
text into its compaction item (dialects/responses/compaction.py) and, when the client
sends the item back, puts the summary where the conversation was.

The prompt is at the end, so the conversation before it is the same prefix the turns
before sent: a backend's prompt cache serves it.
"""

from __future__ import annotations

from dataclasses import replace

from llmbridge.core.messages import Message, TextPart, ToolChoice
from llmbridge.core.request import ChatRequest

__all__ = ["SUMMARY_PROMPT", "summary_request"]

SUMMARY_PROMPT = (
    "Stop here and write a summary of this conversation for whoever continues it, who "
    "will see your summary instead of the conversation. Say what the user asked for and "
    "still wants, what was decided, what was done and found (files, commands, results, "
    "errors), and what is left to do, with the next step first. Keep the exact names, "
    "paths, identifiers and values that the rest of the work needs. Write only the "
    "summary: no tool calls, no greeting."
)
"""The last user message of a compaction asked of a backend that cannot compact."""


def summary_request(request: ChatRequest) -> ChatRequest:
    """``request`` (a compaction) as a request for a summary of its conversation."""
    prompt = Message("user", (TextPart(SUMMARY_PROMPT),))
    choice = ToolChoice("none") if request.tools else None
    return replace(
        request,
        messages=(*request.messages, prompt),
        tool_choice=choice,
        response_format=None,
        compaction=False,
    )

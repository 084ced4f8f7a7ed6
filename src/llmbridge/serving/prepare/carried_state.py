"""Opaque state of another backend, left out of what a backend is sent, and counted.

A Responses server's reasoning and compaction items travel in thinking signatures that
name the backend they came from (dialects/responses/carried.py). Only that backend can
read them: OpenAI refuses a blob it did not encrypt, and any other backend has no use for
a blob at all (a local model would at best read the reasoning's summary as its own
thinking). ``drop_unreadable`` takes them out of the history of a request bound for any
other backend, and a message left with nothing in it goes too (Anthropic refuses an
empty one). What it took out is counted by kind, for ``x-llmbridge-dropped-items``
(``Changes.dropped_items``), so a client learns that its reasoning did not travel,
rather than finding out from a worse answer.

Only these signatures are read (the head of each, never the item), so a request without
them costs one look at each thinking part; other thinking is left to each backend's
encoder, as before.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from llmbridge.core.messages import Message, Part, ThinkingPart
from llmbridge.core.request import ChatRequest
from llmbridge.dialects.responses.carried import carried_kind

__all__ = ["drop_unreadable"]


def drop_unreadable(request: ChatRequest, backend: str) -> tuple[ChatRequest, tuple[str, ...]]:
    """``request`` without what another backend than ``backend`` (its name) carried,
    and what was dropped as ``kind=count`` entries (``reasoning=2``), in a fixed order."""
    if not any(_carried_elsewhere(part, backend) for m in request.messages for part in m.parts):
        return request, ()  # the common case: nothing to look at twice
    dropped: Counter[str] = Counter()
    messages: list[Message] = []
    for message in request.messages:
        kept: list[Part] = []
        for part in message.parts:
            kind = _carried_elsewhere(part, backend)
            if kind is None:
                kept.append(part)
            else:
                dropped[kind] += 1
        if len(kept) == len(message.parts):
            messages.append(message)
        elif kept:
            messages.append(replace(message, parts=tuple(kept)))
    order = ("reasoning", "compaction")
    counts = tuple(f"{kind}={dropped[kind]}" for kind in order if dropped[kind])
    return replace(request, messages=tuple(messages)), counts


def _carried_elsewhere(part: Part, backend: str) -> str | None:
    """The kind of item ``part`` carries from a backend other than ``backend``."""
    if not isinstance(part, ThinkingPart) or not part.signature:
        return None
    carried = carried_kind(part.signature)
    if carried is None or carried[1] == backend:
        return None
    return carried[0]

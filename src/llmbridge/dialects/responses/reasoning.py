"""``encrypted_content`` of reasoning items: thinking signatures carried across turns.

A reasoning item's ``encrypted_content`` is opaque state the client sends back with the
next turn. llmbridge fills it only with what the core's ``ThinkingPart`` carries that a
backend needs again (Anthropic's ``signature`` and ``redacted`` data, and which kind of
backend made them), sealed with a prefix so that on the way in llmbridge knows which
items it issued: another server's encrypted reasoning cannot be read by any backend
here and is dropped (and counted: ``dropped_reasoning``). The data is not encrypted:
it only travels between a client and the backend that made it, as the signature does
in Anthropic's API.
"""

from __future__ import annotations

import base64
import binascii

import orjson

from llmbridge.core.messages import ThinkingPart

__all__ = ["PREFIX", "open_reasoning", "seal_reasoning"]

PREFIX = "llmbridge.v1."


def seal_reasoning(part: ThinkingPart) -> str | None:
    """The ``encrypted_content`` for a thinking part, or ``None`` when it carries
    nothing a backend needs back."""
    if part.signature is None and part.redacted is None:
        return None
    state = {"s": part.signature, "r": part.redacted, "p": part.provider}
    return PREFIX + base64.urlsafe_b64encode(orjson.dumps(state)).decode()


def open_reasoning(text: str, sealed: str) -> ThinkingPart | None:
    """The thinking part for a reasoning item's text and ``encrypted_content``;
    ``None`` when llmbridge did not issue it (or it was altered)."""
    if not sealed.startswith(PREFIX):
        return None
    try:
        state = orjson.loads(base64.urlsafe_b64decode(sealed[len(PREFIX) :]))
    except (binascii.Error, ValueError):
        return None
    if not isinstance(state, dict):
        return None
    signature, redacted, provider = state.get("s"), state.get("r"), state.get("p")
    if not all(
        value is None or isinstance(value, str) for value in (signature, redacted, provider)
    ):
        return None
    return ThinkingPart(text, signature=signature, redacted=redacted, provider=provider)

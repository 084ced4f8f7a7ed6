"""A Responses server's encrypted reasoning, carried across turns in a thinking signature.

With ``store: false`` a Responses server keeps nothing between turns: to let a reasoning
model see its own earlier reasoning (between the calls of a tool loop, above all), the
client asks for ``include: ["reasoning.encrypted_content"]`` and sends each reasoning
item's ``encrypted_content`` back with the next request. The blob only means something
to the server that made it (OpenAI decrypts it with the organisation's key), so it
travels tagged with the backend's name (``dialects/carried.py``).
"""

from __future__ import annotations

from llmbridge.dialects.carried import Carrier

__all__ = ["PREFIX", "PROVIDER", "carry", "recover"]

_CARRIER = Carrier(prefix="llmbridge.responses.v1.", provider="openai_responses")
PREFIX = _CARRIER.prefix
PROVIDER = _CARRIER.provider
"""``ThinkingPart.provider`` of reasoning decoded from a Responses server."""
carry = _CARRIER.carry
recover = _CARRIER.recover

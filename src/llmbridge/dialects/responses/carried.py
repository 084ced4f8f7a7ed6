"""A Responses server's encrypted reasoning, carried across turns in a thinking signature.

With ``store: false`` a Responses server keeps nothing between turns: to let a reasoning
model see its own earlier reasoning (between the calls of a tool loop, above all), the
client asks for ``include: ["reasoning.encrypted_content"]`` and sends each reasoning
item's ``encrypted_content`` back with the next request. The core carries that blob as
the ``ThinkingPart``'s ``signature``, which every front able to carry a signature hands
to its client and takes back (Anthropic's ``thinking.signature``, the Responses front's
own ``encrypted_content``).

The blob only means something to the server that made it (OpenAI decrypts it with the
organisation's key; another server answers 400), so the signature says where it came
from: ``PREFIX`` + the backend's name (URL-safe base64, so it holds no ``.``) + ``.`` +
the blob, unchanged. The prefix is what is checked on the way back, not
``ThinkingPart.provider``: the Anthropic front marks every signed block it takes back
as Anthropic's (``dialects/anthropic/request.py``), whoever signed it.
"""

from __future__ import annotations

import base64
import binascii

__all__ = ["PREFIX", "PROVIDER", "carry", "recover"]

PREFIX = "llmbridge.responses.v1."
PROVIDER = "openai_responses"
"""``ThinkingPart.provider`` of reasoning decoded from a Responses server."""


def carry(origin: str | None, encrypted: str) -> str:
    """The signature for ``encrypted`` reasoning from the backend named ``origin``."""
    tag = base64.urlsafe_b64encode((origin or "").encode()).decode()
    return f"{PREFIX}{tag}.{encrypted}"


def recover(signature: str | None, origin: str | None) -> str | None:
    """The encrypted reasoning in ``signature`` when it came from the backend named
    ``origin`` (any backend when ``origin`` is ``None``); else ``None``."""
    if not signature or not signature.startswith(PREFIX):
        return None
    tag, dot, encrypted = signature[len(PREFIX) :].partition(".")
    if not dot or not encrypted:
        return None
    try:
        source = base64.urlsafe_b64decode(tag.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    if origin is not None and source != origin:
        return None
    return encrypted

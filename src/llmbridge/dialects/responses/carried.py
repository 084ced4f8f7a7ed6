"""A Responses server's opaque items, carried across turns in a thinking signature.

With ``store: false`` a Responses server keeps nothing between turns: to let a reasoning
model see its own earlier reasoning (between the calls of a tool loop, above all), the
client asks for ``include: ["reasoning.encrypted_content"]`` and sends each reasoning
item back with the next request; a conversation the server compacted (Codex's
``compaction_trigger``) comes back as its one ``compaction`` item. The blobs in them only
mean something to the server that made them (OpenAI decrypts them with the
organisation's key), so they travel tagged with the backend's name
(``dialects/carried.py``), and only that backend is sent them again.

The whole item travels, not only its ``encrypted_content``: what the server gave (every
``summary`` part, the raw ``content``, the blob) is what it gets back, byte for byte,
whatever a front made of the text in between (the core joins summaries into one thinking
text). Only ``id`` and ``status`` are left out, as Codex leaves them out: with ``store:
false`` the server kept no item an id could name, and OpenAI refuses one it does not
know. The signature is ``llmbridge.responses.v2.`` + the backend's name (base64) + ``.``
+ the item's type + ``.`` + the item as JSON (URL-safe base64).

Signatures of the first form, ``llmbridge.responses.v1.<name>.<encrypted_content>``
(reasoning only, made before items were carried whole), are still read: their item is
rebuilt from the thinking text, as it was sent then.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Literal

import orjson

from llmbridge.dialects.carried import Carrier

__all__ = [
    "ITEM_PREFIX",
    "PREFIX",
    "PROVIDER",
    "CarriedKind",
    "carried_kind",
    "carry",
    "carry_item",
    "is_compaction",
    "recover",
    "recover_item",
]

CarriedKind = Literal["reasoning", "compaction"]
"""The kinds of item a signature carries."""
_KINDS: frozenset[str] = frozenset({"reasoning", "compaction"})
_LEFT_OUT = ("id", "status")
"""Left out of a carried item (module docstring)."""

_ENCRYPTED = Carrier(prefix="llmbridge.responses.v1.", provider="openai_responses")
_ITEMS = Carrier(prefix="llmbridge.responses.v2.", provider="openai_responses")
PREFIX = _ENCRYPTED.prefix
ITEM_PREFIX = _ITEMS.prefix
PROVIDER = _ITEMS.provider
"""``ThinkingPart.provider`` of what is decoded from a Responses server."""


def carry(origin: str | None, encrypted: str) -> str:
    """The first form's signature: a reasoning item's ``encrypted_content`` alone."""
    return _ENCRYPTED.carry(origin, encrypted)


def carry_item(origin: str | None, item: dict[str, Any]) -> str:
    """The signature carrying ``item`` (a ``reasoning`` or ``compaction`` item) from
    the backend named ``origin``."""
    kept = {key: value for key, value in item.items() if key not in _LEFT_OUT}
    body = base64.urlsafe_b64encode(orjson.dumps(kept)).decode()
    return _ITEMS.carry(origin, f"{item['type']}.{body}")


def recover_item(
    signature: str | None, origin: str | None, text: str = ""
) -> dict[str, Any] | None:
    """The item ``signature`` carries when it came from the backend named ``origin``
    (any backend when ``origin`` is ``None``); ``text`` is the thinking text, from which
    a first-form signature's reasoning item is rebuilt. ``None`` for anything else
    (another backend's, another kind of signature, or one altered)."""
    token = _ITEMS.recover(signature, origin)
    if token is not None:
        kind, dot, body = token.partition(".")
        if not dot or kind not in _KINDS:
            return None
        try:
            item = orjson.loads(base64.urlsafe_b64decode(body.encode()))
        except (binascii.Error, ValueError):
            return None
        return item if isinstance(item, dict) and item.get("type") == kind else None
    encrypted = _ENCRYPTED.recover(signature, origin)
    if encrypted is None:
        return None
    summary = [{"type": "summary_text", "text": text}] if text else []
    return {"type": "reasoning", "summary": summary, "encrypted_content": encrypted}


def recover(signature: str | None, origin: str | None) -> str | None:
    """The ``encrypted_content`` a signature carries from the backend named ``origin``."""
    item = recover_item(signature, origin)
    encrypted = item.get("encrypted_content") if item is not None else None
    return encrypted if isinstance(encrypted, str) else None


def carried_kind(signature: str | None) -> tuple[CarriedKind, str] | None:
    """What a signature carries from a Responses server, and which backend that was:
    ``(kind, backend name)``; ``None`` when it is no such signature. Reads only the
    signature's head, never the item."""
    if not signature:
        return None
    for carrier in (_ITEMS, _ENCRYPTED):
        if signature.startswith(carrier.prefix):
            tag, dot, rest = signature[len(carrier.prefix) :].partition(".")
            if not dot:
                return None
            try:
                origin = base64.urlsafe_b64decode(tag.encode()).decode()
            except (binascii.Error, UnicodeDecodeError, ValueError):
                return None
            if carrier is _ENCRYPTED:
                return "reasoning", origin
            kind = rest.partition(".")[0]
            if kind == "compaction":
                return "compaction", origin
            return ("reasoning", origin) if kind == "reasoning" else None
    return None


def is_compaction(signature: str | None) -> bool:
    """Whether a signature carries a Responses server's ``compaction`` item."""
    carried = carried_kind(signature)
    return carried is not None and carried[0] == "compaction"

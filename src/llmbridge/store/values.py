"""What the product's databases can hold, and what the store does about the rest.

Both databases refuse some values Python holds without complaint, and each refusal
used to surface as a 500:

- **Integers** beyond 64 bits signed (``MAX_ID``): SQLite's driver raises
  ``OverflowError``, asyncpg a ``DataError`` (SQLSTATE 22000).
- **U+0000** in text: PostgreSQL's ``text`` cannot hold it ("invalid byte sequence
  for encoding UTF8: 0x00"); SQLite can.
- **Unpaired surrogates** (``"\\ud800"``): not encodable as UTF-8, so neither driver
  can send them.
- **Non-finite floats**: SQLite stores NaN as NULL (a NOT NULL column then fails),
  and PostgreSQL's ``json`` refuses ``Infinity``/``NaN``.
- **Timestamps** outside years 1-9999 once converted to UTC: Python's ``datetime``
  itself overflows (``0001-01-01T00:00-01:00``).

Two policies, one per kind of input:

- What a **client** sends is refused at the HTTP boundary with a 400 naming the
  field (``agent.api``); the limits it checks are the constants here.
- What a **model** (or a tool) produced is never refused: losing an answer to an
  encoding is worse than changing one character. ``storable_text`` replaces U+0000
  and unpaired surrogates with U+FFFD (the Unicode replacement character) before
  the store writes a message, summary, pin or document, on both databases, so a
  database switch changes nothing; ``storable`` does the same inside JSON values.

Anything else a database refuses as a value (an ``OverflowError``, a ``DataError``
or an error of PostgreSQL's SQLSTATE class 22, "data exception") is raised from the
store as ``core.errors.InvalidRequestError`` (HTTP 400) by ``store.errors``, the one
place a database's exceptions are translated, so no route needs to know either
driver's exceptions.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "MAX_ID",
    "REPLACEMENT",
    "as_utc",
    "storable",
    "storable_text",
    "unstorable_text",
]

MAX_ID = 2**63 - 1
"""The largest id either database stores (SQLite INTEGER, PostgreSQL BIGINT)."""

REPLACEMENT = "\ufffd"
"""What stands in for a character the store cannot hold."""

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def unstorable_text(text: str) -> str | None:
    """Why ``text`` cannot be stored as it is, or ``None`` when it can."""
    if text.isascii():  # no surrogates; a scan in C, 100x the regex (32 MB: 1.4 ms)
        return "must not contain U+0000 (NUL)" if "\x00" in text else None
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "must not contain U+0000 (NUL)"
    return "must not contain unpaired surrogates"


def storable_text(text: str) -> str:
    """``text`` with U+0000 and unpaired surrogates replaced by U+FFFD."""
    # The search first: nearly every text is clean, and then nothing is copied.
    if text.isascii() and "\x00" not in text:  # the fast path: ASCII has no surrogates
        return text
    if _UNSTORABLE.search(text) is None:
        return text
    return _UNSTORABLE.sub(REPLACEMENT, text)


def storable(value: Any) -> Any:
    """A JSON value with every string (keys too) made ``storable_text`` and every
    non-finite float made ``None`` (JSON has no NaN or infinity)."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {storable_text(str(k)): storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable(v) for v in value]
    return value


def as_utc(value: datetime) -> datetime:
    """``value`` in UTC (naive means UTC), or ``ValueError`` when that falls outside
    years 1-9999 (``0001-01-01T00:30+01:00`` is in year 0 in UTC)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("must fall within years 1-9999 once converted to UTC") from None

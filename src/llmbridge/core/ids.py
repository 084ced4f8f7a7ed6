"""Identifiers for responses and tool calls, in each dialect's customary shape."""

from __future__ import annotations

import secrets

__all__ = ["new_id"]


def new_id(prefix: str, nbytes: int = 12) -> str:
    """A random identifier such as ``toolu_9f2c...`` or ``chatcmpl-...``.

    ``prefix`` includes its separator (``"toolu_"``, ``"chatcmpl-"``).
    """
    return prefix + secrets.token_hex(nbytes)

"""Identifiers for requests, responses and tool calls, in each dialect's customary shape.

The random part comes from the operating system's CSPRNG (``os.urandom``, as
``secrets`` uses), read 4 KB at a time and handed out in slices: every request takes at
least one identifier, and one ``getrandom`` call each cost about as much as the rest of
making it (more under load, in a VM). A forked child starts with a fresh pool, so no
two processes hand out the same bytes.
"""

from __future__ import annotations

import os
import threading

__all__ = ["new_id"]

_POOL_BYTES = 4096


class _RandomPool:
    """OS random bytes read a pool at a time, each byte handed out once."""

    __slots__ = ("_at", "_lock", "_pool")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool = b""
        self._at = 0

    def take(self, n: int) -> bytes:
        if n > _POOL_BYTES:
            return os.urandom(n)
        with self._lock:  # ids are made in worker threads too
            at = self._at
            if at + n > len(self._pool):
                self._pool, at = os.urandom(_POOL_BYTES), 0
            self._at = at + n
            return self._pool[at : at + n]

    def forget(self) -> None:
        """Drop what the pool holds (a forked child must not repeat its parent's)."""
        self._lock = threading.Lock()
        self._pool, self._at = b"", 0


_POOL = _RandomPool()
os.register_at_fork(after_in_child=_POOL.forget)


def new_id(prefix: str, nbytes: int = 12) -> str:
    """A random identifier such as ``toolu_9f2c...`` or ``chatcmpl-...``.

    ``prefix`` includes its separator (``"toolu_"``, ``"chatcmpl-"``).
    """
    return prefix + _POOL.take(nbytes).hex()

"""API-key authentication: off by default, on when keys are configured.

A key is accepted from ``Authorization: Bearer <key>`` (OpenAI, Ollama clients) or
``x-api-key`` (Anthropic clients), compared in constant time against every
configured key. Keys are never logged.
"""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers

from llmbridge.core.errors import AuthenticationError

__all__ = ["OPEN_PATHS", "KeyChecker"]

OPEN_PATHS = frozenset({"/", "/health"})
"""Liveness probes answer without a key (they reveal nothing but "up")."""


class KeyChecker:
    def __init__(self, keys: tuple[str, ...]) -> None:
        self._keys = tuple(k.encode() for k in keys if k)

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def check(self, headers: Headers) -> None:
        """Raise ``AuthenticationError`` unless the request carries a valid key."""
        if not self._keys:
            return
        presented = headers.get("x-api-key")
        if presented is None:
            auth = headers.get("authorization", "")
            scheme, _, value = auth.partition(" ")
            if scheme.lower() == "bearer":
                presented = value.strip()
        if not presented:
            raise AuthenticationError(
                "missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'"
            )
        candidate = presented.encode()
        # Compare against every key so the time taken does not reveal which matched.
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(candidate, key)
        if not matched:
            raise AuthenticationError("invalid API key")

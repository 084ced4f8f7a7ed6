"""``Accounts``: what a gateway holds for keys and limits, and how a request's key is
resolved.

The gateway builds one per app (``app.state.accounts``, which ``accounts.routes``
reads), opens it in its lifespan and closes it at shutdown. It holds the key store
(the agent database's ``api_keys``), the shared state the limits are counted in, and
the master key of the admin API.

Auth is on when the server has static keys (``server.api_keys``) or a master key
(``server.master_key``). A request's key is then, in order: a static key (compared in
constant time against each, web/auth.py), or a database key (``llmb-...``, looked up
by hash through the per-process cache, accounts/keys.py); a revoked key is a 401 saying
so. The master key opens ``/admin/`` only (accounts/routes.py), not the model APIs.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from pathlib import Path

from llmbridge.accounts.keys import CACHE_S, KEY_PREFIX, KeyRecord, KeyStore
from llmbridge.accounts.limits import Admission, admit
from llmbridge.core.errors import AuthenticationError, ServiceUnavailableError
from llmbridge.core.limits import DEFAULT_LIMITS, RequestLimits
from llmbridge.state.base import SharedState
from llmbridge.web.auth import KeyChecker

__all__ = ["ACCOUNT", "Accounts", "Caller"]

log = logging.getLogger("llmbridge.accounts")

ACCOUNT = "llmbridge.account"
"""The ASGI scope key holding the ``KeyRecord`` of a request's database key (``None``
for a static key or with auth off)."""

Caller = tuple[str | None, KeyRecord | None]
"""A request's identity (``web.auth.key_identity``) and its database key, if any."""


class Accounts:
    """Keys (static and in the database), the master key and the limits' state."""

    def __init__(
        self,
        *,
        static_keys: KeyChecker,
        master_key: str | None,
        database: str | Path | None,
        state: Callable[[], SharedState],
        cache_s: float = CACHE_S,
        body_limits: RequestLimits = DEFAULT_LIMITS,
    ) -> None:
        self.static_keys = static_keys
        self.master_key = master_key or None
        self.database = database
        self._state = state
        self.cache_s = cache_s
        self.body_limits = body_limits
        """What an admin request's body may hold (the gateway's request limits)."""
        self.keys: KeyStore | None = None
        """The key store once open (``None`` with auth off, or when the database failed)."""
        self.error: str | None = None
        """Why the key store could not be opened (the kind of failure only)."""

    @property
    def state(self) -> SharedState:
        """The shared state limits are counted in, read per request (the gateway may
        replace its state once Redis is open)."""
        return self._state()

    @property
    def enabled(self) -> bool:
        """Whether requests need a key."""
        return self.static_keys.enabled or self.master_key is not None

    async def open(self) -> None:
        """Open the key store when auth is on. A failure is logged and leaves static
        keys working; database keys are then refused and ``/admin`` answers 503."""
        if not self.enabled or self.database is None:
            return
        try:
            self.keys = await KeyStore.open(self.database, cache_s=self.cache_s)
        except Exception as exc:  # noqa: BLE001 - reported by /admin instead
            self.error = type(exc).__name__
            log.error("the key database is unavailable: %s: %s", type(exc).__name__, exc)

    async def aclose(self) -> None:
        if self.keys is not None:
            keys, self.keys = self.keys, None
            await keys.close()

    def master_matches(self, presented: str | None) -> bool:
        """Whether ``presented`` is the master key (constant time)."""
        if self.master_key is None or not presented:
            return False
        return hmac.compare_digest(presented.encode(), self.master_key.encode())

    async def caller(self, presented: str) -> Caller:
        """The identity and database key of ``presented``; ``AuthenticationError`` for
        a key that is not one, or was revoked."""
        identity = self.static_keys.match(presented)
        if identity is not None:
            return identity, None
        if presented.startswith(KEY_PREFIX) and self.keys is None and self.error is not None:
            # The key database did not open (logged at start): say so, not "invalid".
            raise ServiceUnavailableError(f"the key database is unavailable ({self.error})")
        if presented.startswith(KEY_PREFIX) and self.keys is not None:
            # The database down is a 503 from the store's boundary (agent/store/errors.py).
            record = await self.keys.cached(presented)
            if record is not None:
                if record.revoked:
                    raise AuthenticationError(f"the API key {record.prefix}... was revoked")
                return record.identity, record
        raise AuthenticationError("invalid API key")

    async def admit(
        self, record: KeyRecord | None, model: str, prompt_tokens: int = 0
    ) -> Admission:
        """``accounts.limits.admit`` on this gateway's shared state."""
        return await admit(self.state, record, model, prompt_tokens)

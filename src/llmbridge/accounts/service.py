"""``Accounts``: what a gateway holds for keys and limits, and how a request's key is
resolved.

The gateway builds one per app (``app.state.accounts``, which ``accounts.routes``
reads), opens it in its lifespan and closes it at shutdown. It holds the key store
(``api_keys``, on the gateway's one ``Database``: store/database.py, opened once
through ``OpenOnce``), the shared state the limits are counted in, and the master key
of the admin API.

When auth is on (``enabled``) the model APIs need a key:

- ``server.auth: false`` (``--no-auth``): never; the gateway is open on purpose and
  does not read the keys in the database.
- ``server.auth: true`` (``--auth``): always, even before any key exists.
- unset (the default): when the server has static keys (``server.api_keys``), a master
  key (``server.master_key``) or unrevoked keys in the database. A gateway that starts
  open keeps looking, at most once per ``cache_s`` and only while requests come, in
  the background (a request never waits for it): the first key created turns auth on
  within ``cache_s`` (5 s) in every process, and it stays on until the process stops,
  even if every key is revoked meanwhile (revoking the last key must not open the
  gateway to everyone).

A request's key is then, in order: a static key (compared in constant time against
each, web/auth.py), or a database key (``llmb-...``, looked up by hash through the
per-process cache, accounts/keys.py); a revoked key is a 401 saying so. The master key
opens ``/admin/`` (accounts/routes.py) and, of the model APIs, only the Ollama
model-management routes (gateway/routes/ollama_models.py).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from llmbridge.accounts.keys import CACHE_S, KEY_PREFIX, KeyRecord, KeyStore
from llmbridge.accounts.limits import OPEN, Admission, admit, admit_tool_call
from llmbridge.core.errors import AuthenticationError, ServiceUnavailableError
from llmbridge.core.request_limits import DEFAULT_LIMITS, RequestLimits
from llmbridge.core.tasks import stop_task
from llmbridge.state.base import SharedState
from llmbridge.store.database import OpenOnce
from llmbridge.store.engine import resolve_url
from llmbridge.web.auth import KeyChecker

__all__ = ["ACCOUNT", "Accounts", "Caller", "auth_summary", "count_database_keys", "shown_database"]

log = logging.getLogger("llmbridge.accounts")

ACCOUNT = "llmbridge.account"
"""The ASGI scope key holding the ``KeyRecord`` of a request's database key (``None``
for a static key or with auth off)."""

Caller = tuple[str | None, KeyRecord | None]
"""A request's identity (``web.auth.key_identity``) and its database key, if any."""


def shown_database(database: str | Path | None) -> str:
    """``database`` as the banner and logs show it: a URL without its password."""
    text = str(database or "")
    if "://" not in text:
        return text
    from sqlalchemy.engine import make_url

    try:
        return make_url(text).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an unusable URL: say so, do not echo it
        return "(unparsable database URL)"


def auth_summary(
    *,
    auth: bool | None,
    static_keys: int,
    master_key: bool,
    database_keys: int | None,
    database: str | Path | None,
    error: str | None = None,
    on: bool | None = None,
) -> str:
    """One line on auth for the banner: on or off, and which keys from where, e.g.
    ``on: 3 database keys (/var/lib/llmbridge.db), 1 static key``."""
    if auth is False:
        return "off on purpose (--no-auth, server.auth: false): no request needs a key"
    where = shown_database(database)
    keys = []
    if database_keys:
        keys.append(f"{database_keys} database key{'s' if database_keys != 1 else ''} ({where})")
    if static_keys:
        keys.append(f"{static_keys} static key{'s' if static_keys != 1 else ''}")
    if master_key:
        keys.append("the master key for /admin/")
    if on is None:
        on = auth is True or bool(static_keys or master_key or database_keys)
    if on:
        if error is not None:
            keys.append(f"the key database is unavailable ({error}): its keys get 503")
        return "on: " + (", ".join(keys) if keys else "no keys yet, every request is refused")
    if error is not None:
        return (
            f"off for now: the key database is unavailable ({error}), its keys unknown; "
            f"it is read again every {CACHE_S:g} s while requests come (--auth refuses "
            "requests meanwhile)"
        )
    return (
        f"off: no keys (the first `llmbridge keys create` in {where} turns it on within "
        f"{CACHE_S:g} s; --no-auth keeps it off on purpose)"
    )


async def count_database_keys(database: str | Path) -> int:
    """The unrevoked keys in ``database`` (migrated first, as the gateway does)."""
    store = await KeyStore.open(database)
    try:
        return await store.count_active()
    finally:
        await store.close()


class Accounts:
    """Keys (static and in the database), the master key and the limits' state."""

    def __init__(
        self,
        *,
        static_keys: KeyChecker,
        master_key: str | None,
        database: OpenOnce | None,
        state: Callable[[], SharedState],
        cache_s: float = CACHE_S,
        body_limits: RequestLimits = DEFAULT_LIMITS,
        auth: bool | None = None,
    ) -> None:
        self.auth = auth
        """``server.auth``: ``None`` decides from the keys there are (module docstring)."""
        self.static_keys = static_keys
        self.master_key = master_key or None
        self.database = database
        """The gateway's database, opened on first use (``None``: no key database)."""
        self._state = state
        self.cache_s = cache_s
        self.body_limits = body_limits
        """What an admin request's body may hold (the gateway's request limits)."""
        self.keys: KeyStore | None = None
        """The key store once open (``None`` with auth off, or when the database failed)."""
        self.error: str | None = None
        """Why the key store could not be opened (the kind of failure only)."""
        self.database_keys: int | None = None
        """Unrevoked keys in the database at the last count (``None``: never counted)."""
        self.on_auth_on: Callable[[], Awaitable[None]] | None = None
        """Called once when database keys turn auth on after the start (the gateway
        opens its usage ledger then)."""
        self._keys_seen = False
        self._looked_at = -float("inf")
        self._looking: asyncio.Task[None] | None = None

    @property
    def state(self) -> SharedState:
        """The shared state limits are counted in, read per request (the gateway may
        replace its state once Redis is open)."""
        return self._state()

    @property
    def enabled(self) -> bool:
        """Whether requests need a key (module docstring)."""
        if self.auth is not None:
            return self.auth
        return self.static_keys.enabled or self.master_key is not None or self._keys_seen

    async def open(self) -> None:
        """Open the key store (unless auth is off on purpose) and count its keys. A
        failure is logged and leaves static keys working; database keys are then
        refused (503) and ``/admin`` answers 503."""
        if self.auth is False or self.database is None:
            return
        self._looked_at = time.monotonic()
        if self.master_key is None and _not_created_yet(self.database.url):
            # No file, no keys, and no admin API to create one: the gateway does not
            # create a database to find that out (with the agent and stored responses
            # off nothing else opens one); ``look_for_keys`` looks again, for keys
            # made by the CLI.
            log.debug("auth: %s", self.summary())
            return
        try:
            self.keys = KeyStore(await self.database.get(), cache_s=self.cache_s)
            self._counted(await self.keys.count_active())
        except Exception as exc:  # noqa: BLE001 - reported by /admin instead
            self.error = type(exc).__name__
            log.error("the key database is unavailable: %s: %s", type(exc).__name__, exc)
        # DEBUG: the banner says it (cli/serve.py); auth turning on later is a warning.
        log.debug("auth: %s", self.summary())

    def summary(self) -> str:
        """What the banner says of auth (``auth_summary``), as this gateway sees it."""
        return auth_summary(
            auth=self.auth,
            static_keys=self.static_keys.count,
            master_key=self.master_key is not None,
            database_keys=self.database_keys,
            database=None if self.database is None else self.database.url,
            error=self.error,
            on=self.enabled,
        )

    def _counted(self, active: int) -> bool:
        """Note ``active`` unrevoked keys; whether that turned auth on just now."""
        self.database_keys = active
        if active and not self._keys_seen:
            self._keys_seen = True
            return self.auth is None and not (self.static_keys.enabled or self.master_key)
        return False

    def look_for_keys(self) -> None:
        """While auth is off only for want of keys: count the database's keys again, in
        the background, at most once per ``cache_s`` (the middleware calls this on every
        request it lets through without a key; a request never waits for it)."""
        if self.auth is not None or self._keys_seen or self.database is None:
            return
        now = time.monotonic()
        if self._looking is not None or now - self._looked_at < self.cache_s:
            return
        self._looked_at = now  # one try per cache_s, failed or not
        self._looking = asyncio.get_running_loop().create_task(self._look())

    async def _look(self) -> None:
        try:
            if self.keys is None:  # not there, or it failed to open at the start
                if self.database is None or _not_created_yet(self.database.url):
                    return
                self.keys = KeyStore(await self.database.get(), cache_s=self.cache_s)
                self.error = None
            if self._counted(await self.keys.count_active()):
                log.warning("auth is on: %s", self.summary())
                if self.on_auth_on is not None:
                    await self.on_auth_on()
        except Exception as exc:  # noqa: BLE001 - tried again in cache_s; serving goes on
            log.debug("counting the database's keys failed: %s: %s", type(exc).__name__, exc)
        finally:
            self._looking = None

    async def stop_looking(self) -> None:
        """Stop ``look_for_keys``'s count, if one is under way (at shutdown)."""
        looking, self._looking = self._looking, None
        # stop_task: a count on the database may lose one cancellation (core/tasks.py).
        await stop_task(looking)

    async def aclose(self) -> None:
        await self.stop_looking()
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
            # The database down is a 503 from the store's boundary (store/errors.py).
            record = await self.keys.cached(presented)
            if record is not None:
                if record.revoked:
                    raise AuthenticationError(f"the API key {record.prefix}... was revoked")
                return record.identity, record
        raise AuthenticationError("invalid API key")

    async def admit(
        self,
        record: KeyRecord | None,
        model: str,
        prompt_tokens: int = 0,
        *,
        reserve_usd: float = 0.0,
    ) -> Admission:
        """``accounts.limits.admit`` on this gateway's shared state."""
        return await admit(self.state, record, model, prompt_tokens, reserve_usd=reserve_usd)

    async def admit_tool_call(self, record: KeyRecord | None) -> Admission:
        """``accounts.limits.admit_tool_call`` on this gateway's shared state."""
        return await admit_tool_call(self.state, record)

    def within_request(self, record: KeyRecord | None) -> Admission:
        """The admission of a model call made inside a request already admitted on
        ``record`` (a later round of the MCP tool loop): no slot or request of its own,
        nothing reserved, so ``finish`` counts all its tokens to the key's tokens per
        minute (its cost reaches the spend through its ledger row)."""
        return OPEN if record is None else Admission(self.state, record)


def _not_created_yet(database: str | Path) -> bool:
    """Whether ``database`` is a SQLite file that does not exist yet (it holds no key)."""
    url = resolve_url(database)
    name = url.database
    if url.get_backend_name() != "sqlite" or not name or name == ":memory:":
        return False
    return not Path(name).exists()

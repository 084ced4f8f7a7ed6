"""The console's sign-in session: a signed, expiring cookie, and the CSRF token of its
forms.

Signing in proves knowledge of the master key once (a POSTed form, never a URL); what
the browser keeps afterwards is a cookie that holds no key: ``<payload>.<signature>``,
where the payload is ``v1:<issued>:<expires>:<nonce>`` and the signature its
HMAC-SHA256 under a key *derived from* the master key (``HMAC(master, "llmbridge
console session v1")``). So:

- every ``llmbridge serve --workers N`` process, and every replica with the same master
  key, accepts the cookie another one issued, with no shared store;
- changing the master key invalidates every session at once (the derived key changes);
- the cookie expires (``SESSION_S``, 12 h): the expiry is inside the signed payload, so
  a client cannot extend it, whatever its cookie jar does with ``Max-Age``.

Signing out revokes the session on the server too: its nonce is kept in the shared
state (``revoked_key``, for ``SESSION_S``: until the cookie would have expired anyway),
and the gate (web.py ``session_of``) refuses a cookie whose nonce is there, so a copy of
the cookie taken before signing out opens nothing. The shared state is Redis with
``state.redis_url``: every worker and replica then knows; without it each process keeps
its own (``--workers N`` needs Redis for a sign-out to reach the other workers, as it
does for limits). Rotating the master key ends every session at once, everywhere
(docs/CONSOLE.md, "Security model").

The CSRF token of a session is ``HMAC(derived key, "csrf:" + nonce)``: bound to that
session, never stored, checked in constant time on every POST (``csrf_matches``),
beside the ``Origin`` check of the routes and the cookie's ``SameSite=Strict``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

__all__ = [
    "COOKIE",
    "SESSION_S",
    "Session",
    "csrf_matches",
    "issue",
    "read",
    "revoked_key",
]

COOKIE = "llmbridge_console"
"""The session cookie's name (``Path=/ui``)."""
SESSION_S = 12 * 3600
"""How long a session lasts after signing in."""
_CONTEXT = b"llmbridge console session v1"


@dataclass(frozen=True, slots=True)
class Session:
    """A valid session, as read from its cookie."""

    nonce: str
    issued_at: int
    expires_at: int
    csrf: str
    """The token every POST form of this session carries."""


def _signing_key(master_key: str) -> bytes:
    return hmac.new(master_key.encode(), _CONTEXT, hashlib.sha256).digest()


def _sign(key: bytes, payload: bytes) -> str:
    digest = hmac.new(key, payload, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _csrf(key: bytes, nonce: str) -> str:
    return hmac.new(key, b"csrf:" + nonce.encode(), hashlib.sha256).hexdigest()


def issue(master_key: str, *, now: float | None = None, lifetime_s: int = SESSION_S) -> str:
    """A new session cookie's value."""
    issued = int(time.time() if now is None else now)
    nonce = secrets.token_urlsafe(18)
    payload = f"v1:{issued}:{issued + lifetime_s}:{nonce}".encode()
    encoded = base64.urlsafe_b64encode(payload).rstrip(b"=").decode()
    return f"{encoded}.{_sign(_signing_key(master_key), payload)}"


def read(master_key: str | None, cookie: str | None, *, now: float | None = None) -> Session | None:
    """The session ``cookie`` holds, or ``None``: no master key, no cookie, a forged or
    altered one, one signed under another master key, or one past its expiry."""
    if not master_key or not cookie or len(cookie) > 512:
        return None
    encoded, _, signature = cookie.partition(".")
    try:
        payload = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    except ValueError:
        return None
    key = _signing_key(master_key)
    if not hmac.compare_digest(_sign(key, payload), signature):
        return None
    try:
        version, issued, expires, nonce = payload.decode().split(":")
        issued_at, expires_at = int(issued), int(expires)
    except ValueError:
        return None
    if version != "v1" or (time.time() if now is None else now) >= expires_at:
        return None
    return Session(nonce, issued_at, expires_at, _csrf(key, nonce))


def revoked_key(session: Session) -> str:
    """The shared state's counter that marks ``session`` signed out (its nonce is
    random and never shown, so one session cannot revoke another)."""
    return f"console:signed-out:{session.nonce}"


def csrf_matches(session: Session, presented: str | None) -> bool:
    """Whether ``presented`` is ``session``'s CSRF token (constant time)."""
    return bool(presented) and hmac.compare_digest(session.csrf, presented or "")

"""API-key authentication: off by default, on when keys are configured.

A key is accepted from ``Authorization: Bearer <key>`` (OpenAI, Ollama clients),
``x-api-key`` (Anthropic clients), ``x-goog-api-key`` or the ``key`` query parameter
(Gemini clients: the google-genai SDKs send the header, Google's REST examples and some
tools the parameter: ``presented_key``), compared in constant time against every
configured key (``KeyChecker``). Keys kept in the database (``llmb-...``) are resolved
by the gateway's middleware through ``accounts.service``, after the static ones. Keys
are never logged; ``llmbridge serve`` takes ``key=`` values out of its access log
(cli/serve.py) with ``redact_query_keys``, which reads a query string exactly as
``query_key`` does (the same split, the same percent-decoding of names), so whatever
authenticates is redacted: ``?%6Bey=...`` too (a regex on the raw text missed it).

The key a request matched is its caller's identity: ``key_identity(key)``, a prefix of
the key's SHA-256 (never the key itself), is put in the ASGI scope by the gateway's
auth middleware under ``KEY_IDENTITY``; routes read it with ``caller_identity``. The
agent API stores it as the ``owner`` of what a key creates. With auth off there is
no identity (``None``).
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import unquote

from starlette.datastructures import Headers
from starlette.requests import HTTPConnection

from llmbridge.core.errors import AuthenticationError

__all__ = [
    "KEY_IDENTITY",
    "OPEN_PATHS",
    "KeyChecker",
    "caller_identity",
    "key_identity",
    "presented_key",
    "query_key",
    "redact_query_keys",
]

OPEN_PATHS = frozenset({"/", "/api/hello", "/health"})
"""Liveness probes answer without a key (they reveal nothing but "up")."""

KEY_IDENTITY = "llmbridge.key_identity"
"""The ASGI scope key holding the identity of the key a request matched."""


def key_identity(key: str) -> str:
    """The stored identity of an API key: the first 32 hex digits (128 bits) of its
    SHA-256. Enough to tell keys apart; says nothing usable about the key."""
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def caller_identity(connection: HTTPConnection) -> str | None:
    """The identity of the key the request matched (``None`` with auth off)."""
    identity = connection.scope.get(KEY_IDENTITY)
    return identity if isinstance(identity, str) else None


class KeyChecker:
    def __init__(self, keys: tuple[str, ...]) -> None:
        self._keys = tuple(k.encode() for k in keys if k)
        self._identities = tuple(key_identity(k) for k in keys if k)

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    @property
    def count(self) -> int:
        return len(self._keys)

    def match(self, presented: str) -> str | None:
        """The identity of the static key ``presented`` is, else ``None``."""
        candidate = presented.encode()
        # Compare against every key so the time taken does not reveal which matched.
        matched: str | None = None
        for key, identity in zip(self._keys, self._identities, strict=True):
            if hmac.compare_digest(candidate, key):
                matched = identity
        return matched

    def check(self, headers: Headers, query_string: bytes = b"") -> str | None:
        """The identity (``key_identity``) of the key the request carries (in its
        headers, or ``query_string``'s ``key``), ``None`` with auth off;
        ``AuthenticationError`` unless it carries a valid key."""
        if not self._keys:
            return None
        matched = self.match(presented_key(headers, query_string))
        if matched is None:
            raise AuthenticationError("invalid API key")
        return matched


_KEY_HEADERS = frozenset((b"x-api-key", b"x-goog-api-key", b"authorization"))


def presented_key(headers: Headers, query_string: bytes = b"") -> str:
    """The key a request carries (module docstring); ``AuthenticationError`` when it
    carries none."""
    # One pass over the raw headers (ASGI names are lower-case bytes), not a scan of
    # the whole list per header name looked up: this runs on every request.
    found: dict[bytes, bytes] = {}
    for name, raw_value in headers.raw:
        if name in _KEY_HEADERS:
            found.setdefault(name, raw_value)
    raw = found.get(b"x-api-key") or found.get(b"x-goog-api-key")
    presented = raw.decode("latin-1") if raw else None
    if presented is None:
        auth = found.get(b"authorization", b"").decode("latin-1")
        scheme, _, credentials = auth.partition(" ")
        if scheme.lower() == "bearer":
            presented = credentials.strip()
    if not presented and query_string:
        presented = query_key(query_string.decode("latin-1"))
    if not presented:
        raise AuthenticationError(
            "missing API key: send 'Authorization: Bearer <key>', 'x-api-key: <key>' "
            "or 'x-goog-api-key: <key>'"
        )
    return presented


REDACTED = "REDACTED"


def _query_name(raw: str) -> str:
    """A query parameter's name as ``urllib.parse.parse_qsl`` (so starlette's
    ``QueryParams``) decodes it: ``+`` is a space, then percent-decoding as UTF-8."""
    if "+" in raw:
        raw = raw.replace("+", " ")
    return unquote(raw, errors="replace") if "%" in raw else raw


def query_key(query: str) -> str | None:
    """The ``key`` parameter of a query string (the last one, as ``QueryParams.get``
    gives), its name and value percent-decoded; ``None`` without one."""
    found: str | None = None
    for pair in query.split("&"):
        name, eq, value = pair.partition("=")
        if eq and _query_name(name) == "key":
            found = _query_name(value)
    return found


def redact_query_keys(text: str) -> str:
    """``text`` (a request target, ``/path?query``) with the value of every parameter
    ``query_key`` would read replaced by ``REDACTED``, however its name is encoded."""
    path, mark, query = text.partition("?")
    if not mark:
        return text
    # The target ends at whitespace (a request line's " HTTP/1.1"): keep what follows.
    cut = next((i for i, c in enumerate(query) if c.isspace()), len(query))
    query, rest = query[:cut], query[cut:]
    pairs = query.split("&")
    for i, pair in enumerate(pairs):
        name, eq, _ = pair.partition("=")
        if eq and _query_name(name) == "key":
            pairs[i] = f"{name}={REDACTED}"
    return f"{path}?{'&'.join(pairs)}{rest}"

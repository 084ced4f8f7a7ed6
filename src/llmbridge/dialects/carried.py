"""A backend's opaque reasoning token, carried across turns in a thinking signature.

Some servers hand the client an opaque token with their reasoning and want it back with
the next request: a Responses server's ``encrypted_content`` (with ``store: false``),
Gemini's ``thoughtSignature``. The core carries that token as a ``ThinkingPart``'s
``signature``, which every front able to carry a signature hands to its client and takes
back (Anthropic's ``thinking.signature``, the Responses front's ``encrypted_content``,
the Gemini front's ``thoughtSignature``).

The token only means something to the server that made it (another server answers 400),
so the signature says where it came from: the scheme's prefix + the backend's name
(URL-safe base64, so it holds no ``.``) + ``.`` + the token, unchanged. The prefix is
what is checked on the way back, not ``ThinkingPart.provider``: the Anthropic front
marks every signed block it takes back as Anthropic's (``dialects/anthropic/request.py``),
whoever signed it.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

__all__ = ["CARRIED_PREFIX", "Carrier", "is_carried"]

CARRIED_PREFIX = "llmbridge."
"""How every carried token's signature starts (each scheme's prefix extends it), so a
front that hands signatures to a provider that verifies its own (Anthropic) can tell
one that is not that provider's without knowing every scheme."""


def is_carried(signature: str | None) -> bool:
    """Whether ``signature`` is a token some backend's scheme carries (Gemini's, a
    Responses server's), never a signature of the provider the client thinks it is
    talking to."""
    return signature is not None and signature.startswith(CARRIED_PREFIX)


@dataclass(frozen=True, slots=True)
class Carrier:
    """One kind of carried token: its signature prefix and the ``ThinkingPart.provider``
    that parts decoded from such a server get."""

    prefix: str
    """Starts with ``CARRIED_PREFIX``."""
    provider: str

    def __post_init__(self) -> None:
        if not self.prefix.startswith(CARRIED_PREFIX):
            raise ValueError(f"a carried token's prefix starts with {CARRIED_PREFIX!r}")

    def carry(self, origin: str | None, token: str) -> str:
        """The signature for ``token`` from the backend named ``origin``."""
        tag = base64.urlsafe_b64encode((origin or "").encode()).decode()
        return f"{self.prefix}{tag}.{token}"

    def recover(self, signature: str | None, origin: str | None) -> str | None:
        """The token in ``signature`` when it came from the backend named ``origin``
        (any backend when ``origin`` is ``None``); else ``None``."""
        if not signature or not signature.startswith(self.prefix):
            return None
        tag, dot, token = signature[len(self.prefix) :].partition(".")
        if not dot or not token:
            return None
        try:
            source = base64.urlsafe_b64decode(tag.encode()).decode()
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return None
        if origin is not None and source != origin:
            return None
        return token

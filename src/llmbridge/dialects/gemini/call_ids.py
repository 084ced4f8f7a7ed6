"""Gemini's own function call ids, carried across turns in the core's call id.

Google's API may put an ``id`` on a ``functionCall`` (Gemini 3 models do; older ones
leave it out) and then wants it back: on that call in the next request's history and on
the ``functionResponse`` that answers it ("If populated, the client ... return[s] the
response with the matching id", the API's ``FunctionCall.id``). An id Google did not
issue must not be sent: the API has answered 400 to a client's own ids on calls and
results (MoonshotAI/kimi-cli#1582), so the ``gemini`` backend sends back only the ids
that backend issued, and none otherwise (Google then matches by name and order).

The core's call id is what every front shows its client and takes back, so a Google id
travels inside it: ``gcall_<hex of the backend's name>_<hex of Google's id>``. Hex keeps
it within every dialect's id alphabet (Anthropic's ``^[a-zA-Z0-9_-]+$``), and the
marker is found at the end of whatever the front made of the id (the Anthropic front
prefixes ``toolu_``). A call id without the marker, or issued for another backend, is
not Google's.
"""

from __future__ import annotations

import re

__all__ = ["is_issued", "issued_call_id", "recover_call_id"]

_MARKER = "gcall_"
_ISSUED = re.compile(r"(?:^|_)gcall_([0-9a-f]*)_([0-9a-f]+)$")


def issued_call_id(origin: str | None, google_id: str) -> str:
    """The core call id for ``google_id``, issued by the backend named ``origin``."""
    return f"{_MARKER}{(origin or '').encode().hex()}_{google_id.encode().hex()}"


def recover_call_id(call_id: str, origin: str | None) -> str | None:
    """Google's id inside ``call_id`` when the backend named ``origin`` issued it (any
    backend when ``origin`` is ``None``); else ``None``."""
    match = _ISSUED.search(call_id)
    if match is None:
        return None
    try:
        source = bytes.fromhex(match.group(1)).decode()
        google_id = bytes.fromhex(match.group(2)).decode()
    except (ValueError, UnicodeDecodeError):
        return None
    if origin is not None and source != origin:
        return None
    return google_id


def is_issued(call_id: str) -> bool:
    """Whether ``call_id`` carries an id some Gemini backend's server issued."""
    return recover_call_id(call_id, None) is not None

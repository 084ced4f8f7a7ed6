"""The master key's one check, wherever it is presented: the console's sign-in form
(gateway/console/pages.py) and the admin API's ``Authorization: Bearer`` header
(accounts/routes.py) share it, so guessing through one counts against the other.

A peer address that sent ``MASTER_KEY_FAILURES`` wrong master keys in the last
``MASTER_KEY_WINDOW_S`` seconds gets ``RateLimitError`` (429, ``Retry-After``) before
its key is even compared, the right one included, until the window moves on: a guess
past the limit learns nothing. The count is kept in the shared state, so it holds
across ``--workers`` and replicas with Redis (``state.redis_url``), per process
without it.

The peer is the address of the TCP connection (``request.client``), which uvicorn
replaces with the ``X-Forwarded-For`` client only when the connection comes from one
of ``server.trusted_proxies`` (empty by default: a client naming itself in a header
is not trusted; cli/serve.py passes the list to uvicorn as ``forwarded_allow_ips``).
"""

from __future__ import annotations

from starlette.requests import HTTPConnection

from llmbridge.accounts.service import Accounts
from llmbridge.core.errors import RateLimitError

__all__ = ["MASTER_KEY_FAILURES", "MASTER_KEY_WINDOW_S", "master_key_matches", "peer_of"]

MASTER_KEY_FAILURES = 10
"""Wrong master keys one peer address may send per ``MASTER_KEY_WINDOW_S``."""
MASTER_KEY_WINDOW_S = 60.0


def peer_of(connection: HTTPConnection) -> str:
    """The address a request came from, as the limit counts it."""
    return connection.client.host if connection.client else "unknown"


def _counter(peer: str) -> str:
    return f"master-key:wrong:{peer}"


async def master_key_matches(accounts: Accounts, presented: str | None, peer: str) -> bool:
    """Whether ``presented`` is the master key (constant time), a wrong one counted
    against ``peer``; ``RateLimitError`` once ``peer`` is past the limit."""
    shared = accounts.state
    counter = _counter(peer)
    if await shared.used(counter, MASTER_KEY_WINDOW_S) >= MASTER_KEY_FAILURES:
        raise RateLimitError(
            f"too many wrong master keys from this address ({MASTER_KEY_FAILURES} in "
            f"{MASTER_KEY_WINDOW_S:g} s): try again in a minute",
            retry_after=MASTER_KEY_WINDOW_S,
        )
    if accounts.master_matches(presented):
        return True
    await shared.add(counter, 1, MASTER_KEY_WINDOW_S)
    return False

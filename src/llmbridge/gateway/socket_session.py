"""What one Responses WebSocket keeps between its responses, and how a frame's request
finds it: the socket's latest response (``SocketSession``, holding a ``Remembered``), put
in the request's scope under ``SESSION_SCOPE_KEY`` by the socket route
(``routes/responses_socket.py``) and read back with ``socket_session`` by the Responses
route and the stateful code it shares with Interactions (``stateful.py``: ``continued``
looks there first, ``save`` remembers the reply there).

Its own module, below the routes, so that shared code depends on no route. As OpenAI's
WebSocket mode does, only the latest response is kept, and a conversation over
``server.max_body_bytes`` is not (a client could not send it whole either).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.types import Scope

from llmbridge.gateway.stored_responses import Chain

__all__ = ["SESSION_SCOPE_KEY", "Remembered", "SocketSession", "socket_session"]

SESSION_SCOPE_KEY = "llmbridge.responses_socket"
"""The scope entry of a frame's request that holds its socket's ``SocketSession``."""


@dataclass(frozen=True, slots=True)
class Remembered:
    """A response a later ``response.create`` on the same socket may continue."""

    id: str
    input: list[Any]
    """The conversation it answered: every input item, earlier turns' included."""
    output: list[Any]
    chain: Chain
    """Its chain's totals, had it been stored (for a continuation that will be)."""


class SocketSession:
    """What one socket keeps between its responses: the latest one (module docstring)."""

    __slots__ = ("_latest", "max_bytes")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        """The largest conversation kept (``server.max_body_bytes``)."""
        self._latest: Remembered | None = None

    def remember(self, response: Remembered) -> None:
        """Keep ``response`` in place of the one before, unless it is too large to keep."""
        if response.chain.conversation_bytes > self.max_bytes:
            self._latest = None  # too large to continue: the client sends it whole
            return
        self._latest = response

    def find(self, response_id: str) -> Remembered | None:
        latest = self._latest
        return latest if latest is not None and latest.id == response_id else None

    def forget(self) -> None:
        """Drop what is kept (a continuation of it failed, as OpenAI evicts then)."""
        self._latest = None


def socket_session(scope: Scope) -> SocketSession | None:
    """The socket a request came in on, for a frame's request; ``None`` over HTTP."""
    session = scope.get(SESSION_SCOPE_KEY)
    return session if isinstance(session, SocketSession) else None

"""What the stateful routes share: OpenAI's Responses (``routes/responses.py``) and
Google's Interactions (``routes/interactions.py``) keep replies and continue them.

Each API is a ``Stateful``: its ``StoredApi`` (its rows in ``gateway.stored_responses``,
its words for a missing one) and its wire conventions (the field that continues a
chain, how its ``input`` is listed and a stored conversation put before it, where a
reply keeps its output items and its instructions). With it, one code path:

- whether a reply is kept (``asked_to_keep``: the body's ``store`` and
  ``agent.store_responses``, the same setting for both APIs);
- the store for a request (``store_if_open``, ``store_for``: 404 when nothing is
  stored here, 503 when the database did not open);
- the body decoded and continued from its previous id (``continued``), refused past
  ``server.limits.max_chain_*`` before the conversation is loaded, decoded off the
  event loop when large or continued;
- the reply saved (``save``) with its chain's totals; a failed save is logged, and the
  client keeps its answer.

A Responses WebSocket frame (``routes/responses_socket.py``) also brings its socket's
``SocketSession`` (``socket_session.py``): ``continued`` continues the socket's latest
response first, stored or not, and ``save`` remembers the reply there. Interactions have
no socket, and pass none.

Replies are private to the key that made them (``web.auth.caller_identity``); another
key's is a 404 like a missing one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from starlette.requests import Request

from llmbridge.agent.config import AgentConfig
from llmbridge.core.errors import NotFoundError, ServiceUnavailableError
from llmbridge.core.request import ChatRequest
from llmbridge.core.request_limits import RequestLimits
from llmbridge.dialects.framing import dumps
from llmbridge.gateway.socket_session import Remembered, SocketSession
from llmbridge.gateway.state import GatewayState, state_of
from llmbridge.gateway.stored_responses import (
    Chain,
    ResponseStore,
    StoredApi,
    not_found,
    stored_responses_on,
)
from llmbridge.web.auth import caller_identity
from llmbridge.web.bodies import parse_json, read_body

log = logging.getLogger("llmbridge.gateway")

__all__ = [
    "Continued",
    "Decode",
    "Stateful",
    "asked_to_keep",
    "continued",
    "save",
    "store_for",
    "store_if_open",
]

Decode = Callable[[Any, RequestLimits], ChatRequest]


@dataclass(frozen=True, slots=True)
class Stateful:
    """One API whose replies are stored and continued."""

    api: StoredApi
    check_id: Callable[[str, str], None]
    """A 400 naming the field (the second argument) for an id no row can have."""
    input_items: Callable[[object], list[Any]]
    """A body's ``input`` as the list of items its row stores."""
    continued_body: Callable[[dict[str, Any], list[Any], list[Any]], dict[str, Any]]
    """A body with a stored conversation (input, output) before its own input."""
    output_field: str
    """The reply's list of output items (``output``, ``steps``)."""
    instructions_field: str
    """The request's instructions (``instructions``, ``system_instruction``)."""
    created_at: Callable[[dict[str, Any]], datetime]
    """When a reply was created, from the reply."""

    @property
    def previous_field(self) -> str:
        return self.api.previous_field

    def input_bytes(self, value: object) -> int:
        """The bytes a body's ``input`` takes stored: its items as compact JSON."""
        return len(dumps(self.input_items(value)))


def asked_to_keep(store: object, config: AgentConfig) -> bool:
    """Whether a reply is kept, by the request's ``store`` and ``agent.store_responses``."""
    if config.store_responses == "default":
        return store is not False
    return config.store_responses == "explicit" and store is True


def _may_keep(body: dict[str, Any], state: GatewayState) -> bool:
    """Whether the reply to ``body`` is kept, if the store is open."""
    agent = state.config.agent
    return stored_responses_on(agent) and asked_to_keep(body.get("store"), agent)


def store_if_open(request: Request, stateful: Stateful) -> ResponseStore | None:
    """The API's stored replies, or ``None`` when they are off or not open."""
    state = state_of(request)
    if not stored_responses_on(state.config.agent) or state.responses is None:
        return None
    return state.responses.for_api(stateful.api)


def store_for(request: Request, stateful: Stateful, reply_id: str) -> ResponseStore:
    """The API's stored replies, for a request that needs them: 404 when they are off
    (no reply can exist), 503 when they are on but the database did not open."""
    state = state_of(request)
    noun = stateful.api.noun
    if not stored_responses_on(state.config.agent):
        raise NotFoundError(
            f"{noun} with id {reply_id!r} not found: llmbridge stores no {noun.lower()}s "
            "here (agent.store_responses: off, agent.enabled: false)."
        )
    store = store_if_open(request, stateful)
    if store is None:
        error = state.responses_error
        reason = f" ({error}; see the gateway log)" if error else ""
        raise ServiceUnavailableError(
            f"stored {noun.lower()}s are unavailable: the database could not be opened{reason}"
        )
    return store


@dataclass(frozen=True, slots=True)
class Continued:
    """A request body decoded, continued from its previous reply."""

    chat: ChatRequest
    body: dict[str, Any]
    """The body decoded: with the stored conversation when it continued one."""
    previous: str | None
    """The reply it continued (``None``: none, or replies are not stored)."""
    chain: Chain
    """That reply's chain (``Chain()`` when it continued none)."""
    input_bytes: int
    """The body's own ``input`` items as JSON: what its stored reply adds."""
    own_input: object = None
    """The body's own ``input``, as the client sent it."""
    raw: bytes | bytearray | None = None
    """The body's bytes as they came, where ``keep_raw`` asked for them and nothing was
    put before its input (the pass-through path, core/relay.py); else ``None``. As read:
    copied only by a request that relays."""


async def continued(
    request: Request,
    state: GatewayState,
    decode: Decode,
    stateful: Stateful,
    session: SocketSession | None = None,
    *,
    keep_raw: bool = False,
) -> Continued:
    """The body decoded, continued from its previous reply: the latest response of the
    socket a frame came in on (``session``), else a stored one when replies are
    stored; refused (400 naming the field) when that would take the chain past
    ``server.limits.max_chain_*``, before its conversation is loaded.

    As ``web.bodies.read_chat`` does, a large body is parsed and decoded off the event
    loop; so is every continued one, whose stored conversation may be long. With
    ``keep_raw``, a body that continued nothing keeps its bytes (``Continued.raw``)."""
    limits = state.limits
    field = stateful.previous_field
    raw = await read_body(request, limits.max_body_bytes)
    offload = len(raw) > limits.offload_bytes
    body = await asyncio.to_thread(parse_json, raw, limits) if offload else parse_json(raw, limits)
    previous = body.get(field) if isinstance(body, dict) else None
    own_input = body.get("input") if isinstance(body, dict) else None
    size = 0
    if isinstance(body, dict) and (
        isinstance(previous, str) or session is not None or _may_keep(body, state)
    ):
        # Measured only where a chain grows or is judged, or a socket keeps it: Codex
        # sends "store": false with inputs of megabytes over HTTP, and would pay for
        # nothing.
        new_input = body.get("input")
        measure = stateful.input_bytes
        size = await asyncio.to_thread(measure, new_input) if offload else measure(new_input)
    chain = Chain()
    kept: bytes | bytearray | None = None
    if isinstance(previous, str):
        stateful.check_id(previous, field)
    remembered = (
        session.find(previous) if session is not None and isinstance(previous, str) else None
    )
    if remembered is not None and isinstance(body, dict):
        # The socket's own latest response (socket_session.py), stored or not.
        chain = remembered.chain
        if _may_keep(body, state):
            chain.check_continued(size, limits, field)
        body = stateful.continued_body(body, remembered.input, remembered.output)
        offload = True
    elif (
        isinstance(previous, str)
        and session is not None
        and not stored_responses_on(state.config.agent)
    ):
        # On a socket, a response it does not hold is OpenAI's not-found, whatever is
        # stored: Codex then sends the whole conversation.
        raise not_found(previous, param=field, api=stateful.api)
    elif isinstance(previous, str) and stored_responses_on(state.config.agent):
        owner = caller_identity(request)
        store = store_for(request, stateful, previous)
        chain = await store.chain(previous, owner, param=field)
        chain.check_continued(size, limits, field)
        stored = await store.get(previous, owner, param=field)
        body = stateful.continued_body(body, stored.input, stored.output)
        offload = True
    else:
        # Without the store, the dialect's 400 names the field.
        previous = None
        if keep_raw and isinstance(body, dict):
            kept = raw
    chat = await asyncio.to_thread(decode, body, limits) if offload else decode(body, limits)
    return Continued(chat, body, previous, chain, size, own_input, kept)


async def save(
    stateful: Stateful,
    store: ResponseStore | None,
    owner: str | None,
    continued: Continued,
    reply: dict[str, Any],
    session: SocketSession | None = None,
) -> None:
    """Keep ``reply`` (the API's reply object) after ``continued``'s chain: remembered
    on ``session`` (a socket's), and stored in ``store``, each when there is one; a
    failure to store it is logged, and the client keeps its answer."""
    body = continued.body
    instructions = body.get(stateful.instructions_field)
    output = reply[stateful.output_field]
    rest = {k: v for k, v in reply.items() if k not in (stateful.output_field, "usage")}
    # The reply's own parts, measured as written (a few kB; the conversation before it
    # was measured when the chain's earlier rows were stored).
    other_bytes = len(dumps([rest, reply["usage"], instructions]))
    chain = continued.chain.then(continued.input_bytes, len(dumps(output)), other_bytes)
    conversation = stateful.input_items(body.get("input"))
    if session is not None:
        session.remember(Remembered(reply["id"], conversation, list(output), chain))
    if store is None:
        return
    try:
        await store.put(
            reply["id"],
            model=reply["model"],
            created_at=stateful.created_at(reply),
            instructions=instructions if isinstance(instructions, str) else None,
            input=conversation,
            output=output,
            usage=reply["usage"],
            response=rest,
            owner=owner,
            chain=chain,
        )
    except Exception as exc:  # noqa: BLE001 - the answer is delivered all the same
        log.error(
            "%s %s was not stored: %s: %s",
            stateful.api.noun.lower(),
            reply.get("id"),
            type(exc).__name__,
            getattr(exc, "message", exc),
        )

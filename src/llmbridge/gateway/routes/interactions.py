"""Google's Interactions API: ``POST /{v1beta|v1}/interactions`` (create, streamed with
``"stream": true``), ``GET`` and ``DELETE /{v1beta|v1}/interactions/{id}``.

Both prefixes are served alike: google-genai 3.3.0, Python and JS, posts to ``/v1`` (its
default API version for every Gemini call), and to ``/v1beta`` with ``api_version=
"v1beta"`` (or ``GOOGLE_GENAI_API_VERSION=beta``). Errors are Google's body on
both (``web/render.py`` renders ``/v1/interactions*`` as it renders ``/v1beta/*``), and
Google's clients' ways to send the key (``x-goog-api-key``, ``?key=``) are taken, as on
the Gemini routes (``web/auth.py``). One endpoint label for both prefixes
(``/v1beta/interactions``), and the ledger's dialect is ``interactions``.

Stored interactions (docs/INTERACTIONS.md): as stored Responses are
(``gateway/stateful.py``), on the same table and setting (``agent.store_responses``),
private to the caller's key and bounded by ``server.limits.max_chain_*``: an
interaction is stored unless the request says ``"store": false``, saved once complete
(for a stream, before ``interaction.completed`` is sent); ``previous_interaction_id``
puts the stored conversation and steps before the new input
(``dialects/interactions/continuation.py``); another key's interaction is a 404 like a
missing one. ``GET`` answers the resource as created (``include_input=true`` adds the
request's ``input``; ``stream=true`` replays it as a stream); ``DELETE`` answers 200
with ``{}``, as the SDKs expect (they raise on a 204).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmbridge.core.events import StreamEvent
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import ChatResponse
from llmbridge.dialects import interactions
from llmbridge.dialects.framing import dumps
from llmbridge.dialects.interactions.continuation import (
    check_interaction_id,
    continued_body,
    input_items,
    marked,
)
from llmbridge.dialects.interactions.stream import replay_stream
from llmbridge.gateway.exchange.exchange import Exchange
from llmbridge.gateway.exchange.handler import exchanged
from llmbridge.gateway.pipeline import ChatCodec, serve_chat
from llmbridge.gateway.stateful import (
    Continued,
    Stateful,
    asked_to_keep,
    continued,
    save,
    store_for,
    store_if_open,
)
from llmbridge.gateway.stored_responses import INTERACTIONS, ResponseStore
from llmbridge.web.auth import caller_identity
from llmbridge.web.render import Dialect

__all__ = ["ENDPOINT", "routes"]

ENDPOINT = "/v1beta/interactions"
"""The metrics' and the ledger's endpoint: one label for both prefixes."""
_PREFIXES = ("/v1beta", "/v1")

INTERACTIONS_CODEC = ChatCodec(
    dialect=Dialect.GEMINI,
    endpoint=ENDPOINT,
    encode_stream=interactions.encode_chat_stream,
    encode_response=interactions.encode_chat_response,
    stream_media_type="text/event-stream",
)


def _created_at(interaction: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(interaction["created"])


STORED_INTERACTIONS = Stateful(
    api=INTERACTIONS,
    check_id=check_interaction_id,
    input_items=input_items,
    continued_body=continued_body,
    output_field="steps",
    instructions_field="system_instruction",
    created_at=_created_at,
)
"""How interactions are kept and continued (gateway/stateful.py)."""


@exchanged(ENDPOINT, Dialect.GEMINI)
async def create_interaction(request: Request, exchange: Exchange) -> Response:
    """``POST .../interactions``."""
    state = exchange.state
    found = await continued(request, state, interactions.decode_chat_request, STORED_INTERACTIONS)
    chat, previous = found.chat, found.previous
    store = store_if_open(request, STORED_INTERACTIONS)
    keep = store is not None and asked_to_keep(found.body.get("store"), state.config.agent)
    if keep or previous is not None:
        chat = marked(chat, stored=keep, previous_interaction_id=previous)
    keeper = None
    if keep and store is not None:
        keeper = _Keeper(store, caller_identity(request), found)
    codec = INTERACTIONS_CODEC if keeper is None else keeper.codec
    response = await serve_chat(request, chat, codec, exchange=exchange)
    if keeper is not None and keeper.ended is not None:  # a reply that was not streamed
        await keeper.save(keeper.ended)
    return response


@exchanged(f"{ENDPOINT}/{{interaction_id}}", Dialect.GEMINI)
async def get_interaction(request: Request, exchange: Exchange) -> Response:
    """``GET .../interactions/{id}``: the stored interaction (``include_input``,
    ``stream``: query flags)."""
    interaction_id = request.path_params["interaction_id"]
    check_interaction_id(interaction_id, "id")
    store = store_for(request, STORED_INTERACTIONS, interaction_id)
    stored = await store.get(interaction_id, caller_identity(request))
    exchange.asked(stored.model)
    body = {**stored.response, "steps": stored.output, "usage": stored.usage}
    if not _flag(request, "include_input"):
        body.pop("input", None)
    if _flag(request, "stream"):
        return Response(
            replay_stream(body),
            media_type="text/event-stream",
            headers={"x-request-id": exchange.request_id},
        )
    return _json(body, exchange.request_id)


@exchanged(f"{ENDPOINT}/{{interaction_id}}", Dialect.GEMINI)
async def delete_interaction(request: Request, exchange: Exchange) -> Response:
    """``DELETE .../interactions/{id}``: 200 with ``{}``."""
    interaction_id = request.path_params["interaction_id"]
    check_interaction_id(interaction_id, "id")
    store = store_for(request, STORED_INTERACTIONS, interaction_id)
    await store.delete(interaction_id, caller_identity(request))
    return _json({}, exchange.request_id)


def _flag(request: Request, name: str) -> bool:
    """A boolean query parameter as Google's REST clients write one (``true``)."""
    return request.query_params.get(name, "").lower() in ("true", "1")


def _json(body: object, request_id: str) -> Response:
    return Response(
        dumps(body), media_type="application/json", headers={"x-request-id": request_id}
    )


class _Keeper:
    """Stores one interaction once it is complete: the route's codec with the encoders
    wrapped to catch the resource."""

    def __init__(self, store: ResponseStore, owner: str | None, found: Continued) -> None:
        self.store, self.owner, self.found = store, owner, found
        self.ended: dict[str, Any] | None = None
        """The resource of a reply that was not streamed, to store after encoding."""
        self.codec = replace(
            INTERACTIONS_CODEC,
            encode_response=self._encode_response,
            encode_stream=self._encode_stream,
        )

    def _encode_response(self, reply: ChatResponse, chat: ChatRequest) -> dict[str, Any]:
        self.ended = interactions.encode_chat_response(reply, chat)
        return self.ended

    async def _encode_stream(
        self, events: AsyncIterator[StreamEvent], chat: ChatRequest
    ) -> AsyncIterator[bytes]:
        ended: list[dict[str, Any]] = []
        async for chunk in interactions.encode_chat_stream(events, chat, ended.append):
            if ended:  # stored before the client reads interaction.completed
                await self.save(ended.pop())
            yield chunk

    async def save(self, interaction: dict[str, Any]) -> None:
        """Store ``interaction`` with the request's own input (for ``include_input``)."""
        kept = {**interaction, "input": input_items(self.found.own_input)}
        await save(STORED_INTERACTIONS, self.store, self.owner, self.found, kept)


routes = [
    route
    for prefix in _PREFIXES
    for route in (
        Route(f"{prefix}/interactions", create_interaction, methods=["POST"]),
        Route(f"{prefix}/interactions/{{interaction_id}}", get_interaction, methods=["GET"]),
        Route(f"{prefix}/interactions/{{interaction_id}}", delete_interaction, methods=["DELETE"]),
    )
]

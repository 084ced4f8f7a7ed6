"""OpenAI's Responses API: ``POST /v1/responses``, ``POST /v1/responses/input_tokens``,
``POST /v1/responses/compact``, ``/v1/responses`` over a WebSocket
(``responses_socket.py``, whose frames come here as ``POST /v1/responses``) and, with the
agent store, ``GET`` and ``DELETE /v1/responses/{response_id}``.

Stateful responses (docs/RESPONSES.md, "Stateful responses"): with stored responses on
(``stored_responses.stored_responses_on``: the default, whether the agent serves or not)
a response is stored unless the request says
``"store": false`` (``agent.store_responses``: ``explicit`` keeps only those that say
``"store": true``, ``off`` none): saved once it is complete (``response.completed`` or
``response.incomplete``; for a stream, before that event is sent), owned by the
caller's key (``web.auth.caller_identity``), in ``gateway.stored_responses`` on the
gateway's one database.
``previous_response_id`` loads one and puts its conversation and output before the new
input (``dialects/responses/continuation.py``); another key's response is a 404 like a
missing one. With the store off, ``previous_response_id`` stays the dialect's 400. A
failed save is logged and never costs the client its answer. A frame of a WebSocket
continues that socket's latest response first (``SocketSession``), which is kept
whether it is stored or not.

Compaction (docs/RESPONSES.md, "Compaction"; ``dialects/responses/compaction.py``): a
body whose input ends with ``compaction_trigger``, and every ``/v1/responses/compact``,
is served as ``ChatRequest.compaction`` (the backend compacts, or is asked for a
summary: serving/prepare/fit.py), its reply one ``compaction`` item. ``generate:
false`` (Codex's WebSocket warm-up) answers a response without output and calls no
model: it is there to be continued.

Errors are OpenAI's body (``web/render.py`` renders every ``/v1/*`` path but Anthropic's
that way, which is also the Responses API's). Besides the ``x-llmbridge-*`` headers of
what serving changed (``pipeline.change_headers``), two say what this dialect left out:
``x-llmbridge-ignored-tools`` names the hosted tools (``web_search``...) no backend here
runs, ``x-llmbridge-dropped-reasoning`` counts reasoning items whose
``encrypted_content`` another server issued (dialects/responses/reasoning.py; their text
is kept), and ``x-llmbridge-dropped-items`` adds the compaction items another server
issued to what serving left out for the backend (``pipeline.DROPPED_ITEMS_HEADER``).

The pass-through path (docs/PASSTHROUGH.md, ``dialects/responses/relay.py``): where a
backend relays Responses, a body the gateway keeps nothing of is sent to it as it came
(``serve_chat``; serving decides whether it may): one that continued no response the
gateway resolved, whose reply is not kept (stored, or remembered on a socket), that
runs no hosted MCP tools, compacts nothing, generates, left no hosted tool out and
holds nothing llmbridge sealed. A relayed reply says nothing was left out: the items
the front would drop went to the backend as they came.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute

from llmbridge.core.events import ResponseEnd, ResponseStart, StreamEvent
from llmbridge.core.hosted_mcp import HostedEvent, HostedReply, hosted_mcp_of
from llmbridge.core.ids import new_id
from llmbridge.core.messages import Message
from llmbridge.core.relay import RelayBody
from llmbridge.core.request import ChatRequest
from llmbridge.core.request_limits import RequestLimits
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.dialects import responses
from llmbridge.dialects.framing import dumps
from llmbridge.dialects.responses.compaction import (
    compacted_response,
    encode_compaction_response,
    encode_compaction_stream,
    kept_messages,
)
from llmbridge.dialects.responses.continuation import (
    check_response_id,
    continued_body,
    input_items,
    marked,
)
from llmbridge.dialects.responses.mcp_reply import encode_hosted_response, encode_hosted_stream
from llmbridge.dialects.responses.relay import DIALECT, relay_error, relayable
from llmbridge.dialects.responses.request import DETAILS_KEY, decode_input_tokens_request
from llmbridge.gateway.exchange.exchange import Exchange
from llmbridge.gateway.exchange.handler import exchanged
from llmbridge.gateway.hosted.serve import HostedCodec, serve_hosted
from llmbridge.gateway.pipeline import (
    DROPPED_ITEMS_HEADER,
    PATH_HEADER,
    ChatCodec,
    count_chat_tokens,
    serve_chat,
)
from llmbridge.gateway.routes.responses_socket import responses_socket
from llmbridge.gateway.socket_session import SocketSession, socket_session
from llmbridge.gateway.state import GatewayState
from llmbridge.gateway.stateful import (
    Continued,
    Decode,
    Stateful,
    asked_to_keep,
    continued,
    save,
    store_for,
    store_if_open,
)
from llmbridge.gateway.stored_responses import RESPONSES, ResponseStore
from llmbridge.web.auth import caller_identity
from llmbridge.web.render import Dialect, header_value

__all__ = ["IGNORED_TOOLS_HEADER", "routes"]

IGNORED_TOOLS_HEADER = "x-llmbridge-ignored-tools"
DROPPED_REASONING_HEADER = "x-llmbridge-dropped-reasoning"
IGNORED_TOOLS_MAX_BYTES = 1024
"""The most the ignored-tools header lists; the rest are counted (``,+N more``). Tool
types are the client's strings: unbounded, a megabyte of them broke the OpenAI SDK,
whose HTTP library refuses a response head over 64 KiB."""

RESPONSES_CODEC = ChatCodec(
    dialect=Dialect.OPENAI,
    endpoint="/v1/responses",
    encode_stream=responses.encode_chat_stream,
    encode_response=responses.encode_chat_response,
    stream_media_type="text/event-stream",
    relay_dialect=DIALECT,  # an openai_responses backend relays it (core/relay.py)
    relay_error=relay_error,
)
COMPACTION_RESPONSES = ChatCodec(
    dialect=Dialect.OPENAI,
    endpoint="/v1/responses",
    encode_stream=encode_compaction_stream,
    encode_response=encode_compaction_response,
    stream_media_type="text/event-stream",
)
"""A body ending with ``compaction_trigger``: one ``compaction`` item."""
COMPACTED = ChatCodec(
    dialect=Dialect.OPENAI,
    endpoint="/v1/responses/compact",
    encode_stream=encode_compaction_stream,  # never streamed: compact answers JSON
    encode_response=encode_compaction_response,
    stream_media_type="text/event-stream",
)
"""``POST /v1/responses/compact``, its reply made per request (``compact_response``)."""
HOSTED_RESPONSES = HostedCodec(
    dialect=Dialect.OPENAI,
    encode_stream=encode_hosted_stream,
    encode_response=encode_hosted_response,
)
"""A request with ``mcp`` tools: the gateway's MCP loop (gateway/hosted/)."""


def dialect_headers(chat: ChatRequest) -> dict[str, str]:
    """What the decoded request left out, as headers."""
    details = (chat.provider_details or {}).get(DETAILS_KEY) or {}
    headers: dict[str, str] = {}
    if details.get("ignored_tools"):
        headers[IGNORED_TOOLS_HEADER] = listed(details["ignored_tools"], IGNORED_TOOLS_MAX_BYTES)
    if details.get("dropped_reasoning"):
        headers[DROPPED_REASONING_HEADER] = str(details["dropped_reasoning"])
    return headers


def add_dialect_headers(response: Response, chat: ChatRequest) -> None:
    """``dialect_headers`` on ``response``; the compaction items the front could not
    read join what serving left out in ``x-llmbridge-dropped-items``."""
    response.headers.update(dialect_headers(chat))
    details = (chat.provider_details or {}).get(DETAILS_KEY) or {}
    foreign = details.get("dropped_compaction")
    if foreign:
        served = response.headers.get(DROPPED_ITEMS_HEADER)
        counts = dict(entry.split("=", 1) for entry in served.split(",")) if served else {}
        counts["compaction"] = str(int(counts.get("compaction", "0")) + foreign)
        order = [kind for kind in ("reasoning", "compaction") if kind in counts]
        response.headers[DROPPED_ITEMS_HEADER] = ",".join(f"{k}={counts[k]}" for k in order)


def listed(names: list[str], max_bytes: int) -> str:
    """``names`` joined by commas, each percent-encoded where not plain ASCII
    (``header_value``), as many as fit in ``max_bytes``; the rest counted as a last
    entry, ``+N more``."""
    shown: list[str] = []
    for index, name in enumerate(names):
        after = len(names) - index - 1
        # A name longer than the whole header cannot fit: not encoded at all.
        candidate = [*shown, header_value(name) if len(name) <= max_bytes else name]
        # Room for this name and, when others follow, the count of them.
        room = len(",".join(candidate)) + (len(f",+{after} more") if after else 0)
        if room > max_bytes:
            return ",".join([*shown, f"+{len(names) - index} more"])
        shown = candidate
    return ",".join(shown)


@exchanged("/v1/responses", Dialect.OPENAI)
async def create_response(request: Request, exchange: Exchange) -> Response:
    state = exchange.state
    owner = caller_identity(request)
    session = socket_session(request.scope)
    relays = DIALECT in state.models.relayed_dialects
    found = await _continued(request, state, responses.decode_chat_request, keep_raw=relays)
    chat, body, previous = found.chat, found.body, found.previous
    store = store_if_open(request, STORED_RESPONSES)
    keep = store is not None and asked_to_keep(body.get("store"), state.config.agent)
    if keep or previous is not None:
        chat = marked(chat, stored=keep, previous_response_id=previous)
    keeper = None
    if keep or session is not None:
        keeper = _Keeper(store if keep else None, owner, found, session)
    hosted = hosted_mcp_of(chat)
    codec = COMPACTION_RESPONSES if chat.compaction else RESPONSES_CODEC
    if keeper is not None:
        codec = keeper.codec(codec)
    if body.get("generate") is False:
        response = await _without_output(chat, codec, exchange)
    elif hosted is not None and not chat.compaction:
        hosted_codec = HOSTED_RESPONSES if keeper is None else keeper.hosted_codec
        response = await serve_hosted(request, chat, hosted, hosted_codec, exchange=exchange)
    else:
        raw = _relayed_body(found, chat) if keeper is None else None
        if raw is not None:
            chat = replace(chat, relay=RelayBody(DIALECT, body, bytes(raw)))
        response = await serve_chat(request, chat, codec, exchange=exchange)
    if keeper is not None and keeper.ended is not None:  # a reply that was not streamed
        await keeper.save(keeper.ended)
    if response.headers.get(PATH_HEADER) != "passthrough":  # relayed: nothing left out
        add_dialect_headers(response, chat)
    return response


def _relayed_body(found: Continued, chat: ChatRequest) -> bytes | bytearray | None:
    """The body's bytes where ``chat`` may take the pass-through path as far as this
    front knows (the module docstring; serving decides the rest): kept unchanged,
    holding nothing llmbridge sealed, with no hosted tool the front left out."""
    raw = found.raw
    if raw is None or chat.compaction or not relayable(raw):
        return None
    details = (chat.provider_details or {}).get(DETAILS_KEY) or {}
    return None if details.get("ignored_tools") else raw


@exchanged("/v1/responses/compact", Dialect.OPENAI)
async def compact_response(request: Request, exchange: Exchange) -> Response:
    """``POST /v1/responses/compact``: the conversation compacted, answered as the
    ``response.compaction`` object (its user messages, then one ``compaction`` item),
    never streamed and never stored."""
    found = await _continued(request, exchange.state, _decode_compact_request)
    kept = kept_messages(found.body.get("input"))
    chat = replace(found.chat, compaction=True, stream=False)

    def encode(reply: ChatResponse, served: ChatRequest) -> dict[str, Any]:
        return compacted_response(reply, kept)

    response = await serve_chat(
        request, chat, replace(COMPACTED, encode_response=encode), exchange=exchange
    )
    add_dialect_headers(response, chat)
    return response


def _decode_compact_request(body: Any, limits: RequestLimits) -> ChatRequest:
    """A compact body (``model``, ``input``, ``instructions``...) as a Responses one,
    answered whole: a ``stream`` that is not a boolean is the decoder's 400, as on
    ``/v1/responses``, and a boolean one is answered whole all the same."""
    if isinstance(body, dict) and isinstance(body.get("stream"), bool | None):
        body = {**body, "stream": False}
    return responses.decode_chat_request(body, limits)


async def _without_output(chat: ChatRequest, codec: ChatCodec, exchange: Exchange) -> Response:
    """``generate: false``: a response with no output, at once, with no model called,
    which a later request continues (Codex's WebSocket warm-up). Admitted on the key's
    models like any request, and recorded."""
    exchange.asked(chat.model, streamed=chat.stream)
    exchange.admit_model(chat.model, refuse=True)
    created = time.time()
    start = ResponseStart(id=new_id("resp_"), model=chat.model, created=created)
    end = ResponseEnd(stop_reason=StopReason.END_TURN, usage=Usage(input_tokens=0, output_tokens=0))
    headers = {"x-request-id": exchange.request_id}
    if not chat.stream:
        reply = ChatResponse(
            id=start.id,
            model=chat.model,
            message=Message("assistant", ()),
            stop_reason=StopReason.END_TURN,
            usage=end.usage,
            created=created,
        )
        return Response(
            dumps(codec.encode_response(reply, chat)),
            media_type="application/json",
            headers=headers,
        )

    async def events() -> AsyncIterator[StreamEvent]:
        yield start
        yield end

    chunks = [chunk async for chunk in codec.encode_stream(events(), chat)]
    return Response(b"".join(chunks), media_type=codec.stream_media_type, headers=headers)


@exchanged("/v1/responses/{response_id}", Dialect.OPENAI)
async def retrieve_response(request: Request, exchange: Exchange) -> Response:
    """``GET /v1/responses/{response_id}``: the stored response object."""
    response_id = request.path_params["response_id"]
    check_response_id(response_id, "response_id")
    store = store_for(request, STORED_RESPONSES, response_id)
    stored = await store.get(response_id, caller_identity(request))
    exchange.asked(stored.model)
    return _json(stored.response_object(), exchange.request_id)


@exchanged("/v1/responses/{response_id}", Dialect.OPENAI)
async def delete_response(request: Request, exchange: Exchange) -> Response:
    """``DELETE /v1/responses/{response_id}``."""
    response_id = request.path_params["response_id"]
    check_response_id(response_id, "response_id")
    store = store_for(request, STORED_RESPONSES, response_id)
    await store.delete(response_id, caller_identity(request))
    deleted = {"id": response_id, "object": "response.deleted", "deleted": True}
    return _json(deleted, exchange.request_id)


def _json(body: object, request_id: str) -> Response:
    return Response(
        dumps(body), media_type="application/json", headers={"x-request-id": request_id}
    )


# -- the stored responses ----------------------------------------------------------


def _created_at(response: dict[str, Any]) -> datetime:
    return datetime.fromtimestamp(response["created_at"], UTC)


STORED_RESPONSES = Stateful(
    api=RESPONSES,
    check_id=check_response_id,
    input_items=input_items,
    continued_body=continued_body,
    output_field="output",
    instructions_field="instructions",
    created_at=_created_at,
)
"""How Responses are kept and continued (gateway/stateful.py)."""


async def _continued(
    request: Request, state: GatewayState, decode: Decode, *, keep_raw: bool = False
) -> Continued:
    """The body decoded and continued (``stateful.continued``): from the latest response
    of the socket a frame came in on (responses_socket.py), else a stored one; with
    ``keep_raw``, the bytes of a body that continued nothing kept."""
    session = socket_session(request.scope)
    return await continued(request, state, decode, STORED_RESPONSES, session, keep_raw=keep_raw)


async def _decoded(
    request: Request, state: GatewayState, decode: Decode
) -> tuple[ChatRequest, dict[str, Any], str | None]:
    """``_continued``'s request, body and continued response id."""
    found = await _continued(request, state, decode)
    return found.chat, found.body, found.previous


EndingStream = Callable[
    [AsyncIterator[StreamEvent], ChatRequest, Callable[[dict[str, Any]], None]],
    AsyncIterator[bytes],
]
"""A Responses stream encoder told the response object once it is complete."""


class _Keeper:
    """Keeps one response once it is complete, in the stored responses and on the
    socket it came in on (each when there is one): the route's codec with the encoders
    wrapped to catch the response object."""

    def __init__(
        self,
        store: ResponseStore | None,
        owner: str | None,
        found: Continued,
        session: SocketSession | None,
    ) -> None:
        self.store, self.owner, self.found, self.session = store, owner, found, session
        self.ended: dict[str, Any] | None = None
        """The object of a reply that was not streamed, to keep after encoding."""
        self.hosted_codec = replace(
            HOSTED_RESPONSES,
            encode_response=self._encode_hosted_response,
            encode_stream=self._encode_hosted_stream,
        )

    def codec(self, codec: ChatCodec) -> ChatCodec:
        """``codec`` (``RESPONSES_CODEC`` or ``COMPACTION_RESPONSES``) with its encoders
        catching the response object."""
        stream: EndingStream = codec.encode_stream  # type: ignore[assignment]
        encode_response = codec.encode_response

        def encoded(reply: ChatResponse, chat: ChatRequest) -> dict[str, Any]:
            self.ended = encode_response(reply, chat)
            return self.ended

        async def encode_stream(
            events: AsyncIterator[StreamEvent], chat: ChatRequest
        ) -> AsyncIterator[bytes]:
            ended: list[dict[str, Any]] = []
            async for chunk in stream(events, chat, ended.append):
                if ended:  # kept before the client reads response.completed
                    await self.save(ended.pop())
                yield chunk

        return replace(codec, encode_response=encoded, encode_stream=encode_stream)

    def _encode_hosted_response(self, reply: HostedReply, chat: ChatRequest) -> dict[str, Any]:
        self.ended = encode_hosted_response(reply, chat)
        return self.ended

    async def _encode_hosted_stream(
        self, events: AsyncIterator[HostedEvent], chat: ChatRequest
    ) -> AsyncIterator[bytes]:
        ended: list[dict[str, Any]] = []
        async for chunk in encode_hosted_stream(events, chat, ended.append):
            if ended:  # stored before the client reads response.completed
                await self.save(ended.pop())
            yield chunk

    async def save(self, response: dict[str, Any]) -> None:
        """Keep ``response``; a failure to store it is logged, and the client keeps
        its answer."""
        await save(STORED_RESPONSES, self.store, self.owner, self.found, response, self.session)


@exchanged("/v1/responses/input_tokens", Dialect.OPENAI)
async def input_tokens(request: Request, exchange: Exchange) -> Response:
    """The prompt's size, counted as ``/v1/messages/count_tokens`` counts it: admitted
    on the key like any model call (its globs, budget, requests per minute) and
    recorded; a continued conversation is decoded and counted off the event loop."""
    chat, _, _ = await _decoded(request, exchange.state, decode_input_tokens_request)
    tokens = await count_chat_tokens(chat, exchange)
    return Response(
        dumps({"object": "response.input_tokens", "input_tokens": tokens}),
        media_type="application/json",
        headers={"x-request-id": exchange.request_id},
    )


routes: list[BaseRoute] = [
    Route("/v1/responses", create_response, methods=["POST"]),
    WebSocketRoute("/v1/responses", responses_socket),
    Route("/v1/responses/input_tokens", input_tokens, methods=["POST"]),
    Route("/v1/responses/compact", compact_response, methods=["POST"]),
    Route("/v1/responses/{response_id}", retrieve_response, methods=["GET"]),
    Route("/v1/responses/{response_id}", delete_response, methods=["DELETE"]),
]

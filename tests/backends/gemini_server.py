"""A scripted Gemini-protocol server on loopback, for the ``gemini`` backend's tests.

Google's API cannot be reached from tests, nor made to misbehave on demand: this server
answers the routes the backend calls, in the wire shapes of the Gemini API (v1beta, as
google-genai 3.3.0 reads them), records every request (path, query, headers, JSON body),
and answers each ``:streamGenerateContent`` / ``:batchEmbedContents`` / ``:countTokens``
and each ``POST /v1beta/interactions`` (the ``gemini_interactions`` backend) with the
next queued ``Reply``: a status, headers and the bytes of the body (SSE events for a
stream, built by ``sse``, or ``interaction_sse`` for an interaction's named events). A
``:generateContent`` call answers an ``sse`` reply's chunks merged into one, as Google
answers the same generation whole.
``GET /v1beta/models`` serves ``pages`` by ``pageToken``; ``GET /v1beta/models/{model}``
serves ``models``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.conftest import RunningServer

Json = dict[str, Any]


@dataclass
class Reply:
    """One canned answer."""

    status: int = 200
    chunks: list[bytes] = field(default_factory=list)
    media_type: str = "text/event-stream"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    """Seconds to wait before each chunk (a slow stream a client can leave)."""
    whole: Json | None = None
    """The same answer as one ``GenerateContentResponse``, for a ``:generateContent``
    call (``sse`` merges its chunks into it, as Google's whole reply holds them)."""


@dataclass
class Seen:
    """One request as the server received it."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    raw: bytes = b""
    """The body's bytes as they came."""


def sse(*chunks: Json | bytes) -> Reply:
    """A ``streamGenerateContent?alt=sse`` reply: each chunk one ``data:`` event, framed
    as Google frames them (``\\r\\n\\r\\n`` between events); bytes are sent as given.
    Asked by ``:generateContent`` instead, the same chunks merged into one reply (none
    where a chunk is bytes or an error: those are a stream's own)."""
    return Reply(
        chunks=[
            c if isinstance(c, bytes) else b"data: " + orjson.dumps(c) + b"\r\n\r\n" for c in chunks
        ],
        whole=_merged(chunks),
    )


def _merged(chunks: tuple[Json | bytes, ...]) -> Json | None:
    """Stream chunks as one ``GenerateContentResponse``: the first's fields, every
    chunk's parts in order, the last finish reason and counts."""
    if not chunks or any(isinstance(c, bytes) or "error" in c for c in chunks):
        return None
    merged: Json = {k: v for k, v in chunks[0].items() if k != "candidates"}
    candidate: Json = {"index": 0}
    parts: list[Json] = []
    for piece in chunks:
        assert isinstance(piece, dict)
        for key in ("usageMetadata", "promptFeedback"):
            if key in piece:
                merged[key] = piece[key]
        for got in piece.get("candidates", []):
            parts += got.get("content", {}).get("parts", [])
            candidate.update({k: v for k, v in got.items() if k not in ("content", "index")})
    if parts:
        candidate["content"] = {"role": "model", "parts": parts}
    if "candidates" in chunks[0] or parts or "finishReason" in candidate:
        merged["candidates"] = [candidate]
    return merged


def interaction_sse(*events: Json | bytes, done: bool = True) -> Reply:
    """A streamed interaction: each event ``event: <event_type>`` and its ``data:``,
    ``data: [DONE]`` last (unless ``done`` is false); bytes are sent as given."""
    chunks = [
        e
        if isinstance(e, bytes)
        else b"event: " + str(e["event_type"]).encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n"
        for e in events
    ]
    if done:
        chunks.append(b"data: [DONE]\n\n")
    return Reply(chunks=chunks)


def json_reply(body: object, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    return Reply(
        status=status,
        chunks=[orjson.dumps(body)],
        media_type="application/json",
        headers=headers or {},
    )


def google_error(
    code: int, message: str, status: str, *, details: list[Json] | None = None, **headers: str
) -> Reply:
    """Google's error body, ``{"error": {"code", "message", "status", "details"?}}``."""
    error: Json = {"code": code, "message": message, "status": status}
    if details is not None:
        error["details"] = details
    return json_reply({"error": error}, code, {k.replace("_", "-"): v for k, v in headers.items()})


def chunk(
    *parts: Json,
    finish: str | None = None,
    usage: Json | None = None,
    model: str = "gemini-2.5-flash",
) -> Json:
    """One ``GenerateContentResponse`` chunk: ``parts`` of the model's turn, and the
    ``finishReason`` / ``usageMetadata`` when given."""
    candidate: Json = {"index": 0}
    if parts:
        candidate["content"] = {"role": "model", "parts": list(parts)}
    if finish is not None:
        candidate["finishReason"] = finish
    body: Json = {"candidates": [candidate], "modelVersion": model, "responseId": "resp-1"}
    if usage is not None:
        body["usageMetadata"] = usage
    return body


def model_entry(name: str, *, thinking: bool = True, embeds: bool = False) -> Json:
    """A ``Model`` as ``GET /v1beta/models`` lists it."""
    methods = (
        ["batchEmbedContents", "embedContent"]
        if embeds
        else [
            "generateContent",
            "countTokens",
            "createCachedContent",
            "batchGenerateContent",
        ]
    )
    entry: Json = {
        "name": f"models/{name}",
        "version": "001",
        "displayName": name,
        "description": f"{name}, scripted",
        "inputTokenLimit": 1048576,
        "outputTokenLimit": 65536,
        "supportedGenerationMethods": methods,
    }
    if thinking and not embeds:
        entry["thinking"] = True
    return entry


class GeminiServer:
    def __init__(self) -> None:
        self.queue: deque[Reply] = deque()
        self.seen: list[Seen] = []
        self.pages: dict[str, Json] = {"": {"models": []}}
        """``GET /v1beta/models`` answers by ``pageToken`` ("" for the first page)."""
        self.models: dict[str, Json] = {}
        """``GET /v1beta/models/{name}`` answers; a name not here is a 404."""
        self.app = Starlette(
            routes=[
                Route("/v1beta/models", self._list, methods=["GET"]),
                Route("/v1beta/models/{rest:path}", self._model, methods=["GET", "POST"]),
                Route("/v1beta/interactions", self._scripted, methods=["POST"]),
            ]
        )

    def reset(self) -> None:
        self.queue.clear()
        self.seen.clear()
        self.pages = {"": {"models": []}}
        self.models = {}

    def enqueue(self, *replies: Reply) -> None:
        self.queue.extend(replies)

    @property
    def last(self) -> Seen:
        return self.seen[-1]

    def generations(self) -> list[Seen]:
        """The requests made to ``:generateContent`` or ``:streamGenerateContent``, in
        order (a client's chat, whole or streamed)."""
        chats = (":generateContent", ":streamGenerateContent")
        return [s for s in self.seen if s.path.endswith(chats)]

    def calls(self, method: str) -> list[Seen]:
        """The requests made to ``:{method}`` (``streamGenerateContent``...), or to
        ``/interactions`` for ``interactions``, in order."""
        if method == "interactions":
            return [s for s in self.seen if s.path.endswith("/interactions")]
        return [s for s in self.seen if s.path.endswith(f":{method}")]

    async def _record(self, request: Request) -> None:
        raw = await request.body()
        self.seen.append(
            Seen(
                method=request.method,
                # raw_path: what the client sent, before the server decodes %3A / %2F.
                path=request.scope["raw_path"].decode("ascii"),
                query=dict(request.query_params),
                headers=dict(request.headers),
                body=orjson.loads(raw) if raw else None,
                raw=raw,
            )
        )

    async def _list(self, request: Request) -> Response:
        await self._record(request)
        page = self.pages.get(request.query_params.get("pageToken", ""))
        if page is None:
            return _respond(google_error(400, "Invalid page token.", "INVALID_ARGUMENT"))
        return _respond(json_reply(page))

    async def _model(self, request: Request) -> Response:
        await self._record(request)
        if request.method == "GET":
            name = str(request.path_params["rest"])
            if name not in self.models:
                return _respond(google_error(404, f"models/{name} is not found.", "NOT_FOUND"))
            return _respond(json_reply(self.models[name]))
        if request.scope["raw_path"].endswith(b":generateContent") and self.queue:
            whole = self.queue[0].whole
            if whole is not None:  # a stream's chunks, asked for whole
                self.queue.popleft()
                return _respond(json_reply(whole))
        return self._next()

    async def _scripted(self, request: Request) -> Response:
        await self._record(request)
        return self._next()

    def _next(self) -> Response:
        if not self.queue:
            return _respond(google_error(500, "nothing scripted", "INTERNAL"))
        return _respond(self.queue.popleft())


def _respond(reply: Reply) -> Response:
    async def body() -> AsyncIterator[bytes]:
        for piece in reply.chunks:
            if reply.delay:
                await asyncio.sleep(reply.delay)
            yield piece

    return StreamingResponse(
        body(), status_code=reply.status, media_type=reply.media_type, headers=reply.headers
    )


@contextmanager
def running_gemini_server() -> Iterator[tuple[GeminiServer, RunningServer]]:
    server = GeminiServer()
    with RunningServer(server.app) as running:
        yield server, running

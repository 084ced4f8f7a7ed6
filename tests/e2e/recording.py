"""A pass-through ASGI wrapper that keeps each HTTP exchange with the gateway, both
directions, so an end-to-end test can assert on the exact bytes a real client sent and
received (Claude Code's ``/v1/messages``, Codex's ``/v1/responses``); a WebSocket is one
exchange (method ``WEBSOCKET``) whose text frames are kept each way (Codex's
``response.create`` frames and the events that answered them)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send


@dataclass
class Exchange:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    request: bytes = b""
    status: int | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    response: bytes = b""
    frames_in: list[str] = field(default_factory=list)
    """A WebSocket's text frames from the client."""
    frames_out: list[str] = field(default_factory=list)
    """A WebSocket's text frames to the client."""

    def frames(self) -> list[dict[str, Any]]:
        """A WebSocket's frames from the client, decoded."""
        return [json.loads(frame) for frame in self.frames_in]

    def body(self) -> dict[str, object]:
        loaded: dict[str, object] = json.loads(self.request)
        return loaded

    def streamed_text(self) -> str:
        """The text deltas of an Anthropic event stream."""
        text = []
        for line in self.response.decode().splitlines():
            if line.startswith("data:"):
                event = json.loads(line[len("data:") :])
                if event["type"] == "content_block_delta" and "text" in event["delta"]:
                    text.append(event["delta"]["text"])
        return "".join(text)

    def sse_events(self) -> list[dict[str, Any]]:
        """The ``data:`` payloads of an event stream, in order."""
        return [
            json.loads(line[len("data:") :])
            for line in self.response.decode().splitlines()
            if line.startswith("data:")
        ]


class Recorder:
    """Passes every request through to ``app`` and keeps a copy of both directions."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.exchanges: list[Exchange] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._socket(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        exchange = Exchange(
            method=scope["method"],
            path=scope["path"],
            query=scope["query_string"].decode(),
            headers={k.decode(): v.decode() for k, v in scope["headers"]},
        )
        self.exchanges.append(exchange)

        async def keep_request() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                exchange.request += message.get("body", b"")
            return message

        async def keep_response(message: Message) -> None:
            if message["type"] == "http.response.start":
                exchange.status = message["status"]
                exchange.response_headers = {
                    k.decode(): v.decode() for k, v in message.get("headers", [])
                }
            elif message["type"] == "http.response.body":
                exchange.response += message.get("body", b"")
            await send(message)

        await self.app(scope, keep_request, keep_response)

    async def _socket(self, scope: Scope, receive: Receive, send: Send) -> None:
        exchange = Exchange(
            method="WEBSOCKET",
            path=scope["path"],
            query=scope["query_string"].decode(),
            headers={k.decode(): v.decode() for k, v in scope["headers"]},
        )
        self.exchanges.append(exchange)

        async def keep_received() -> Message:
            message = await receive()
            if message["type"] == "websocket.receive" and message.get("text") is not None:
                exchange.frames_in.append(message["text"])
            return message

        async def keep_sent(message: Message) -> None:
            if message["type"] == "websocket.send" and message.get("text") is not None:
                exchange.frames_out.append(message["text"])
            await send(message)

        await self.app(scope, keep_received, keep_sent)

    def sockets(self, path: str) -> list[Exchange]:
        """The WebSockets opened on ``path``, in order."""
        return [e for e in self.exchanges if e.method == "WEBSOCKET" and e.path == path]

    def calls(self, path: str) -> list[Exchange]:
        """The POSTs to ``path``, in order."""
        return [e for e in self.exchanges if e.method == "POST" and e.path == path]

    def messages_calls(self) -> list[Exchange]:
        return self.calls("/v1/messages")

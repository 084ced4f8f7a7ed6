"""The Responses API over a WebSocket: ``/v1/responses`` upgraded, one socket a session.

Codex uses it with a provider that says it can (``supports_websockets = true``, or the
built-in ``openai`` provider pointed at the gateway): it connects with ``OpenAI-Beta:
responses_websockets=2026-02-06`` and its key in ``Authorization: Bearer``, then sends a
``response.create`` text frame per response (the body of ``POST /v1/responses`` with a
``type``), one after the other, and reads the same events the HTTP stream carries, each
a JSON text frame, up to ``response.completed`` (openai's ``responses.connect()`` does
the same). Codex 0.169 and 0.171 first send a warm-up (``generate: false``), then each
turn continues the previous response with ``previous_response_id`` and only the new
items, ``store: false`` throughout.

Nothing here serves a response: each frame becomes one ``POST /v1/responses`` through
the gateway's own app (``scope["app"]``), with the upgrade request's headers, so it goes
the same way as any HTTP request: the key checked (again per frame, so a key revoked
mid-session stops there), the Exchange's admission, limits, ledger row, metrics and
span, the stored responses. Its SSE events are sent on as text frames, unchanged; an
HTTP error is an ``error`` event (below).

- **Continuing.** As OpenAI's WebSocket mode does, the socket keeps its latest response
  in memory (``SocketSession``, gateway/socket_session.py), so ``previous_response_id``
  with ``store: false`` continues it (the route looks there first:
  routes/responses.py). A response that is neither there nor stored is
  ``previous_response_not_found``, on which Codex sends the whole conversation again.
  A conversation over ``max_body_bytes`` is not kept (a client could not send it whole
  either).
- **Errors** are ``{"type": "error", "status": 400, "error": {"type", "code",
  "message", "param", "headers"}}``, with the status also as ``status_code`` and the
  headers (``Retry-After``, rate limits) also at the top: the shapes openai's
  ``ResponsesServerEvent`` and Codex (``codex-api``'s ``WrappedWebsocketErrorEvent``)
  read. A frame that is not JSON, not an object, of another type (``response.steer``)
  or binary gets one, in its turn, and the socket stays open; so does a body the route
  refuses. Refusals at the upgrade (no key, a wrong one) are the HTTP answer itself,
  401 in OpenAI's shape (gateway/app.py).
- **Order.** Frames are answered one at a time, in the order they came: a frame sent
  while a response streams waits for it (what OpenAI does within a stream).
- **Disconnects.** A client that leaves cancels the response in flight (its request
  sees ``http.disconnect``, as an HTTP client's does), which is billed for what it
  generated; nothing waits for it.
- **Age.** After ``server.websocket_max_age_s`` (60 minutes, as OpenAI) a new frame is
  answered ``websocket_connection_limit_reached`` and the socket closed: Codex opens
  another and sends the whole conversation.

The per-response ``x-llmbridge-*`` headers have no place on a socket; ``/v1/responses``
over HTTP carries them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Scope
from starlette.websockets import WebSocket, WebSocketDisconnect

from llmbridge.dialects.framing import SSEParser
from llmbridge.gateway.exchange.handler import EXCHANGED
from llmbridge.gateway.socket_session import SESSION_SCOPE_KEY, SocketSession
from llmbridge.gateway.state import GatewayState

__all__ = ["responses_socket"]

log = logging.getLogger("llmbridge.gateway")

_UPGRADE_ONLY = frozenset(
    {
        b"connection",
        b"upgrade",
        b"content-length",
        b"content-type",
        b"transfer-encoding",
        b"sec-websocket-key",
        b"sec-websocket-version",
        b"sec-websocket-extensions",
        b"sec-websocket-protocol",
    }
)
"""Headers of the upgrade that say nothing about the frames' requests."""
_ERROR_HEADERS = ("retry-after", "x-request-id")
"""Headers of a refused frame's answer that its ``error`` event repeats (with every
``x-ratelimit-*``)."""
_MAX_WAITING = 16
"""Frames that may wait behind the one being answered; more are answered at once with an
error (OpenAI allows 16 responses in flight on a connection)."""


async def responses_socket(websocket: WebSocket) -> None:
    """``/v1/responses`` upgraded (module docstring)."""
    state: GatewayState = websocket.app.state.gateway
    server = state.config.server
    await websocket.accept()
    socket = _Socket(websocket, SocketSession(server.max_body_bytes), server.websocket_max_age_s)
    await socket.serve()


# Each frame goes through the exchanged HTTP route (tests/gateway/test_every_route_exchanged.py).
setattr(responses_socket, EXCHANGED, True)


class _Socket:
    """One connection: its frames read as they come, answered one at a time."""

    def __init__(self, websocket: WebSocket, session: SocketSession, max_age: float) -> None:
        self.websocket = websocket
        self.session = session
        self.loop = asyncio.get_running_loop()
        self.deadline = self.loop.time() + max_age
        self.waiting: deque[Message] = deque()
        self.current: _Frame | None = None

    async def serve(self) -> None:
        reading: asyncio.Task[Message] = self.loop.create_task(self.websocket.receive())
        answering: asyncio.Task[bool] | None = None
        try:
            while True:
                waits: set[asyncio.Future[Any]] = {reading}
                if answering is not None:
                    waits.add(answering)
                done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if answering is not None and answering in done:
                    keep_open = answering.result()
                    answering = None
                    if not keep_open:
                        await self._close()
                        return
                if reading in done:
                    message = reading.result()
                    if message["type"] == "websocket.disconnect":
                        return
                    if len(self.waiting) >= _MAX_WAITING:
                        await self._send(
                            _error_event(
                                429,
                                "too_many_requests",
                                (
                                    f"more than {_MAX_WAITING} response.create frames are waiting "
                                    "on this socket; wait for the responses before sending more"
                                ),
                            )
                        )
                    else:
                        self.waiting.append(message)
                    reading = self.loop.create_task(self.websocket.receive())
                if answering is None and self.waiting:
                    answering = self.loop.create_task(self._answer(self.waiting.popleft()))
        finally:
            # The client left (or the server stops): the response in flight sees its
            # client gone and cancels its backend call; it is not waited for longer
            # than it takes to notice.
            if self.current is not None:
                self.current.gone.set()
            reading.cancel()
            if answering is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await answering

    async def _answer(self, message: Message) -> bool:
        """Answer one frame; ``False`` when the socket is to be closed after it."""
        if self.loop.time() > self.deadline:
            await self._send(
                _error_event(
                    400,
                    "websocket_connection_limit_reached",
                    "Responses websocket connection limit reached (60 minutes); open a new "
                    "connection to continue.",
                )
            )
            return False
        try:
            body = _create_body(message)
        except _BadFrame as bad:
            await self._send(bad.event)
            return True
        frame = _Frame(self, orjson.dumps(body))
        self.current = frame
        try:
            await frame.run()
        finally:
            self.current = None
        return True

    async def _send(self, event: dict[str, Any]) -> None:
        with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
            await self.websocket.send_text(orjson.dumps(event).decode())

    async def _close(self) -> None:
        with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
            await self.websocket.close(1000)


class _BadFrame(Exception):
    """A frame that is no ``response.create``: ``event`` answers it."""

    def __init__(self, event: dict[str, Any]) -> None:
        super().__init__(event["error"]["message"])
        self.event = event


def _create_body(message: Message) -> dict[str, Any]:
    """The ``POST /v1/responses`` body of a ``response.create`` frame.

    Raises:
        _BadFrame: any other frame, with the ``error`` event that answers it.
    """
    text = message.get("text")
    if text is None:
        raise _BadFrame(
            _error_event(400, "invalid_frame", "binary frames are not accepted: send JSON text")
        )
    try:
        frame = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise _BadFrame(
            _error_event(400, "invalid_json", f"the frame is not JSON: {exc}")
        ) from None
    if not isinstance(frame, dict):
        raise _BadFrame(_error_event(400, "invalid_frame", "the frame is not a JSON object"))
    kind = frame.get("type")
    if kind != "response.create":
        shown = kind if isinstance(kind, str) and len(kind) <= 100 else type(kind).__name__
        raise _BadFrame(
            _error_event(
                400,
                "unsupported_event",
                f"unsupported event type {shown!r}: this socket takes 'response.create'",
                param="type",
            )
        )
    body = {key: value for key, value in frame.items() if key != "type"}
    body["stream"] = True  # a socket streams: its events are the frames
    return body


def _error_event(
    status: int,
    code: str | None,
    message: str,
    *,
    param: str | None = None,
    error_type: str = "invalid_request_error",
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An ``error`` event, in the shapes openai's SDK and Codex read (module docstring)."""
    error: dict[str, Any] = {"type": error_type, "code": code, "message": message, "param": param}
    event: dict[str, Any] = {"type": "error", "status": status, "status_code": status}
    if headers:
        error["headers"] = headers
        event["headers"] = headers
    event["error"] = error
    return event


class _Frame:
    """One ``response.create`` as one request to the app: a synthetic HTTP scope whose
    body is the frame, whose disconnect is the socket's, and whose answer goes back as
    frames."""

    def __init__(self, socket: _Socket, body: bytes) -> None:
        self.socket = socket
        self.body = body
        self.gone = asyncio.Event()
        """Set when the client left: the request's next ``receive`` is a disconnect."""
        self.sent_body = False
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.stream = False
        self.parser = SSEParser()
        self.answer: list[bytes] = []
        self.stream_id = _stream_id(body)

    async def run(self) -> None:
        websocket = self.socket.websocket
        app: ASGIApp = websocket.scope["app"]
        try:
            await app(self._scope(), self._receive, self._send)
        except OSError:
            return  # the client left while a response streamed: already recorded
        except Exception:
            log.exception("a Responses WebSocket frame failed")
            if not self.gone.is_set() and not self.stream:
                await self.socket._send(
                    _error_event(
                        500,
                        "server_error",
                        "internal error; see the gateway log",
                        error_type="server_error",
                    )
                )
            return
        if self.gone.is_set() or self.stream or self.status == 499:
            return
        await self._refused()

    def _scope(self) -> Scope:
        upgrade = self.socket.websocket.scope
        headers = [(name, value) for name, value in upgrade["headers"] if name not in _UPGRADE_ONLY]
        headers.append((b"content-type", b"application/json"))
        headers.append((b"content-length", str(len(self.body)).encode()))
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": upgrade.get("asgi", {"version": "3.0"}),
            "http_version": "1.1",
            "method": "POST",
            "scheme": "https" if upgrade.get("scheme") == "wss" else "http",
            "path": upgrade["path"],
            "raw_path": upgrade.get("raw_path") or upgrade["path"].encode(),
            "root_path": upgrade.get("root_path", ""),
            "query_string": b"",
            "headers": headers,
            "client": upgrade.get("client"),
            "server": upgrade.get("server"),
            "extensions": {},
            "state": dict(upgrade.get("state") or {}),
            SESSION_SCOPE_KEY: self.socket.session,
        }
        return scope

    async def _receive(self) -> Message:
        if not self.sent_body:
            self.sent_body = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.status = message["status"]
            self.headers = list(message.get("headers") or [])
            media = dict(self.headers).get(b"content-type", b"")
            self.stream = self.status == 200 and media.startswith(b"text/event-stream")
            return
        if kind != "http.response.body":
            return
        chunk = message.get("body", b"")
        if not self.stream:
            self.answer.append(chunk)
            return
        for event in self.parser.feed(chunk):
            if event.data:
                await self._send_frame(event.data)

    async def _send_frame(self, data: str) -> None:
        if self.gone.is_set():
            raise OSError("the WebSocket client left")
        if self.stream_id is not None:
            event = orjson.loads(data)
            event["stream_id"] = self.stream_id
            data = orjson.dumps(event).decode()
        try:
            await self.socket.websocket.send_text(data)
        except (WebSocketDisconnect, RuntimeError, OSError) as exc:
            self.gone.set()
            raise OSError("the WebSocket client left") from exc

    async def _refused(self) -> None:
        """The request's HTTP error (or non-streamed answer) as an ``error`` event."""
        raw = b"".join(self.answer)
        try:
            body = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            body = {}
        error = body.get("error") if isinstance(body, dict) else None
        error = error if isinstance(error, dict) else {}
        headers = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in self.headers
            if name.decode("latin-1") in _ERROR_HEADERS or name.startswith(b"x-ratelimit-")
        }
        event = _error_event(
            self.status,
            _text(error.get("code")),
            _text(error.get("message")) or f"the request failed with status {self.status}",
            param=_text(error.get("param")),
            error_type=_text(error.get("type")) or "invalid_request_error",
            headers=headers,
        )
        if self.stream_id is not None:
            event["stream_id"] = self.stream_id
        await self.socket._send(event)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _stream_id(body: bytes) -> str | None:
    """The frame's ``stream_id`` (a named lane of the SDK's), echoed on its events."""
    if b'"stream_id"' not in body:
        return None
    value = orjson.loads(body).get("stream_id")
    return value if isinstance(value, str) else None

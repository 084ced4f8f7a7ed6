"""A FAKE OpenCode server that misbehaves on demand, for the ``opencode`` backend's
fault tests (test_opencode_faults.py, test_opencode_pool.py).

The real server (tests/e2e/test_opencode.py) cannot be made to drop its event stream
mid-turn, lose a warm session, report a retryable provider error, ask for a
permission, send an event twice or go silent. This fake implements just the routes
the backend uses, in the wire shapes verified against OpenCode 1.18.33
(shared/reference/opencode-server.md), records every call, and answers each
``prompt_async`` with the next scripted ``Prompt``: a status, and the events it
then publishes on ``/event``. Also here: builders for OpenCode's events, the request
and stream helpers, and ``make_backend``.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from llmbridge.backends.opencode import OpenCodeBackend, OpenCodeTimeouts
from llmbridge.backends.opencode.sessions import SESSION_TITLE
from llmbridge.core.events import (
    PartDelta,
    StreamEvent,
    TextDelta,
)
from llmbridge.core.messages import Message, TextPart
from llmbridge.core.request import ChatRequest
from tests.conftest import RunningServer
from tests.waiting import HANG_S, until

Event = dict[str, Any]
DROP = "drop"
"""In a script's events: end the ``/event`` stream there (the connection is lost)."""


@dataclass
class Prompt:
    """How the fake answers one ``prompt_async``: its status, then the events it
    publishes (built from the session id), ``gap`` seconds apart."""

    status: int = 204
    events: Callable[[str], list[Event | str]] = lambda sid: []
    gap: float = 0.0


@dataclass
class Call:
    method: str
    path: str
    body: Any = None


@dataclass
class _Stream:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[Event | str | None] = field(default_factory=asyncio.Queue)


class FakeOpenCode:
    """Just enough of ``opencode serve`` for the backend, scripted and recorded."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.prompts: deque[Prompt] = deque()
        self.reset()
        self._streams: list[_Stream] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.app = Starlette(
            routes=[
                Route("/global/health", self._health, methods=["GET"]),
                Route("/event", self._events, methods=["GET"]),
                Route("/session", self._create, methods=["POST"]),
                Route("/session/{sid}/prompt_async", self._prompt, methods=["POST"]),
                Route("/session/{sid}/abort", self._true, methods=["POST"]),
                Route("/session/{sid}", self._true, methods=["DELETE"]),
                Route("/config/providers", self._providers, methods=["GET"]),
                Route("/config", self._config, methods=["GET"]),
                Route("/agent", self._agents, methods=["GET"]),
                Route("/permission/{rid}/reply", self._true, methods=["POST"]),
                Route("/question/{rid}/reject", self._true, methods=["POST"]),
            ]
        )
        self._server = RunningServer(self.app)
        self.url = self._server.url

    def reset(
        self,
        *,
        agents: tuple[str, ...] = ("build", "plan", "llmbridge"),
        providers: list[dict[str, Any]] | None = None,
        config_model: str | None = None,
    ) -> None:
        """Forget the calls and scripts, and set what discovery will find."""
        self.calls.clear()
        self.prompts.clear()
        self.agents = agents
        self.providers = providers if providers is not None else [{"id": "p", "models": {"m": {}}}]
        self.config_model = config_model
        self.event_connections = 0
        self.create_delays: deque[float] = deque()
        """Seconds to wait before answering each next session creation (then at once)."""

    def __enter__(self) -> FakeOpenCode:
        self._server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.publish(None)  # end every open event stream, so the server can stop
        self._server.__exit__(*exc)

    # -- what the test reads ---------------------------------------------------------

    def paths(self, method: str | None = None) -> list[str]:
        return [c.path for c in self.calls if method is None or c.method == method]

    def created(self) -> list[str]:
        """Session ids, in the order the fake created them."""
        return [c.body["id"] for c in self.calls if c.path == "/session" and c.method == "POST"]

    def prompted(self) -> list[str]:
        """The sessions prompted, in order."""
        return [c.path.split("/")[2] for c in self.calls if c.path.endswith("/prompt_async")]

    def prompt_bodies(self) -> list[Any]:
        return [c.body for c in self.calls if c.path.endswith("/prompt_async")]

    def cleanup_of(self, sid: str) -> list[str]:
        """The abort and delete calls for a session, in order."""
        return [
            f"{c.method} {c.path}"
            for c in self.calls
            if c.path in (f"/session/{sid}", f"/session/{sid}/abort")
        ]

    # -- what the test does ----------------------------------------------------------

    def publish(self, item: Event | str | None) -> None:
        """Send ``item`` on every open ``/event`` stream (from any thread); ``DROP`` or
        ``None`` ends the streams."""
        with self._lock:
            streams = list(self._streams)
        for stream in streams:
            stream.loop.call_soon_threadsafe(stream.queue.put_nowait, item)

    # -- routes --------------------------------------------------------------------

    async def _record(self, request: Request) -> Call:
        raw = await request.body()
        call = Call(request.method, request.url.path, orjson.loads(raw) if raw else None)
        self.calls.append(call)
        return call

    @staticmethod
    def _json(value: Any, status: int = 200) -> Response:
        return Response(orjson.dumps(value), status_code=status, media_type="application/json")

    async def _health(self, request: Request) -> Response:
        await self._record(request)
        return self._json({"healthy": True, "version": "1.18.33"})

    async def _true(self, request: Request) -> Response:
        await self._record(request)
        return self._json(True)

    async def _create(self, request: Request) -> Response:
        sid = f"ses_{next(self._ids):04d}"
        asked = orjson.loads(await request.body())
        self.calls.append(Call("POST", "/session", {"request": asked, "id": sid}))
        if self.create_delays:
            await asyncio.sleep(self.create_delays.popleft())
        return self._json({"id": sid, "slug": sid, "title": SESSION_TITLE, "version": "1.18.33"})

    async def _providers(self, request: Request) -> Response:
        await self._record(request)
        return self._json({"providers": self.providers, "default": {}})

    async def _config(self, request: Request) -> Response:
        await self._record(request)
        return self._json({"model": self.config_model} if self.config_model else {})

    async def _agents(self, request: Request) -> Response:
        await self._record(request)
        return self._json([{"name": name, "mode": "primary"} for name in self.agents])

    async def _prompt(self, request: Request) -> Response:
        await self._record(request)
        sid = request.path_params["sid"]
        script = self.prompts.popleft() if self.prompts else Prompt()
        if script.status != 204:
            message = f"Session not found: {sid}"
            return self._json({"name": "NotFoundError", "data": {"message": message}}, 404)

        async def play() -> None:
            for item in script.events(sid):
                if script.gap:
                    await asyncio.sleep(script.gap)
                self.publish(item)

        # After the 204 has gone out, as OpenCode's own events follow its answer.
        return Response(status_code=204, background=BackgroundTask(play))

    async def _events(self, request: Request) -> Response:
        await self._record(request)
        stream = _Stream(asyncio.get_running_loop())
        with self._lock:
            self._streams.append(stream)
        self.event_connections += 1

        async def body() -> AsyncIterator[bytes]:
            try:
                yield self._frame({"type": "server.connected", "properties": {}})
                while True:
                    item = await stream.queue.get()
                    if item is None or item == DROP:
                        return
                    assert isinstance(item, dict)
                    yield self._frame(item)
            finally:
                with self._lock:
                    self._streams.remove(stream)

        return StreamingResponse(body(), media_type="text/event-stream")

    def _frame(self, event: Event) -> bytes:
        event = {"id": f"evt_{next(self._ids):06d}", **event}
        return b"data: " + orjson.dumps(event) + b"\n\n"


# -- OpenCode's events, in its wire shapes --------------------------------------------


def ev(kind: str, event_id: str | None = None, **props: Any) -> Event:
    event: Event = {"type": kind, "properties": props}
    if event_id is not None:
        event["id"] = event_id
    return event


def delta(sid: str, text: str, part: str = "prt_t", event_id: str | None = None) -> Event:
    return ev(
        "message.part.delta",
        event_id,
        sessionID=sid,
        messageID="msg_a",
        partID=part,
        field="text",
        delta=text,
    )


def opening(sid: str) -> list[Event | str]:
    """The user's message and the start of the assistant's, before any text."""

    def part(pid: str, mid: str, kind: str, **fields: Any) -> Event:
        info = {"id": pid, "sessionID": sid, "messageID": mid, "type": kind, **fields}
        return ev("message.part.updated", part=info)

    return [
        ev("message.updated", info={"id": "msg_u", "sessionID": sid, "role": "user"}),
        part("prt_u", "msg_u", "text", text="the user's words"),
        ev("session.status", sessionID=sid, status={"type": "busy"}),
        ev("message.updated", info={"id": "msg_a", "sessionID": sid, "role": "assistant"}),
        part("prt_s", "msg_a", "step-start"),
        part("prt_t", "msg_a", "text", text=""),
    ]


def closing(sid: str, text: str, *, idle: str = "both") -> list[Event | str]:
    """The assistant's final text, tokens and finish, then the end of the turn
    (``idle``: ``status``, ``idle`` or ``both``)."""
    tokens = {"input": 12, "output": 3, "reasoning": 0, "cache": {"read": 0, "write": 0}}
    info = {"id": "msg_a", "sessionID": sid, "role": "assistant", "finish": "stop"}
    final = {"id": "prt_t", "sessionID": sid, "messageID": "msg_a", "type": "text", "text": text}
    events: list[Event | str] = [
        ev("message.part.updated", part=final),
        ev("message.updated", info={**info, "tokens": tokens}),
    ]
    if idle in ("status", "both"):
        events.append(ev("session.status", sessionID=sid, status={"type": "idle"}))
    if idle in ("idle", "both"):
        events.append(ev("session.idle", sessionID=sid))
    return events


def reply(*pieces: str, idle: str = "both") -> Callable[[str], list[Event | str]]:
    """A whole successful turn streaming ``pieces``."""

    def events(sid: str) -> list[Event | str]:
        deltas: list[Event | str] = [delta(sid, piece) for piece in pieces]
        return [*opening(sid), *deltas, *closing(sid, "".join(pieces), idle=idle)]

    return events


def session_error(error: dict[str, Any]) -> Callable[[str], list[Event | str]]:
    def events(sid: str) -> list[Event | str]:
        return [
            *opening(sid),
            ev("session.error", sessionID=sid, error=error),
            ev("session.status", sessionID=sid, status={"type": "idle"}),
        ]

    return events


# -- helpers -----------------------------------------------------------------------------


def chat_request(text: str = "Say hello", model: str = "anything") -> ChatRequest:
    return ChatRequest(model=model, messages=(Message(role="user", parts=(TextPart(text),)),))


def text_of(events: list[StreamEvent]) -> str:
    return "".join(
        e.delta.text for e in events if isinstance(e, PartDelta) and isinstance(e.delta, TextDelta)
    )


async def collect(
    backend: OpenCodeBackend, request: ChatRequest | None = None
) -> list[StreamEvent]:
    return [e async for e in backend.chat(request or chat_request())]


async def eventually(check: Callable[[], bool], within: float = HANG_S) -> None:
    """Wait, boundedly, for ``check`` to hold (background work to reach the fake); the
    bound (scaled in tests/waiting.py) only stops a hang."""
    await until(check, "background work reached the fake", within)


def make_backend(
    url: str,
    *,
    prompt: float = 1.0,
    idle: float = 2.0,
    total: float | None = None,
    delete: float = 1.0,
    pool_size: int = 0,
) -> OpenCodeBackend:
    return OpenCodeBackend(
        "oc",
        url=url,
        default_model="p/m",
        timeouts=OpenCodeTimeouts(prompt=prompt, idle=idle, total=total, delete=delete),
        pool_size=pool_size,
    )


def deleted(fake: FakeOpenCode, sid: str) -> Callable[[], bool]:
    return lambda: f"DELETE /session/{sid}" in fake.cleanup_of(sid)

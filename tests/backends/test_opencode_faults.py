"""The ``opencode`` backend against a FAKE OpenCode server that misbehaves on demand.

The real server (tests/e2e/test_opencode.py) cannot be made to drop its event stream
mid-turn, lose a warm session, report a retryable provider error, ask for a
permission, send an event twice or go silent. This fake implements just the routes
the backend uses, in the wire shapes verified against OpenCode 1.18.33
(shared/reference/opencode-server.md), records every call, and answers each
``prompt_async`` with the next scripted ``Prompt``: a status, and the events it
then publishes on ``/event``.

Every deadline here is under a second, every wait is a bounded poll, and everything
listens on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from llmbridge.backends.opencode import OpenCodeBackend, OpenCodeTimeouts
from llmbridge.backends.opencode.sessions import DENY_ALL, SESSION_TITLE
from llmbridge.core.errors import (
    BackendError,
    BackendHTTPError,
    BackendTimeoutError,
    BackendUnavailableError,
)
from llmbridge.core.events import (
    PartDelta,
    ResponseEnd,
    ResponseStart,
    StreamEvent,
    TextDelta,
)
from llmbridge.core.messages import Message, TextPart
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import StopReason
from tests.conftest import RunningServer

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


async def eventually(check: Callable[[], bool], within: float = 3.0) -> None:
    """Wait, boundedly, for ``check`` to hold (background work to reach the fake)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"not within {within} s")
        await asyncio.sleep(0.01)


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeOpenCode]:
    with FakeOpenCode() as server:
        yield server


@pytest.fixture
def fake(fake_server: FakeOpenCode) -> FakeOpenCode:
    fake_server.reset()
    return fake_server


def make_backend(
    url: str,
    *,
    prompt: float = 1.0,
    completion: float = 2.0,
    delete: float = 1.0,
    pool_size: int = 0,
) -> OpenCodeBackend:
    return OpenCodeBackend(
        "oc",
        url=url,
        default_model="p/m",
        timeouts=OpenCodeTimeouts(prompt=prompt, completion=completion, delete=delete),
        pool_size=pool_size,
    )


@pytest.fixture
async def backend(fake: FakeOpenCode) -> AsyncIterator[OpenCodeBackend]:
    opencode = make_backend(fake.url)
    await opencode.start()
    try:
        yield opencode
    finally:
        await opencode.aclose()


def deleted(fake: FakeOpenCode, sid: str) -> Callable[[], bool]:
    return lambda: f"DELETE /session/{sid}" in fake.cleanup_of(sid)


# -- completion ------------------------------------------------------------------------


@pytest.mark.parametrize("idle", ["status", "idle", "both"])
async def test_the_turn_ends_on_either_idle_signal(
    fake: FakeOpenCode, backend: OpenCodeBackend, idle: str
) -> None:
    fake.prompts.append(Prompt(events=reply("Hel", "lo", " there", idle=idle)))
    events = await collect(backend)
    assert isinstance(events[0], ResponseStart)
    assert text_of(events) == "Hello there"
    end = events[-1]
    assert isinstance(end, ResponseEnd) and end.stop_reason == StopReason.END_TURN
    assert end.usage.input_tokens == 12 and end.usage.output_tokens == 3
    body = fake.prompt_bodies()[0]
    assert body["model"] == {"providerID": "p", "modelID": "m"}
    assert body["tools"] == {"*": False} and body["agent"] == "llmbridge"
    assert body["parts"] == [{"type": "text", "text": "Say hello"}]


async def test_events_of_other_sessions_are_ignored(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    def events(sid: str) -> list[Event | str]:
        own = reply("mine")(sid)
        theirs = reply("NOT MINE")("ses_other")
        # Interleaved, and the other session finishes first.
        return [*theirs[:3], *own[:7], *theirs[3:], *own[7:]]

    fake.prompts.append(Prompt(events=events))
    events_out = await collect(backend)
    assert text_of(events_out) == "mine"
    assert isinstance(events_out[-1], ResponseEnd)


async def test_a_duplicated_event_is_delivered_once(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    def events(sid: str) -> list[Event | str]:
        twice = delta(sid, "Hello", event_id="evt_same")
        again = delta(sid, "Hello", event_id="evt_same")
        return [
            *opening(sid),
            twice,
            again,
            delta(sid, " world"),
            *closing(sid, "Hello world"),
            *closing(sid, "Hello world"),  # idle twice, as OpenCode has sent it
        ]

    fake.prompts.append(Prompt(events=events))
    events_out = await collect(backend)
    assert text_of(events_out) == "Hello world"
    assert sum(isinstance(e, ResponseEnd) for e in events_out) == 1


async def test_a_turn_without_text_still_answers(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    fake.prompts.append(Prompt(events=lambda sid: [*opening(sid), *closing(sid, "")]))
    events = await collect(backend)
    assert isinstance(events[0], ResponseStart) and isinstance(events[-1], ResponseEnd)
    assert text_of(events) == ""


# -- a lost event stream ---------------------------------------------------------------


async def test_a_stream_lost_before_output_is_retried_in_a_new_session(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    fake.prompts.append(Prompt(events=lambda sid: [*opening(sid), DROP]))
    fake.prompts.append(Prompt(events=reply("second", " time")))
    events = await collect(backend)
    assert text_of(events) == "second time"
    first, second = fake.prompted()
    assert first != second
    assert fake.event_connections == 2  # the hub reconnected
    await eventually(deleted(fake, first))
    assert fake.cleanup_of(first) == [f"POST /session/{first}/abort", f"DELETE /session/{first}"]
    await eventually(deleted(fake, second))
    assert backend.breakdowns[0].outcome == "retried (BackendUnavailableError)"
    assert backend.breakdowns[1].outcome == "ok"


async def test_a_stream_lost_after_output_fails_without_a_retry(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    fake.prompts.append(Prompt(events=lambda sid: [*opening(sid), delta(sid, "partial"), DROP]))
    fake.prompts.append(Prompt(events=reply("must not be used")))
    received: list[StreamEvent] = []
    with pytest.raises(BackendUnavailableError, match="event stream was lost"):
        async for item in backend.chat(chat_request()):
            received.append(item)
    assert text_of(received) == "partial"
    assert sum(isinstance(e, ResponseStart) for e in received) == 1
    (sid,) = fake.prompted()
    assert len(fake.prompts) == 1
    await eventually(deleted(fake, sid))
    assert fake.cleanup_of(sid)[0] == f"POST /session/{sid}/abort"


# -- a warm session gone ----------------------------------------------------------------


async def test_a_vanished_warm_session_is_replaced(fake: FakeOpenCode) -> None:
    opencode = make_backend(fake.url, pool_size=2)
    await opencode.start()
    try:
        await eventually(lambda: len(fake.created()) == 2)
        fake.prompts.append(Prompt(status=404))
        fake.prompts.append(Prompt(events=reply("fine")))
        events = await collect(opencode)
        assert text_of(events) == "fine"
        first, second = fake.prompted()
        assert first != second
        assert {first, second} <= set(fake.created())
        await eventually(deleted(fake, first))
    finally:
        await opencode.aclose()


async def test_a_second_missing_session_surfaces_the_error(fake: FakeOpenCode) -> None:
    opencode = make_backend(fake.url, pool_size=2)
    await opencode.start()
    try:
        await eventually(lambda: len(fake.created()) == 2)
        fake.prompts.extend([Prompt(status=404), Prompt(status=404), Prompt(events=reply("x"))])
        with pytest.raises(BackendHTTPError) as info:
            await collect(opencode)
        assert info.value.backend_status == 404
        assert len(fake.prompted()) == 2 and len(fake.prompts) == 1
        for sid in fake.prompted():
            await eventually(deleted(fake, sid))
    finally:
        await opencode.aclose()


# -- provider errors reported by OpenCode -----------------------------------------------


def api_error(status: int, retryable: bool) -> dict[str, Any]:
    return {
        "name": "APIError",
        "data": {
            "message": f"provider failed ({status})",
            "statusCode": status,
            "isRetryable": retryable,
        },
    }


async def test_a_retryable_provider_error_before_output_is_retried_once(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    fake.prompts.append(Prompt(events=session_error(api_error(503, True))))
    fake.prompts.append(Prompt(events=reply("recovered")))
    assert text_of(await collect(backend)) == "recovered"
    assert len(fake.prompted()) == 2


async def test_a_retryable_error_twice_surfaces(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    fake.prompts.extend([Prompt(events=session_error(api_error(429, True)))] * 2)
    with pytest.raises(BackendHTTPError) as info:
        await collect(backend)
    assert info.value.status_code == 429
    assert len(fake.prompted()) == 2


async def test_a_non_retryable_provider_error_is_not_retried(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    fake.prompts.append(Prompt(events=session_error(api_error(400, False))))
    fake.prompts.append(Prompt(events=reply("must not be used")))
    with pytest.raises(BackendHTTPError) as info:
        await collect(backend)
    assert info.value.status_code == 400 and info.value.backend_status == 400
    assert "provider failed (400)" in info.value.message
    (sid,) = fake.prompted()
    await eventually(deleted(fake, sid))
    assert fake.cleanup_of(sid) == [f"POST /session/{sid}/abort", f"DELETE /session/{sid}"]


async def test_a_retryable_error_after_output_is_not_retried(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    def events(sid: str) -> list[Event | str]:
        return [*opening(sid), delta(sid, "half"), *session_error(api_error(503, True))(sid)[-2:]]

    fake.prompts.append(Prompt(events=events))
    received: list[StreamEvent] = []
    with pytest.raises(BackendHTTPError):
        async for item in backend.chat(chat_request()):
            received.append(item)
    assert text_of(received) == "half"
    assert len(fake.prompted()) == 1


# -- deadlines ---------------------------------------------------------------------------


async def test_silence_times_out_and_the_session_is_aborted_then_deleted(
    fake: FakeOpenCode,
) -> None:
    opencode = make_backend(fake.url, prompt=0.3, completion=1.0)
    await opencode.start()
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(BackendTimeoutError) as info:
            await collect(opencode)
        assert 0.25 < loop.time() - started < 1.5
        assert info.value.status_code == 504
        assert "did not start its reply within 0.3 s" in info.value.message
        (sid,) = fake.prompted()  # a timeout is not retried
        await eventually(deleted(fake, sid))
        assert fake.cleanup_of(sid) == [f"POST /session/{sid}/abort", f"DELETE /session/{sid}"]
        assert opencode.breakdowns[0].outcome == "BackendTimeoutError"
    finally:
        await opencode.aclose()


async def test_a_provider_retry_message_is_named_in_the_timeout(fake: FakeOpenCode) -> None:
    opencode = make_backend(fake.url, prompt=0.3, completion=1.0)
    await opencode.start()
    try:

        def events(sid: str) -> list[Event | str]:
            status = {"type": "retry", "attempt": 1, "message": "Cannot connect to API", "next": 1}
            return [*opening(sid), ev("session.status", sessionID=sid, status=status)]

        fake.prompts.append(Prompt(events=events))
        with pytest.raises(BackendTimeoutError) as info:
            await collect(opencode)
        assert "retrying its model provider: Cannot connect to API" in info.value.message
    finally:
        await opencode.aclose()


async def test_a_reply_that_never_finishes_times_out_mid_stream(fake: FakeOpenCode) -> None:
    opencode = make_backend(fake.url, prompt=0.3, completion=0.6)
    await opencode.start()
    try:
        fake.prompts.append(Prompt(events=lambda sid: [*opening(sid), delta(sid, "and then")]))
        received: list[StreamEvent] = []
        with pytest.raises(BackendTimeoutError, match=r"did not finish its reply within 0\.6 s"):
            async for item in opencode.chat(chat_request()):
                received.append(item)
        assert text_of(received) == "and then"
        (sid,) = fake.prompted()
        await eventually(deleted(fake, sid))
        assert fake.cleanup_of(sid)[0] == f"POST /session/{sid}/abort"
    finally:
        await opencode.aclose()


# -- permission and question requests ---------------------------------------------------


async def test_permission_and_question_requests_are_refused(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    def events(sid: str) -> list[Event | str]:
        asked = ev(
            "permission.asked",
            id="per_1",
            sessionID=sid,
            permission="bash",
            patterns=["ls"],
            metadata={},
            always=[],
            tool={"messageID": "msg_a", "callID": "call_1"},
        )
        question = ev("question.asked", id="que_1", sessionID=sid, questions=[])
        foreign = ev("permission.asked", id="per_other", sessionID="ses_other", permission="x")
        return [*opening(sid), foreign, asked, question, *reply("done")(sid)[len(opening(sid)) :]]

    fake.prompts.append(Prompt(events=events))
    assert text_of(await collect(backend)) == "done"
    await eventually(lambda: "/question/que_1/reject" in fake.paths("POST"))
    await eventually(lambda: "/permission/per_1/reply" in fake.paths("POST"))
    (reply_call,) = [c for c in fake.calls if c.path == "/permission/per_1/reply"]
    assert reply_call.body["reply"] == "reject"
    assert not any("per_other" in path for path in fake.paths())


# -- the session pool and cleanup --------------------------------------------------------


async def test_a_warm_pool_serves_requests_and_is_refilled(fake: FakeOpenCode) -> None:
    opencode = make_backend(fake.url, pool_size=2)
    await opencode.start()
    try:
        await eventually(lambda: len(fake.created()) == 2)
        warm = fake.created()
        for call in fake.calls:
            if call.path == "/session":
                assert call.body["request"] == {"title": SESSION_TITLE, "permission": DENY_ALL}
        fake.prompts.append(Prompt(events=reply("pooled")))
        assert text_of(await collect(opencode)) == "pooled"
        (sid,) = fake.prompted()
        assert sid in warm
        await eventually(lambda: len(fake.created()) == 3)  # its replacement
        await eventually(lambda: opencode.breakdowns[0].cleaned)
        breakdown = opencode.breakdowns[0]
        assert breakdown.pooled and breakdown.session_id == sid and breakdown.outcome == "ok"
        assert fake.cleanup_of(sid) == [f"DELETE /session/{sid}"]  # finished: no abort
    finally:
        await opencode.aclose()
    # Closing deletes the warm sessions too.
    for sid in fake.created():
        assert fake.cleanup_of(sid) == [f"DELETE /session/{sid}"]


def _other_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]


async def test_closing_at_once_leaves_no_session_behind(fake: FakeOpenCode) -> None:
    """Sessions still being created for the pool when the backend closes are deleted."""
    opencode = make_backend(fake.url, pool_size=3)
    await opencode.start()
    await opencode.aclose()
    assert len(fake.created()) == 3
    for sid in fake.created():
        assert fake.cleanup_of(sid) == [f"DELETE /session/{sid}"]
    assert _other_tasks() == []


async def test_closing_leaves_no_background_task_behind(fake: FakeOpenCode) -> None:
    opencode = make_backend(fake.url)
    await opencode.start()
    try:

        def events(sid: str) -> list[Event | str]:
            asked = ev("permission.asked", id="per_2", sessionID=sid, permission="bash")
            return [*opening(sid), asked, *closing(sid, "")]

        fake.prompts.append(Prompt(events=events))
        await collect(opencode)
    finally:
        await opencode.aclose()
    assert _other_tasks() == []


async def test_without_a_pool_the_session_is_created_on_the_request_path(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    await asyncio.sleep(0.05)
    assert fake.created() == []
    fake.prompts.append(Prompt(events=reply("made now")))
    assert text_of(await collect(backend)) == "made now"
    assert fake.created() == fake.prompted()
    await eventually(lambda: bool(backend.breakdowns) and backend.breakdowns[0].cleaned)
    breakdown = backend.breakdowns[0]
    assert not breakdown.pooled and breakdown.session is not None
    assert breakdown.cleanup is not None and breakdown.cleanup >= 0
    await asyncio.sleep(0.05)
    assert len(fake.created()) == 1  # nothing is created ahead


async def test_a_client_that_stops_reading_aborts_and_deletes_the_session(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    fake.prompts.append(Prompt(events=reply("one", " two", " three"), gap=0.05))
    stream = backend.chat(chat_request())
    assert isinstance(stream, AsyncGenerator)  # what the gateway closes when a client leaves
    async for item in stream:
        if isinstance(item, PartDelta):
            break
    await stream.aclose()
    (sid,) = fake.prompted()
    await eventually(deleted(fake, sid))
    assert fake.cleanup_of(sid) == [f"POST /session/{sid}/abort", f"DELETE /session/{sid}"]
    await eventually(lambda: bool(backend.breakdowns) and backend.breakdowns[0].cleaned)
    assert backend.breakdowns[0].outcome == "cancelled"


async def test_sessions_are_deleted_whatever_the_outcome(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    fake.prompts.append(Prompt(events=reply("ok")))
    await collect(backend)
    fake.prompts.append(
        Prompt(events=session_error({"name": "UnknownError", "data": {"message": "x"}}))
    )
    with pytest.raises(BackendError, match="UnknownError: x"):
        await collect(backend)
    ok, failed = fake.prompted()
    await eventually(deleted(fake, ok))
    await eventually(deleted(fake, failed))
    assert fake.cleanup_of(ok) == [f"DELETE /session/{ok}"]
    assert fake.cleanup_of(failed) == [f"POST /session/{failed}/abort", f"DELETE /session/{failed}"]


# -- discovery, health and models ---------------------------------------------------------


async def test_a_server_without_our_agent_gets_no_agent_in_prompts(fake: FakeOpenCode) -> None:
    fake.reset(agents=("build", "plan"))
    opencode = make_backend(fake.url)
    await opencode.start()
    try:
        fake.prompts.append(Prompt(events=reply("plain")))
        assert text_of(await collect(opencode)) == "plain"
        (body,) = fake.prompt_bodies()
        assert "agent" not in body
        assert body["tools"] == {"*": False}
    finally:
        await opencode.aclose()


async def test_the_servers_default_model_is_used_without_one_of_our_own(
    fake: FakeOpenCode,
) -> None:
    fake.reset(config_model="p/served")
    opencode = OpenCodeBackend("oc", url=fake.url, pool_size=0)
    await opencode.start()
    try:
        fake.prompts.append(Prompt(events=reply("x")))
        fake.prompts.append(Prompt(events=reply("y")))
        await collect(opencode, chat_request(model="homeassistant"))
        await collect(opencode, chat_request(model="p/m"))
        first, second = fake.prompt_bodies()
        assert first["model"] == {"providerID": "p", "modelID": "served"}
        assert second["model"] == {"providerID": "p", "modelID": "m"}
    finally:
        await opencode.aclose()


async def test_health_reports_the_version(fake: FakeOpenCode, backend: OpenCodeBackend) -> None:
    health = await backend.health()
    assert health.ok
    assert "OpenCode 1.18.33 (external, restarts: 0)" in health.detail
    assert health.latency_ms is not None and health.latency_ms >= 0


async def test_health_of_an_unreachable_server_says_so() -> None:
    sock = RunningServer.reserve()
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    opencode = make_backend(f"http://127.0.0.1:{port}", prompt=0.3)
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        health = await opencode.health()
        assert loop.time() - started < 2
        assert not health.ok
        assert "event stream did not open within 0.3 s" in health.detail
        assert "unreachable" in health.detail
    finally:
        await opencode.aclose()


async def test_list_models_names_provider_models_with_their_limits(fake: FakeOpenCode) -> None:
    providers = [
        {
            "id": "gw",
            "models": {
                "thinker": {
                    "limit": {"context": 32768, "output": 4096},
                    "capabilities": {"reasoning": True, "input": {"image": True}},
                    "family": "qwen",
                },
                "plain": {"limit": {"context": 0}, "capabilities": {"reasoning": False}},
            },
        },
        {"id": "alpha", "models": {"a": {}}},
    ]
    fake.reset(providers=providers)
    opencode = make_backend(fake.url)
    await opencode.start()
    try:
        models = await opencode.list_models()
    finally:
        await opencode.aclose()
    by_name = {m.name: m for m in models}
    assert [m.name for m in models] == ["alpha/a", "gw/plain", "gw/thinker"]
    thinker = by_name["gw/thinker"]
    assert thinker.context_length == 32768 and thinker.backend == "oc"
    assert thinker.capabilities == {"completion", "tools", "thinking", "vision"}
    assert thinker.family == "qwen" and thinker.details == {"provider": "gw"}
    plain = by_name["gw/plain"]
    assert plain.context_length is None
    assert plain.capabilities == {"completion", "tools"}  # tools always: emulated
    assert by_name["alpha/a"].capabilities == {"completion", "tools"}

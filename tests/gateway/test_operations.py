"""Operations faults: clients that leave or dawdle while sending a request,
oversized headers, what ``/health`` tells a stranger, and backends that trickle.

Every test runs a real gateway on a loopback port through the HTTP protocol
``llmbridge serve`` uses (gateway/server/read_limits.py), with small limits so that each
fault shows within a second or two; slow and broken clients are raw sockets, since no
well-behaved client can be one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import select
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from llmbridge.backends.base import BackendHealth
from llmbridge.backends.http import HTTPSettings
from llmbridge.backends.ollama import OllamaBackend
from llmbridge.backends.scripted import Script, ScriptedBackend
from tests.conftest import RunningServer, ollama_client, running_gateway
from tests.upstream import Canned, FakeUpstream
from tests.waiting import scaled, wait_until

KEY = "sk-ops-key"
CHAT = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "stream": False}


class _Records(logging.Handler):
    """Every log record of the gateway's and uvicorn's loggers while installed (uvicorn's
    own loggers do not propagate to the root logger, so caplog would miss them)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.text: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.text.append(logging.Formatter().format(record))


@contextmanager
def _captured_logs() -> Iterator[_Records]:
    handler = _Records()
    loggers = [logging.getLogger(name) for name in ("llmbridge", "uvicorn", "uvicorn.error")]
    saved = [(lg, lg.level) for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        for lg, level in saved:
            lg.removeHandler(handler)
            lg.setLevel(level)


def _metric(server: RunningServer, prefix: str) -> float:
    """The value of the one metric line starting with ``prefix`` (0 when absent)."""
    for line in httpx.get(f"{server.url}/metrics", timeout=10).text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _connect(server: RunningServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (10 s at most)."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass  # closed with our unread bytes in its buffer: a reset after the reply
    return received


def _send_all_you_can(sock: socket.socket, data: bytes, chunk: int = 16 * 1024) -> None:
    """Send ``data`` until the server stops reading it (it answers and closes)."""
    for start in range(0, len(data), chunk):
        try:
            sock.sendall(data[start : start + chunk])
        except (BrokenPipeError, ConnectionResetError):
            return
        if select.select([sock], [], [], 0)[0]:
            return  # the server has answered


@pytest.fixture(scope="module")
def scripted() -> ScriptedBackend:
    return ScriptedBackend("scripted", models=("scripted",), default=Script(text=["served"]))


# -- a client that leaves while sending its body ---------------------------------------


def test_a_client_leaving_mid_body_is_one_log_line_and_a_499(scripted: ScriptedBackend) -> None:
    body = json.dumps(CHAT).encode()
    with running_gateway({"scripted": scripted}) as gateway, _captured_logs() as logs:
        for _ in range(5):
            with _connect(gateway) as sock:
                head = (
                    b"POST /api/chat HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n" % len(body)
                )
                sock.sendall(head + body[: len(body) // 2])
                # The client goes once the gateway is reading the body: uvicorn starts
                # the request's task when the head is complete.
                wait_until(
                    lambda: len(gateway.server.server_state.tasks) == 1, "the body being read"
                )
        metric = 'llmbridge_requests_total{backend="",endpoint="/api/chat",model="",status="499"}'
        wait_until(lambda: _metric(gateway, metric) >= 5, "five 499s counted")
        assert _metric(gateway, metric) == 5.0
        # ... and the gateway still serves.
        assert httpx.post(f"{gateway.url}/api/chat", json=CHAT).status_code == 200
    gone = [t for t in logs.text if "disconnected while sending the body" in t]
    assert len(gone) == 5
    assert all("\n" not in line for line in gone)
    assert not [r for r in logs.records if r.exc_info]
    assert not [t for t in logs.text if "Traceback" in t or "Exception in ASGI" in t]


# -- slow and oversized headers (slowloris) ----------------------------------------------


def test_slow_headers_are_cut_off_while_others_are_served(scripted: ScriptedBackend) -> None:
    limits = {"header_timeout": 1.0}
    with running_gateway({"scripted": scripted}, server=limits) as gateway:
        slow = [_connect(gateway) for _ in range(40)]
        silent = [_connect(gateway) for _ in range(5)]  # connect and send nothing at all
        for sock in slow:
            sock.sendall(b"POST /api/chat HTTP/1.1\r\nhost: x\r\nx-slow: ")
        # A normal client is served meanwhile, by its official client.
        reply = ollama_client(gateway.url).chat(model="scripted", messages=[CHAT["messages"][0]])
        assert reply.message.content == "served"
        # One byte a tenth of a second on each slow connection, until the gateway
        # closes them (bounded, scaled in tests/waiting.py: 40 connections fed one at a time
        # by a busy machine take a while to reach their 1 s).
        answers: dict[socket.socket, bytes] = {}
        deadline = time.monotonic() + scaled(60)
        while len(answers) < len(slow) and time.monotonic() < deadline:
            for sock in slow:
                if sock in answers:
                    continue
                try:
                    sock.sendall(b"a")
                except (BrokenPipeError, ConnectionResetError):
                    answers[sock] = _read_until_closed(sock)
                    continue
                if select.select([sock], [], [], 0)[0]:
                    answers[sock] = _read_until_closed(sock)
            time.sleep(0.1)  # the slow clients' pace (a byte a tenth of a second), not a poll
        silent_answers = [_read_until_closed(sock) for sock in silent]
        rejected = _metric(gateway, 'llmbridge_rejected_connections_total{reason="header_timeout"}')
    for sock in slow + silent:
        sock.close()
    assert len(answers) == len(slow)
    assert all(a.startswith(b"HTTP/1.1 408 ") for a in [*answers.values(), *silent_answers])
    assert all(b"connection: close" in a for a in answers.values())
    assert rejected == len(slow) + len(silent)


def test_a_kept_alive_connections_next_request_has_its_own_header_clock(
    scripted: ScriptedBackend,
) -> None:
    limits = {"header_timeout": 1.0}
    with (
        running_gateway({"scripted": scripted}, server=limits) as gateway,
        _connect(gateway) as sock,
    ):
        sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        first = b""
        while not first.endswith(b"Ollama is running"):
            first += sock.recv(65536)
        sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n")  # ... and the rest never comes
        second = _read_until_closed(sock)
    assert first.startswith(b"HTTP/1.1 200 ") and first.endswith(b"Ollama is running")
    assert second.startswith(b"HTTP/1.1 408 ")


def _served_on(sock: socket.socket) -> bytes:
    """One ``GET /`` on ``sock``, read to its end (``Ollama is running``)."""
    sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
    answer = b""
    while not answer.endswith(b"Ollama is running"):
        chunk = sock.recv(65536)
        if not chunk:
            break  # closed before the answer ended: the caller's assertion says so
        answer += chunk
    return answer


def test_an_idle_kept_alive_connection_lasts_its_keep_alive_timeout(
    scripted: ScriptedBackend,
) -> None:
    """``server.keep_alive_timeout`` reaches the protocol: the idle connection is closed,
    and not before that many seconds."""
    with (
        running_gateway({"scripted": scripted}, server={"keep_alive_timeout": 0.5}) as gateway,
        _connect(gateway) as sock,
    ):
        assert _served_on(sock).startswith(b"HTTP/1.1 200 ")
        answered = time.monotonic()
        sock.settimeout(scaled(30.0))
        assert sock.recv(65536) == b""  # the gateway closed it
        assert time.monotonic() - answered >= 0.5


def test_a_connection_idle_past_uvicorns_five_seconds_is_still_served(
    scripted: ScriptedBackend,
) -> None:
    """The default outlasts the pools of the clients in front (httpx 5 s, aiohttp 15 s):
    with uvicorn's 5 s the gateway closed first, and a client that reused the connection
    just then had its request fail (two "Can not write request body" in a benchmark)."""
    with running_gateway({"scripted": scripted}) as gateway, _connect(gateway) as sock:
        assert _served_on(sock).startswith(b"HTTP/1.1 200 ")
        # Idle past uvicorn's own 5 s (the default is 120 s): the idle time is what
        # is tested, so this one wait is on the clock by design.
        time.sleep(6.0)
        assert _served_on(sock).startswith(b"HTTP/1.1 200 ")


def test_a_megabyte_of_headers_is_a_431(scripted: ScriptedBackend) -> None:
    with running_gateway({"scripted": scripted}) as gateway:
        with _connect(gateway) as sock:
            request = b"GET /health HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 1_000_000 + b"\r\n\r\n"
            _send_all_you_can(sock, request)
            answer = _read_until_closed(sock)
        # A long URL counts too.
        with _connect(gateway) as sock:
            _send_all_you_can(sock, b"GET /" + b"a" * 200_000 + b" HTTP/1.1\r\n\r\n")
            long_url = _read_until_closed(sock)
        assert httpx.get(f"{gateway.url}/health").status_code == 200
        rejected = _metric(
            gateway, 'llmbridge_rejected_connections_total{reason="headers_too_large"}'
        )
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert answer.endswith(b"request headers exceed 65536 bytes")
    assert long_url.startswith(b"HTTP/1.1 431 ")
    assert rejected == 2


def test_a_hundred_thousand_headers_are_a_431(scripted: ScriptedBackend) -> None:
    with running_gateway({"scripted": scripted}) as gateway:
        with _connect(gateway) as sock:
            fields = b"".join(b"x-%d: y\r\n" % i for i in range(100_000))
            _send_all_you_can(sock, b"GET /health HTTP/1.1\r\nhost: x\r\n" + fields + b"\r\n")
            answer = _read_until_closed(sock)
        # Headers within the limits, as a busy proxy might add them, are fine.
        many = {f"x-forwarded-{i}": "v" * 200 for i in range(90)}
        assert httpx.get(f"{gateway.url}/health", headers=many).status_code == 200
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert answer.endswith(b"more than 100 request header fields")


def test_a_slow_body_is_a_408_in_the_callers_dialect(scripted: ScriptedBackend) -> None:
    with running_gateway({"scripted": scripted}, server={"body_timeout": 1.0}) as gateway:
        answers = {}
        for path in ("/api/chat", "/v1/chat/completions"):
            with _connect(gateway) as sock:
                sock.sendall(
                    b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                    b'content-length: 1000\r\n\r\n{"model": ' % path.encode()
                )
                answers[path] = _read_until_closed(sock)
        assert httpx.post(f"{gateway.url}/api/chat", json=CHAT).status_code == 200
        counted = _metric(
            gateway,
            'llmbridge_requests_total{backend="",endpoint="/api/chat",model="",status="408"}',
        )
    for path, answer in answers.items():
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 ")
        assert b"connection: close" in head.lower()
        error = json.loads(body)["error"]
        message = error if path.startswith("/api/") else error["message"]
        assert message == "request body not received within 1s"
    assert counted == 1.0


# -- /health ----------------------------------------------------------------------------


def _dead_backend() -> OllamaBackend:
    return OllamaBackend("dead", "http://127.0.0.1:9", http=HTTPSettings(connect=0.5))


def test_health_says_only_up_or_down_without_a_key(scripted: ScriptedBackend) -> None:
    backends = {"scripted": scripted, "dead": _dead_backend()}
    with running_gateway(backends, server={"api_keys": [KEY]}) as gateway:
        anonymous = httpx.get(f"{gateway.url}/health")
        wrong = httpx.get(f"{gateway.url}/health", headers={"x-api-key": "wrong"})
        keyed = httpx.get(f"{gateway.url}/health", headers={"authorization": f"Bearer {KEY}"})
    for reply in (anonymous, wrong):
        assert reply.status_code == 200
        assert reply.json() == {"status": "degraded"}
        assert "127.0.0.1:9" not in reply.text and "dead" not in reply.text
    details = keyed.json()
    assert details["status"] == "degraded" and details["version"]
    assert details["backends"]["dead"]["kind"] == "ollama"
    assert "127.0.0.1:9" in details["backends"]["dead"]["detail"]


def test_health_without_keys_configured_gives_the_details(scripted: ScriptedBackend) -> None:
    with running_gateway({"scripted": scripted}) as gateway:
        up = httpx.get(f"{gateway.url}/health").json()
    assert up["status"] == "up" and up["backends"]["scripted"]["ok"] is True
    with running_gateway({"dead": _dead_backend()}, server={"api_keys": [KEY]}) as gateway:
        down = httpx.get(f"{gateway.url}/health")
    assert down.status_code == 503 and down.json() == {"status": "down"}


class _CountedProbes(ScriptedBackend):
    """A scripted backend whose health probe counts its calls and can be held open."""

    def __init__(self) -> None:
        super().__init__("counted")
        self.probes = 0
        self.gate = threading.Event()
        self.gate.set()

    async def health(self) -> BackendHealth:
        self.probes += 1
        # The gate is set from the test's thread, not the server's loop.
        await asyncio.to_thread(self.gate.wait, scaled(60))
        return BackendHealth(ok=True, detail="probed")


def test_health_reuses_a_probe_for_health_cache_s() -> None:
    backend = _CountedProbes()
    with running_gateway({"counted": backend}, server={"health_cache_s": 3600}) as gateway:
        bodies = [httpx.get(f"{gateway.url}/health").json() for _ in range(5)]
    assert backend.probes == 1
    assert all(b["backends"]["counted"]["detail"] == "probed" for b in bodies)


def test_health_probes_every_time_with_health_cache_s_zero() -> None:
    backend = _CountedProbes()
    with running_gateway({"counted": backend}, server={"health_cache_s": 0}) as gateway:
        for _ in range(3):
            assert httpx.get(f"{gateway.url}/health").status_code == 200
    assert backend.probes == 3


def test_callers_during_a_probe_share_it() -> None:
    backend = _CountedProbes()
    backend.gate.clear()  # the probe waits until every caller has arrived
    with (
        running_gateway({"counted": backend}, server={"health_cache_s": 0}) as gateway,
        concurrent.futures.ThreadPoolExecutor(8) as pool,
    ):
        calls = [pool.submit(httpx.get, f"{gateway.url}/health") for _ in range(8)]
        wait_until(lambda: backend.probes > 0, "the first caller's probe")
        # Every caller in the gateway (uvicorn's request tasks) while the probe is held:
        # each reaches the shared probe in its first steps, long before the probe,
        # released from this thread, can end.
        wait_until(lambda: len(gateway.server.server_state.tasks) >= 8, "all eight callers")
        backend.gate.set()
        statuses = [call.result(timeout=scaled(60)).status_code for call in calls]
    assert statuses == [200] * 8
    assert backend.probes == 1


# -- a backend that trickles: the total deadline ----------------------------------------


def _frame(text: str, done: bool = False) -> bytes:
    line = {
        "model": "m",
        "created_at": "2026-01-01T00:00:00Z",
        "message": {"role": "assistant", "content": text},
        "done": done,
    }
    return json.dumps(line).encode() + b"\n"


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, RunningServer]]:
    fake = FakeUpstream()
    with RunningServer(fake.app) as server:
        yield fake, server


@contextmanager
def _trickled(server: RunningServer) -> Iterator[RunningServer]:
    # Each chunk comes well within the 5 s read timeout; the whole never within 1 s.
    settings = HTTPSettings(connect=1.0, read=5.0, total=1.0)
    backend = OllamaBackend("trickle", server.url, http=settings)
    with running_gateway(
        {"trickle": backend}, resilience={"retries": 0, "breaker_failures": 0}
    ) as gateway:
        yield gateway


def test_a_trickling_backend_is_cut_at_the_total_deadline(
    upstream: tuple[FakeUpstream, RunningServer],
) -> None:
    fake, server = upstream
    trickle = [_frame(f"t{i} ") for i in range(40)] + [_frame("", done=True)]
    fake.queue.extend(Canned(chunks=trickle, delay=0.2) for _ in range(2))
    with _trickled(server) as gateway:
        # Streamed: the reply has begun, so the dialect's in-stream error ends it.
        with httpx.stream(
            "POST", f"{gateway.url}/api/chat", json={**CHAT, "stream": True}, timeout=20
        ) as streamed:
            assert streamed.status_code == 200
            lines = [json.loads(line) for line in streamed.iter_lines() if line]
        # Not streamed: nothing was sent yet, so a 504.
        whole = httpx.post(f"{gateway.url}/api/chat", json=CHAT, timeout=20)
    assert lines[0]["message"]["content"] == "t0 "
    assert "total deadline of 1s" in lines[-1]["error"]
    assert len(lines) < len(trickle)
    assert whole.status_code == 504
    expected = "backend 'trickle' did not finish within its total deadline of 1s"
    assert whole.json()["error"] == expected


def test_the_total_deadline_before_the_first_byte_is_a_504(
    upstream: tuple[FakeUpstream, RunningServer],
) -> None:
    fake, server = upstream
    fake.queue.append(Canned(chunks=[_frame("late", done=True)], delay=3))
    with _trickled(server) as gateway:
        reply = httpx.post(f"{gateway.url}/api/chat", json={**CHAT, "stream": True}, timeout=20)
    assert reply.status_code == 504
    assert "total deadline of 1s" in reply.json()["error"]


def test_without_a_total_deadline_a_steady_trickle_is_served(
    upstream: tuple[FakeUpstream, RunningServer],
) -> None:
    fake, server = upstream
    # A reply sent whole (``stream: false``), its bytes trickling in.
    whole = _frame("ab", done=True)
    fake.queue.append(Canned(chunks=[whole[:20], whole[20:]], delay=0.3))
    backend = OllamaBackend("steady", server.url, http=HTTPSettings(connect=1.0, read=5.0))
    with running_gateway({"steady": backend}) as gateway:
        reply = httpx.post(f"{gateway.url}/api/chat", json=CHAT, timeout=20)
    assert reply.status_code == 200 and reply.json()["message"]["content"] == "ab"

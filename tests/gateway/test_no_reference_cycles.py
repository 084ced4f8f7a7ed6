"""A request served leaves no reference cycle behind.

Garbage in a cycle waits for the collector, which the gateway runs rarely (its gen-0
threshold is 50,000: gateway/server/asgi.py ``tune_interpreter``); a cycle per request made
the gateway's memory grow by 1.3 MB a minute at 100 requests/s (``bench/
memory_plateau.py``: the server's ``send`` kept in the request's scope). Each
request here goes over one kept-alive raw socket, so the client makes no garbage of its
own, and the collector is off while they are served: whatever it finds afterwards is
the gateway's.
"""

from __future__ import annotations

import gc
import socket
from collections.abc import Iterator

import orjson
import pytest

from llmbridge.backends.scripted import ScriptedBackend
from tests.conftest import RunningServer, running_gateway

_REQUESTS = 50


@pytest.fixture(scope="module")
def served() -> Iterator[RunningServer]:
    with running_gateway({"scripted": ScriptedBackend("scripted")}) as server:
        yield server


def _read_reply(conn: socket.socket, streamed: bool) -> bytes:
    """One whole response: to its Content-Length, or to the chunked terminator."""
    received = b""
    while True:
        chunk = conn.recv(65536)
        assert chunk, "the gateway closed the connection"
        received += chunk
        head, found, body = received.partition(b"\r\n\r\n")
        if not found:
            continue
        if streamed:
            if body.endswith(b"0\r\n\r\n"):
                return received
            continue
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        if len(body) >= length:
            return received


def _ask(conn: socket.socket, path: str, body: dict[str, object], streamed: bool) -> None:
    data = orjson.dumps(body)
    conn.sendall(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    reply = _read_reply(conn, streamed)
    assert reply.startswith(b"HTTP/1.1 200 "), reply[:200]


_CHATS = {
    "openai": ("/v1/chat/completions", {"model": "scripted", "messages": []}),
    "anthropic": ("/v1/messages", {"model": "scripted", "max_tokens": 16, "messages": []}),
    "ollama": ("/api/chat", {"model": "scripted", "messages": []}),
}


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("dialect", sorted(_CHATS))
def test_a_chat_leaves_no_garbage_cycle(
    served: RunningServer, dialect: str, streamed: bool
) -> None:
    path, base = _CHATS[dialect]
    body = base | {"stream": streamed, "messages": [{"role": "user", "content": "hi"}]}
    with socket.create_connection(("127.0.0.1", served.port), timeout=60) as conn:
        for _ in range(3):  # first-use caches (labels, the route index) filled
            _ask(conn, path, body, streamed)
        gc.collect()
        gc.disable()
        try:
            for _ in range(_REQUESTS):
                _ask(conn, path, body, streamed)
            found = gc.collect()
        finally:
            gc.enable()
    # Not one per request (a per-request cycle makes ~11 objects each, 550 here).
    assert found < _REQUESTS, f"{found} objects in reference cycles after {_REQUESTS} requests"

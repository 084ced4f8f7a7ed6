"""``HeadHoldingTransport`` (gateway/server/head_write.py): a response's head goes out in the
same write as its body, is never held past the loop's turn, and is written before the
connection closes. And through a real gateway: every response still arrives whole."""

from __future__ import annotations

import asyncio
import socket

import pytest

from llmbridge.gateway.server.head_write import HeadHoldingTransport
from tests.conftest import RunningServer


class _Recording(asyncio.Transport):
    """A transport that records each write as the socket would get it."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def writelines(self, list_of_data: object) -> None:
        self.writes.append(b"".join(list_of_data))  # type: ignore[arg-type]

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0


async def test_the_head_and_the_body_are_one_write() -> None:
    raw = _Recording()
    transport = HeadHoldingTransport(raw, asyncio.get_running_loop())
    transport.hold_next_write()
    transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    transport.write(b"{}")
    assert raw.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    await asyncio.sleep(0)  # the end-of-turn flush finds nothing left
    assert len(raw.writes) == 1
    transport.write(b"next")  # not held: only the write after a request's headers is
    assert raw.writes[-1] == b"next"


async def test_a_head_without_a_body_in_the_same_turn_goes_out_at_its_end() -> None:
    raw = _Recording()
    transport = HeadHoldingTransport(raw, asyncio.get_running_loop())
    transport.hold_next_write()
    transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert raw.writes == []
    await asyncio.sleep(0)
    assert raw.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]


async def test_closing_writes_the_held_head_first() -> None:
    raw = _Recording()
    transport = HeadHoldingTransport(raw, asyncio.get_running_loop())
    transport.hold_next_write()
    transport.write(b"HTTP/1.1 204 No Content\r\n\r\n")
    transport.close()
    assert raw.writes == [b"HTTP/1.1 204 No Content\r\n\r\n"] and raw.closed
    assert transport.is_closing()  # the transport's own, through the wrapper


async def test_a_large_body_is_not_copied_onto_the_head() -> None:
    raw = _Recording()
    transport = HeadHoldingTransport(raw, asyncio.get_running_loop())
    transport.hold_next_write()
    transport.write(b"HEAD\r\n\r\n")
    assert transport.get_write_buffer_size() == len(b"HEAD\r\n\r\n")
    body = b"x" * (1 << 20)
    transport.write(body)
    assert raw.writes == [b"HEAD\r\n\r\n" + body]  # one writelines call


def _exchange(port: int, request: bytes) -> bytes:
    """Send ``request`` on a fresh connection and read until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(request)
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
    return received


@pytest.mark.parametrize("method", ["GET", "HEAD"])
async def test_a_real_gateway_answers_whole_responses(gateway: RunningServer, method: str) -> None:
    request = (
        f"{method} /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    ).encode()
    reply = await asyncio.to_thread(_exchange, gateway.port, request)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 ")
    assert (body == b"") if method == "HEAD" else body.startswith(b"{")

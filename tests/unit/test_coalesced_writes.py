"""``CoalescingTransport`` (gateway/coalesced_writes.py): the writes of one turn of the
event loop go out as one, none waits past its turn, and what is pending is written
before the connection closes. And through a real gateway: responses arrive whole, a
stream's chunks all arrive, in order."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from llmbridge.gateway.coalesced_writes import CoalescingTransport
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


def _wrapped() -> tuple[_Recording, CoalescingTransport]:
    raw = _Recording()
    return raw, CoalescingTransport(raw, asyncio.get_running_loop())


async def test_the_writes_of_one_turn_are_one_write() -> None:
    raw, transport = _wrapped()
    transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    transport.write(b"{}")
    assert raw.writes == []  # held until the end of the turn
    assert transport.get_write_buffer_size() == len(
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"
    )
    await asyncio.sleep(0)
    assert raw.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    transport.write(b"next turn")
    await asyncio.sleep(0)
    assert raw.writes[-1] == b"next turn" and len(raw.writes) == 2


async def test_a_lone_write_goes_out_at_the_end_of_its_turn() -> None:
    raw, transport = _wrapped()
    transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    await asyncio.sleep(0)
    assert raw.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    transport.write(b"")  # nothing to send: no write, no flush
    await asyncio.sleep(0)
    assert len(raw.writes) == 1


async def test_closing_writes_what_is_pending_first() -> None:
    raw, transport = _wrapped()
    transport.write(b"HTTP/1.1 204 No Content\r\n\r\n")
    transport.close()
    assert raw.writes == [b"HTTP/1.1 204 No Content\r\n\r\n"] and raw.closed
    assert transport.is_closing()  # the transport's own, through the wrapper
    await asyncio.sleep(0)
    assert len(raw.writes) == 1  # the scheduled flush finds nothing left


async def test_an_aborted_connection_drops_what_is_pending() -> None:
    raw, transport = _wrapped()
    raw.abort = lambda: setattr(raw, "closed", True)  # type: ignore[method-assign]
    transport.write(b"never delivered")
    transport.abort()
    await asyncio.sleep(0)
    assert raw.writes == [] and raw.closed


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


def test_a_real_gateway_streams_what_it_answers_whole(gateway: RunningServer) -> None:
    import openai

    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "count"}]
    whole = client.chat.completions.create(model="scripted", messages=messages)
    stream = client.chat.completions.create(model="scripted", messages=messages, stream=True)
    pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert len(pieces) > 1 and "".join(pieces) == whole.choices[0].message.content

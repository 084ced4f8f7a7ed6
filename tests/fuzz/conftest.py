"""The fuzzed gateway: tests/conftest.py's scripted gateway, on a TCP_NODELAY socket.

``RunningServer.reserve()`` makes its socket with ``proto=0``; asyncio sets
``TCP_NODELAY`` only on connections whose socket says ``IPPROTO_TCP``, so there every
reply (headers, then body: two writes) waits out Nagle's algorithm against the
client's delayed ACK: about 45 ms a request instead of under 1 ms. The fuzz tests send
thousands of requests, so their gateway listens on a socket that names TCP.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from llmbridge.backends.scripted import ScriptedBackend
from llmbridge.gateway.app import create_app, http_protocol
from llmbridge.gateway.config import GatewayConfig
from tests.conftest import RunningServer


def tcp_socket() -> socket.socket:
    """A bound loopback socket whose accepted connections get TCP_NODELAY from asyncio."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@pytest.fixture(scope="module")
def gateway(scripted: ScriptedBackend) -> Iterator[RunningServer]:
    """The gateway over the module's scripted backend, serving any model name."""
    settings: dict[str, Any] = {
        "backends": {"scripted": {"type": "scripted"}},
        "default_backend": "scripted",
    }
    if "resilience" in GatewayConfig.model_fields:
        # One scripted failure must give exactly its status: no retry (which would get
        # the default reply) and no circuit breaker (which would turn later requests
        # into 503s). Retries and the breaker have tests of their own.
        settings["resilience"] = {"retries": 0, "breaker_failures": 0}
    app = create_app(GatewayConfig.model_validate(settings), backends={"scripted": scripted})
    # Through the HTTP protocol `llmbridge serve` uses (header limits,
    # gateway/server/read_limits.py).
    with RunningServer(app, tcp_socket(), http=http_protocol(app)) as server:
        yield server

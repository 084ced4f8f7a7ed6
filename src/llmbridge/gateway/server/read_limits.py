"""How long and how much a client may take to send its request.

Without limits, a client that sends its headers a byte a second holds a connection
(and a file descriptor) for as long as it likes, and a megabyte of headers or a
hundred thousand header fields are parsed and kept: a few thousand such clients
(slowloris) exhaust the server. uvicorn has no header limits or header read timeout
for httptools (its ``h11_max_incomplete_event_size`` is for h11 only), so:

- ``protocol_class(limits)`` is uvicorn's ``HttpToolsProtocol`` with three checks
  while a request's headers are read: their size in bytes (request line included),
  their count, and the time they take. Over either size: ``431 Request Header Fields
  Too Large`` (RFC 6585 section 5); too slow: ``408 Request Timeout`` (RFC 9110
  15.5.9). Both close the connection: nothing is left to read it by. ``llmbridge
  serve`` passes the class as uvicorn's ``http=`` option. Between requests the class
  keeps a connection for ``keep_alive_timeout`` (``ServerConfig`` says why 120 s, not
  uvicorn's 5).
- ``BodyDeadline``, an ASGI middleware, bounds the time from the end of the headers to
  the end of the body: a ``receive()`` still waiting at the deadline raises
  ``RequestTimeoutError``, which the route renders as a 408 in the caller's dialect,
  with ``connection: close``.

Each rejection is logged as one line and counted (``on_reject``).
"""

from __future__ import annotations

import asyncio
import logging
from asyncio import TimerHandle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import httptools
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from llmbridge.core.errors import RequestTimeoutError
from llmbridge.gateway.config import ServerConfig
from llmbridge.gateway.server.head_write import HeadHoldingTransport

__all__ = ["BodyDeadline", "ReadLimits", "protocol_class"]

log = logging.getLogger("llmbridge.gateway")

Rejected = Callable[[str], None]
"""Told the reason of each connection closed for a limit: ``header_timeout``,
``headers_too_large`` or ``too_many_headers``."""


@dataclass(frozen=True, slots=True)
class ReadLimits:
    """The header limits (``ServerConfig`` has each one's meaning and default)."""

    max_header_bytes: int
    max_headers: int
    header_timeout: float
    keep_alive_timeout: float

    @classmethod
    def of(cls, server: ServerConfig) -> ReadLimits:
        return cls(
            server.max_header_bytes,
            server.max_headers,
            server.header_timeout,
            server.keep_alive_timeout,
        )


@dataclass(frozen=True, slots=True)
class _Settings:
    limits: ReadLimits
    on_reject: Rejected | None


class _HeaderLimit(Exception):
    """Raised from a parser callback to stop parsing (httptools wraps it)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with header limits; see the module docstring."""

    settings: ClassVar[_Settings] = _Settings(ReadLimits.of(ServerConfig()), None)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = self.settings.limits
        # uvicorn's own idle timeout between requests, replaced by the configured one
        # here so that every server of the app (one process, workers, tests) has it.
        self.timeout_keep_alive = self.limits.keep_alive_timeout  # type: ignore[assignment]
        self._reading_headers = False
        self._header_bytes = 0
        """Bytes received since the request began: the whole of them while the
        headers are incomplete (bounds what the parser buffers)."""
        self._parsed_bytes = 0
        """The request line and header fields the parser has handed over."""
        self._header_count = 0
        self._headers_began = 0.0
        self._header_clock: TimerHandle | None = None
        self._writes: HeadHoldingTransport
        """The connection's transport, as uvicorn is given it (``connection_made``)."""

    # -- the header clock ---------------------------------------------------------------

    def _start_headers(self, began: float) -> None:
        self._reading_headers = True
        self._header_bytes = self._parsed_bytes = self._header_count = 0
        self._headers_began = began

    def _arm_header_clock(self) -> None:
        deadline = self._headers_began + self.limits.header_timeout
        self._header_clock = self.loop.call_at(deadline, self._headers_too_slow)

    def _stop_header_clock(self) -> None:
        self._reading_headers = False
        if self._header_clock is not None:
            self._header_clock.cancel()
            self._header_clock = None

    def _headers_too_slow(self) -> None:
        self._header_clock = None
        if self._reading_headers:
            seconds = f"{self.limits.header_timeout:g}"
            self._reject(408, "header_timeout", f"request headers not received within {seconds}s")

    # -- uvicorn's protocol, with the checks ---------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # Each response's head goes out with its body in one write (gateway/server/head_write.py).
        self._writes = HeadHoldingTransport(transport, self.loop)
        super().connection_made(self._writes)  # type: ignore[arg-type]
        # The clock starts with the connection: a client that connects and sends
        # nothing is as much a slow client as one that sends a byte a second.
        self._start_headers(self.loop.time())
        self._arm_header_clock()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_clock()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        # uvicorn's own data_received, with the header checks; its parser-error branch
        # would answer a limit raised from a callback with a 400.
        if self.transport.is_closing():
            return
        self._unset_keepalive_if_required()
        if self._reading_headers:
            self._header_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, _HeaderLimit):
                limit = exc.__context__
                self._reject(431, limit.reason, limit.message)
                return
            self._invalid_request()
            return
        except httptools.HttpParserError:
            self._invalid_request()
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if self._reading_headers:
            if self._header_bytes > self.limits.max_header_bytes:
                # Headers still incomplete past the limit: everything received is header.
                self._reject(431, "headers_too_large", self._too_large_message())
            elif self._header_clock is None:
                # Armed only when a request's headers span more than one read: most
                # come whole in one, and then no timer is made at all.
                self._arm_header_clock()

    def _invalid_request(self) -> None:
        message = "Invalid HTTP request received."
        self.logger.warning(message)
        self.send_400_response(message)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        # The connection's first request keeps the clock started at the connection; a
        # kept-alive connection's next request starts its own at its first byte
        # (between requests, uvicorn's keep-alive timeout applies).
        began = self._headers_began if self._header_clock is not None else self.loop.time()
        self._start_headers(began)

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.limits.max_headers:
            message = f"more than {self.limits.max_headers} request header fields"
            raise _HeaderLimit("too_many_headers", message)
        self._count(len(name) + len(value) + 4)  # "name: value\r\n"
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._stop_header_clock()
        self._writes.hold_next_write()  # this request's response head
        super().on_headers_complete()

    def _count(self, size: int) -> None:
        self._parsed_bytes += size
        if self._parsed_bytes > self.limits.max_header_bytes:
            raise _HeaderLimit("headers_too_large", self._too_large_message())

    def _too_large_message(self) -> str:
        return f"request headers exceed {self.limits.max_header_bytes} bytes"

    def _reject(self, status: int, reason: str, message: str) -> None:
        """Answer ``status`` with ``message`` and close; one log line, one count."""
        self._stop_header_clock()
        if self.transport.is_closing():
            return
        client = "%s:%d" % self.client if self.client else "a client"  # noqa: UP031
        log.warning("closed the connection from %s: %s (%d)", client, message, status)
        if self.settings.on_reject is not None:
            self.settings.on_reject(reason)
        if self.cycle is None or self.cycle.response_complete:
            # Only between responses: a pipelined request's headers may arrive while
            # the previous response is still being written.
            body = message.encode()
            defaults = b"".join(b"%s: %s\r\n" % h for h in self.server_state.default_headers)
            self.transport.write(
                b"".join(
                    (
                        STATUS_LINE[status],
                        defaults,  # server, date: as uvicorn's own responses carry
                        b"content-type: text/plain; charset=utf-8\r\n",
                        b"content-length: %d\r\n" % len(body),
                        b"connection: close\r\n\r\n",
                        body,
                    )
                )
            )
        self.transport.close()


def protocol_class(
    limits: ReadLimits, on_reject: Rejected | None = None
) -> type[LimitedHttpToolsProtocol]:
    """The protocol class for uvicorn's ``http=`` option, enforcing ``limits``."""
    attributes = {"settings": _Settings(limits, on_reject)}
    return type("LimitedHttpToolsProtocol", (LimitedHttpToolsProtocol,), attributes)


class BodyDeadline:
    """Bounds the time from the end of the headers to the end of the body (ASGI).

    Only ``receive()`` calls made before the body's last chunk are timed; once it has
    come, ``receive()`` is the app's own (a disconnect watcher waits on it as long as
    a reply takes). ``on_timeout`` is told the request's scope."""

    def __init__(
        self, app: ASGIApp, seconds: float, on_timeout: Callable[[Scope], None] | None = None
    ) -> None:
        self.app = app
        self.seconds = seconds
        self.on_timeout = on_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # The clock starts now, at the end of the headers, whenever the app first reads.
        body = _TimedBody(self, scope, receive, asyncio.get_running_loop().time())
        try:
            await self.app(scope, body.receive, send)
        finally:
            body.stop_clock()  # a body the app stopped reading early (a 413, a refusal)

    def timed_out(self, scope: Scope) -> RequestTimeoutError:
        """Count, log and make the 408 of a body not received in time."""
        if self.on_timeout is not None:
            self.on_timeout(scope)
        log.warning(
            "request body of %s %s not received within %gs",
            scope.get("method"),
            scope.get("path"),
            self.seconds,
        )
        return RequestTimeoutError(f"request body not received within {self.seconds:g}s")


class _TimedBody:
    """One request's ``receive`` under ``BodyDeadline``: one timer for the whole body,
    armed at the first ``receive()`` for the deadline counted from the end of the
    headers, and cancelled when the body's last chunk is in (or the app is done);
    when it fires, the task waiting in ``receive()`` (if one is) is cancelled and
    gets the 408 instead. (An ``asyncio.timeout`` per ``receive()`` call cost about 2%
    of a request's CPU.) Once the body is in, ``receive()`` is the app's
    own: a disconnect watcher waits on it as long as a reply takes."""

    __slots__ = (
        "_deadline",
        "_done",
        "_expired",
        "_receive",
        "_scope",
        "_started",
        "_timer",
        "_waiter",
    )

    def __init__(
        self, deadline: BodyDeadline, scope: Scope, receive: Receive, started: float
    ) -> None:
        self._deadline = deadline
        self._started = started
        self._scope = scope
        self._receive = receive
        self._done = False
        self._expired = False
        self._timer: TimerHandle | None = None
        self._waiter: asyncio.Task[Any] | None = None

    def stop_clock(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        self._expired = True
        if self._waiter is not None:
            self._waiter.cancel()

    async def receive(self) -> Message:
        if self._done:
            return await self._receive()
        if self._expired:
            raise self._deadline.timed_out(self._scope)
        if self._timer is None:
            deadline = self._started + self._deadline.seconds
            self._timer = asyncio.get_running_loop().call_at(deadline, self._expire)
        waiter = self._waiter = asyncio.current_task()
        try:
            message = await self._receive()
        except asyncio.CancelledError:
            if self._expired and waiter is not None and waiter.uncancel() == 0:
                raise self._deadline.timed_out(self._scope) from None
            raise
        finally:
            self._waiter = None
        if message["type"] != "http.request" or not message.get("more_body", False):
            self._done = True
            self.stop_clock()
        return message

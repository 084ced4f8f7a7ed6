"""The HTTP transport shared by every HTTP backend, and its error mapping.

Backends talk to their servers through aiohttp: on the gateway's hot path it costs a
fraction of httpx's CPU per request (C HTTP parser, no anyio locks; see
docs/PERFORMANCE.md for the profile behind this choice). aiohttp exceptions are
mapped to ``core.errors`` here and nowhere else: connection failures become
``BackendUnavailableError`` (503), timeouts ``BackendTimeoutError`` (504), a dropped
connection ``BackendError`` (502), and an error status from the backend
``BackendHTTPError`` carrying the backend's own message.

Two clocks bound a call: ``read``, the longest silence between two chunks, and the
optional ``total``, the whole call streaming included. ``read`` alone lets a backend
that trickles a byte now and then hold its client for as long as it keeps trickling;
``total`` ends that (504 before the first byte, the dialect's in-stream error after).

A large request (over ``offload_bytes``, the gateway's ``server.limits.offload_bytes``)
is encoded in a worker thread and written out a slice at a time, so the event loop
keeps answering others (``/health`` among them) meanwhile; a small one is encoded in
place, where a thread hop would cost more than the encoding.

A pass-through call (core/relay.py) runs through ``HTTPTransport.relay``: the backend
prepares a ``RelayCall`` (the body it sends, and the dialect's reader of the reply) and
hands the generator out as it is, so each read of a relayed stream passes through one
async generator only.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import aiohttp.abc
import aiohttp.payload
import orjson

from llmbridge.backends.base import BackendHealth
from llmbridge.backends.loop_bound import LoopBound
from llmbridge.core.errors import (
    BackendError,
    BackendHTTPError,
    BackendProtocolError,
    BackendTimeoutError,
    BackendUnavailableError,
    LLMBridgeError,
)
from llmbridge.core.events import StreamEvent
from llmbridge.core.frozen import faster_frozen_init
from llmbridge.core.replay import events_from_response
from llmbridge.core.request import ChatRequest
from llmbridge.core.request_limits import DEFAULT_LIMITS
from llmbridge.core.request_size import larger_than
from llmbridge.core.response import ChatResponse

__all__ = [
    "HTTPSettings",
    "HTTPTransport",
    "RelayCall",
    "StreamReader",
    "error_message",
    "parse_retry_after",
    "transport_error",
]

_MAX_ERROR_BODY = 64 * 1024
_JSON_HEADERS = {"content-type": "application/json"}


@dataclass(frozen=True, slots=True)
class HTTPSettings:
    """Timeouts in seconds. ``read`` bounds the gap between two chunks, not the whole
    reply, because a long generation is fine as long as tokens keep coming."""

    connect: float = 10.0
    read: float = 600.0
    total: float | None = None
    """The whole call, from sending the request to the reply's last byte (waiting for a
    pooled connection included); ``None``: no limit while chunks keep coming."""
    max_connections: int = 4096
    """Concurrent connections to the backend; requests beyond wait for a free one
    (without a deadline: the wait is the backend's capacity, not a fault)."""
    keep_alive: float = 4.0
    """Seconds an idle pooled connection is kept; the configuration's default depends on
    the URL's scheme (serving/config.py, ``keep_alive_timeout``, says why)."""
    probe_timeout: float = 5.0
    offload_bytes: int = DEFAULT_LIMITS.offload_bytes
    """Requests larger than this (estimated, ``core/request_size.py``) are encoded in a
    worker thread; the gateway passes its ``server.limits.offload_bytes``."""


def transport_error(
    exc: TimeoutError | aiohttp.ClientError, backend: str, total: float | None = None
) -> LLMBridgeError:
    """The llmbridge error an aiohttp failure is. ``total`` is the call's whole-call
    deadline, if it has one, named in the message when it hit."""
    if isinstance(exc, TimeoutError):  # aiohttp's timeouts subclass the builtin one
        # aiohttp's connect and read timeouts are ServerTimeoutError; its `total`
        # timer raises a plain TimeoutError.
        if total is not None and not isinstance(exc, aiohttp.ServerTimeoutError):
            message = f"backend '{backend}' did not finish within its total deadline of {total:g}s"
        else:
            message = f"backend '{backend}' did not answer in time"
        return BackendTimeoutError(message, backend=backend)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return BackendUnavailableError(
            f"backend '{backend}' is unreachable: {exc.os_error or exc}", backend=backend
        )
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return BackendError(
            f"backend '{backend}' closed the connection unexpectedly: {exc}", backend=backend
        )
    return BackendUnavailableError(f"backend '{backend}' transport failure: {exc}", backend=backend)


def error_message(body: Any) -> str | None:
    """Pull a human message out of any dialect's error body (or a plain-text one)."""
    if isinstance(body, str):
        return body or None
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, str):
            return err
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])
        for key in ("message", "detail"):
            if isinstance(body.get(key), str):
                return str(body[key])
    return None


async def _raise_for_status(response: aiohttp.ClientResponse, backend: str) -> None:
    if response.status < 400:
        return
    raw = await response.content.read(_MAX_ERROR_BODY)
    body: Any
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = raw.decode("utf-8", errors="replace")
    message = error_message(body)
    raise BackendHTTPError(
        f"backend '{backend}' returned HTTP {response.status}: {message or response.reason}",
        backend_status=response.status,
        backend=backend,
        body=body,
        retry_after=parse_retry_after(response.headers.get("Retry-After")),
    )


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds: delta-seconds or an HTTP date (RFC 9110 10.2.3)."""
    if not value:
        return None
    value = value.strip()
    # isascii(): str.isdigit() is true for superscript digits ("²"), which float() refuses.
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def _encode_json(encode: Callable[[ChatRequest], object], request: ChatRequest) -> bytes:
    return orjson.dumps(encode(request))


_WRITE_SLICE = 256 * 1024


class _SlicedBody(aiohttp.payload.Payload):
    """An encoded JSON body written ``_WRITE_SLICE`` bytes at a time, yielding to the
    event loop between slices. aiohttp writes ``bytes`` data in one piece, copying it
    twice on the way (the slice to ``Content-Length``, then the join with the headers on
    Python < 3.12.9, aiohttp's ``SKIP_WRITELINES``): for a 32 MB body that held the loop
    up to 0.19 s. The size is known, so ``Content-Length`` is still sent (no chunked
    upload, which not every backend server accepts)."""

    _autoclose = True  # only bytes in memory: nothing to close

    def __init__(self, value: bytes) -> None:
        super().__init__(value, content_type="application/json")
        self._size = len(value)

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return bytes(self._value).decode(encoding, errors)

    async def as_bytes(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return bytes(self._value)

    async def write(self, writer: aiohttp.abc.AbstractStreamWriter) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(
        self, writer: aiohttp.abc.AbstractStreamWriter, content_length: int | None
    ) -> None:
        view = memoryview(self._value)
        if content_length is not None:
            view = view[:content_length]
        for start in range(0, len(view), _WRITE_SLICE):
            await writer.write(view[start : start + _WRITE_SLICE])
            # write() yields only when the socket's buffer is full; a backend that
            # reads as fast as we write would otherwise get the whole body in one go.
            await asyncio.sleep(0)


def _request_data(body: Any) -> bytes | _SlicedBody | None:
    """What aiohttp sends for ``body``: nothing, JSON, or bytes already encoded (a
    large body in slices)."""
    if body is None:
        return None
    if not isinstance(body, bytes):
        return orjson.dumps(body)
    return _SlicedBody(body) if len(body) > _WRITE_SLICE else body


class StreamReader(Protocol):
    """A dialect's reader of a relayed stream (``dialects/*/relay.py``): ``feed`` each
    read, then ``end`` once the body ended; ``stopped`` once the reply's last frame
    came, when nothing more is read."""

    stopped: bool

    def feed(self, chunk: bytes) -> list[StreamEvent]: ...

    def end(self) -> list[StreamEvent]: ...


@faster_frozen_init
@dataclass(frozen=True, slots=True)
class RelayCall:
    """One pass-through call as its backend prepared it: ``body`` POSTed to ``path``
    (with ``headers`` for this request only), the reply read by ``reader`` as it
    streams or, sent whole, by ``reply``. ``recover``: what an error of the exchange
    becomes (the events ending a stream that had started; it raises what stays an
    error); without it the error is raised."""

    path: str
    body: bytes
    reader: StreamReader | None = None
    reply: Callable[[bytes], list[StreamEvent]] | None = None
    headers: Mapping[str, str] | None = None
    recover: Callable[[LLMBridgeError], list[StreamEvent]] | None = None


class HTTPTransport:
    """One backend's connection pool, created on first use inside the event loop; one
    per loop when it is used from several (the Python client, backends/loop_bound.py),
    each closed with its loop."""

    def __init__(
        self,
        backend: str,
        base_url: str,
        settings: HTTPSettings,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.backend = backend
        self.base_url = base_url.rstrip("/")
        self.settings = settings
        self._headers = headers or {}
        self._sessions = LoopBound(self._new_session, aiohttp.ClientSession.close)
        self._timeout = aiohttp.ClientTimeout(
            # sock_connect, not connect: aiohttp's `connect` also covers waiting for a
            # free pooled connection, which made a burst beyond the pool size time out.
            total=settings.total,
            sock_connect=settings.connect,
            sock_read=settings.read,
        )

    def _url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    def _client(self) -> aiohttp.ClientSession:
        return self._sessions.get()

    def _new_session(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=self.settings.max_connections,
            limit_per_host=0,
            ttl_dns_cache=300,
            keepalive_timeout=self.settings.keep_alive,
        )
        return aiohttp.ClientSession(
            connector=connector,
            headers=self._headers,
            timeout=self._timeout,
            # Backends are configured explicitly; never route them through a proxy
            # picked up from the environment.
            trust_env=False,
            auto_decompress=True,
            # One session serves every caller: a cookie one backend reply set must not
            # ride along on the next caller's request (and no jar to consult per call).
            cookie_jar=aiohttp.DummyCookieJar(),
        )

    async def aclose(self) -> None:
        await self._sessions.aclose()

    async def encode(self, request: ChatRequest, encode: Callable[[ChatRequest], object]) -> bytes:
        """``encode(request)`` (a dialect's ``encode_chat_request``) as JSON bytes, for
        ``stream``. In a worker thread when the request is larger than
        ``offload_bytes``: the encoder is Python code that walks every message (0.2-0.35 s
        for 10,000 of them), so there the event loop gets the interpreter
        back every few milliseconds instead of waiting for the whole of it."""
        if larger_than(request, self.settings.offload_bytes):
            return await asyncio.to_thread(_encode_json, encode, request)
        return _encode_json(encode, request)

    async def whole(
        self,
        path: str,
        request: ChatRequest,
        encode: Callable[[ChatRequest], object],
        decode: Callable[[object], ChatResponse],
        *,
        headers: Mapping[str, str] | None = None,
    ) -> list[StreamEvent]:
        """A chat the client wants whole, asked for whole: ``request`` encoded (as
        ``encode`` does it), sent to ``path`` with ``headers`` for this request only, its
        one reply ``decode``d, as the events that accumulate back to it
        (``core/replay.py``). One body decoded, where a stream was decoded chunk by
        chunk and accumulated again."""
        body = await self.encode(request, encode)
        reply = await self.request_json("POST", path, body, headers=headers)
        return events_from_response(decode(reply))

    @asynccontextmanager
    async def stream(
        self,
        path: str,
        body: Any = None,
        *,
        method: str = "POST",
        headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """Send ``body`` as JSON (none for ``GET``; ``bytes`` are sent as already
        encoded, see ``encode``), with ``headers`` for this request only (Anthropic's
        ``anthropic-beta``); yields the response body as an async byte iterator."""
        data = _request_data(body)
        json_headers = None if body is None else _JSON_HEADERS
        headers = {**(json_headers or {}), **headers} if headers else json_headers
        # aiohttp's failures as ours, caught here: a context manager for it cost 2 us a call.
        try:
            async with self._client().request(
                method, self._url(path), data=data, headers=headers
            ) as response:
                await _raise_for_status(response, self.backend)
                yield _GuardedChunks(response, self.backend, self.settings.total)
                # Reached only when the reader finished normally: decoders stop at the
                # final frame, but the body's own end (a chunked terminator) may still be
                # in flight, and aiohttp reuses a connection only once the body is read to
                # its end. Drain that tail, briefly and boundedly, instead of reconnecting.
                await _drain(response)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise transport_error(exc, self.backend, self.settings.total) from exc

    async def relay(
        self, request: ChatRequest, prepare: Callable[[], RelayCall]
    ) -> AsyncGenerator[StreamEvent, None]:
        """The events of ``request``'s pass-through call (its ``relay`` set), which
        ``prepare`` makes: in a worker thread when the client's body is larger than
        ``offload_bytes`` (what must be set in it is set on a copy written out again)."""
        relay = request.relay
        assert relay is not None
        if len(relay.raw) > self.settings.offload_bytes:
            call = await asyncio.to_thread(prepare)
        else:
            call = prepare()
        try:
            reader = call.reader
            if reader is None:
                assert call.reply is not None
                raw = await self.request_bytes("POST", call.path, call.body, headers=call.headers)
                for event in call.reply(raw):
                    yield event
                return
            async with self.stream(call.path, call.body, headers=call.headers) as chunks:
                async for chunk in chunks:
                    for event in reader.feed(chunk):
                        yield event
                    if reader.stopped:
                        break
                for event in reader.end():
                    yield event
        except LLMBridgeError as exc:
            if call.recover is None:
                raise
            for event in call.recover(exc):
                yield event

    async def request_bytes(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> bytes:
        """One complete request/response exchange with errors mapped: ``body`` sent as
        JSON (``bytes`` as already encoded), with ``headers`` for this request only (as
        ``stream`` takes them), the reply's body read whole in one call (a relayed reply
        sent whole: no per-chunk iteration)."""
        data = _request_data(body)
        json_headers = None if body is None else _JSON_HEADERS
        headers = {**(json_headers or {}), **headers} if headers else json_headers
        # aiohttp's failures as ours, caught here: a context manager for it cost 2 us a call.
        try:
            async with self._client().request(
                method, self._url(path), data=data, headers=headers
            ) as r:
                await _raise_for_status(r, self.backend)
                return await r.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise transport_error(exc, self.backend, self.settings.total) from exc

    async def request_json(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> object:
        """One complete JSON request/response exchange with errors mapped (``headers``
        as ``request_bytes`` takes them)."""
        raw = await self.request_bytes(method, path, body, headers=headers)
        if not raw:
            return None  # 204 No Content, or an empty 200
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise BackendProtocolError(
                f"backend '{self.backend}' sent invalid JSON for {path}", backend=self.backend
            ) from exc

    async def probe(self, path: str) -> tuple[BackendHealth, object]:
        """GET ``path`` as a health probe: the verdict and the decoded body (or None)."""
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.settings.probe_timeout):
                async with self._client().get(self._url(path)) as response:
                    raw = await response.read()
                    status = response.status
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            detail = str(exc) or type(exc).__name__
            return BackendHealth(ok=False, detail=f"{type(exc).__name__}: {detail}"), None
        latency = (time.perf_counter() - started) * 1000
        body: object = None
        if status == 200:
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError:
                body = None
        return BackendHealth(ok=status == 200, detail=f"HTTP {status}", latency_ms=latency), body


class _GuardedChunks:
    """The body's chunks as they arrive, with mid-stream transport errors mapped
    (``transport_error``). An iterator object rather than an async generator: every
    read of every stream passes here, and a generator would be one more hop a read."""

    __slots__ = ("_backend", "_content", "_total")

    def __init__(self, response: aiohttp.ClientResponse, backend: str, total: float | None):
        self._content = response.content
        self._backend = backend
        self._total = total

    def __aiter__(self) -> _GuardedChunks:
        return self

    async def __anext__(self) -> bytes:
        try:
            chunk = await self._content.readany()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise transport_error(exc, self._backend, self._total) from exc
        if not chunk:  # the body's end (aiohttp's iter_any stops there too)
            raise StopAsyncIteration
        return chunk


_DRAIN_LIMIT = 64 * 1024
_DRAIN_SECONDS = 0.5


async def _drain(response: aiohttp.ClientResponse) -> None:
    if response.content.at_eof():
        return  # the usual case: the body's end came with its last event; no timer
    drained = 0
    try:
        async with asyncio.timeout(_DRAIN_SECONDS):
            while drained <= _DRAIN_LIMIT and (chunk := await response.content.readany()):
                drained += len(chunk)
    except (TimeoutError, aiohttp.ClientError):
        pass  # the connection is simply not reused

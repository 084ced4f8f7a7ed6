"""The SDK's client transport for one configured server: ``open_transport``.

- **stdio** (``mcp.client.stdio.stdio_client``): the SDK spawns the program in a
  process group of its own and, when the transport closes, closes its stdin, waits,
  then kills the group (the specification's shutdown). Its stderr is a pipe this
  module reads and logs, a line at a time (``llmbridge.mcp`` logger, ``mcp <server>:
  ...``, each line cut to ``STDERR_LINE_CHARS``), rather than the gateway's own
  stderr, where a chatty server's output would interleave with the access log.
- **streamable HTTP** (``streamable_http_client``) over an ``httpx2`` client carrying
  the server's headers; its SSE events are bounded a little above
  ``mcp.max_result_bytes`` (the SDK buffers a whole event before parsing it), so a
  server streaming a huge result fails that call instead of filling memory.
- **SSE** (``sse_client``), the 2024-11-05 revision's transport, with its headers.

Whatever the transport, the read stream is watched (``_WatchedRead``): when it ends
(the process exited, the SSE stream dropped) ``on_closed`` is called, which is how the
upstream's supervisor (mcp/upstream.py) learns the connection is gone and restarts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping
from types import TracebackType
from typing import Any, Self

import httpx2
from mcp.client._transport import ReadStream, TransportStreams
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from llmbridge.mcp.config import HttpServerConfig, StdioServerConfig, UpstreamConfig, expanded

__all__ = ["STDERR_LINE_CHARS", "open_transport"]

log = logging.getLogger("llmbridge.mcp")

STDERR_LINE_CHARS = 2000
"""A stdio server's stderr line is logged cut to this (a server printing megabytes
without a newline must not make one log record of it)."""

_STDERR_READ = 64 * 1024

SSE_EVENT_MARGIN = 64 * 1024
"""What an SSE event may hold beyond ``max_result_bytes``: the JSON-RPC envelope."""


class _WatchedRead:
    """The transport's read stream, calling ``on_closed`` once it ends (module
    docstring). Everything else is the wrapped stream's; ``last_context`` too, which
    the SDK's dispatcher reads to run a message in its sender's context."""

    def __init__(
        self, inner: ReadStream[SessionMessage | Exception], on_closed: Callable[[], None]
    ) -> None:
        self._inner = inner
        self._on_closed = on_closed

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            return await self._inner.receive()
        except BaseException:
            self._on_closed()
            raise

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self._inner.__anext__()
        except BaseException:  # its end (StopAsyncIteration), a close, a cancellation
            self._on_closed()
            raise

    async def aclose(self) -> None:
        self._on_closed()
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        self._on_closed()
        return await self._inner.__aexit__(exc_type, exc_val, exc_tb)


@contextlib.asynccontextmanager
async def open_transport(
    name: str,
    config: UpstreamConfig,
    *,
    on_closed: Callable[[], None],
    environ: Mapping[str, str] | None,
    max_result_bytes: int,
) -> AsyncIterator[TransportStreams]:
    """The connected transport of the server ``name`` (module docstring);
    ``on_closed`` is called when its read stream ends. ``environ`` is where ``${VAR}``
    is read; ``None`` sends the values as they are (a server a request named: its
    headers are the caller's, never the gateway's variables). ``ValueError`` for a
    ``${VAR}`` not set, ``OSError`` for a program that cannot be started."""
    if isinstance(config, StdioServerConfig):
        opened = _stdio(name, config, environ or {})
    else:
        opened = _http(config, environ, max_result_bytes)
    async with opened as (read, write):
        yield _WatchedRead(read, on_closed), write


@contextlib.asynccontextmanager
async def _stdio(
    name: str, config: StdioServerConfig, environ: Mapping[str, str]
) -> AsyncIterator[TransportStreams]:
    params = StdioServerParameters(
        command=config.command[0],
        args=list(config.command[1:]),
        env=expanded(config.env, environ, "env") or None,
        cwd=config.cwd,
    )
    read_fd, write_fd = os.pipe()
    errlog = os.fdopen(write_fd, "w")
    reader: asyncio.Task[None] | None = None
    try:
        reader = asyncio.get_running_loop().create_task(
            _log_stderr(name, read_fd), name=f"llmbridge-mcp-stderr-{name}"
        )
        async with stdio_client(params, errlog=errlog) as streams:
            # The child has its own copy now: the pipe ends when the child's closes.
            errlog.close()
            yield streams
    finally:
        if not errlog.closed:
            errlog.close()
        if reader is not None:
            # The server has exited (the SDK's shutdown waits for it): what it wrote
            # last is read to the end, within a bound a descendant holding the pipe
            # cannot stretch.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(reader), timeout=2.0)
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader


async def _log_stderr(name: str, read_fd: int) -> None:
    """Log the stdio server ``name``'s stderr line by line until it closes."""
    loop = asyncio.get_running_loop()
    stream = asyncio.StreamReader(limit=_STDERR_READ)
    pipe = os.fdopen(read_fd, "rb", buffering=0)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream), pipe)
    pending = b""
    try:
        while chunk := await stream.read(_STDERR_READ):
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            if len(pending) > STDERR_LINE_CHARS:  # no newline for a long while
                lines.append(pending)
                pending = b""
            for line in lines:
                _log_line(name, line)
        if pending:
            _log_line(name, pending)
    finally:
        transport.close()


def _log_line(name: str, raw: bytes) -> None:
    line = raw.decode("utf-8", "replace").rstrip("\r")
    if line:
        log.info("mcp %s: %s", name, line[:STDERR_LINE_CHARS])


@contextlib.asynccontextmanager
async def _http(
    config: HttpServerConfig, environ: Mapping[str, str] | None, max_result_bytes: int
) -> AsyncIterator[TransportStreams]:
    if environ is None:
        headers = dict(config.headers)
    else:
        headers = expanded(config.headers, environ, "headers")
    if config.transport == "sse":
        async with sse_client(config.url, headers=headers) as streams:
            yield streams
        return
    # The SDK's default timeouts (mcp.shared._httpx_utils): 30 s to connect and write,
    # 300 s between reads of a stream a server may hold open; a call's own bound is
    # the upstream's (mcp/upstream.py).
    client = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0))
    async with (
        client,
        streamable_http_client(
            config.url,
            http_client=client,
            max_sse_event_size=max_result_bytes + SSE_EVENT_MARGIN,
        ) as streams,
    ):
        yield streams

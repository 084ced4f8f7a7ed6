"""The HTTP transport shared by every HTTP backend, and its error mapping.

httpx exceptions are mapped to ``core.errors`` here and nowhere else: connection
failures become ``BackendUnavailableError`` (503), timeouts ``BackendTimeoutError``
(504), and an error status from the backend ``BackendHTTPError`` carrying the
backend's own message.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from llmbridge.backends.base import BackendHealth
from llmbridge.core.errors import (
    BackendError,
    BackendHTTPError,
    BackendProtocolError,
    BackendTimeoutError,
    BackendUnavailableError,
)

__all__ = [
    "HTTPSettings",
    "make_client",
    "map_transport_errors",
    "probe",
    "raise_for_backend_status",
    "request_json",
    "response_json",
]

_MAX_ERROR_BODY = 64 * 1024


@dataclass(frozen=True, slots=True)
class HTTPSettings:
    """Timeouts in seconds. ``read`` bounds the gap between two chunks, not the whole
    reply, because a long generation is fine as long as tokens keep coming."""

    connect: float = 10.0
    read: float = 600.0
    write: float = 60.0
    pool: float = 60.0
    max_connections: int = 512


def make_client(
    base_url: str, settings: HTTPSettings, headers: dict[str, str] | None = None
) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=base_url,
        headers=headers,
        timeout=httpx.Timeout(
            connect=settings.connect,
            read=settings.read,
            write=settings.write,
            pool=settings.pool,
        ),
        limits=httpx.Limits(
            max_connections=settings.max_connections,
            max_keepalive_connections=settings.max_connections,
        ),
        # Backends are configured explicitly; never route them through a proxy
        # picked up from the environment.
        trust_env=False,
    )


@asynccontextmanager
async def map_transport_errors(backend: str) -> AsyncIterator[None]:
    """Translate httpx failures inside the block into llmbridge errors."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise BackendTimeoutError(
            f"backend '{backend}' did not answer in time ({type(exc).__name__})", backend=backend
        ) from exc
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise BackendUnavailableError(
            f"backend '{backend}' is unreachable: {exc}", backend=backend
        ) from exc
    except httpx.RemoteProtocolError as exc:
        raise BackendError(
            f"backend '{backend}' closed the connection unexpectedly: {exc}", backend=backend
        ) from exc
    except httpx.TransportError as exc:
        raise BackendUnavailableError(
            f"backend '{backend}' transport failure: {exc}", backend=backend
        ) from exc


def _error_message(body: Any) -> str | None:
    """Pull a human message out of any dialect's error body."""
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, str):
            return err
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])
        if isinstance(body.get("message"), str):
            return str(body["message"])
        if isinstance(body.get("detail"), str):
            return str(body["detail"])
    return None


async def raise_for_backend_status(response: httpx.Response, backend: str) -> None:
    """Raise ``BackendHTTPError`` when the backend answered with a 4xx/5xx status."""
    if response.status_code < 400:
        return
    raw = b""
    async for chunk in response.aiter_bytes():
        raw += chunk
        if len(raw) >= _MAX_ERROR_BODY:
            break
    body: Any
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = raw.decode("utf-8", errors="replace")
    message = _error_message(body) or (body if isinstance(body, str) and body else None)
    text = message or f"HTTP {response.status_code}"
    raise BackendHTTPError(
        f"backend '{backend}' returned HTTP {response.status_code}: {text}",
        backend_status=response.status_code,
        backend=backend,
        body=body,
    )


def response_json(response: httpx.Response, backend: str) -> object:
    """The decoded JSON body of a complete response, or ``BackendProtocolError``."""
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError as exc:
        raise BackendProtocolError(
            f"backend '{backend}' sent invalid JSON for {response.request.url.path}",
            backend=backend,
        ) from exc


async def request_json(
    client: httpx.AsyncClient, method: str, path: str, backend: str, body: Any = None
) -> object:
    """One complete JSON request/response exchange with errors mapped."""
    content = None if body is None else orjson.dumps(body)
    headers = None if body is None else {"content-type": "application/json"}
    async with map_transport_errors(backend):
        response = await client.request(method, path, content=content, headers=headers)
        await raise_for_backend_status(response, backend)
    return response_json(response, backend)


async def probe(client: httpx.AsyncClient, path: str) -> tuple[BackendHealth, object]:
    """GET ``path`` as a health probe; returns the verdict and the decoded body (or None)."""
    started = time.perf_counter()
    try:
        response = await client.get(path, timeout=5.0)
    except httpx.HTTPError as exc:
        return BackendHealth(ok=False, detail=f"{type(exc).__name__}: {exc}"), None
    latency = (time.perf_counter() - started) * 1000
    ok = response.status_code == 200
    body: object = None
    if ok:
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            body = None
    return BackendHealth(ok=ok, detail=f"HTTP {response.status_code}", latency_ms=latency), body

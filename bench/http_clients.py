"""The load generator's HTTP client, behind one small interface: how a benchmark
request is sent and timed, so every scenario drives the backend and the gateway alike.

``AiohttpClient``: one shared ``aiohttp.ClientSession``, about 80 us of client CPU per
request on the 2-core reference machine, so the direct baseline measures the backend,
not the load generator (an httpx client cost ~0.5 ms a request and ~12 us a streamed
chunk, which capped the direct baseline and flattered the gateway's ratios).

Timings start before the request is sent and stop at the last byte of the body;
``first_byte`` is the arrival of the first body bytes of a stream.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

__all__ = ["AiohttpClient", "BenchClient", "Headers", "Outcome", "make_client"]

_HEADERS = {"content-type": "application/json"}
Headers = Mapping[str, str]
_TIMEOUT_S = 60.0


@dataclass(slots=True)
class Outcome:
    """One request as the client saw it."""

    status: int
    raw: bytes
    total: float
    """Seconds from sending to the last byte of the body."""
    first_byte: float | None
    error: str | None = None


class BenchClient(Protocol):
    name: str

    async def fetch(
        self, slot: int, url: str, body: bytes, stream: bool, headers: Headers | None = None
    ) -> Outcome:
        """POST ``body``; ``slot`` is the calling worker (0 .. concurrency-1); ``headers``
        go with the content type (an API key, a proxy's routing headers)."""
        ...

    async def get(self, url: str) -> tuple[int, str]:
        """A GET's status and body text (readiness probes)."""
        ...

    async def aclose(self) -> None: ...


class AiohttpClient:
    name = "aiohttp"

    def __init__(self, max_connections: int) -> None:
        import aiohttp

        self._aiohttp = aiohttp
        self._errors = (aiohttp.ClientError, TimeoutError)
        # Idle connections dropped after 4 s, before the 5 s after which uvicorn closes
        # them: a baseline checkout or a peer on uvicorn's default would otherwise
        # fail the odd request reused just as it closed (a keep-alive race, not a
        # fault of the target; llmbridge itself now keeps them 120 s).
        connector = aiohttp.TCPConnector(
            limit=max_connections, limit_per_host=0, keepalive_timeout=4.0
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=_TIMEOUT_S),
            trust_env=False,
            auto_decompress=False,
        )

    async def fetch(
        self, slot: int, url: str, body: bytes, stream: bool, headers: Headers | None = None
    ) -> Outcome:
        sent = {**_HEADERS, **headers} if headers else _HEADERS
        started = time.perf_counter()
        first: float | None = None
        try:
            async with self._session.post(url, data=body, headers=sent) as response:
                if not stream:
                    raw = await response.read()
                else:
                    parts = []
                    async for part in response.content.iter_any():
                        if first is None:
                            first = time.perf_counter() - started
                        parts.append(part)
                    raw = b"".join(parts)
                return Outcome(response.status, raw, time.perf_counter() - started, first)
        except self._errors as exc:
            elapsed = time.perf_counter() - started
            return Outcome(0, b"", elapsed, None, f"{type(exc).__name__}: {exc}")

    async def fetch_frames(
        self, url: str, body: bytes, separator: bytes, headers: Headers | None = None
    ) -> tuple[Outcome, list[float]]:
        """A streamed POST that also notes when each frame arrived: the
        ``time.perf_counter()`` at which each ``separator`` (b"\n\n" ends an SSE event,
        b"\n" an NDJSON line) was read, so frames that came in one read share a time
        (``bench/frontier.py``'s frame timing, as the client sees it)."""
        sent = {**_HEADERS, **headers} if headers else _HEADERS
        started = time.perf_counter()
        first: float | None = None
        frames: list[float] = []
        keep = len(separator) - 1
        tail = b""
        try:
            async with self._session.post(url, data=body, headers=sent) as response:
                parts = []
                async for part in response.content.iter_any():
                    now = time.perf_counter()
                    if first is None:
                        first = now - started
                    # A separator split across two reads is counted once, in the second.
                    frames.extend([now] * (tail + part).count(separator))
                    tail = part[-keep:] if keep else b""
                    parts.append(part)
                raw = b"".join(parts)
                total = time.perf_counter() - started
                return Outcome(response.status, raw, total, first), frames
        except self._errors as exc:
            elapsed = time.perf_counter() - started
            return Outcome(0, b"", elapsed, None, f"{type(exc).__name__}: {exc}"), frames

    async def get(self, url: str) -> tuple[int, str]:
        timeout = self._aiohttp.ClientTimeout(total=5.0)
        async with self._session.get(url, timeout=timeout) as response:
            return response.status, await response.text()

    async def aclose(self) -> None:
        await self._session.close()


def make_client(max_connections: int = 256) -> BenchClient:
    return AiohttpClient(max_connections)

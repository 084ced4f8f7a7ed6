"""The load generator's HTTP client: how a benchmark request is sent and timed, so every
scenario drives the backend, the gateway and the peers alike.

One shared ``aiohttp.ClientSession``: about 80 us of client CPU per request on the
2-core reference machine, so the direct baseline measures the backend, not the load
generator (an httpx client cost ~0.5 ms a request and ~12 us a streamed chunk, which
capped the direct baseline and flattered the gateway's ratios).

Timings start before the request is sent and stop at the last byte of the body;
``first_byte`` is the arrival of the first body bytes of a stream, and with a frame
``separator`` the arrival of each frame is noted too.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp

Headers = Mapping[str, str]
_HEADERS = {"content-type": "application/json"}


@dataclass(slots=True)
class Outcome:
    """One request as the client saw it."""

    status: int
    raw: bytes
    total: float
    """Seconds from sending to the last byte of the body."""
    first_byte: float | None
    error: str | None = None
    frames: list[float] | None = None
    """The ``time.perf_counter()`` at which each frame was read (``separator``)."""


class AiohttpClient:
    name = "aiohttp"

    def __init__(self, max_connections: int, timeout_s: float, keepalive_s: float = 4.0) -> None:
        # Idle connections dropped after 4 s by default, before the 5 s after which
        # uvicorn closes them: a baseline checkout or a peer on uvicorn's default would
        # otherwise fail the odd request reused just as it closed (a keep-alive race,
        # not a fault of the target; llmbridge itself now keeps them 120 s).
        connector = aiohttp.TCPConnector(
            limit=max_connections, limit_per_host=0, keepalive_timeout=keepalive_s
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
            trust_env=False,
            auto_decompress=False,
        )

    async def fetch(
        self,
        slot: int,
        url: str,
        body: bytes,
        stream: bool,
        headers: Headers | None = None,
        separator: bytes | None = None,
    ) -> Outcome:
        """POST ``body``; ``slot`` is the calling worker (0 .. concurrency-1); ``headers``
        go with the content type (an API key, a proxy's routing headers). With a
        ``separator`` (b"\\n\\n" ends an SSE event, b"\\n" an NDJSON line) a stream's
        frames are timed as they are read, so frames that came in one read share a
        time and a separator split across two reads counts once, in the second."""
        sent = {**_HEADERS, **headers} if headers else _HEADERS
        started = time.perf_counter()
        first: float | None = None
        frames: list[float] | None = [] if separator else None
        keep, tail = len(separator or b"") - 1, b""
        try:
            async with self._session.post(url, data=body, headers=sent) as response:
                if not stream:
                    raw = await response.read()
                else:
                    parts = []
                    async for part in response.content.iter_any():
                        now = time.perf_counter()
                        if first is None:
                            first = now - started
                        if frames is not None and separator:
                            frames.extend([now] * (tail + part).count(separator))
                            tail = part[-keep:] if keep else b""
                        parts.append(part)
                    raw = b"".join(parts)
                total = time.perf_counter() - started
                return Outcome(response.status, raw, total, first, frames=frames)
        except (aiohttp.ClientError, TimeoutError) as exc:
            elapsed = time.perf_counter() - started
            error = f"{type(exc).__name__}: {exc}"
            return Outcome(0, b"", elapsed, None, error, frames)

    async def get(self, url: str) -> tuple[int, str]:
        """A GET's status and body text (readiness probes, metrics)."""
        async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=5.0)) as response:
            return response.status, await response.text()

    async def aclose(self) -> None:
        await self._session.close()


BenchClient = AiohttpClient
"""The one client the harness drives every scenario with."""


def make_client(max_connections: int = 256, timeout_s: float = 60.0) -> AiohttpClient:
    """The load generator's client; ``timeout_s`` bounds one request (a slow peer's
    stream can take longer than the default, and the benchmark measures slowness)."""
    return AiohttpClient(max_connections, timeout_s)

"""A fake HTTP upstream (Ollama, OpenAI-compatible, Responses or, with ``serve_canned``,
any other) that answers with canned bytes.

Used where a real backend cannot misbehave on demand: error statuses, garbage
output, streams cut off mid-way, a server that never answers. Each request takes
the next ``Canned`` reply from the queue.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.waiting import scaled

READ_TIMEOUT_S = scaled(0.5)
"""A backend read deadline for the tests of a backend that does not answer: short, but
scaled like every wait, since beside busy loops the fake upstream's own prompt answer
(a 429, an error body) took longer than 0.5 s and read as a timeout (a 504)."""
PAST_READ_TIMEOUT_S = 2 * READ_TIMEOUT_S + 2.0
"""A ``Canned.delay`` that outlasts ``READ_TIMEOUT_S``: the backend that does not answer."""


@dataclass
class Canned:
    status: int = 200
    chunks: list[bytes] = field(default_factory=list)
    media_type: str = "application/x-ndjson"
    delay: float = 0.0
    """Seconds to wait before each chunk (a hang when large)."""
    end_delay: float = 0.0
    """Seconds between the last chunk and the end of the body (the chunked terminator),
    as real servers that flush each event separately produce."""
    headers: dict[str, str] = field(default_factory=dict)
    """Response headers (``Retry-After``...)."""


class FakeUpstream:
    def __init__(self) -> None:
        self.queue: deque[Canned] = deque()
        self.bodies: list[bytes] = []
        self.peers: list[tuple[str, int]] = []
        self.healthy = True
        """What the health probe (``/api/version``) answers."""
        self.probes = 0
        """(host, port) of the connection each request came on."""
        self.paths: list[str] = []
        """The path of each request that took a canned reply, in order."""
        self.cookies: list[str | None] = []
        """The ``Cookie`` header of each request that took a canned reply, in order."""
        self.show: dict[str, object] | None = None
        """What ``/api/show`` answers (404 when ``None``: the model's details unknown)."""
        self.tags: list[dict[str, object]] = []
        """The models ``/api/tags`` lists."""
        self.running: list[dict[str, object]] = []
        """The models ``/api/ps`` lists."""
        self.methods: list[str] = []
        """The method of each request that took a canned reply, in order."""
        self.headers: list[dict[str, str]] = []
        """The headers of each request that took a canned reply, in order."""
        self.app = Starlette(
            routes=[
                Route("/api/chat", self._reply, methods=["POST"]),
                Route("/v1/chat/completions", self._reply, methods=["POST"]),
                Route("/api/generate", self._reply, methods=["POST"]),
                Route("/v1/completions", self._reply, methods=["POST"]),
                Route("/v1/responses", self._reply, methods=["POST"]),
                # Ollama's model management: canned replies too.
                Route("/api/pull", self._reply, methods=["POST"]),
                Route("/api/push", self._reply, methods=["POST"]),
                Route("/api/create", self._reply, methods=["POST"]),
                Route("/api/copy", self._reply, methods=["POST"]),
                Route("/api/delete", self._reply, methods=["DELETE"]),
                Route("/api/show", self._show, methods=["POST"]),
                Route("/api/version", self._version, methods=["GET"]),
                Route("/api/tags", self._tags, methods=["GET"]),
                Route("/api/ps", self._ps, methods=["GET"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )

    def serve_canned(self, path: str, method: str = "POST") -> None:
        """Answer ``path`` from the queue too (unrouted paths are a 404)."""
        self.app.add_route(path, self._reply, methods=[method])

    async def _reply(self, request: Request) -> Response:
        self.bodies.append(await request.body())
        self.paths.append(request.url.path)
        self.methods.append(request.method)
        self.cookies.append(request.headers.get("cookie"))
        self.headers.append(dict(request.headers))
        if request.client is not None:
            self.peers.append((request.client.host, request.client.port))
        canned = self.queue.popleft() if self.queue else Canned(status=500, chunks=[b"{}"])

        async def body() -> AsyncIterator[bytes]:
            for chunk in canned.chunks:
                if canned.delay:
                    await asyncio.sleep(canned.delay)
                yield chunk
            if canned.end_delay:
                await asyncio.sleep(canned.end_delay)

        return StreamingResponse(
            body(), status_code=canned.status, media_type=canned.media_type, headers=canned.headers
        )

    async def _version(self, request: Request) -> Response:
        self.probes += 1
        if not self.healthy:
            return Response(b'{"error":"down"}', status_code=503, media_type="application/json")
        return Response(b'{"version":"0.12.0"}', media_type="application/json")

    async def _show(self, request: Request) -> Response:
        if self.show is None:
            return Response(b'{"error":"model not found"}', status_code=404)
        return Response(orjson.dumps(self.show), media_type="application/json")

    async def _tags(self, request: Request) -> Response:
        return Response(orjson.dumps({"models": self.tags}), media_type="application/json")

    async def _ps(self, request: Request) -> Response:
        return Response(orjson.dumps({"models": self.running}), media_type="application/json")

    async def _models(self, request: Request) -> Response:
        return Response(b'{"object":"list","data":[]}', media_type="application/json")

"""The floor of llmbridge's HTTP stack: the least any proxy built on it can cost.

A raw ASGI app under uvicorn (httptools, uvloop: what ``llmbridge serve`` runs) that
proxies OpenAI chat completions to the configured backend with aiohttp (what
llmbridge's HTTP backends use), doing nothing else: read the body, parse it, ask the
backend for a stream, join the streamed content, answer the JSON. No routing, no
validation, no neutral events, no keys, no metrics, no ledger; one pooled aiohttp
session. It is not a gateway: it measures what the server and the client libraries
cost by themselves, so llmbridge's own cost per request is the difference.

Run it in llmbridge's place with ``bench/overhead.py``, which starts it as it starts the
gateway (``SCRIPT serve --config FILE --port N ...``) and measures it the same way::

    .venv/bin/python bench/overhead.py --only nonstream-c1 --only nonstream-c64 \\
        --gateway-launcher bench/floor_proxy.py

``--server granian`` (or ``FLOOR_PROXY_SERVER=granian``, which passes through
``bench/overhead.py``) serves the same app under granian, the Rust ASGI server, when it
is installed (it is not a dependency), to see whether another server lowers the floor.
``--server aiohttp`` does the same proxying in aiohttp's own server (its C parser, no
ASGI layer at all, one handler on its low-level ``web.Server``): the floor of a gateway
that left ASGI and Starlette behind. ``--client pyreqwest`` (``FLOOR_PROXY_CLIENT``)
swaps aiohttp for pyreqwest, a Rust (reqwest, hyper) client, under uvicorn.

Only ``POST /v1/chat/completions`` is proxied. Without streaming (the scenarios
``nonstream-*``) the reply is asked for streamed and joined, as llmbridge does; a
streamed one (``stream-*``, uvicorn only) is relayed byte for byte as it arrives, with
no decoding at all: the floor of any streaming proxy on this stack, below what a
gateway that translates between dialects can reach. ``GET`` answers the readiness
probe.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import re
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import uvicorn
import uvloop

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_JSON = [(b"content-type", b"application/json")]
_SSE = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


class FloorProxy:
    """The raw ASGI proxy (module docstring)."""

    def __init__(self, backend_url: str, client: str = "aiohttp") -> None:
        self.url = backend_url.rstrip("/") + "/chat/completions"
        self.client = client
        self.session: aiohttp.ClientSession | None = None
        self.reqwest: Any = None

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["method"] == "GET":
            await self._answer(send, b'{"status":"ok"}')
        else:
            await self._proxy(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.session = aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=4096),
                    cookie_jar=aiohttp.DummyCookieJar(),
                )
                if self.client == "pyreqwest":
                    self.reqwest = _pyreqwest_client()
                await send({"type": "lifespan.startup.complete"})
            else:
                if self.session is not None:
                    await self.session.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _proxy(self, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = orjson.loads(body)
        if request.get("stream") and self.session is not None:
            await self._relay(orjson.dumps(request), send)
            return
        request["stream"] = True
        if self.reqwest is not None:
            sent = (
                self.reqwest.post(self.url)
                .header("content-type", "application/json")
                .body_bytes(orjson.dumps(request))
                .build()
            )
            streamed = bytes(await (await sent.send()).bytes())
        else:
            assert self.session is not None
            streamed = await _streamed(self.session, self.url, request)
        await self._answer(send, _joined_answer(streamed))

    async def _relay(self, body: bytes, send: Send) -> None:
        """A streamed reply relayed as its bytes arrive, untouched: the floor of any
        streaming proxy, which at least reads every upstream chunk and writes it."""
        assert self.session is not None
        async with self.session.post(
            self.url, data=body, headers={"content-type": "application/json"}
        ) as reply:
            await send({"type": "http.response.start", "status": 200, "headers": _SSE})
            async for chunk in reply.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    @staticmethod
    async def _answer(send: Send, body: bytes) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": _JSON})
        await send({"type": "http.response.body", "body": body})


def _pyreqwest_client() -> Any:
    # An optional client, not a dependency: only this comparison needs it.
    try:
        pyreqwest = importlib.import_module("pyreqwest.client")
    except ImportError:
        raise SystemExit("pyreqwest is not installed: .venv/bin/pip install pyreqwest") from None
    return pyreqwest.ClientBuilder().max_connections(4096).build()


async def _streamed(session: aiohttp.ClientSession, url: str, request: object) -> bytes:
    """The whole of the backend's streamed reply to ``request``, as it came."""
    async with session.post(
        url, data=orjson.dumps(request), headers={"content-type": "application/json"}
    ) as reply:
        return b"".join([chunk async for chunk in reply.content.iter_any()])


def _joined_answer(streamed: bytes) -> bytes:
    """The chat completion made of a streamed reply's content pieces."""
    pieces: list[str] = []
    model = ""
    for line in streamed.split(b"\n"):
        if line.startswith(b"data: {"):
            chunk = orjson.loads(line[6:])
            model = chunk.get("model", model)
            for choice in chunk["choices"]:
                if text := choice.get("delta", {}).get("content"):
                    pieces.append(text)
    answer = {
        "id": "chatcmpl-floor",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(pieces)},
                "finish_reason": "stop",
            }
        ],
    }
    return orjson.dumps(answer)


def _backend_url(config: Path) -> str:
    """The one backend's URL in the configuration ``bench/processes.py`` writes."""
    found = re.search(r"url: '([^']+)'", config.read_text())
    if found is None:
        raise SystemExit(f"no backend url in {config}")
    return found.group(1)


def granian_app() -> FloorProxy:
    """The app for granian's workers, which import it by name (its factory)."""
    return FloorProxy(os.environ["FLOOR_PROXY_BACKEND"])


def _serve_granian(backend_url: str, port: int) -> None:
    # An optional server, not a dependency: only this comparison needs it.
    try:
        granian = importlib.import_module("granian")
    except ImportError:
        raise SystemExit("granian is not installed: .venv/bin/pip install granian") from None
    os.environ["FLOOR_PROXY_BACKEND"] = backend_url
    os.environ["PYTHONPATH"] = str(Path(__file__).parent)
    sys.path.insert(0, str(Path(__file__).parent))
    granian.Granian(
        "floor_proxy:granian_app",
        factory=True,
        address="127.0.0.1",
        port=port,
        interface="asgi",
        loop="uvloop",
        workers=1,
        log_enabled=False,
    ).serve()


def _serve_aiohttp(backend_url: str, port: int) -> None:
    # Imported here: only this comparison needs aiohttp's server side.
    from aiohttp import web

    url = backend_url.rstrip("/") + "/chat/completions"

    async def serve() -> None:
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=4096), cookie_jar=aiohttp.DummyCookieJar()
        )

        async def handle(request: web.BaseRequest) -> web.Response:
            if request.method == "GET":
                return web.Response(body=b'{"status":"ok"}', content_type="application/json")
            body = orjson.loads(await request.read())
            body["stream"] = True
            streamed = await _streamed(session, url, body)
            return web.Response(body=_joined_answer(streamed), content_type="application/json")

        runner = web.ServerRunner(web.Server(handle), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()
            await session.close()

    uvloop.run(serve())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    parser.add_argument(
        "--server",
        choices=["uvicorn", "granian", "aiohttp"],
        default=os.environ.get("FLOOR_PROXY_SERVER", "uvicorn"),
        help="the ASGI server (default: $FLOOR_PROXY_SERVER, else uvicorn)",
    )
    parser.add_argument(
        "--client",
        choices=["aiohttp", "pyreqwest"],
        default=os.environ.get("FLOOR_PROXY_CLIENT", "aiohttp"),
        help="the HTTP client under uvicorn (default: $FLOOR_PROXY_CLIENT, else aiohttp)",
    )
    args, _ = parser.parse_known_args(argv)
    if args.server == "granian":
        _serve_granian(_backend_url(args.config), args.port)
        return
    if args.server == "aiohttp":
        _serve_aiohttp(_backend_url(args.config), args.port)
        return
    uvicorn.run(
        FloorProxy(_backend_url(args.config), args.client),
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level=args.log_level,
        access_log=False,
    )


if __name__ == "__main__":
    main(sys.argv[1:])

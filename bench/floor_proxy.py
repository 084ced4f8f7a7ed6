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

Only ``POST /v1/chat/completions`` without streaming is proxied (the scenarios
``nonstream-*``); ``GET`` answers the readiness probe.
"""

from __future__ import annotations

import argparse
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

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_JSON = [(b"content-type", b"application/json")]


class FloorProxy:
    """The raw ASGI proxy (module docstring)."""

    def __init__(self, backend_url: str) -> None:
        self.url = backend_url.rstrip("/") + "/chat/completions"
        self.session: aiohttp.ClientSession | None = None

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
        request["stream"] = True
        assert self.session is not None
        pieces: list[str] = []
        model = ""
        async with self.session.post(
            self.url, data=orjson.dumps(request), headers={"content-type": "application/json"}
        ) as reply:
            streamed = b"".join([chunk async for chunk in reply.content.iter_any()])
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
        await self._answer(send, orjson.dumps(answer))

    @staticmethod
    async def _answer(send: Send, body: bytes) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": _JSON})
        await send({"type": "http.response.body", "body": body})


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    parser.add_argument(
        "--server",
        choices=["uvicorn", "granian"],
        default=os.environ.get("FLOOR_PROXY_SERVER", "uvicorn"),
        help="the ASGI server (default: $FLOOR_PROXY_SERVER, else uvicorn)",
    )
    args, _ = parser.parse_known_args(argv)
    if args.server == "granian":
        _serve_granian(_backend_url(args.config), args.port)
        return
    uvicorn.run(
        FloorProxy(_backend_url(args.config)),
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level=args.log_level,
        access_log=False,
    )


if __name__ == "__main__":
    main(sys.argv[1:])

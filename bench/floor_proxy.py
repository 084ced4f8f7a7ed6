"""The floor of llmbridge's HTTP stack: the least any proxy built on it can cost.

A raw ASGI app under uvicorn (httptools, uvloop: what ``llmbridge serve`` runs) that
forwards OpenAI chat completions to the configured backend with aiohttp (what
llmbridge's HTTP backends use), doing nothing else: no routing, validation, neutral
events, keys, metrics or ledger; one pooled aiohttp session. A non-streamed request is
asked for streamed and its content joined into one answer, as llmbridge does; a
streamed one is relayed byte for byte as it arrives, with no decoding at all: the floor
of any streaming proxy on this stack, below what a gateway that translates between
dialects can reach. Not a gateway: llmbridge's own cost is the difference.

``overhead`` starts it in the gateway's place and measures it the same way::

    .venv/bin/python -m bench overhead --gateway-launcher bench/floor_proxy.py
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import uvicorn

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
_HEAD = [(b"content-type", b"application/json")]


class FloorProxy:
    """The raw ASGI proxy (module docstring)."""

    def __init__(self, backend_url: str) -> None:
        self.url = backend_url.rstrip("/") + "/chat/completions"
        self.session: aiohttp.ClientSession | None = None

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] == "lifespan.startup":
                connector, jar = aiohttp.TCPConnector(limit=4096), aiohttp.DummyCookieJar()
                self.session = aiohttp.ClientSession(connector=connector, cookie_jar=jar)
                await send({"type": "lifespan.startup.complete"})
            if self.session is not None:
                await self.session.close()
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["method"] == "GET":  # the readiness probe
            await send({"type": "http.response.start", "status": 200, "headers": _HEAD})
            await send({"type": "http.response.body", "body": b'{"status":"ok"}'})
            return
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        request = orjson.loads(body)
        streamed = bool(request.get("stream"))
        assert self.session is not None
        headers = {"content-type": "application/json"}
        data = body if streamed else orjson.dumps({**request, "stream": True})
        async with self.session.post(self.url, data=data, headers=headers) as reply:
            start = {"type": "http.response.start", "status": 200, "headers": _HEAD}
            if streamed:
                start["headers"] = [(b"content-type", b"text/event-stream")]
                await send(start)
                async for chunk in reply.content.iter_any():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
                return
            whole = b"".join([chunk async for chunk in reply.content.iter_any()])
        await send(start)
        await send({"type": "http.response.body", "body": _joined(whole)})


def _joined(streamed: bytes) -> bytes:
    """The chat completion made of a streamed reply's content pieces."""
    pieces, model = [], ""
    for line in streamed.split(b"\n"):
        if line.startswith(b"data: {"):
            chunk = orjson.loads(line[6:])
            model = chunk.get("model", model)
            pieces += [c["delta"]["content"] for c in chunk["choices"] if c["delta"].get("content")]
    message = {"role": "assistant", "content": "".join(pieces)}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    answer = {"id": "chatcmpl-floor", "object": "chat.completion", "created": 0, "model": model}
    return orjson.dumps(answer | {"choices": [choice]})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("--config", type=Path, required=True, help="the gateway's: its url")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    args, _ = parser.parse_known_args()
    found = re.search(r"url: '([^']+)'", args.config.read_text())
    if found is None:
        raise SystemExit(f"no backend url in {args.config}")
    app = FloorProxy(found.group(1))
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level=args.log_level,
        access_log=False,
    )


if __name__ == "__main__":
    main()

"""The floor of llmbridge's HTTP stack: the least any proxy built on it can cost.

A raw ASGI app under uvicorn (httptools, uvloop: what ``llmbridge serve`` runs) that
forwards OpenAI chat completions to the configured backend with aiohttp (what
llmbridge's HTTP backends use), doing nothing else: no routing, validation, neutral
events, keys, metrics or ledger; one pooled aiohttp session. The request is parsed once
(to know whether it streams) and forwarded as it came; a non-streamed reply goes back
whole, as llmbridge asks for one; a streamed one is relayed byte for byte as it arrives,
with no decoding at all: the floor of any streaming proxy on this stack, below what a
gateway that translates between dialects can reach. Not a gateway: llmbridge's own cost
is the difference.

``overhead`` starts it in the gateway's place and measures it the same way::

    .venv/bin/python -m bench overhead --gateway-launcher bench/floor_proxy.py

With ``FLOOR_REENCODE=1`` in its environment (or ``--reencode``) it is the floor of a
translating gateway instead: each streamed SSE event is parsed with orjson and written
back, whole events at a time, the least a gateway that decodes and re-encodes a stream
does (the bar for llmbridge's translated path)::

    FLOOR_REENCODE=1 .venv/bin/python -m bench overhead --gateway-launcher bench/floor_proxy.py

With ``FLOOR_DECODE=1`` (or ``--decode``) each request is also read as llmbridge reads
one (``web.bodies.parse_json``, then the OpenAI dialect's ``decode_chat_request``:
validation and the neutral request) before it is forwarded as it came: what checking
a request costs a relay that does nothing else, measured beside the forwarding floor.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import uvicorn

from llmbridge.dialects.openai.request import decode_chat_request
from llmbridge.web.bodies import parse_json

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
_HEAD = [(b"content-type", b"application/json")]


class FloorProxy:
    """The raw ASGI proxy (module docstring)."""

    def __init__(self, backend_url: str, *, reencode: bool = False, decode: bool = False) -> None:
        self.url = backend_url.rstrip("/") + "/chat/completions"
        self.session: aiohttp.ClientSession | None = None
        self.reencode = reencode
        self.decode = decode

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
        if self.decode:
            streamed = decode_chat_request(parse_json(body)).stream
        else:
            streamed = bool(orjson.loads(body).get("stream"))
        assert self.session is not None
        headers = {"content-type": "application/json"}
        async with self.session.post(self.url, data=body, headers=headers) as reply:
            start = {"type": "http.response.start", "status": 200, "headers": _HEAD}
            if streamed:
                start["headers"] = [(b"content-type", b"text/event-stream")]
                await send(start)
                pending = b""
                async for chunk in reply.content.iter_any():
                    if self.reencode:
                        chunk, pending = _reencoded(pending + chunk)
                        if not chunk:
                            continue
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": pending})
                return
            whole = await reply.read()
        await send(start)
        await send({"type": "http.response.body", "body": whole})


def _reencoded(data: bytes) -> tuple[bytes, bytes]:
    """The whole SSE events of ``data``, each JSON payload parsed and written again, and
    the rest (an event the read cut) for the next read."""
    cut = data.rfind(b"\n\n")
    if cut < 0:
        return b"", data
    out = []
    for event in data[: cut + 2].split(b"\n\n"):
        if event.startswith(b"data: {"):
            event = b"data: " + orjson.dumps(orjson.loads(event[6:]))
        if event:
            out.append(event + b"\n\n")
    return b"".join(out), data[cut + 2 :]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("--config", type=Path, required=True, help="the gateway's: its url")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("--reencode", action="store_true", help="decode and re-encode streams")
    parser.add_argument("--decode", action="store_true", help="read requests as llmbridge does")
    args, _ = parser.parse_known_args()
    found = re.search(r"url: '([^']+)'", args.config.read_text())
    if found is None:
        raise SystemExit(f"no backend url in {args.config}")
    reencode = args.reencode or os.environ.get("FLOOR_REENCODE") == "1"
    decode = args.decode or os.environ.get("FLOOR_DECODE") == "1"
    app = FloorProxy(found.group(1), reencode=reencode, decode=decode)
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

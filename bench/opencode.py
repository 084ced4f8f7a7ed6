"""What the ``opencode`` backend adds over a bare OpenCode prompt on the same server.

One OpenCode server (the pinned ``opencode serve``, spawned and isolated exactly as
the gateway spawns it) answers from the fast scripted model server
(``fast_backend.py``), so the model's own time is a few milliseconds and what is
measured is OpenCode plus whatever sits in front of it. Sequentially (concurrency 1,
where latency is what a user feels), in the same run:

- ``bare prompt``: the baseline, ``POST /session/{id}/message`` (OpenCode's
  synchronous prompt) on a fresh session created beforehand, with the very body the
  backend sends (same agent, tools off, system text): OpenCode's own time.
- ``bare + session``: create a session, prompt, delete it, one after the other: the
  least a stateless client must do per request.
- ``seed-style``: the seed's adapter: create, ``prompt_async``, poll the messages
  every 300 ms until the reply is there, delete.
- ``gateway, pool N``: the official route a client uses, Ollama ``POST /api/chat``
  through a gateway whose ``opencode`` backend reaches the same server by URL;
  non-streaming, then streaming (time to first token and to the end), with a warm
  pool of N sessions (N = 2, then 0: session created on the request's path).

Each row prints p50 / p95 and the p50 difference to the bare prompt. Target: at most
50 ms added at p50 with the pool. Run: ``.venv/bin/python bench/opencode.py``
(``--requests``, ``--opencode PATH``); the OpenCode binary defaults to the one
``make test`` installs in tests/e2e/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from fast_backend import DEFAULT_MODEL
from harness import (
    log,
    start_fast_backend,
    start_gateway,
    wait_ready,
)
from http_clients import make_client
from llmbridge.backends.opencode.prompt import ModelRef, prompt_body
from llmbridge.backends.opencode.server import (
    AGENT_NAME,
    OpenCodeProvider,
    OpenCodeServer,
    SpawnSettings,
)
from llmbridge.core.messages import Message, TextPart
from llmbridge.core.request import ChatRequest

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_OPENCODE = BENCH_DIR.parent / "tests" / "e2e" / "node_modules" / ".bin" / "opencode"
TARGET_MS = 50.0
QUESTION = "Say hello."
SYSTEM = "You are a terse assistant."

Timed = Callable[[], Awaitable[tuple[float, float | None]]]
"""One request: (seconds to the end, seconds to the first token or None)."""


def _request() -> ChatRequest:
    return ChatRequest(
        model="bench",
        messages=(
            Message("system", (TextPart(SYSTEM),)),
            Message("user", (TextPart(QUESTION),)),
        ),
    )


class BareClient:
    """OpenCode's HTTP API driven directly, with the same body the backend sends."""

    def __init__(self, http: aiohttp.ClientSession, server: OpenCodeServer, model: ModelRef):
        assert server.url is not None
        self.http, self.url, self.headers = http, server.url, server.headers
        self.body = prompt_body(_request(), model, AGENT_NAME)

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        async with self.http.request(
            method, f"{self.url}/{path}", json=body, headers=self.headers
        ) as r:
            r.raise_for_status()
            raw = await r.read()
        return json.loads(raw) if raw else None

    async def session(self) -> str:
        reply = await self.call("POST", "session", {"title": "bench"})
        return str(reply["id"])

    async def prompt(self, sid: str) -> str:
        reply = await self.call("POST", f"session/{sid}/message", self.body)
        return "".join(p.get("text", "") for p in reply["parts"] if p.get("type") == "text")

    async def bare(self, sessions: list[str]) -> tuple[float, float | None]:
        """A prompt on a fresh session made beforehand (not timed): a reused session
        would grow, as OpenCode resends a session's whole history on every prompt."""
        sid = sessions.pop()
        started = time.perf_counter()
        text = await self.prompt(sid)
        assert text, "OpenCode gave an empty reply"
        return time.perf_counter() - started, None

    async def with_session(self) -> tuple[float, float | None]:
        started = time.perf_counter()
        sid = await self.session()
        await self.prompt(sid)
        await self.call("DELETE", f"session/{sid}")
        return time.perf_counter() - started, None

    async def seed_style(self) -> tuple[float, float | None]:
        """The seed's adapter: prompt, then poll the messages every 300 ms."""
        started = time.perf_counter()
        sid = await self.session()
        await self.call("POST", f"session/{sid}/prompt_async", self.body)
        while True:
            await asyncio.sleep(0.3)
            messages = await self.call("GET", f"session/{sid}/message")
            last = messages[-1] if messages else None
            if last and last["info"]["role"] == "assistant" and last["info"].get("finish"):
                break
        elapsed = time.perf_counter() - started
        await self.call("DELETE", f"session/{sid}")
        return elapsed, None


async def gateway_request(
    http: aiohttp.ClientSession, url: str, stream: bool
) -> tuple[float, float | None]:
    body = {
        "model": "bench",
        "stream": stream,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}],
    }
    started = time.perf_counter()
    first: float | None = None
    async with http.post(f"{url}/api/chat", json=body) as r:
        r.raise_for_status()
        if not stream:
            reply = await r.json()
            assert reply["message"]["content"], reply
            return time.perf_counter() - started, None
        async for line in r.content:
            frame = json.loads(line)
            if first is None and frame.get("message", {}).get("content"):
                first = time.perf_counter() - started
            assert "error" not in frame, frame
    return time.perf_counter() - started, first


async def measure(name: str, run: Timed, requests: int, warmup: int) -> dict[str, Any]:
    for _ in range(warmup):
        await run()
    totals: list[float] = []
    firsts: list[float] = []
    for _ in range(requests):
        total, first = await run()
        totals.append(total * 1000)
        if first is not None:
            firsts.append(first * 1000)
    log(f"{name}: p50 {statistics.median(totals):.1f} ms")
    return {
        "name": name,
        "p50": statistics.median(totals),
        "p95": statistics.quantiles(totals, n=20)[-1],
        "ttft_p50": statistics.median(firsts) if firsts else None,
    }


def _gateway_yaml(url: str, password: str, model: str, pool: int) -> str:
    return (
        "server: {host: 127.0.0.1, log_level: warning}\n"
        "backends:\n"
        f"  oc: {{type: opencode, url: '{url}', password: '{password}', model: '{model}', "
        f"pool_size: {pool}}}\n"
        "default_backend: oc\n"
    )


async def run_gateway(
    http: aiohttp.ClientSession,
    server: OpenCodeServer,
    model: ModelRef,
    pool: int,
    args: argparse.Namespace,
    workdir: Path,
) -> list[dict[str, Any]]:
    assert server.url is not None and server.password is not None
    config = _gateway_yaml(server.url, server.password, str(model), pool)
    gateway = start_gateway(workdir, config, name=f"gateway-pool{pool}")
    port = gateway.port
    try:
        probe = make_client()
        try:
            await wait_ready(probe, gateway, "/health")
        finally:
            await probe.aclose()
        url = f"http://127.0.0.1:{port}"
        rows = []
        for stream in (False, True):
            kind = "stream" if stream else "whole"
            rows.append(
                await measure(
                    f"gateway, pool {pool}, {kind}",
                    lambda s=stream: gateway_request(http, url, s),  # type: ignore[misc]
                    args.requests,
                    args.warmup,
                )
            )
        return rows
    finally:
        gateway.stop()


def render(rows: list[dict[str, Any]], baseline: float) -> str:
    lines = [
        f"{'path':<28} {'p50 ms':>8} {'p95 ms':>8} {'TTFT p50':>9} {'p50 vs bare':>12}",
        "-" * 69,
    ]
    for row in rows:
        ttft = "-" if row["ttft_p50"] is None else f"{row['ttft_p50']:.1f}"
        lines.append(
            f"{row['name']:<28} {row['p50']:>8.1f} {row['p95']:>8.1f} {ttft:>9} "
            f"{row['p50'] - baseline:>+11.1f}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=40, help="measured requests per path")
    parser.add_argument("--warmup", type=int, default=5, help="unmeasured requests per path")
    parser.add_argument("--chunks", type=int, default=20, help="pieces in each model reply")
    parser.add_argument("--opencode", type=Path, default=DEFAULT_OPENCODE, help="the binary")
    parser.add_argument("--json", type=Path, help="also write the results here")
    return parser.parse_args(argv)


async def main_async(args: argparse.Namespace) -> int:
    if not args.opencode.exists():
        log(f"{args.opencode} is missing: run `make test` (it installs the pinned OpenCode)")
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-opencode-") as tmp:
        workdir = Path(tmp)
        backend = start_fast_backend(workdir, "--chunks", str(args.chunks), name="model")
        backend_port = backend.port
        model = ModelRef("fast", DEFAULT_MODEL)
        server = OpenCodeServer(
            spawn=SpawnSettings(
                command=str(args.opencode),
                default_model=str(model),
                providers={
                    "fast": OpenCodeProvider(
                        base_url=f"http://127.0.0.1:{backend_port}/v1",
                        # OpenCode asks for max_tokens = this output limit, which the
                        # fast backend takes as the reply's length: --chunks pieces.
                        models={DEFAULT_MODEL: {"context": 32768, "output": args.chunks}},
                    )
                },
            )
        )
        try:
            probe = make_client()
            try:
                await wait_ready(probe, backend, "/v1/models")
            finally:
                await probe.aclose()
            await server.start()
            log(f"OpenCode listening on {server.url}")
            async with aiohttp.ClientSession() as http:
                bare = BareClient(http, server, model)
                fresh = [await bare.session() for _ in range(args.requests + args.warmup)]
                rows = [
                    await measure(
                        "bare prompt", lambda: bare.bare(fresh), args.requests, args.warmup
                    ),
                    await measure("bare + session", bare.with_session, args.requests, args.warmup),
                    await measure(
                        "seed-style (poll 300 ms)", bare.seed_style, max(2, args.requests // 4), 1
                    ),
                ]
                for pool in (2, 0):
                    rows += await run_gateway(http, server, model, pool, args, workdir)
        finally:
            await server.stop()
            backend.stop()
    baseline = rows[0]["p50"]
    print(render(rows, baseline))
    pooled = next(r for r in rows if r["name"] == "gateway, pool 2, whole")
    added = pooled["p50"] - baseline
    verdict = "met" if added <= TARGET_MS else "MISSED"
    print(f"\nadded p50 with the pool (non-streaming): {added:+.1f} ms; ", end="")
    print(f"target <= {TARGET_MS:g} ms: {verdict}")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "added_p50_ms": added}, indent=2))
    return 0 if added <= TARGET_MS else 1


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())

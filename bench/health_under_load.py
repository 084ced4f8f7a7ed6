"""The ``health_under_load`` scenario: ``/health`` latency while the largest request bodies
the default limits allow are being processed.

A large chat body once stalled ``/health`` for seconds, because parsing, validating and
decoding ran on the event loop; the gateway now bounds that work (``server.limits``)
and does it in a worker thread for large bodies. One gateway (default limits) in front
of the stub backend; ``/health`` probed every 5 ms, one probe at a time, first idle,
then while each body below is POSTed again and again for ``--seconds``:

- ``openai-long-text``: 10,000 messages of 3.2 kB each (32 MB of text);
- ``openai-max-items``: 10,000 messages of 9 text parts (just under 500k JSON items);
- ``anthropic-max-items``: the same as Anthropic blocks on ``/v1/messages``;
- ``anthropic-tools``: 512 tools with JSON Schemas plus 2,000 messages;
- ``over-tiny-messages`` (over the limits): 30 MB of 1M tiny messages, a 400 for
  ``max_json_items`` before anything is parsed.

Printed: /health p50/p99/max per phase and against idle; each body's status and time.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from fast_backend import DEFAULT_MODEL
from harness import (
    Server,
    arguments,
    entry_point,
    gateway_config,
    log,
    results_header,
    run_async,
    save_results,
    start_fast_backend,
    start_gateway,
    start_run,
    wait_ready,
    workspace,
)
from load import ms

PROBE_INTERVAL_S = 0.005


def _openai_long_text() -> dict[str, Any]:
    text = "lorem ipsum dolor sit amet " * 118  # ~3.2 kB
    roles = ("user", "assistant")
    messages = [{"role": roles[i % 2], "content": text} for i in range(10_000)]
    return {"model": DEFAULT_MODEL, "messages": messages, "max_tokens": 8}


def _parts(n: int) -> list[dict[str, str]]:
    return [{"type": "text", "text": "x"} for _ in range(n)]


def _openai_max_items() -> dict[str, Any]:
    messages = [{"role": "user", "content": _parts(8)} for _ in range(10_000)]
    return {"model": DEFAULT_MODEL, "messages": messages, "max_tokens": 8}


def _anthropic_max_items() -> dict[str, Any]:
    roles = ("user", "assistant")
    messages = [{"role": roles[i % 2], "content": _parts(8)} for i in range(10_000)]
    return {"model": DEFAULT_MODEL, "max_tokens": 8, "messages": messages}


def _anthropic_tools() -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string", "description": "a field"} for i in range(20)},
        "required": ["p0"],
    }
    tools = [
        {"name": f"tool_{i}", "description": "d" * 200, "input_schema": schema} for i in range(512)
    ]
    roles = ("user", "assistant")
    messages = [{"role": roles[i % 2], "content": "hello " * 50} for i in range(1_999)]
    return {"model": DEFAULT_MODEL, "max_tokens": 8, "tools": tools, "messages": messages}


def _over_tiny_messages() -> dict[str, Any]:
    return {"model": DEFAULT_MODEL, "messages": [{"role": "user", "content": "x"}] * 1_000_000}


BODIES: dict[str, tuple[str, Callable[[], dict[str, Any]]]] = {
    "openai-long-text": ("/v1/chat/completions", _openai_long_text),
    "openai-max-items": ("/v1/chat/completions", _openai_max_items),
    "anthropic-max-items": ("/v1/messages", _anthropic_max_items),
    "anthropic-tools": ("/v1/messages", _anthropic_tools),
    "over-tiny-messages": ("/v1/chat/completions", _over_tiny_messages),
}


async def _probe(http: aiohttp.ClientSession, url: str, stop: asyncio.Event) -> list[float]:
    samples = []
    while not stop.is_set():
        started = time.perf_counter()
        async with http.get(url) as response:
            await response.read()
            if response.status != 200:
                raise RuntimeError(f"/health answered {response.status}")
        samples.append(time.perf_counter() - started)
        await asyncio.sleep(PROBE_INTERVAL_S)
    return samples


async def _post_repeatedly(
    http: aiohttp.ClientSession, url: str, raw: bytes, seconds: float
) -> list[tuple[int, float]]:
    results: list[tuple[int, float]] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline or not results:
        started = time.perf_counter()
        async with http.post(url, data=raw, headers={"content-type": "application/json"}) as r:
            await r.read()
            results.append((r.status, time.perf_counter() - started))
    return results


async def measure(args: argparse.Namespace, backend: Server, gateway: Server) -> dict[str, Any]:
    await wait_ready(None, backend, gateway)
    timeout = aiohttp.ClientTimeout(total=300)
    # Separate sessions: the probe never waits for the body's connection.
    async with (
        aiohttp.ClientSession(timeout=timeout) as probes,
        aiohttp.ClientSession(timeout=timeout) as posts,
    ):
        results: dict[str, Any] = {}
        for name in ["idle", *args.bodies]:
            stop = asyncio.Event()
            task = asyncio.create_task(_probe(probes, gateway.url + "/health", stop))
            if name == "idle":
                await asyncio.sleep(args.seconds)
                stop.set()
                results[name] = {"health": ms(await task, 0.5, 0.99)}
                continue
            path, build = BODIES[name]
            raw = orjson.dumps(build())
            posted = await _post_repeatedly(posts, gateway.url + path, raw, args.seconds)
            stop.set()
            results[name] = {
                "bytes": len(raw),
                "statuses": sorted({status for status, _ in posted}),
                "requests": len(posted),
                "request_s_median": statistics.median(t for _, t in posted),
                "health": ms(await task, 0.5, 0.99),
            }
            log(f"{name}: {results[name]}")
        return results


def _print(results: dict[str, Any]) -> None:
    idle = results["idle"]["health"]
    print(
        f"{'phase':<22} {'body MB':>8} {'status':>7} {'req s':>6} "
        f"{'/health p50':>11} {'p99':>8} {'max':>8} {'p99/idle':>9}"
    )
    for name, row in results.items():
        health = row["health"]
        size = f"{row['bytes'] / 1e6:.1f}" if "bytes" in row else "-"
        status = ",".join(map(str, row.get("statuses", []))) or "-"
        seconds = f"{row['request_s_median']:.2f}" if "request_s_median" in row else "-"
        ratio = health["p99"] / idle["p99"]
        print(
            f"{name:<22} {size:>8} {status:>7} {seconds:>6} {health['p50']:>9.2f}ms "
            f"{health['p99']:>6.2f}ms {health['max']:>6.2f}ms {ratio:>8.1f}x"
        )


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each phase")
    parser.add_argument("--bodies", nargs="+", choices=list(BODIES), default=list(BODIES))
    args = parser.parse_args(argv)
    run = start_run("health_under_load", argv)
    with workspace("health") as (workdir, started):
        backend = started.add(start_fast_backend(workdir, "--chunks", "4"))
        gateway = started.add(start_gateway(workdir, gateway_config(backend.port)))
        results = run_async(measure(args, backend, gateway))
    _print(results)
    document = results_header(run, args) | {"results": results}
    save_results("health_under_load", document, run.started, args)
    return 0


if __name__ == "__main__":
    entry_point(main)

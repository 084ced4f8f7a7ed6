"""The ``soak`` scenario: many concurrent streams held open through the gateway for a minute.

The fast backend (``fast_backend.py --interval-ms``) paces each reply so every stream
lasts ``--seconds``; ``--streams`` of them are opened through the gateway's OpenAI
route over a few seconds (ramp-up) and read to their end. Measured, from outside the
gateway process:

- errors: any stream that failed, broke off or lost a chunk (``wire.py``; target: zero);
- memory: the gateway's RSS idle, then every two seconds, over two identical waves of
  streams: "flat" means the second wave's peak is within 2 % of the first's (what the
  first left allocated is reused, not leaked). Within a wave RSS climbs a little as the
  streams run, because each open stream keeps its reply's text for the part's end
  event (about 64 bytes a chunk); memory per stream is (peak - idle) / streams;
- leaks afterwards: requests in flight (target 0), asyncio tasks (back to the idle
  count, within a few) and open file descriptors: just after the streams end the
  upstream pool still holds idle keep-alive connections (reported), and once it has
  let them go (``--settle`` seconds) the count must be back to idle.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

import wire
from fast_backend import reply_pieces
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
from http_clients import AiohttpClient, Outcome, make_client
from load import Tally

INTERVAL_MS = 500.0


def rss_mb(server: Server) -> float:
    return server.tree.rss_kib() / 1024


def open_fds(server: Server) -> int:
    return len(list(Path(f"/proc/{server.pid}/fd").iterdir()))


async def gauge(client: AiohttpClient, server: Server, name: str) -> float:
    """The sum of the gateway's metric ``name`` over its labels."""
    _, text = await client.get(f"{server.url}/metrics")
    lines = (line for line in text.splitlines() if line.startswith(name))
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines)


async def wave(
    client: AiohttpClient, args: argparse.Namespace, gateway: Server, name: str
) -> dict[str, Any]:
    """Open ``args.streams`` streams over ``args.ramp`` seconds and read them all."""
    chunks = max(1, int(args.seconds * 1000 / INTERVAL_MS))
    url, body = gateway.url + wire.path("openai"), wire.body("openai", True, chunks)
    started = time.monotonic()

    async def launch(i: int) -> Outcome:
        await asyncio.sleep(args.ramp * i / args.streams)
        return await client.fetch(0, url, body, True)

    runs = asyncio.gather(*(launch(i) for i in range(args.streams)))
    samples: list[tuple[float, float, float]] = []
    while not runs.done():
        await asyncio.sleep(2)
        in_flight = await gauge(client, gateway, "llmbridge_in_flight_requests")
        at, rss = time.monotonic() - started, rss_mb(gateway)
        samples.append((at, rss, in_flight))
        log(f"{name} t={at:5.1f}s rss={rss:7.1f} MB in flight={in_flight:.0f}")
    tally, expected = Tally(), reply_pieces(chunks)
    tally.record(await runs, lambda raw: wire.check("openai", True, raw, expected))
    plateau = [rss for _, rss, n in samples if n >= args.streams * 0.99]
    return {
        "ok": tally.ok,
        "errors": tally.failures,
        "error_samples": tally.failure_examples,
        "elapsed_s": time.monotonic() - started,
        "peak_rss_mb": max((rss for _, rss, _ in samples), default=rss_mb(gateway)),
        "plateau_first_mb": plateau[0] if plateau else None,
        "plateau_last_mb": plateau[-1] if plateau else None,
        "chunks_per_stream": chunks,
    }


async def soak(args: argparse.Namespace, backend: Server, gateway: Server) -> dict[str, Any]:
    client = make_client(args.streams + 8, timeout_s=args.seconds * 3)
    try:
        await wait_ready(client, backend, gateway)
        short = (gateway.url + wire.path("openai"), wire.body("openai", True, 2), True)
        await asyncio.gather(*(client.fetch(0, *short) for _ in range(20)))  # warm-up
        await asyncio.sleep(2)
        idle_rss, idle_fds = rss_mb(gateway), open_fds(gateway)
        idle_tasks = await gauge(client, gateway, "llmbridge_event_loop_tasks")
        log(f"idle: {idle_rss:.1f} MB RSS, {idle_fds} fds, {idle_tasks:.0f} tasks")
        # The first wave warms the allocator up to the peak; the second, identical,
        # must not need more memory: what the first left behind is reused, not leaked.
        first = await wave(client, args, gateway, "warm-up")
        await asyncio.sleep(3)
        between_rss = rss_mb(gateway)
        second = await wave(client, args, gateway, "measured")
        await asyncio.sleep(3)  # let the gateway finish its bookkeeping
        after_rss, after_fds = rss_mb(gateway), open_fds(gateway)
        after_tasks = await gauge(client, gateway, "llmbridge_event_loop_tasks")
        after_in_flight = await gauge(client, gateway, "llmbridge_in_flight_requests")
        # The gateway's pool closes upstream connections idle for 15 s (aiohttp's
        # keep-alive default) in a sweep that runs every 15 s: within 35 s, every
        # socket the streams opened must be gone.
        await asyncio.sleep(args.settle)
        settled_fds = open_fds(gateway)
    finally:
        await client.aclose()
    peak1, peak2 = first["peak_rss_mb"], second["peak_rss_mb"]
    return {
        "streams": args.streams,
        "seconds_per_stream": args.seconds,
        "warm_up": first,
        "measured": second,
        "ok": second["ok"],
        "errors": first["errors"] + second["errors"],
        "idle_rss_mb": idle_rss,
        "between_rss_mb": between_rss,
        "peak_growth": (peak2 - peak1) / peak1,
        "kb_per_stream": (peak2 - idle_rss) * 1024 / args.streams,
        "after_rss_mb": after_rss,
        "idle_fds": idle_fds,
        "after_fds": after_fds,
        "settled_fds": settled_fds,
        "idle_tasks": idle_tasks,
        "after_tasks": after_tasks,
        "after_in_flight": after_in_flight,
    }


def verdicts(r: dict[str, Any]) -> list[tuple[str, bool, str]]:
    growth = r["peak_growth"]
    fds = f"fds {r['idle_fds']} idle -> {r['after_fds']} just after (pooled) -> "
    return [
        (
            "zero errors",
            r["errors"] == 0,
            f"{r['ok']} ok in the measured wave, {r['errors']} failed",
        ),
        ("memory flat", growth < 0.02, f"peak {growth:+.1%} from the warm-up wave to the next"),
        ("nothing in flight", r["after_in_flight"] == 0, f"{r['after_in_flight']:.0f} left"),
        (
            "no connection leak",
            r["settled_fds"] <= r["idle_fds"] + 5,
            fds + f"{r['settled_fds']} once the pool let them go",
        ),
        (
            "no task leak",
            r["after_tasks"] <= r["idle_tasks"] + 5,
            f"tasks {r['idle_tasks']:.0f} idle -> {r['after_tasks']:.0f} after",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each stream")
    parser.add_argument("--ramp", type=float, default=5.0, help="seconds to open all streams")
    parser.add_argument("--settle", type=float, default=35.0, help="s before the last fd count")
    args = parser.parse_args(argv)
    run = start_run("soak", argv)
    with workspace("soak") as (workdir, started):
        backend = started.add(start_fast_backend(workdir, "--interval-ms", str(INTERVAL_MS)))
        gateway = started.add(start_gateway(workdir, gateway_config(backend.port)))
        result = run_async(soak(args, backend, gateway))
    checks = verdicts(result)
    for name, ok, detail in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}")
    print(
        f"memory: idle {result['idle_rss_mb']:.1f} MB, peak "
        f"{result['measured']['peak_rss_mb']:.1f} MB, {result['kb_per_stream']:.1f} KB per "
        f"open stream (its reply text included); fds {result['idle_fds']} idle -> "
        f"{result['after_fds']} after (idle upstream keep-alive connections included)"
    )
    save_results("soak", results_header(run, args) | {"result": result}, run.started, args)
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    entry_point(main)

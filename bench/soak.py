"""Soak: many concurrent streams held open through the gateway for a minute.

The fast backend (``fast_backend.py --interval-ms``) paces each reply so every stream
lasts ``--seconds``; ``--streams`` of them are opened through the gateway's OpenAI
route over a few seconds (ramp-up) and read to their end. Measured, from outside the
gateway process:

- errors: any stream that failed, broke off or lost a chunk (target: zero);
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
import json
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from fast_backend import DEFAULT_MODEL
from harness import (
    Server,
    gateway_config,
    log,
    start_fast_backend,
    start_gateway,
    wait_ready,
)
from http_clients import make_client

BENCH_DIR = Path(__file__).resolve().parent
INTERVAL_MS = 500.0


@dataclass
class Tally:
    ok: int = 0
    errors: list[str] = field(default_factory=list)


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"VmRSS:\s+(\d+) kB", status)
    return int(match.group(1)) / 1024 if match else 0.0


def open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


async def gauge(http: aiohttp.ClientSession, url: str, name: str) -> float:
    async with http.get(f"{url}/metrics") as response:
        text = await response.text()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def one_stream(http: aiohttp.ClientSession, url: str, chunks: int, tally: Tally) -> None:
    body = {
        "model": DEFAULT_MODEL,
        "stream": True,
        "max_tokens": chunks,
        "messages": [{"role": "user", "content": "soak"}],
    }
    received = 0
    try:
        async with http.post(f"{url}/v1/chat/completions", json=body) as response:
            if response.status != 200:
                tally.errors.append(f"HTTP {response.status}")
                return
            done = False
            async for line in response.content:
                if line.startswith(b"data: [DONE]"):
                    done = True
                elif line.startswith(b"data: "):
                    event = json.loads(line[6:])
                    if "error" in event:
                        tally.errors.append(str(event["error"])[:200])
                        return
                    if event["choices"] and event["choices"][0]["delta"].get("content"):
                        received += 1
            if not done or received != chunks:
                tally.errors.append(f"incomplete: {received}/{chunks} chunks, done={done}")
                return
    except (aiohttp.ClientError, TimeoutError) as exc:
        tally.errors.append(f"{type(exc).__name__}: {exc}")
        return
    tally.ok += 1


async def wave(
    http: aiohttp.ClientSession, url: str, args: argparse.Namespace, gateway: Server, name: str
) -> dict[str, object]:
    """Open ``args.streams`` streams over ``args.ramp`` seconds and read them all."""
    chunks = max(1, int(args.seconds * 1000 / INTERVAL_MS))
    tally = Tally()
    started = time.monotonic()

    async def launch(i: int) -> None:
        await asyncio.sleep(args.ramp * i / args.streams)
        await one_stream(http, url, chunks, tally)

    runs = asyncio.gather(*(launch(i) for i in range(args.streams)))
    samples: list[tuple[float, float, float]] = []
    while not runs.done():
        await asyncio.sleep(2)
        in_flight = await gauge(http, url, "llmbridge_in_flight_requests")
        samples.append((time.monotonic() - started, rss_mb(gateway.pid), in_flight))
        at, rss = samples[-1][0], samples[-1][1]
        log(f"{name} t={at:5.1f}s rss={rss:7.1f} MB in flight={in_flight:.0f}")
    await runs
    plateau = [rss for _, rss, n in samples if n >= args.streams * 0.99]
    return {
        "ok": tally.ok,
        "errors": len(tally.errors),
        "error_samples": tally.errors[:5],
        "elapsed_s": time.monotonic() - started,
        "peak_rss_mb": max((rss for _, rss, _ in samples), default=rss_mb(gateway.pid)),
        "plateau_first_mb": plateau[0] if plateau else None,
        "plateau_last_mb": plateau[-1] if plateau else None,
        "chunks_per_stream": chunks,
    }


async def soak(args: argparse.Namespace, gateway: Server) -> dict[str, object]:
    url = f"http://127.0.0.1:{gateway.port}"
    # Idle pooled connections are dropped after 2 s, before uvicorn's 5 s keep-alive
    # timeout can close one under a new request (a client-side race, not a fault).
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=2)
    timeout = aiohttp.ClientTimeout(total=args.seconds * 3, sock_read=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        warm = Tally()
        await asyncio.gather(*(one_stream(http, url, 2, warm) for _ in range(20)))
        await asyncio.sleep(2)
        idle_rss, idle_fds = rss_mb(gateway.pid), open_fds(gateway.pid)
        idle_tasks = await gauge(http, url, "llmbridge_event_loop_tasks")
        log(f"idle: {idle_rss:.1f} MB RSS, {idle_fds} fds, {idle_tasks:.0f} tasks")
        # The first wave warms the allocator up to the peak; the second, identical,
        # must not need more memory: what the first left behind is reused, not leaked.
        first = await wave(http, url, args, gateway, "warm-up")
        await asyncio.sleep(3)
        between_rss = rss_mb(gateway.pid)
        second = await wave(http, url, args, gateway, "measured")
        await asyncio.sleep(3)  # let the gateway finish its bookkeeping
        after_rss, after_fds = rss_mb(gateway.pid), open_fds(gateway.pid)
        after_tasks = await gauge(http, url, "llmbridge_event_loop_tasks")
        after_in_flight = await gauge(http, url, "llmbridge_in_flight_requests")
        # The gateway's pool closes upstream connections idle for 15 s (aiohttp's
        # keep-alive default) in a sweep that runs every 15 s: within 35 s, every
        # socket the streams opened must be gone.
        await asyncio.sleep(args.settle)
        settled_fds = open_fds(gateway.pid)
    peak1, peak2 = float(first["peak_rss_mb"]), float(second["peak_rss_mb"])  # type: ignore[arg-type]
    return {
        "streams": args.streams,
        "seconds_per_stream": args.seconds,
        "warm_up": first,
        "measured": second,
        "ok": second["ok"],
        "errors": int(first["errors"]) + int(second["errors"]),  # type: ignore[call-overload]
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


def verdicts(r: dict[str, object]) -> list[tuple[str, bool, str]]:
    growth = float(r["peak_growth"])  # type: ignore[arg-type]
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
            int(r["settled_fds"]) <= int(r["idle_fds"]) + 5,  # type: ignore[call-overload]
            f"fds {r['idle_fds']} idle -> {r['after_fds']} just after (pooled) -> "
            f"{r['settled_fds']} once the pool let them go",
        ),
        (
            "no task leak",
            float(r["after_tasks"]) <= float(r["idle_tasks"]) + 5,  # type: ignore[arg-type]
            f"tasks {r['idle_tasks']:.0f} idle -> {r['after_tasks']:.0f} after",
        ),
    ]


async def main_async(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        workdir = Path(tmp)
        backend = start_fast_backend(workdir, "--interval-ms", str(INTERVAL_MS))
        gateway = start_gateway(workdir, gateway_config("openai", backend.port))
        try:
            probe = make_client()
            try:
                await wait_ready(probe, backend, "/v1/models")
                await wait_ready(probe, gateway, "/health")
            finally:
                await probe.aclose()
            result = await soak(args, gateway)
        finally:
            gateway.stop()
            backend.stop()
    print(json.dumps(result, indent=2))
    checks = verdicts(result)
    for name, ok, detail in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}")
    measured = result["measured"]
    assert isinstance(measured, dict)
    print(
        f"memory: idle {result['idle_rss_mb']:.1f} MB, peak {measured['peak_rss_mb']:.1f} MB, "
        f"{result['kb_per_stream']:.1f} KB per open stream (its reply text included); fds "
        f"{result['idle_fds']} idle -> {result['after_fds']} after (idle upstream keep-alive "
        "connections included)"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if all(ok for _, ok, _ in checks) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each stream")
    parser.add_argument("--ramp", type=float, default=5.0, help="seconds to open all streams")
    parser.add_argument(
        "--settle", type=float, default=35.0, help="seconds to wait before the final fd count"
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    return asyncio.run(main_async(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())

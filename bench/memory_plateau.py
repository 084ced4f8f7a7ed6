"""The ``memory_plateau`` scenario: the gateway's resident memory over minutes of steady
mixed load must stop growing.

``llmbridge serve`` in front of ``fast_backend.py`` with two backends on it (types
``openai`` and ``ollama``, native tools), driven open loop (``open_loop.py``, Poisson
arrivals) at ``--rate`` requests a second for ``--warmup-seconds`` and then
``--minutes``, cycling through 24 kinds of request: the OpenAI, Anthropic and Ollama
dialects, streamed or not, with tools or not, to each backend; every reply checked
(``wire.py``). Every ``--sample-seconds`` it reads the
gateway's RSS over its process tree. Reported: the RSS at the start and end of the
measured window, its least-squares slope over the window's second half, and the
verdict: ``plateau`` when that slope is at most ``--tolerance-kb-per-min`` (100 KB/min:
at 100 requests/s a leak of one small object per request fails it), else ``growing``;
the run is INVALID unless no request failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

import wire
from fast_backend import DEFAULT_MODEL, reply_pieces
from harness import (
    CPUS,
    ProcessTree,
    Server,
    arguments,
    entry_point,
    gateway_config,
    log,
    quick_defaults,
    results_header,
    run_async,
    save_results,
    start_fast_backend,
    start_gateway,
    start_run,
    wait_ready,
    workspace,
)
from http_clients import make_client
from load import figure, ms, table
from open_loop import OpenLoop, Request, Shot, StepRun, schedule

OLLAMA_MODEL = "bench-ollama"
"""The route to the fast backend reached as an Ollama server (``gateway_config``'s)."""
DIALECTS = ("openai", "anthropic", "ollama")


@dataclass(frozen=True)
class Variant:
    """One of the 24 kinds of request: dialect, streamed or not, tools or not, model."""

    dialect: str
    stream: bool
    tools: bool
    model: str
    pieces: int

    @property
    def label(self) -> str:
        return (
            f"{self.dialect} {'stream' if self.stream else 'whole'} "
            f"{'tools' if self.tools else 'plain'} {self.model}"
        )

    def request(self, base: str) -> Request:
        tools, model = self.tools, self.model
        body = wire.body(
            self.dialect, self.stream, self.pieces, tools=tools, answered=tools, model=model
        )
        return Request(base + wire.path(self.dialect), body, self.stream, self.label)

    def check(self, raw: bytes) -> None:
        wire.check(self.dialect, self.stream, raw, reply_pieces(self.pieces))


def variants(pieces: int) -> list[Variant]:
    return [
        Variant(dialect, stream, tools, model, pieces)
        for dialect in DIALECTS
        for stream in (False, True)
        for tools in (False, True)
        for model in (DEFAULT_MODEL, OLLAMA_MODEL)
    ]


# -- the run ----------------------------------------------------------------------------------


def slope_per_minute(samples: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, KiB) samples, in KiB per minute."""
    if len(samples) < 2:
        return None
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_v = sum(v for _, v in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    if var == 0:
        return None
    cov = sum((t - mean_t) * (v - mean_v) for t, v in samples)
    return cov / var * 60


async def sample_rss(
    tree: ProcessTree, every: float, started: float, out: list[tuple[float, float]]
) -> None:
    """(seconds since ``started``, KiB) every ``every`` seconds until cancelled."""
    while True:
        kib = await asyncio.to_thread(tree.rss_kib)
        out.append((time.perf_counter() - started, float(kib)))
        await asyncio.sleep(every)


async def measure(args: argparse.Namespace, backend: Server, gateway: Server) -> dict[str, Any]:
    client = make_client(args.cap, timeout_s=120.0)
    try:
        await wait_ready(client, backend, gateway)
        kinds = variants(args.chunks)
        requests = [v.request(gateway.url) for v in kinds]
        by_label = {v.label: v for v in kinds}
        tally: dict[str, list[int]] = {v.label: [0, 0] for v in kinds}

        def check(shot: Shot) -> None:
            by_label[shot.request.label].check(shot.raw)

        seconds = args.warmup_seconds + args.minutes * 60
        offsets = schedule(args.rate, seconds, "poisson")
        tree = gateway.tree
        samples: list[tuple[float, float]] = []
        started = time.perf_counter()
        sampler = asyncio.create_task(sample_rss(tree, args.sample_seconds, started, samples))
        progress = asyncio.create_task(_progress(samples, args))
        log(
            f"{len(offsets)} requests over {seconds:.0f} s ({args.rate:g}/s, the first "
            f"{args.warmup_seconds:g} s a warm-up), {len(kinds)} kinds in turn"
        )
        try:
            run = await OpenLoop(client, args.cap).run(
                offsets,
                lambda i: requests[i % len(requests)],
                rate=args.rate,
                seconds=seconds,
                check=check,
                check_inline=True,
            )
        finally:
            for task in (sampler, progress):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for shot in run.shots:
            tally[shot.request.label][0 if shot.error is None else 1] += 1
        return summarise_run(args, run, samples, tally)
    finally:
        await client.aclose()


async def _progress(samples: list[tuple[float, float]], args: argparse.Namespace) -> None:
    while True:
        await asyncio.sleep(30 if not args.quick else 10)
        if samples:
            at, kib = samples[-1]
            phase = "warm-up" if at < args.warmup_seconds else "measuring"
            log(f"t={at:6.0f} s  rss {kib / 1024:7.1f} MiB  ({phase})")


def summarise_run(
    args: argparse.Namespace,
    run: StepRun,
    samples: list[tuple[float, float]],
    tally: dict[str, list[int]],
) -> dict[str, Any]:
    window = [(t, v) for t, v in samples if t >= args.warmup_seconds]
    half = [(t, v) for t, v in window if t >= args.warmup_seconds + args.minutes * 30]
    slope = slope_per_minute(half)
    whole = slope_per_minute(window)
    per_request = None
    if slope is not None:
        per_request = slope * 1024 / 60 / args.rate
    verdict = "INVALID (failures)" if run.failures else "no samples"
    if not run.failures and slope is not None:
        verdict = "plateau" if slope <= args.tolerance_kb_per_min else "growing"
    return {
        "requests": len(run.shots),
        "failures": len(run.failures),
        "failure_examples": sorted(set(run.failures))[:5],
        "by_kind": {k: {"ok": v[0], "failed": v[1]} for k, v in tally.items()},
        "achieved_rps": len(run.ok) / max(run.seconds, 1e-9),
        "scheduled_rps": len(run.shots) / max(run.seconds, 1e-9),
        "latency_ms": ms([shot.latency for shot in run.ok], 0.5, 0.99),
        "generator_lag_ms": ms([max(0.0, s.lag) for s in run.shots if s.sent], 0.5, 0.99),
        "generator_cpu_share": run.generator_cpu_s / max(run.finished - run.started, 1e-9),
        "rss_mib": {
            "before_load": samples[0][1] / 1024 if samples else None,
            "start": window[0][1] / 1024 if window else None,
            "end": window[-1][1] / 1024 if window else None,
            "min": min(v for _, v in window) / 1024 if window else None,
            "max": max(v for _, v in window) / 1024 if window else None,
        },
        "slope_second_half_kb_per_min": slope,
        "slope_second_half_mb_per_hour": None if slope is None else slope * 60 / 1024,
        "slope_window_kb_per_min": whole,
        "bytes_per_request": per_request,
        "tolerance_kb_per_min": args.tolerance_kb_per_min,
        "verdict": verdict,
        "samples": [[round(t, 2), v] for t, v in samples],
    }


def report(r: dict[str, Any], args: argparse.Namespace) -> str:
    rss = r["rss_mib"]
    rows = [
        ("requests / failures", f"{r['requests']:,} / {r['failures']}"),
        (
            "achieved rate",
            f"{r['achieved_rps']:.1f}/s of {r['scheduled_rps']:.1f}/s scheduled "
            f"(Poisson arrivals at {args.rate:g}/s)",
        ),
        ("RSS before load", f"{figure(rss['before_load'], '.2f')} MiB"),
        (
            "RSS at start / end of the window",
            f"{figure(rss['start'], '.2f')} / {figure(rss['end'], '.2f')} MiB",
        ),
        (
            "RSS min / max in the window",
            f"{figure(rss['min'], '.2f')} / {figure(rss['max'], '.2f')} MiB",
        ),
        (
            "slope, second half",
            f"{figure(r['slope_second_half_kb_per_min'], '+.1f')} KB/min "
            f"({figure(r['slope_second_half_mb_per_hour'], '+.2f')} MB/hour, "
            f"{figure(r['bytes_per_request'], '+.1f')} bytes/request)",
        ),
        ("slope, whole window", f"{figure(r['slope_window_kb_per_min'], '+.1f')} KB/min"),
        ("verdict", f"{r['verdict']} (tolerance {args.tolerance_kb_per_min:g} KB/min)"),
        (
            "latency p50 / p99 (info)",
            f"{figure(r['latency_ms']['p50'], '.2f')} / {figure(r['latency_ms']['p99'], '.2f')} ms",
        ),
        (
            "generator lag p99 / CPU",
            f"{figure(r['generator_lag_ms']['p99'], '.2f')} ms / {r['generator_cpu_share']:.0%}",
        ),
    ]
    lines = [table([("check", "result"), *rows])]
    if args.minutes < 5:
        lines += [
            "",
            f"NOTE: a {args.minutes:g}-minute window is a smoke test; a few pages of RSS "
            "make its slope, so its verdict means little (default: 10 minutes).",
        ]
    if r["failures"]:
        lines += ["", "failures, e.g.:", *(f"  {e}" for e in r["failure_examples"])]
    return "\n".join(lines)


# -- main -------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = arguments(__doc__, quick="a smoke run of about a minute")
    add = parser.add_argument
    add("--minutes", type=float, help="measured (10; 0.75 quick)")
    add("--warmup-seconds", type=float, help="(60; 10 quick)")
    add("--rate", type=float, default=100.0, help="requests/s (default 100)")
    add("--sample-seconds", type=float, help="(5; 2 quick)")
    add("--chunks", type=int, default=16, help="pieces per reply (16)")
    add("--workers", type=int, default=1, help="the gateway's --workers")
    add("--tolerance-kb-per-min", type=float, default=100.0, help="the most for a plateau")
    add("--cap", type=int, default=1000, help="most requests in flight")
    args = quick_defaults(
        parser.parse_args(argv),
        minutes=(10.0, 0.75),
        warmup_seconds=(60.0, 10.0),
        sample_seconds=(5.0, 2.0),
    )
    if args.minutes <= 0 or args.rate <= 0 or args.sample_seconds <= 0 or args.workers < 1:
        parser.error("--minutes, --rate, --sample-seconds and --workers must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = start_run("memory_plateau", argv)
    cap = args.warmup_seconds + args.minutes * 60 + 300
    with workspace("memory") as (workdir, started):
        backend = started.add(start_fast_backend(workdir, "--chunks", str(args.chunks)))
        config = gateway_config(backend.port, more={"ollama": ("ollama", backend.port)}, tools=True)
        workers = ("--workers", str(args.workers))
        gateway = started.add(start_gateway(workdir, config, extra_args=workers))
        log(f"backend :{backend.port}, gateway :{gateway.port} (--workers {args.workers})")
        result = run_async(measure(args, backend, gateway), cap)
    print(
        f"\nllmbridge memory plateau: {args.minutes:g} min of mixed load at {args.rate:g}/s "
        f"after a {args.warmup_seconds:g} s warm-up (OpenAI, Anthropic, Ollama; whole and "
        f"streamed; with and without tools; openai and ollama backends), gateway --workers "
        f"{args.workers}, RSS summed over its process tree; {CPUS} CPUs\n"
    )
    print(report(result, args))
    save_results(
        "memory_plateau", results_header(run, args) | {"result": result}, run.started, args
    )
    return 0 if result["verdict"] == "plateau" else 1


if __name__ == "__main__":
    entry_point(main)

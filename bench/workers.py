"""The ``workers`` scenario: how ``llmbridge serve --workers N`` scales with cores, on the
pass-through path (an OpenAI client, an ``openai`` backend), for N = 1, 2, 4, 8, 16.

The machine's CPUs are split three ways, so that what is measured is the gateway's:
the gateway's (the largest power of two up to half of them, 8 of 16), the stub
backend's (``fast_backend.py --processes K``, one process a CPU) and the load
generator's (``load_pool.py``, one process a CPU). ``w{N}`` runs on the first
``min(N, gateway CPUs)`` of the gateway's; every gateway is started at once and idles
while another is measured. ``direct`` is the backend called from the same load
generator: the harness's own ceiling. On a machine of fewer than 6 CPUs nothing can be
kept apart and nothing is pinned; the report says so.

Closed-loop rounds (``load.Runner.rounds``: the order rotated and reversed every round;
a warm-up per cell), every reply checked, two cells at the same number in flight for
every target (32 a worker of the largest N by default): non-streamed replies and
streamed ones. Per target: requests/s, its ratio to ``w1``, the efficiency per CPU given
(``requests/s / (w1's * CPUs)``), latency, and the cores each part kept busy, the
busiest gateway process's among them (how evenly uvicorn's shared socket spreads the
connections). A cell whose backend or load generator was near its CPUs' limit is
marked harness-bound: there the curve shows the harness, not the gateway. The curve
bends at the first N whose efficiency falls below ``EFFICIENT``. docs/PERFORMANCE.md
("Many cores") has the method and the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from harness import (
    CPUS,
    Server,
    Started,
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
    system_busy_seconds,
    wait_ready,
    workspace,
)
from http_clients import make_client
from load import Cell, Runner, Tally, Target, figure, table
from load_pool import LoadPool

WORKER_COUNTS = (1, 2, 4, 8, 16)
EFFICIENT = 0.8
"""Requests/s a CPU at least this share of one worker's on one CPU: still scaling."""
SATURATED = 0.9
"""A part of the harness using this share of its CPUs limits what the cell can show."""
PIN_MIN_CPUS = 6


@dataclass(frozen=True)
class Layout:
    """Which CPUs each part runs on; ``pinned`` False: all share every CPU."""

    gateway: list[int]
    backend: list[int]
    load: list[int]
    pinned: bool

    def gateway_cpus(self, workers: int) -> list[int] | None:
        return self.gateway[: min(workers, len(self.gateway))] if self.pinned else None

    def cpus_given(self, workers: int) -> int:
        """At most one CPU a worker (each is one thread of Python), pinned or not."""
        return min(workers, len(self.gateway))

    def describe(self) -> dict[str, Any]:
        return asdict(self)


def cpu_layout(cpus: list[int], gateway: int | None, backend: int | None) -> Layout:
    """The gateway's CPUs first (``gateway``, or the largest power of two up to half),
    then the backend's (``backend``, or three eighths of the rest), then the load
    generator's (the rest)."""
    if len(cpus) < PIN_MIN_CPUS and gateway is None:
        return Layout(cpus, cpus, cpus, pinned=False)
    if gateway is None:
        gateway = 1 << (max(1, len(cpus) // 2).bit_length() - 1)
    if backend is None:
        backend = max(1, (len(cpus) - gateway) * 3 // 8)
    if gateway < 1 or backend < 1 or gateway + backend >= len(cpus):
        raise RuntimeError(
            f"--gateway-cpus {gateway} and --backend-cpus {backend} leave none of the "
            f"{len(cpus)} CPUs for the load generator"
        )
    return Layout(
        cpus[:gateway], cpus[gateway : gateway + backend], cpus[gateway + backend :], True
    )


def topology(cpus: list[int]) -> dict[str, Any]:
    """What the report needs to read the curve: the processor, and which CPUs are
    hardware threads of one core (two of those are not two cores)."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    siblings = {}
    for cpu in cpus:
        path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        try:
            siblings[cpu] = path.read_text().strip()
        except OSError:
            siblings[cpu] = "?"
    shared = sorted({s for s in siblings.values() if "," in s or "-" in s})
    return {"model": model, "thread_siblings": siblings, "cores_with_two_threads": shared}


class PooledRunner(Runner):
    """``load.Runner`` with its load sent from a ``LoadPool``'s processes."""

    def __init__(self, pool: LoadPool, backend: Server) -> None:
        self.pool, self.backend = pool, backend.tree

    async def batch(
        self,
        target: Target,
        cell: Cell,
        tally: Tally,
        *,
        count: int = 0,
        seconds: float | None = None,
    ) -> None:
        """As many requests as ``seconds`` take (this runner sends no fixed count)."""
        if seconds is None:
            raise ValueError("a pooled batch runs for a number of seconds")
        trees = {"backend": self.backend, **({"proxy": target.proxy} if target.proxy else {})}
        for tree in trees.values():
            tree.reset_peak()
        before = {name: tree.cpu_seconds() for name, tree in trees.items()}
        per_process = target.proxy.cpu_by_process() if target.proxy else {}
        busy = system_busy_seconds()
        shares = await self.pool.batch(
            target.base, target.dialect, cell.stream, cell.pieces, cell.concurrency, seconds
        )
        used = {name: tree.cpu_seconds() - before[name] for name, tree in trees.items()}
        used["client"] = sum(share.cpu for share in shares)
        used["other"] = max(0.0, system_busy_seconds() - busy - sum(used.values()))
        if target.proxy is not None:
            after = target.proxy.cpu_by_process()
            deltas = [after[pid] - per_process.get(pid, 0.0) for pid in after]
            used["proxy_busiest"] = max(deltas, default=0.0)
        tally.add_cost(max(share.wall for share in shares), used, trees)
        for share in shares:
            tally.ok += share.ok
            tally.chunks += share.chunks
            for example in share.examples:
                tally.fail(example)
            tally.failures += share.failures - len(share.examples)
            tally.first_bytes += share.first_bytes
        tally.add_latencies([latency for share in shares for latency in share.latencies])


async def wait_for_workers(server: Server, workers: int, patience_s: float = 180.0) -> None:
    """Until ``server``'s /health lists ``workers`` workers (a supervisor starts them one
    after another; a worker still starting would take no connections)."""
    if workers < 2:
        return
    client = make_client(4)
    deadline = time.monotonic() + patience_s
    try:
        while True:
            _, text = await client.get(server.url + "/health")
            listed = len(orjson.loads(text).get("workers") or [])
            if listed >= workers:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{server.name}: {listed} of {workers} workers up")
            await asyncio.sleep(0.2)
    finally:
        await client.aclose()


async def measure(
    args: argparse.Namespace, layout: Layout, backend: Server, gateways: dict[int, Server]
) -> list[dict[str, Any]]:
    client = make_client(8)
    try:
        await wait_ready(client, backend, *gateways.values())
    finally:
        await client.aclose()
    for workers, server in gateways.items():
        await wait_for_workers(server, workers)
    loads = [[cpu] for cpu in layout.load] if layout.pinned else [None] * args.load_processes
    connections = args.in_flight // len(loads) + 1
    pool = await LoadPool.start(loads, connections * (len(gateways) + 1))
    try:
        targets = [Target("direct", backend.url)]
        targets += [Target(f"w{n}", s.url, proxy=s.tree) for n, s in gateways.items()]
        runner = PooledRunner(pool, backend)
        cells = []
        for stream, pieces in ((False, args.nonstream_chunks), (True, args.stream_chunks)):
            cell = Cell(stream, args.in_flight, pieces)
            seconds, warmup = args.round_seconds, args.warmup_seconds
            cells.append(
                await runner.cell(
                    targets, cell, args.rounds, seconds=seconds, warmup_seconds=warmup
                )
            )
        return cells
    finally:
        await pool.aclose()


def curve(cell: dict[str, Any], layout: Layout, counts: list[int]) -> dict[str, Any]:
    """Each N's requests/s over ``w1``'s, its efficiency per CPU given, whether the
    harness limited it, and the N at which the curve bends."""
    runs = cell["targets"]
    one = runs.get("w1", {}).get("requests_per_s")
    points, bend = [], None
    for n in counts:
        run = runs.get(f"w{n}")
        if not run or not run["requests_ok"]:
            continue
        rps, cpus = run["requests_per_s"], layout.cpus_given(n)
        speedup = rps / one if one else None
        efficiency = speedup / cpus if speedup else None
        busy = run["cores_busy"]
        harness = (
            busy.get("backend", 0.0) >= SATURATED * len(layout.backend)
            or busy.get("client", 0.0) >= SATURATED * len(layout.load)
        ) and layout.pinned
        if bend is None and efficiency is not None and efficiency < EFFICIENT and n > 1:
            bend = n
        points.append(
            {
                "workers": n,
                "cpus": cpus,
                "requests_per_s": rps,
                "speedup": speedup,
                "efficiency_per_cpu": efficiency,
                "harness_bound": harness,
            }
        )
    direct = runs.get("direct", {}).get("requests_per_s")
    return {"points": points, "bends_at": bend, "direct_requests_per_s": direct}


def cell_table(cell: dict[str, Any], found: dict[str, Any]) -> str:
    rows = [["target", "CPUs", "req/s", "x w1", "per CPU", "p50 ms", "p99 ms"]]
    rows[0] += ["gateway busy", "busiest process", "backend busy", "load busy", "other"]
    rows[0] += ["ok / failed"]
    points = {f"w{p['workers']}": p for p in found["points"]}
    for name, s in cell["targets"].items():
        point = points.get(name, {})
        busy = s["cores_busy"]
        mark = " (harness-bound)" if point.get("harness_bound") else ""
        rows.append(
            [
                name,
                str(point.get("cpus", "-")),
                figure(s["requests_per_s"], ",.0f") + mark,
                figure(point.get("speedup"), ".2f"),
                figure(point.get("efficiency_per_cpu"), ".2f"),
                figure(s["latency_ms"]["p50"], ".2f"),
                figure(s["latency_ms"]["p99"], ".2f"),
                figure(busy.get("proxy"), ".2f"),
                figure(busy.get("proxy_busiest"), ".2f"),
                figure(busy.get("backend"), ".2f"),
                figure(busy.get("client"), ".2f"),
                f"{s['other_load']:.0%}",
                f"{s['requests_ok']} / {s['failures']}",
            ]
        )
    return table(rows)


def report(cells: list[dict[str, Any]], curves: list[dict[str, Any]], pinned: bool) -> str:
    out = []
    for cell, found in zip(cells, curves, strict=True):
        bend = found["bends_at"]
        where = f"bends at --workers {bend}" if bend else "does not bend in the counts measured"
        if not pinned:
            where += " (nothing pinned: this shows the parts sharing CPUs, not scaling)"
        out += [f"{cell['key']}: {cell['title']}; the curve {where}", ""]
        out += [cell_table(cell, found), ""]
        for name, s in cell["targets"].items():
            out += [f"  failure {name}: {e}" for e in s["failure_examples"]]
    return "\n".join(out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = arguments(__doc__, quick="short rounds, --workers 1 and 2 (under a minute)")
    add = parser.add_argument
    add("--workers", type=int, nargs="+", help="the counts (default 1 2 4 8 16; quick 1 2)")
    add("--in-flight", type=int, help="requests in flight in every cell (32 x the largest N)")
    add("--rounds", type=int, help="per target and cell (3; 2)")
    add("--round-seconds", type=float, help="(3; 1)")
    add("--warmup-seconds", type=float, help="(1; 0.5)")
    add("--nonstream-chunks", type=int, default=16, help="pieces per reply (default 16)")
    add("--stream-chunks", type=int, default=20, help="chunks per stream (default 20)")
    add("--gateway-cpus", type=int, help="CPUs for the gateway (a power of two up to half)")
    add("--backend-cpus", type=int, help="CPUs for the stub backend (3/8 of the rest)")
    add("--load-processes", type=int, default=2, help="load processes when not pinned (2)")
    add("--max-seconds", type=float, help="hard cap (900; 240)")
    args = quick_defaults(
        parser.parse_args(argv),
        workers=(list(WORKER_COUNTS), [1, 2]),
        rounds=(3, 2),
        round_seconds=(3.0, 1.0),
        warmup_seconds=(1.0, 0.5),
        max_seconds=(900.0, 240.0),
    )
    if args.in_flight is None:
        args.in_flight = 32 * max(args.workers)
    args.workers = sorted(set(args.workers))
    positive = (args.rounds, args.round_seconds, args.in_flight, args.load_processes)
    if min(args.workers) < 1 or min(positive) <= 0:
        parser.error("--workers, --rounds, --round-seconds and --in-flight must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = start_run("workers", argv)
    cpus = sorted(os.sched_getaffinity(0))
    layout = cpu_layout(cpus, args.gateway_cpus, args.backend_cpus)
    if not layout.pinned:
        log(f"{len(cpus)} CPUs: too few to keep the parts apart; nothing is pinned")
    else:
        log(f"CPUs: gateway {layout.gateway}, backend {layout.backend}, load {layout.load}")
    busy_before = system_busy_seconds()
    with workspace("workers") as (workdir, started):
        processes = len(layout.backend) if layout.pinned else 1
        options = ("--chunks", str(args.nonstream_chunks), "--processes", str(processes))
        cpus_backend = layout.backend if layout.pinned else None
        backend = started.add(start_fast_backend(workdir, *options, cpus=cpus_backend))
        gateways = start_gateways(workdir, started, backend.port, layout, args.workers)
        cells = run_async(measure(args, layout, backend, gateways), args.max_seconds)
    curves = [curve(cell, layout, args.workers) for cell in cells]
    document = results_header(run, args) | {
        "layout": layout.describe(),
        "topology": topology(cpus),
        "cells": cells,
        "curves": curves,
    }
    document["machine"]["busy_cpu_s"] = system_busy_seconds() - busy_before
    shared = document["topology"]["cores_with_two_threads"]
    print(
        f"\nllmbridge --workers {' '.join(map(str, args.workers))} on the pass-through path; "
        f"{CPUS} CPUs ({document['topology']['model'] or 'processor unknown'}"
        f"{'; hardware threads share cores: ' + ', '.join(shared) if shared else ''}); "
        f"gateway CPUs {layout.gateway}, backend {layout.backend}, load {layout.load}"
        f"{'' if layout.pinned else ' (not pinned: all share every CPU)'}; "
        f"{args.in_flight} in flight; load average at start {run.load_at_start}\n"
    )
    print(report(cells, curves, layout.pinned))
    save_results("workers", document, run.started, args)
    return 1 if any(s["failures"] for c in cells for s in c["targets"].values()) else 0


def start_gateways(
    workdir: Path, started: Started, port: int, layout: Layout, counts: list[int]
) -> dict[int, Server]:
    """``w{N}`` for each count, on its share of the gateway's CPUs."""
    out = {}
    for n in counts:
        name, extra = f"w{n}", ("--workers", str(n))
        server = start_gateway(
            workdir, gateway_config(port), name=name, extra_args=extra, cpus=layout.gateway_cpus(n)
        )
        out[n] = started.add(server)
    return out


if __name__ == "__main__":
    entry_point(main)

"""The ``overhead`` scenario: what the gateway costs, llmbridge in front of the stub backend
against that backend called directly, by the same load generator in the same run.

It starts ``fast_backend.py`` and ``llmbridge serve`` pointed at it (``--dialect``:
``openai``, ``ollama``, ``responses``, ``anthropic`` or ``gemini`` for both targets;
``--gateway-backend`` picks the gateway's backend type, by default the dialect's own, so
a run measures that dialect's relay), and runs four cells, each against DIRECT and GATEWAY in
alternating rounds (D G G D ...: drift cancels) after a warm-up (``load.py``):

- ``nonstream-c1``: one request at a time, a short reply: added p50 latency (ms);
- ``stream-c1``: one stream at a time, ``--chunks`` pieces: added p50 per chunk (µs);
- ``nonstream-c64`` and ``stream-c64``: 64 in flight: requests or chunks/s, gateway/direct.

Beside the timings it records the CPU time of the backend, the gateway and the load
generator per request or chunk, and how busy the rest of the machine was. Every reply
is checked after its timing (``wire.py``); a failure makes the cell INVALID and the exit
status 1. ``--baseline-src DIR`` adds a third target, a gateway serving DIR, in rotated
rounds (D G B, B G D, G B D, ...), and the report compares this tree with it.
``--py-spy FILE`` or ``--profile-gateway FILE`` profile the gateway meanwhile (py-spy's
collapsed stacks, cProfile's stats); ``--gateway-launcher`` serves something else in its
place (``floor_proxy.py``, or a patched llmbridge).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness import (
    Baseline,
    Server,
    arguments,
    entry_point,
    gateway_config,
    log,
    prepare_baseline,
    py_spy,
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
from load import Cell, Runner, Target, figure, summarise, table

CELL_KEYS = ("nonstream-c1", "stream-c1", "nonstream-c64", "stream-c64")
DIALECTS = ("openai", "ollama", "responses", "anthropic", "gemini")
BACKEND_TYPES = ("openai", "ollama", "openai_responses", "anthropic", "gemini")
_VERDICT = ("metric", "direct", "gateway", "added", "target", "result", "value")


def plan(args: argparse.Namespace) -> list[tuple[Cell, int, int]]:
    """Each cell, with its requests per target and its rounds."""
    n, whole, chunks = args.requests, args.nonstream_chunks, args.chunks
    c64_rounds = max(2, min(6, n // 256))
    cells = [
        (Cell(False, 1, whole), n, 10),
        (Cell(True, 1, chunks), max(10, n // 8), 10),
        (Cell(False, 64, whole), 2 * n, c64_rounds),
        (Cell(True, 64, chunks), max(n // 4, 128 * c64_rounds), c64_rounds),
    ]
    return [c for c in cells if not args.only or c[0].key in args.only]


def judge(cell: Cell, rounds: int, d: dict[str, Any], g: dict[str, Any]) -> dict[str, Any]:
    """The cell's headline figure, gateway ``g`` against direct ``d``, and whether it
    meets its target (<= 1 ms added p50, <= 25 µs a chunk, >= half direct's chunks/s)."""
    met: bool | None
    if cell.concurrency == 1:
        direct, gateway = (
            " / ".join(figure(x["latency_ms"][p], ".3f") for p in ("p50", "p90", "p99"))
            for x in (d, g)
        )
        d50, g50 = d["latency_ms"]["p50"], g["latency_ms"]["p50"]
        value = g50 - d50 if d50 is not None and g50 is not None else float("nan")
        metric, added, target, met = (
            "latency p50/p90/p99 ms",
            f"{value:+.3f} ms p50",
            "<= 1 ms",
            value <= 1.0,
        )
        if cell.stream:
            value = value * 1000 / cell.pieces
            metric = f"whole stream p50/p90/p99 ms ({cell.pieces} chunks)"
            added, target, met = f"{value:+.1f} us/chunk", "<= 25 us/chunk", value <= 25.0
    else:
        key = "chunks_per_s" if cell.stream else "requests_per_s"
        value = (g[key] or 0.0) / d[key] if d[key] else None
        metric, direct, gateway = (
            key.split("_")[0] + "/s",
            figure(d[key], ",.0f"),
            figure(g[key], ",.0f"),
        )
        added, target = f"x{figure(value, '.3f')}", ">= 0.50x" if cell.stream else "-"
        met = None if not cell.stream else (value is not None and value >= 0.5)
    result = "info" if met is None else ("PASS" if met else "FAIL")
    if min(d["rounds_completed"], g["rounds_completed"]) < rounds:
        result += " (time cap: fewer rounds)"
    if d["failures"] or g["failures"] or not d["requests_ok"] or not g["requests_ok"]:
        result = "INVALID (failures)"
    return dict(zip(_VERDICT, (metric, direct, gateway, added, target, result, value), strict=True))


def versus_baseline(
    cell: Cell, g: dict[str, Any], b: dict[str, Any], gv: Any, bv: Any
) -> dict[str, Any]:
    """This tree against the baseline in one cell. One in flight: the difference and
    ratio of the added cost (``gv``, ``bv``: ms p50, or µs per chunk when streaming,
    over direct). 64 in flight: throughput, this tree / baseline. Both: the gateway's
    CPU time per request or chunk, this tree / baseline."""
    unit = "cpu_us_per_chunk" if cell.stream else "cpu_us_per_request"
    mine, theirs = g[unit].get("proxy", 0.0), b[unit].get("proxy", 0.0)
    out: dict[str, Any] = {
        "gateway_cpu_us": mine,
        "baseline_cpu_us": theirs,
        "cpu_ratio": mine / theirs if theirs else None,
        "text": "n/a",
    }
    if cell.concurrency == 1:
        if gv is None or bv is None or gv != gv or bv != bv:
            return out
        # A ratio of added costs only means something when the baseline adds some.
        ratio = gv / bv if bv > 0 else None
        out.update(added_difference=gv - bv, added_ratio=ratio)
        unit_text = "us/chunk" if cell.stream else "ms p50"
        out["text"] = f"{gv - bv:+{'.1f' if cell.stream else '.3f'}} {unit_text}"
        out["text"] += f" (x{ratio:.2f})" if ratio is not None else ""
        return out
    key = "chunks_per_s" if cell.stream else "requests_per_s"
    ratio = (g[key] or 0.0) / b[key] if b[key] else None
    out["throughput_ratio"] = ratio
    out["text"] = "n/a" if ratio is None else f"x{ratio:.3f} {key.split('_')[0]}/s"
    return out


def report(results: list[dict[str, Any]], baseline: Baseline | None = None) -> str:
    rows = [["cell", "metric", "direct", "gateway", "added / ratio", "target", "result"]]
    rows += [[r["key"], *(str(r["verdict"][k]) for k in _VERDICT[:6])] for r in results]
    names = ("direct", "gateway", "baseline")[: 2 if baseline is None else 3]
    tag = "/".join(name[0] for name in names)
    cpu_rows = [["cell", "per", f"backend {tag}", "/".join(names[1:]), f"client {tag}"]]
    cpu_rows[0] += [f"other load {tag}", f"failures {tag}"]
    for r in results:
        runs = [r[name] for name in names]
        unit = "cpu_us_per_chunk" if r["stream"] else "cpu_us_per_request"
        cpu_rows.append(
            [
                r["key"],
                "chunk" if r["stream"] else "request",
                _joined((run[unit]["backend"] for run in runs), ".1f") + " us",
                _joined((run[unit].get("proxy", 0.0) for run in runs[1:]), ".1f") + " us",
                _joined((run[unit]["client"] for run in runs), ".1f") + " us",
                _joined((run["other_load"] for run in runs), ".0%"),
                _joined((run["failures"] for run in runs), ""),
            ]
        )
    out = [table(rows), ""]
    if baseline is not None:
        out += [f"Baseline {baseline.label()}, measured in the same rounds:", ""]
        head = ["cell", "baseline", "added / ratio", "result", "this tree", "this vs baseline"]
        base_rows = [[*head, "gateway CPU this / baseline"]]
        for r in results:
            v, b, versus = r["verdict"], r["baseline_verdict"], r["gateway_vs_baseline"]
            cpu = f"{versus['gateway_cpu_us']:.1f} / {versus['baseline_cpu_us']:.1f} us"
            cpu += f" (x{versus['cpu_ratio']:.3f})" if versus["cpu_ratio"] is not None else ""
            base_rows.append(
                [r["key"], b["gateway"], b["added"], b["result"], v["added"], versus["text"], cpu]
            )
        out += [table(base_rows), ""]
    legend = "d = direct run, g = gateway run" + ("" if baseline is None else ", b = baseline run")
    out += [f"CPU time per unit ({legend}):", "", table(cpu_rows)]
    for r in results:
        for name in names:
            out += [f"failure {r['key']} {name}: {e}" for e in r[name]["failure_examples"]]
    return "\n".join(out)


def _joined(values: Iterable[float], spec: str) -> str:
    return " / ".join(format(value, spec) for value in values)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = arguments(
        __doc__,
        quick="a ~15 s smoke run",
        baseline="also serve another checkout's src/ DIR (e.g. made by git worktree add) "
        "with a second gateway, measured in the same rounds, and compare",
    )
    add = parser.add_argument
    add("--dialect", choices=DIALECTS, default="openai")
    add("--gateway-backend", choices=BACKEND_TYPES, help="its type (default: the dialect's)")
    add("--requests", type=int, help="c1: N, stream-c1 N/8, c64 2N, stream-c64 N/4 (10000; 500)")
    add("--chunks", type=int, default=200, help="pieces per streamed reply")
    add("--nonstream-chunks", type=int, default=16, help="pieces per non-streamed reply")
    add("--max-seconds", type=float, help="cap on the measured phase (240; 40)")
    add("--only", action="append", choices=CELL_KEYS, help="this cell (repeatable)")
    add("--profile-gateway", type=Path, metavar="FILE", help="the gateway under cProfile")
    add("--py-spy", type=Path, metavar="FILE", help="sample the gateway with py-spy meanwhile")
    add("--gateway-launcher", type=Path, metavar="SCRIPT", help="serve 'python SCRIPT serve ...'")
    args = parser.parse_args(argv)
    if args.gateway_backend is None:
        args.gateway_backend = "openai" if args.dialect == "responses" else args.dialect
    args.requests = args.requests or (500 if args.quick else 10000)
    if args.max_seconds is None:  # a third target takes half as long again
        args.max_seconds = (40.0 if args.quick else 240.0) * (1.5 if args.baseline_src else 1)
    if args.requests < 1 or args.chunks < 1 or args.nonstream_chunks < 1:
        parser.error("--requests, --chunks and --nonstream-chunks must be positive")
    return args


async def measure(
    args: argparse.Namespace, backend: Server, gateways: list[Server]
) -> list[dict[str, Any]]:
    client = make_client()
    try:
        await wait_ready(client, backend, *gateways)
        targets = [Target("direct", backend.url, args.dialect)]
        targets += [Target(g.name, g.url, args.dialect, g.tree) for g in gateways]
        runner = Runner(client, backend.tree)
        cells = plan(args)
        log(f"warming up {len(targets)} targets")
        for cell, _, _ in cells:
            per_slot = 2 if cell.concurrency > 1 else (5 if cell.stream else 30)
            count = cell.concurrency * per_slot * (1 if args.quick else 3)
            await runner.warm_up(targets, cell, count=count)
        finish_by, results = time.monotonic() + args.max_seconds, []
        with py_spy(args.py_spy, gateways[0].pid):
            for index, (cell, requests, rounds) in enumerate(cells):
                share = (finish_by - time.monotonic()) / (len(cells) - index)
                log(
                    f"{cell.key}: {requests} requests per target in {rounds} rounds ({share:.0f} s)"
                )
                tallies = await runner.rounds(
                    targets,
                    cell,
                    rounds,
                    count=max(1, requests // rounds),
                    deadline=time.monotonic() + share,
                )
                runs = {name: summarise(tally, cell.stream) for name, tally in tallies.items()}
                result: dict[str, Any] = {
                    "key": cell.key,
                    "title": cell.title,
                    "stream": cell.stream,
                }
                result |= {"concurrency": cell.concurrency, "pieces": cell.pieces}
                result |= {"requests_per_target": requests, "rounds": rounds, **runs}
                result["verdict"] = judge(cell, rounds, runs["direct"], runs["gateway"])
                if "baseline" in runs:
                    bv = result["baseline_verdict"] = judge(
                        cell, rounds, runs["direct"], runs["baseline"]
                    )
                    gv = result["verdict"]
                    result["gateway_vs_baseline"] = versus_baseline(
                        cell, runs["gateway"], runs["baseline"], gv["value"], bv["value"]
                    )
                results.append(result)
        return results
    finally:
        await client.aclose()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = start_run("overhead", argv)
    baseline = prepare_baseline(args.baseline_src)
    with workspace("overhead") as (workdir, started):
        backend = started.add(start_fast_backend(workdir, "--chunks", str(args.chunks)))
        config = gateway_config(backend.port, args.gateway_backend)
        profile = args.profile_gateway.resolve() if args.profile_gateway else None
        gateway = start_gateway(workdir, config, profile=profile, launcher=args.gateway_launcher)
        gateways = [started.add(gateway)]
        if baseline is not None:
            gateways.append(
                started.add(start_gateway(workdir, config, name="baseline", baseline=baseline))
            )
            log(f"baseline pid {gateways[1].pid} imports {baseline.module} ({baseline.label()})")
        results = run_async(measure(args, backend, gateways), args.max_seconds + 180)
    document = results_header(run, args) | {
        "dialect": args.dialect,
        "gateway_backend_type": args.gateway_backend,
        "client": "aiohttp",
        "profiled": bool(args.py_spy or args.profile_gateway),
        "baseline": baseline.describe() if baseline else None,
        "cells": results,
    }
    document["machine"]["processor"] = _cpu_model()
    print(
        f"\nllmbridge gateway overhead, dialect {args.dialect} (gateway backend type "
        f"{args.gateway_backend}), {os.cpu_count()} CPUs, {args.chunks} chunks per stream, "
        f"{args.nonstream_chunks} per non-streamed reply\n"
    )
    if document["profiled"]:
        print("NOTE: the gateway was profiled during this run; its timings are inflated.\n")
    print(report(results, baseline))
    save_results("overhead", document, run.started, args)
    return 1 if any(r["verdict"]["result"].startswith("INVALID") for r in results) else 0


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


if __name__ == "__main__":
    entry_point(main)

"""The ``dialect_paths`` scenario: every client dialect's path through the gateway, with
tools and without, against OpenAI chat completions' (target: none more than 20% slower).

One stub backend (the gateway's backend is of type ``openai`` for every front) and one
gateway (with ``--baseline-src DIR``, a second one serving DIR). For each dialect the
gateway serves (``wire.DIALECTS``: OpenAI chat, Responses, Anthropic, Ollama, Gemini),
streamed or not, without tools and with three (the backend then answers with a tool
call), it sends requests one at a time in interleaved rounds, every path once per round
in a rotating order (``load.py``), and measures p50/p99 latency and the gateway's CPU per
request. Every reply is checked after its timing (``wire.py``); any failure makes the
run exit 1. The table gives each path's CPU and p50 as a ratio to the OpenAI path of the
same kind; PASS when both are at most 1.20.
"""

from __future__ import annotations

import argparse
from typing import Any

import wire
from harness import (
    CLK_TCK,
    Server,
    arguments,
    entry_point,
    gateway_config,
    log,
    prepare_baseline,
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
from load import Cell, Runner, Tally, Target, round_order, summarise

LIMIT = 1.20
KINDS = [(stream, tools) for tools in (False, True) for stream in (False, True)]


def kind(stream: bool, tools: bool) -> str:
    return ("stream" if stream else "nonstream") + ("+tools" if tools else "")


async def measure(
    args: argparse.Namespace, backend: Server, gateways: list[Server]
) -> dict[str, dict[str, Any]]:
    client = make_client()
    try:
        await wait_ready(client, *gateways)
        runner = Runner(client, backend.tree)
        paths = [
            (
                g.name,
                f"{d}/{kind(stream, tools)}",
                Target(d, g.url, d, g.tree, tools=tools),
                Cell(stream, 1, args.pieces),
            )
            for stream, tools in KINDS
            for d in wire.DIALECTS
            for g in gateways
        ]
        log(f"warming up {len(paths)} paths")
        for _, _, target, cell in paths:
            await runner.batch(target, cell, Tally(), count=5)
        tallies = {(name, key): Tally() for name, key, _, _ in paths}
        per_round = max(1, args.requests // args.rounds)
        for index in range(args.rounds):
            for name, key, target, cell in round_order(paths, index * 7):
                await runner.batch(target, cell, tallies[(name, key)], count=per_round)
            failed = sum(t.failures for t in tallies.values())
            log(f"round {index + 1}/{args.rounds} done ({failed} failures so far)")
        results: dict[str, dict[str, Any]] = {g.name: {} for g in gateways}
        for (name, key), tally in tallies.items():
            results[name][key] = summarise(tally, "stream" in key)
        return results
    finally:
        await client.aclose()


def table(results: dict[str, dict[str, Any]]) -> tuple[str, bool]:
    """The printed table and whether every path passes."""
    lines, ok = [], True
    header = f"{'path':<30}{'p50 ms':>9}{'p99 ms':>9}{'CPU us/req':>12}"
    header += f"{'CPU/openai':>12}{'p50/openai':>12}  verdict"
    for name, paths in results.items():
        lines += [f"== {name} (concurrency 1; ratios to the OpenAI path of the same kind)", header]
        for key, s in paths.items():
            ref = paths[f"openai/{key.split('/', 1)[1]}"]
            cpu, p50 = s["cpu_us_per_request"].get("proxy", 0.0), s["latency_ms"]["p50"] or 0.0
            s["cpu_ratio"] = cpu / (ref["cpu_us_per_request"].get("proxy") or 1e-9)
            s["p50_ratio"] = p50 / (ref["latency_ms"]["p50"] or 1e-9)
            s["pass"] = s["cpu_ratio"] <= LIMIT and s["p50_ratio"] <= LIMIT and not s["failures"]
            ok = ok and s["pass"]
            verdict = ("PASS" if s["pass"] else "FAIL") + (
                f" ({s['failures']} bad replies)" if s["failures"] else ""
            )
            p99 = s["latency_ms"]["p99"] or 0.0
            ratios = f"{s['cpu_ratio']:>12.2f}{s['p50_ratio']:>12.2f}"
            lines.append(f"{key:<30}{p50:>9.3f}{p99:>9.3f}{cpu:>12.0f}{ratios}  {verdict}")
    return "\n".join(lines), ok


def main(argv: list[str] | None = None) -> int:
    parser = arguments(
        __doc__, quick="few requests: a smoke run", baseline="another checkout's src/"
    )
    parser.add_argument("--requests", type=int, help="requests per path (600; 60)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (10; 3)")
    parser.add_argument("--pieces", type=int, default=50, help="text pieces per reply")
    args = parser.parse_args(argv)
    args.requests = args.requests or (60 if args.quick else 600)
    args.rounds = args.rounds or (3 if args.quick else 10)
    run = start_run("dialect_paths", argv)
    baseline = prepare_baseline(args.baseline_src)
    with workspace("dialect-paths") as (workdir, started):
        backend = started.add(start_fast_backend(workdir, "--chunks", str(args.pieces)))
        config = gateway_config(backend.port)
        gateways = [started.add(start_gateway(workdir, config))]
        if baseline is not None:
            gateways.append(
                started.add(start_gateway(workdir, config, name="baseline", baseline=baseline))
            )
        paths = len(wire.DIALECTS) * len(KINDS)
        log(f"{paths} paths, {args.requests} requests each in {args.rounds} rounds")
        results = run_async(measure(args, backend, gateways))
    text, ok = table(results)
    print(text)
    # The gateway's CPU is read in clock ticks; each batch may be off by one either way.
    tick_us = 1e6 / CLK_TCK / args.requests * args.rounds
    print(f"CPU per request: /proc ticks of 1/{CLK_TCK} s, at worst +-{tick_us:.0f} us here")
    failures = sum(s["failures"] for paths in results.values() for s in paths.values())
    record = results_header(run, args) | {
        "limit": LIMIT,
        "baseline": baseline.describe() if baseline else None,
        "results": results,
        "all_pass": ok,
        "failures": failures,
    }
    save_results("dialect_paths", record, run.started, args)
    if failures:
        log(f"{failures} replies failed their check")
    return 1 if failures else 0


if __name__ == "__main__":
    entry_point(main)

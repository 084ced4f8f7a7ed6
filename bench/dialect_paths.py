"""The ``dialect_paths`` scenario: every client dialect's path through the gateway, with
tools and without, against OpenAI chat completions' (target: none more than 20% slower).

One stub backend (the gateway's backend is of type ``openai`` for every front) and one
gateway (with ``--baseline-src DIR``, a second one serving DIR). For each dialect the
gateway serves (OpenAI chat, Responses, Anthropic, Ollama, Gemini), streamed or not,
without tools and with three (the backend then answers with a tool call), it sends
requests one at a time in interleaved rounds, every path once per round in a rotating
order, and measures p50/p99 latency and the gateway's CPU per request. Every reply is
checked after its timing (``dialect_requests.py``); any failure makes the run exit 1.
The table gives each path's CPU and p50 as a ratio to the OpenAI path of the same kind;
PASS when both are at most 1.20.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dialect_requests import DIALECTS, CheckError, check, path, request_body
from harness import (
    CLK_TCK,
    Baseline,
    BaselineError,
    Server,
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
    stopping,
    wait_ready,
)
from http_clients import make_client

LIMIT = 1.20


@dataclass(frozen=True)
class Route:
    dialect: str
    stream: bool
    tools: bool

    @property
    def kind(self) -> str:
        return ("stream" if self.stream else "nonstream") + ("+tools" if self.tools else "")

    @property
    def key(self) -> str:
        return f"{self.dialect}/{self.kind}"


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    cpu: float = 0.0
    requests: int = 0
    failures: int = 0
    examples: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        ordered = sorted(self.latencies)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else 0.0
        return {
            "requests": self.requests,
            "failures": self.failures,
            "p50_ms": statistics.median(ordered) * 1000 if ordered else 0.0,
            "p99_ms": p99 * 1000,
            "cpu_us_per_request": self.cpu / self.requests * 1e6 if self.requests else 0.0,
            "failure_examples": self.examples[:3],
        }


def all_paths() -> list[Route]:
    return [
        Route(d, stream, tools)
        for tools in (False, True)
        for stream in (False, True)
        for d in DIALECTS
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few requests: a smoke run")
    parser.add_argument("--requests", type=int, default=None, help="requests per path")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds")
    parser.add_argument("--pieces", type=int, default=50, help="text pieces per reply")
    parser.add_argument("--baseline-src", type=Path, default=None, help="another checkout's src/")
    parser.add_argument("--json", type=Path, default=None, help="result file")
    args = parser.parse_args(argv)
    args.requests = args.requests or (60 if args.quick else 600)
    args.rounds = args.rounds or (3 if args.quick else 10)
    return args


async def _batch(
    client: Any, gateway: Server, p: Route, count: int, pieces: int, tally: Tally
) -> None:
    url = f"http://127.0.0.1:{gateway.port}{path(p.dialect, p.stream)}"
    body = request_body(p.dialect, p.stream, p.tools, pieces)
    outcomes = []
    cpu_before = gateway.cpu_seconds()
    for _ in range(count):
        outcomes.append(await client.fetch(0, url, body, p.stream))
    tally.cpu += gateway.cpu_seconds() - cpu_before
    tally.requests += count
    for outcome in outcomes:
        tally.latencies.append(outcome.total)
        try:
            if outcome.status != 200:
                raise CheckError(
                    f"HTTP {outcome.status} {outcome.error or ''} {outcome.raw[:200]!r}"
                )
            check(p.dialect, p.stream, p.tools, pieces, outcome.raw)
        except CheckError as exc:
            tally.failures += 1
            tally.examples.append(str(exc))


async def measure(args: argparse.Namespace, gateways: dict[str, Server]) -> dict[str, Any]:
    client = make_client()
    try:
        for gateway in gateways.values():
            await wait_ready(client, gateway, "/health")
        paths = all_paths()
        targets = [(name, p) for p in paths for name in gateways]
        log(f"warming up {len(targets)} paths")
        for name, p in targets:
            await _batch(client, gateways[name], p, 5, args.pieces, Tally())
        tallies = {(name, p): Tally() for name, p in targets}
        per_round = max(1, args.requests // args.rounds)
        for index in range(args.rounds):
            # Rotate, and reverse every other round: a steady drift cancels out.
            shift = (index * 7) % len(targets)
            order = targets[shift:] + targets[:shift]
            for name, p in order if index % 2 == 0 else order[::-1]:
                await _batch(client, gateways[name], p, per_round, args.pieces, tallies[(name, p)])
            failed = sum(t.failures for t in tallies.values())
            log(f"round {index + 1}/{args.rounds} done ({failed} failures so far)")
        return {name: {p.key: tallies[(name, p)].summary() for p in paths} for name in gateways}
    finally:
        await client.aclose()


def table(results: dict[str, dict[str, Any]]) -> tuple[str, bool]:
    """The printed table and whether every path passes."""
    lines = []
    ok = True
    header = (
        f"{'path':<30}{'p50 ms':>9}{'p99 ms':>9}{'CPU us/req':>12}"
        f"{'CPU/openai':>12}{'p50/openai':>12}  verdict"
    )
    for name, paths in results.items():
        lines += [f"== {name} (concurrency 1; ratios to the OpenAI path of the same kind)", header]
        for key, s in paths.items():
            kind = key.split("/", 1)[1]
            ref = paths[f"openai/{kind}"]
            cpu_ratio = s["cpu_us_per_request"] / ref["cpu_us_per_request"]
            p50_ratio = s["p50_ms"] / ref["p50_ms"]
            passed = cpu_ratio <= LIMIT and p50_ratio <= LIMIT and not s["failures"]
            s["cpu_ratio"], s["p50_ratio"], s["pass"] = cpu_ratio, p50_ratio, passed
            ok = ok and passed
            verdict = "PASS" if passed else "FAIL"
            if s["failures"]:
                verdict += f" ({s['failures']} bad replies)"
            lines.append(
                f"{key:<30}{s['p50_ms']:>9.3f}{s['p99_ms']:>9.3f}{s['cpu_us_per_request']:>12.0f}"
                f"{cpu_ratio:>12.2f}{p50_ratio:>12.2f}  {verdict}"
            )
    return "\n".join(lines), ok


@contextlib.contextmanager
def servers(
    args: argparse.Namespace, workdir: Path, baseline: Baseline | None
) -> Iterator[dict[str, Server]]:
    with stopping() as started:
        backend = start_fast_backend(workdir, "--chunks", str(args.pieces))
        started.append(backend)
        config = gateway_config("openai", backend.port)
        gateways = {"gateway": start_gateway(workdir, config)}
        started.append(gateways["gateway"])
        if baseline is not None:
            other = start_gateway(workdir, config, name="baseline", baseline=baseline)
            started.append(other)
            gateways["baseline"] = other
        yield gateways


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = start_run("dialect_paths", argv)
    baseline = None
    if args.baseline_src is not None:
        try:
            baseline = prepare_baseline(args.baseline_src)
        except BaselineError as exc:
            print(exc, file=sys.stderr)
            return 2
    with (
        tempfile.TemporaryDirectory(prefix="dialect-paths-") as tmp,
        servers(args, Path(tmp), baseline) as gateways,
    ):
        log(f"{len(all_paths())} paths, {args.requests} requests each in {args.rounds} rounds")
        results = run_async(measure(args, gateways))
    text, ok = table(results)
    print(text)
    # The gateway's CPU is read in clock ticks; each batch may be off by one either way.
    tick_us = 1e6 / CLK_TCK / args.requests * args.rounds
    print(f"CPU per request: /proc ticks of 1/{CLK_TCK} s, at worst +-{tick_us:.0f} us here")
    failures = sum(s["failures"] for paths in results.values() for s in paths.values())
    record = results_header(run, args) | {
        "requests_per_path": args.requests,
        "rounds": args.rounds,
        "pieces": args.pieces,
        "limit": LIMIT,
        "baseline": baseline.describe() if baseline else None,
        "results": results,
        "all_pass": ok,
        "failures": failures,
    }
    save_results("dialect_paths", record, run.started, args.json)
    if failures:
        log(f"{failures} replies failed their check")
        return 1
    return 0


if __name__ == "__main__":
    entry_point(main)

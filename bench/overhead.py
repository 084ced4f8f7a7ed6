"""The ``overhead`` scenario: what the gateway costs, llmbridge in front of the stub backend
against that backend called directly, by the same load generator in the same run.

It starts ``fast_backend.py`` and ``llmbridge serve`` pointed at it (``--dialect``:
``openai``, ``ollama`` or ``responses`` for both targets; ``--gateway-backend`` picks the
gateway's backend type), and runs four measurements, each against DIRECT and GATEWAY in
alternating rounds (D G G D ...: drift cancels) after a warm-up:

- ``nonstream-c1``: one request at a time, a short reply: added p50 latency (ms);
- ``stream-c1``: one stream at a time, ``--chunks`` pieces: added p50 per chunk (µs);
- ``nonstream-c64`` and ``stream-c64``: 64 in flight: requests or chunks/s, gateway/direct.

Beside the timings it records the CPU time of the backend, the gateway and the load
generator per request or chunk, and how busy the rest of the machine was. Every reply
is checked after its timing (``replies.py``). ``--baseline-src DIR`` adds a third
target, a gateway serving DIR, in rotated rounds (D G B, B G D, G B D, ...), and the
report compares this tree with it. ``--py-spy FILE`` or ``--profile-gateway FILE``
profile the gateway meanwhile (``profile_summary`` reads the result);
``overhead_stats.py`` holds the summaries, verdicts and tables.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from fast_backend import reply_pieces
from harness import (
    Baseline,
    BaselineError,
    RunStart,
    Server,
    backend_type,
    entry_point,
    gateway_config,
    log,
    prepare_baseline,
    results_header,
    run_async,
    save_results,
    start_fast_backend,
    start_gateway,
    start_py_spy,
    start_run,
    stop_py_spy,
    stopping,
    system_busy_seconds,
    wait_ready,
)
from http_clients import BenchClient, Outcome, make_client
from overhead_stats import Scenario, Tally, Verdict, judge, report, summarise, versus_baseline
from replies import DIALECTS, chat_path, check_reply, request_body

T = TypeVar("T")
SCENARIO_KEYS = ("nonstream-c1", "stream-c1", "nonstream-c64", "stream-c64")
_JSON_HEADERS = {"content-type": "application/json"}


# -- load generation ----------------------------------------------------------------------


@dataclass
class Target:
    name: str
    url: str


def round_order(targets: tuple[Target, ...], index: int) -> tuple[Target, ...]:
    """The targets' order in round ``index``. Two: D G, G D, D G, ... (ABBA). Three: each
    rotation, then its reverse (D G B, B G D, G B D, D B G, B D G, G D B): a steady drift
    cancels within each pair of rounds, and over six rounds every target follows every
    other equally often."""
    shift = (index // 2) % len(targets) if len(targets) > 2 else 0
    order = targets[shift:] + targets[:shift]
    return order if index % 2 == 0 else order[::-1]


class LoadGenerator:
    """Sends the same requests to every target and tallies what comes back."""

    def __init__(
        self,
        client: BenchClient,
        dialect: str,
        backend: Server,
        gateway: Server,
        baseline: Server | None = None,
    ) -> None:
        self.client, self.dialect = client, dialect
        self.servers = {"backend": backend, "gateway": gateway}
        path = chat_path(dialect)
        targets = [
            Target("direct", f"http://127.0.0.1:{backend.port}{path}"),
            Target("gateway", f"http://127.0.0.1:{gateway.port}{path}"),
        ]
        if baseline is not None:
            self.servers["baseline"] = baseline
            targets.append(Target("baseline", f"http://127.0.0.1:{baseline.port}{path}"))
        self.targets = tuple(targets)

    def _cpu(self) -> dict[str, float]:
        cpu = {name: server.cpu_seconds() for name, server in self.servers.items()}
        cpu["client"] = time.process_time()
        cpu["system"] = system_busy_seconds()
        return cpu

    async def batch(self, target: Target, scenario: Scenario, count: int, tally: Tally) -> None:
        """``count`` requests, ``scenario.concurrency`` at a time; checked after timing."""
        body = request_body(self.dialect, scenario.stream, scenario.pieces)
        outcomes: list[Outcome] = []
        remaining = count

        async def worker(slot: int) -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                outcomes.append(await fetch(slot, target.url, body, scenario.stream))

        fetch = self.client.fetch
        cpu_before = self._cpu()
        started = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(min(scenario.concurrency, count))))
        wall = time.perf_counter() - started
        cpu_after = self._cpu()
        tally.wall += wall
        tally.batches += 1
        used = {name: value - cpu_before[name] for name, value in cpu_after.items()}
        ours = sum(used[name] for name in self.servers) + used["client"]
        # Whatever else ran meanwhile (other people's tests...): a noise indicator.
        used["other"] = max(0.0, used.pop("system") - ours)
        for name, value in used.items():
            tally.cpu[name] = tally.cpu.get(name, 0.0) + value
        expected = reply_pieces(scenario.pieces)
        tally.record(
            outcomes, lambda raw: check_reply(self.dialect, scenario.stream, raw, expected)
        )

    async def warm_up(self, plan: list[Scenario], quick: bool) -> None:
        """Untimed traffic of the same shapes: imports, caches, pools and the JIT-less
        interpreter's specialisation all settle before anything is measured."""
        scale = 1 if quick else 3
        for target in self.targets:
            for scenario in plan:
                per_slot = 2 if scenario.concurrency > 1 else (5 if scenario.stream else 30)
                count = scenario.concurrency * per_slot * scale
                tally = Tally()
                await self.batch(target, scenario, count, tally)
                if tally.failures:
                    log(
                        f"warm-up {scenario.key} against {target.name}: {tally.failures} "
                        f"of {count} failed, e.g. {tally.failure_examples[0]}"
                    )

    async def run(self, scenario: Scenario, deadline: float) -> dict[str, Tally]:
        tallies = {t.name: Tally() for t in self.targets}
        per_round = max(1, scenario.requests // scenario.rounds)
        for index in range(scenario.rounds):
            for target in round_order(self.targets, index):
                if time.monotonic() > deadline:
                    log(f"{scenario.key}: time budget spent after {index} rounds; stopping early")
                    return tallies
                await self.batch(target, scenario, per_round, tallies[target.name])
            log(
                f"{scenario.key} round {index + 1}/{scenario.rounds}: "
                + ", ".join(_round_summary(n, t) for n, t in tallies.items())
            )
        return tallies


def _round_summary(name: str, tally: Tally) -> str:
    last = tally.round_p50s[-1] * 1000 if tally.round_p50s else float("nan")
    return f"{name} p50 {last:.3f} ms" + (f" ({tally.failures} failed)" if tally.failures else "")


# -- main ---------------------------------------------------------------------------------


def scenarios(args: argparse.Namespace) -> list[Scenario]:
    n = args.requests
    c64_rounds = max(2, min(6, n // 256))
    return [
        Scenario(
            "nonstream-c1", "non-streaming, 1 in flight", False, 1, args.nonstream_chunks, n, 10
        ),
        Scenario("stream-c1", "streaming, 1 in flight", True, 1, args.chunks, max(10, n // 8), 10),
        Scenario(
            "nonstream-c64",
            "non-streaming, 64 in flight",
            False,
            64,
            args.nonstream_chunks,
            2 * n,
            c64_rounds,
        ),
        Scenario(
            "stream-c64",
            "streaming, 64 in flight",
            True,
            64,
            args.chunks,
            max(n // 4, 128 * c64_rounds),
            c64_rounds,
        ),
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dialect",
        choices=DIALECTS,
        default="openai",
        help="the API both targets are called in (responses: POST /v1/responses)",
    )
    parser.add_argument(
        "--gateway-backend",
        choices=("openai", "ollama", "openai_responses"),
        default=None,
        help="the type of the gateway's backend (default: the dialect's own; openai "
        "behind --dialect responses)",
    )
    parser.add_argument(
        "--requests",
        type=int,
        default=None,
        help="base request count per target: nonstream-c1 runs N, stream-c1 N/8, "
        "nonstream-c64 2N, stream-c64 N/4 (default 10000; 500 with --quick)",
    )
    parser.add_argument("--chunks", type=int, default=200, help="pieces per streamed reply")
    parser.add_argument(
        "--nonstream-chunks",
        type=int,
        default=16,
        help="pieces per non-streamed reply (the gateway streams them from the backend)",
    )
    parser.add_argument("--quick", action="store_true", help="a ~15 s smoke run")
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=None,
        help="hard cap on the measured phase (default 240; 40 with --quick)",
    )
    parser.add_argument(
        "--profile-gateway",
        type=Path,
        default=None,
        metavar="FILE",
        help="run the gateway under cProfile and write its stats to FILE",
    )
    parser.add_argument(
        "--only",
        action="append",
        default=None,
        choices=SCENARIO_KEYS,
        help="run only this scenario (repeatable)",
    )
    parser.add_argument(
        "--py-spy",
        type=Path,
        default=None,
        metavar="FILE",
        help="sample the gateway with py-spy (on PATH or $PY_SPY) during the measured "
        "phase and write collapsed stacks to FILE; summarise with bench/profile_summary.py",
    )
    parser.add_argument(
        "--gateway-launcher",
        type=Path,
        default=None,
        metavar="SCRIPT",
        help="experiments: start the gateway as 'python SCRIPT serve ...', e.g. a script "
        "that patches llmbridge and then calls llmbridge.cli.main()",
    )
    parser.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        metavar="DIR",
        help="also serve the src/ directory DIR of another checkout (e.g. made by git "
        "worktree add) with a second gateway, measured in the same rounds, and compare",
    )
    parser.add_argument("--no-save", action="store_true", help="do not write the JSON file")
    args = parser.parse_args(argv)
    args.gateway_backend = args.gateway_backend or backend_type(args.dialect)
    if args.requests is None:
        args.requests = 500 if args.quick else 10000
    if args.max_seconds is None:
        # A third target takes half as long again.
        args.max_seconds = (40.0 if args.quick else 240.0) * (1.5 if args.baseline_src else 1)
    if args.requests < 1 or args.chunks < 1 or args.nonstream_chunks < 1:
        parser.error("--requests, --chunks and --nonstream-chunks must be positive")
    return args


async def measure(
    args: argparse.Namespace,
    backend: Server,
    gateway: Server,
    baseline: Server | None = None,
) -> list[dict[str, Any]]:
    client = make_client()
    sampler: subprocess.Popen[bytes] | None = None
    try:
        probe = "/api/version" if args.dialect == "ollama" else "/v1/models"
        await wait_ready(client, backend, probe)
        await wait_ready(client, gateway, "/health")
        if baseline is not None:
            await wait_ready(client, baseline, "/health")
        gen = LoadGenerator(client, args.dialect, backend, gateway, baseline)
        plan = [s for s in scenarios(args) if not args.only or s.key in args.only]
        log("warming up " + ("both targets" if baseline is None else "all three targets"))
        await gen.warm_up(plan, args.quick)
        if args.py_spy is not None:
            sampler = start_py_spy(args.py_spy, gateway.pid)
        finish_by = time.monotonic() + args.max_seconds
        results = []
        for index, scenario in enumerate(plan):
            share = (finish_by - time.monotonic()) / (len(plan) - index)
            log(
                f"{scenario.key}: {scenario.title}, {scenario.requests} requests per target "
                f"in {scenario.rounds} rounds (budget {share:.0f} s)"
            )
            tallies = await gen.run(scenario, time.monotonic() + share)
            d, g = (summarise(tallies[t], scenario) for t in ("direct", "gateway"))
            verdict = judge(scenario, d, g)
            result: dict[str, Any] = {}
            if baseline is not None:
                b = summarise(tallies["baseline"], scenario)
                result = _baseline_result(scenario, d, g, b, verdict)
            results.append(
                {
                    "client": client.name,
                    "key": scenario.key,
                    "title": scenario.title,
                    "stream": scenario.stream,
                    "concurrency": scenario.concurrency,
                    "pieces": scenario.pieces,
                    "requests_per_target": scenario.requests,
                    "rounds": scenario.rounds,
                    "direct": d,
                    "gateway": g,
                    "verdict": verdict.__dict__,
                    **result,
                }
            )
        return results
    finally:
        if sampler is not None:
            stop_py_spy(sampler)
        await client.aclose()


def _baseline_result(
    scenario: Scenario,
    d: dict[str, Any],
    g: dict[str, Any],
    b: dict[str, Any],
    gateway_verdict: Verdict,
) -> dict[str, Any]:
    """A scenario's baseline figures: its summary, its verdict against direct (as the
    gateway's), and this tree against it."""
    baseline_verdict = judge(scenario, d, b)
    one = scenario.concurrency == 1
    return {
        "baseline": b,
        "baseline_verdict": baseline_verdict.__dict__,
        "gateway_vs_baseline": versus_baseline(
            scenario.concurrency,
            g,
            b,
            gateway_verdict.value if one else None,
            baseline_verdict.value if one else None,
        ),
    }


@contextlib.contextmanager
def servers(
    args: argparse.Namespace, workdir: Path, baseline: Baseline | None = None
) -> Iterator[tuple[Server, Server, Server | None]]:
    """The backend, this tree's gateway and, with ``baseline``, the baseline's gateway
    (the same command and config; ``PYTHONPATH`` makes it import the baseline)."""
    with stopping() as started:
        backend = start_fast_backend(workdir, "--chunks", str(args.chunks))
        started.append(backend)
        profile = args.profile_gateway.resolve() if args.profile_gateway else None
        gateway = start_gateway(
            workdir,
            gateway_config(args.dialect, backend.port, args.gateway_backend),
            profile=profile,
            launcher=args.gateway_launcher,
        )
        started.append(gateway)
        other = None
        if baseline is not None:
            config = gateway_config(args.dialect, backend.port, args.gateway_backend)
            other = start_gateway(workdir, config, name="baseline", baseline=baseline)
            started.append(other)
        yield backend, gateway, other


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command, started, load_at_start = start_run("overhead", argv)
    try:
        baseline = prepare_baseline(args.baseline_src) if args.baseline_src else None
        with (
            tempfile.TemporaryDirectory(prefix="llmbridge-bench-") as tmp,
            servers(args, Path(tmp), baseline) as (backend, gateway, other),
        ):
            log(
                f"dialect {args.dialect}: backend pid {backend.pid} on :{backend.port}, "
                f"gateway pid {gateway.pid} on :{gateway.port}"
            )
            if baseline is not None and other is not None:
                log(
                    f"baseline pid {other.pid} on :{other.port} imports {baseline.module} "
                    f"({baseline.label()})"
                )
            results = run_async(
                asyncio.wait_for(measure(args, backend, gateway, other), args.max_seconds + 180)
            )
    except (RuntimeError, BaselineError) as exc:
        log(str(exc))
        return 2
    except TimeoutError:
        log("hard time cap reached; stopping")
        return 3
    document = results_header(RunStart(command, started, load_at_start), args) | {
        "dialect": args.dialect,
        "gateway_backend_type": args.gateway_backend,
        "client": "aiohttp",
        "profiled": bool(args.py_spy or args.profile_gateway),
        "scenarios": results,
    }
    document["machine"]["processor"] = _cpu_model()
    if baseline is not None:
        document["baseline"] = baseline.describe()
    print(
        f"\nllmbridge gateway overhead, dialect {args.dialect} (gateway backend type "
        f"{document['gateway_backend_type']}), {os.cpu_count()} CPUs, "
        f"{args.chunks} chunks per stream, {args.nonstream_chunks} per non-streamed reply, "
        f"client {document['client']}\n"
    )
    if document["profiled"]:
        print("NOTE: the gateway was profiled during this run; its timings are inflated.\n")
    if baseline is not None:
        print(f"baseline: {baseline.label()}, module {baseline.module}\n")
    print(report(results, baseline))
    if not args.no_save:
        save_results("overhead", document, started)
    invalid = any(r["verdict"]["result"].startswith("INVALID") for r in results)
    return 1 if invalid else 0


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


if __name__ == "__main__":
    entry_point(main)

"""The ``frontier`` scenario: the highest request rate each target sustains with p99 within
5, 10 and 50 ms under open-loop load, and streaming frame timing.

It starts the stub backend twice (``backend``, as fast as it can; ``paced``, pausing
``--frame-interval-ms`` between chunks), ``llmbridge serve`` in front of both
(``--workers N``), with ``--baseline-src DIR`` the same gateway serving DIR, and with
``--peers`` the LiteLLM proxy and Portkey (non-streamed only; a peer that cannot start
is left out). Every request is an OpenAI chat completion, byte-identical for every
target, sent open loop (``open_loop.py``: arrivals on a seeded schedule, latency from the
scheduled time, so a server that falls behind shows it).

The ladder: ``--start-rate`` x ``--factor``^k up to ``--max-rate`` (or ``--rates``),
``--seconds-per-step`` per target, the order rotated and reversed per step. A step
passes a bound when no request failed (every reply checked), the achieved rate is at
least ``--min-share`` of the scheduled one, and p99 is within it; a target's frontier is
the highest rate whose step and every step below passed; it leaves the ladder at its
first step that fails the loosest bound. A frontier whose first failing step had the
generator itself behind (lag p99 > 1 ms) is marked ``*``. Frame timing: per target, the
time to the first content frame and the gaps between content frames of paced streams.
On a small machine everything shares the cores: each figure is the whole system's.
``frontier_report.py`` renders the results.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

import http_clients
import litellm_proxy
import portkey_gateway
from fast_backend import DEFAULT_MODEL, reply_pieces
from frontier_report import BOUNDS_MS, figure, report
from harness import (
    CPUS,
    Baseline,
    BaselineError,
    ProcessTree,
    RunStart,
    Server,
    entry_point,
    log,
    prepare_baseline,
    results_header,
    run_async,
    save_results,
    start_fast_backend,
    start_gateway,
    start_peer,
    start_run,
    stopping,
    wait_ready,
)
from http_clients import AiohttpClient
from open_loop import ARRIVALS, OpenLoop, Request, Shot, StepRun, schedule, summarise
from replies import check_reply, request_body

PACED_MODEL = "bench-paced"
CHAT_PATH = "/v1/chat/completions"
PEERS = ("litellm", "portkey")
SSE_END = b"\n\n"


# -- servers ----------------------------------------------------------------------------------


def gateway_config(backend_port: int, paced_port: int) -> str:
    """Two OpenAI-compatible backends, the fast one and the paced one, a model each."""
    return (
        "server:\n"
        "  host: 127.0.0.1\n"
        "  log_level: warning\n"
        "backends:\n"
        f"  bench: {{type: openai, url: 'http://127.0.0.1:{backend_port}/v1'}}\n"
        f"  paced: {{type: openai, url: 'http://127.0.0.1:{paced_port}/v1'}}\n"
        "models:\n"
        f"  - {{name: {DEFAULT_MODEL}, backend: bench}}\n"
        f"  - {{name: {PACED_MODEL}, backend: paced, model: {DEFAULT_MODEL}}}\n"
        "default_backend: bench\n"
    )


@dataclass
class Servers:
    backend: Server
    paced: Server
    gateway: Server
    baseline: Server | None = None
    peers: list[Server] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)


def _start_peers(args: argparse.Namespace, workdir: Path, backend_port: int) -> list[Server]:
    """The peers asked for; one that cannot be installed or started is left out."""
    peers: list[Server] = []
    for name in args.peers:
        try:
            peers.append(start_peer(name, workdir, backend_port, args.workers))
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            log(f"{name} left out: {exc}")
    return peers


@contextlib.contextmanager
def servers(
    args: argparse.Namespace, workdir: Path, baseline: Baseline | None
) -> Iterator[Servers]:
    with stopping() as started:
        backend = start_fast_backend(workdir, "--chunks", str(args.chunks))
        started.append(backend)
        paced = start_fast_backend(
            workdir,
            "--chunks",
            str(args.frame_chunks),
            "--interval-ms",
            str(args.frame_interval_ms),
            name="paced",
        )
        started.append(paced)
        config = gateway_config(backend.port, paced.port)
        workers = ("--workers", str(args.workers))
        gateway = start_gateway(workdir, config, extra_args=workers)
        started.append(gateway)
        s = Servers(backend, paced, gateway)
        if baseline is not None:
            s.baseline = start_gateway(
                workdir, config, name="baseline", baseline=baseline, extra_args=workers
            )
            started.append(s.baseline)
        if args.peers:
            s.peers = _start_peers(args, workdir, backend.port)
            started.extend(s.peers)
            names = {p.name for p in s.peers}
            if "litellm" in names:
                s.versions["litellm"] = litellm_proxy.installed_version()
            if "portkey" in names:
                s.versions["portkey"] = portkey_gateway.installed_version()
        yield s


# -- targets and requests ---------------------------------------------------------------------


@dataclass
class Target:
    name: str
    url: str
    tree: ProcessTree
    """The server whose CPU is reported beside each step."""
    streams: bool = True
    frames_url: str | None = None
    """Where a paced stream goes (None: no frame timing for this target)."""
    headers: dict[str, str] | None = None


def make_targets(s: Servers) -> list[Target]:
    def url(server: Server) -> str:
        return f"http://127.0.0.1:{server.port}{CHAT_PATH}"

    targets = [
        Target("direct", url(s.backend), ProcessTree(s.backend.pid), frames_url=url(s.paced)),
        Target("llmbridge", url(s.gateway), ProcessTree(s.gateway.pid), frames_url=url(s.gateway)),
    ]
    if s.baseline is not None:
        tree = ProcessTree(s.baseline.pid)
        targets.append(Target("baseline", url(s.baseline), tree, frames_url=url(s.baseline)))
    for peer in s.peers:
        tree = ProcessTree(peer.pid)
        if peer.name == "portkey":
            headers = portkey_gateway.headers(s.backend.port)
            targets.append(Target("portkey", url(peer), tree, streams=False, headers=headers))
        else:
            targets.append(Target(peer.name, url(peer), tree))
    return targets


@dataclass(frozen=True)
class Kind:
    """Non-streamed or streamed requests of a fixed size, and their check."""

    key: str
    stream: bool
    pieces: int
    body: bytes
    paced: bool = False

    def request(self, target: Target) -> Request:
        url = (target.frames_url or target.url) if self.paced else target.url
        separator = SSE_END if self.paced else None
        return Request(url, self.body, self.stream, target.name, target.headers, separator)

    def check(self, shot: Shot) -> None:
        check_reply("openai", self.stream, shot.raw, reply_pieces(self.pieces))
        if self.paced and shot.frames is not None:
            shot.frames = content_frames(shot.raw, shot.frames)


def content_frames(raw: bytes, times: list[float]) -> list[float]:
    """The arrival times of the SSE events that carry content (``times`` has one per
    event, in order): the finish, usage and ``[DONE]`` events are left out, so the gaps
    are those between tokens. The fast backend paces those trailers like tokens, which
    no real server does (they follow the last token at once), and the gateway sends its
    finish event once the upstream's usage has come, so with them the gaps would
    measure the backend's pacing of its trailers."""
    return [
        at
        for event, at in zip(raw.split(SSE_END), times, strict=False)
        if b'"content":"' in event and b'"content":""' not in event
    ]


def kinds(args: argparse.Namespace) -> dict[str, Kind]:
    paced = orjson.loads(request_body("openai", True, args.frame_chunks))
    paced["model"] = PACED_MODEL
    n, c = args.nonstream_chunks, args.chunks
    return {
        "nonstream": Kind("nonstream", False, n, request_body("openai", False, n)),
        "stream": Kind("stream", True, c, request_body("openai", True, c)),
        "frames": Kind("frames", True, args.frame_chunks, orjson.dumps(paced), paced=True),
    }


# -- the ladder -------------------------------------------------------------------------------


def ladder(args: argparse.Namespace) -> list[float]:
    if args.rates:
        return sorted(args.rates)
    rates, rate = [], args.start_rate
    while rate <= args.max_rate * 1.0001:
        rates.append(round(rate, 1))
        rate *= args.factor
    return rates


def passes(step: dict[str, Any], bound_ms: float, min_share: float) -> bool:
    p99 = step["latency_ms"]["p99"]
    return (
        step["errors"] == 0
        and (step["achieved_share"] or 0.0) >= min_share
        and p99 is not None
        and p99 <= bound_ms
    )


def frontier(steps: list[dict[str, Any]], bound_ms: float, min_share: float) -> dict[str, Any]:
    """The highest rate passed with every step below it passed; ``reached``: whether a
    step failed (False: the ladder ended first, so the frontier is a lower bound)."""
    best: dict[str, Any] | None = None
    for step in steps:
        if not passes(step, bound_ms, min_share):
            return {
                "rps": best["offered_rps"] if best else None,
                "achieved_rps": best["achieved_rps"] if best else None,
                "reached": True,
                "first_failing_rps": step["offered_rps"],
                "generator_behind_at_failure": step["generator_behind"],
            }
        best = step
    return {
        "rps": best["offered_rps"] if best else None,
        "achieved_rps": best["achieved_rps"] if best else None,
        "reached": False,
        "first_failing_rps": None,
        "generator_behind_at_failure": False,
    }


def round_order(targets: list[Target], index: int) -> list[Target]:
    shift = index % len(targets)
    order = targets[shift:] + targets[:shift]
    return order if index % 2 == 0 else order[::-1]


class Bench:
    def __init__(self, client: AiohttpClient, args: argparse.Namespace) -> None:
        self.args = args
        self.loop = OpenLoop(client, args.cap)
        self.deadline = time.monotonic() + args.max_seconds

    async def step(self, target: Target, kind: Kind, rate: float, seconds: float) -> StepRun:
        request = kind.request(target)
        offsets = schedule(rate, seconds, self.args.arrivals)
        return await self.loop.run(
            offsets, lambda _: request, rate=rate, seconds=seconds, check=kind.check
        )

    async def measured(
        self, target: Target, kind: Kind, rate: float, seconds: float
    ) -> dict[str, Any]:
        cpu = target.tree.cpu_seconds()
        run = await self.step(target, kind, rate, seconds)
        summary = summarise(run, target.tree.cpu_seconds() - cpu)
        summary["target"] = target.name
        await asyncio.sleep(self.args.pause)
        return summary

    async def warm_up(self, targets: list[Target], plan: list[Kind]) -> None:
        for kind in plan:
            for target in targets:
                if kind.stream and not target.streams:
                    continue
                run = await self.step(target, kind, self.args.warm_rate, self.args.warmup_seconds)
                if run.failures:
                    log(
                        f"warm-up {kind.key} {target.name}: {len(run.failures)} of "
                        f"{len(run.shots)} failed, e.g. {run.failures[0]}"
                    )

    async def ladder(self, targets: list[Target], kind: Kind) -> dict[str, list[dict[str, Any]]]:
        args = self.args
        active = [t for t in targets if t.streams or not kind.stream]
        steps: dict[str, list[dict[str, Any]]] = {t.name: [] for t in active}
        loosest = max(BOUNDS_MS)
        for index, rate in enumerate(ladder(args)):
            if not active:
                break
            if time.monotonic() > self.deadline:
                log(f"{kind.key}: --max-seconds reached; the ladder stops at {rate:g}/s")
                break
            for target in round_order(active, index):
                summary = await self.measured(target, kind, rate, args.seconds_per_step)
                steps[target.name].append(summary)
                log(f"{kind.key} {rate:>8.1f}/s {target.name:<10} {_step_line(summary)}")
            active = [t for t in active if passes(steps[t.name][-1], loosest, args.min_share)]
        return steps


def _step_line(s: dict[str, Any]) -> str:
    lat, lag = s["latency_ms"], s["generator_lag_ms"]
    errors = f" {s['errors']} errors ({s['error_examples'][0]})" if s["errors"] else ""
    return (
        f"achieved {s['achieved_rps']:8.1f}/s "
        f"p50 {figure(lat['p50'])} p99 {figure(lat['p99'])} ms, "
        f"generator lag p99 {figure(lag['p99'])} ms cpu {s['generator_cpu_share']:.0%}{errors}"
    )


async def measure(args: argparse.Namespace, s: Servers) -> dict[str, Any]:
    http_clients._TIMEOUT_S = max(http_clients._TIMEOUT_S, 120.0)
    client = AiohttpClient(args.cap)
    try:
        await wait_ready(client, s.backend, "/v1/models")
        await wait_ready(client, s.paced, "/v1/models")
        await wait_ready(client, s.gateway, "/health")
        if s.baseline is not None:
            await wait_ready(client, s.baseline, "/health")
        for peer in list(s.peers):
            path = portkey_gateway.HEALTH_PATH if peer.name == "portkey" else "/health/liveliness"
            try:
                await wait_ready(client, peer, path, patience=180.0)
            except RuntimeError as exc:
                log(f"{peer.name} left out: {exc}")
                s.peers.remove(peer)
        targets = make_targets(s)
        bench = Bench(client, args)
        all_kinds = kinds(args)
        plan = [all_kinds[k] for k in ("nonstream", "stream") if args.kind in ("all", k)]
        log("warming up: " + ", ".join(t.name for t in targets))
        await bench.warm_up(targets, plan)
        out: dict[str, Any] = {"targets": [t.name for t in targets], "kinds": {}}
        for kind in plan:
            log(f"{kind.key}: ladder {', '.join(f'{r:g}' for r in ladder(args))}/s")
            steps = await bench.ladder(targets, kind)
            out["kinds"][kind.key] = {
                "pieces": kind.pieces,
                "steps": steps,
                "frontier": {
                    name: {f"{b:g}": frontier(found, b, args.min_share) for b in BOUNDS_MS}
                    for name, found in steps.items()
                },
            }
        if args.frame_seconds > 0:
            framed = [t for t in targets if t.frames_url is not None]
            kind = all_kinds["frames"]
            await bench.warm_up(framed, [kind])
            frames: dict[str, Any] = {}
            for target in framed:
                log(f"frame timing: {target.name}, {args.frame_rate:g} streams/s")
                frames[target.name] = await bench.measured(
                    target, kind, args.frame_rate, args.frame_seconds
                )
                log(f"frames {target.name:<10} {_step_line(frames[target.name])}")
            out["frames"] = frames
        return out
    finally:
        await client.aclose()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of about a minute")
    parser.add_argument(
        "--kind", choices=("all", "nonstream", "stream"), default="all", help="which ladders"
    )
    parser.add_argument(
        "--seconds-per-step", type=float, default=None, help="per target (10; 2 with --quick)"
    )
    parser.add_argument(
        "--rates", type=float, nargs="+", default=None, help="the ladder's rates, req/s"
    )
    parser.add_argument("--start-rate", type=float, default=None, help="(25; 100 with --quick)")
    parser.add_argument("--max-rate", type=float, default=None, help="(6400; 3200 with --quick)")
    parser.add_argument("--factor", type=float, default=None, help="(1.41; 2 with --quick)")
    parser.add_argument("--arrivals", choices=ARRIVALS, default="poisson", help="(default poisson)")
    parser.add_argument(
        "--min-share",
        type=float,
        default=0.97,
        help="achieved / offered rate a passing step needs (default 0.97)",
    )
    parser.add_argument("--chunks", type=int, default=16, help="pieces per streamed reply")
    parser.add_argument(
        "--nonstream-chunks", type=int, default=16, help="pieces per non-streamed reply"
    )
    parser.add_argument("--workers", type=int, default=1, help="the gateway's --workers")
    parser.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        metavar="DIR",
        help="also serve another checkout's src/ DIR as target 'baseline' (PYTHONPATH, checked)",
    )
    parser.add_argument(
        "--peers",
        nargs="*",
        choices=PEERS,
        default=None,
        help="also these peers (none named: both), started as bench/compare.py does",
    )
    parser.add_argument("--frame-rate", type=float, default=20.0, help="paced streams per s")
    parser.add_argument("--frame-chunks", type=int, default=50, help="chunks per paced stream")
    parser.add_argument("--frame-interval-ms", type=float, default=10.0, help="between chunks")
    parser.add_argument(
        "--frame-seconds", type=float, default=None, help="per target (10; 4 with --quick; 0: none)"
    )
    parser.add_argument(
        "--warmup-seconds", type=float, default=None, help="per target and kind (3; 1)"
    )
    parser.add_argument("--cap", type=int, default=1000, help="most requests in flight")
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between two steps")
    parser.add_argument("--max-seconds", type=float, default=None, help="ladder cap (3600; 240)")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT", help="write results")
    parser.add_argument("--no-save", action="store_true", help="no bench/results/ JSON file")
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "seconds_per_step": 2.0 if quick else 10.0,
        "start_rate": 100.0 if quick else 25.0,
        "max_rate": 3200.0 if quick else 6400.0,
        "factor": 2.0 if quick else 1.41,
        "frame_seconds": 4.0 if quick else 10.0,
        "warmup_seconds": 1.0 if quick else 3.0,
        "max_seconds": 240.0 if quick else 3600.0,
    }
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.factor <= 1 or args.start_rate <= 0 or args.seconds_per_step <= 0:
        parser.error("--factor must be > 1, --start-rate and --seconds-per-step positive")
    if args.workers < 1 or args.cap < 1:
        parser.error("--workers and --cap must be positive")
    if args.peers == []:
        args.peers = list(PEERS)
    args.warm_rate = (args.rates and min(args.rates)) or args.start_rate
    return args


def _run(args: argparse.Namespace, s: Servers) -> dict[str, Any]:
    return run_async(asyncio.wait_for(measure(args, s), args.max_seconds + 600))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command, started, load_at_start = start_run("frontier", argv)
    try:
        baseline = prepare_baseline(args.baseline_src) if args.baseline_src else None
        with (
            tempfile.TemporaryDirectory(prefix="llmbridge-frontier-") as tmp,
            servers(args, Path(tmp), baseline) as s,
        ):
            log(
                f"backend :{s.backend.port}, paced :{s.paced.port}, gateway :{s.gateway.port} "
                f"(--workers {args.workers}); {CPUS} CPUs shared by all of them and the "
                "load generator"
            )
            results = _run(args, s)
            versions = dict(s.versions)
    except (RuntimeError, BaselineError) as exc:
        log(str(exc))
        return 2
    except TimeoutError:
        log("hard time cap reached; stopping")
        return 3
    document: dict[str, Any] = results_header(RunStart(command, started, load_at_start), args) | {
        "ladder": ladder(args),
        "bounds_ms": list(BOUNDS_MS),
        "peer_versions": versions,
        "results": results,
    }
    if baseline is not None:
        document["baseline"] = baseline.describe()
    print(
        f"\nllmbridge throughput frontier (open loop, {args.arrivals} arrivals, "
        f"{args.seconds_per_step:g} s per step, gateway --workers {args.workers}); "
        f"{CPUS} CPUs shared by the load generator, the backends and the gateways, so "
        "every figure is the whole system's; load average at start "
        f"{load_at_start}\n"
    )
    if baseline is not None:
        print(f"baseline: {baseline.label()}\n")
    if versions:
        print("peers: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + "\n")
    print(report(document))
    if not args.no_save:
        save_results("frontier", document, started, args.json)
    return 0


if __name__ == "__main__":
    entry_point(main)

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
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass
from typing import Any

import orjson

import peers
import wire
from fast_backend import reply_pieces
from harness import (
    CPUS,
    ProcessTree,
    Server,
    arguments,
    entry_point,
    gateway_config,
    log,
    prepare_baseline,
    quick_defaults,
    results_header,
    run_async,
    save_results,
    start_fast_backend,
    start_gateway,
    start_peer,
    start_run,
    wait_ready,
    workspace,
)
from http_clients import AiohttpClient, make_client
from load import figure, round_order, table
from open_loop import ARRIVALS, OpenLoop, Request, Shot, StepRun, schedule, summarise

BOUNDS_MS = (5.0, 10.0, 50.0)
"""The p99 bounds (ms) a frontier is reported for, as the field's benchmarks do."""
PACED_MODEL = "bench-paced"
"""The gateway's route to the paced backend (``gateway_config``'s ``bench-NAME``)."""
SSE_END = b"\n\n"


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
        wire.check("openai", self.stream, shot.raw, reply_pieces(self.pieces))
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
    paced = orjson.loads(wire.body("openai", True, args.frame_chunks))
    paced["model"] = PACED_MODEL
    n, c = args.nonstream_chunks, args.chunks
    return {
        "nonstream": Kind("nonstream", False, n, wire.body("openai", False, n)),
        "stream": Kind("stream", True, c, wire.body("openai", True, c)),
        "frames": Kind("frames", True, args.frame_chunks, orjson.dumps(paced), paced=True),
    }


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
    share = step["achieved_share"] or 0.0
    return step["errors"] == 0 and share >= min_share and p99 is not None and p99 <= bound_ms


def frontier(steps: list[dict[str, Any]], bound_ms: float, min_share: float) -> dict[str, Any]:
    """The highest rate passed with every step below it passed; ``reached``: whether a
    step failed (False: the ladder ended first, so the frontier is a lower bound)."""
    best: dict[str, Any] = {}
    failing = next((s for s in steps if not passes(s, bound_ms, min_share)), None)
    for step in steps:
        if step is failing:
            break
        best = step
    return {
        "rps": best.get("offered_rps"),
        "achieved_rps": best.get("achieved_rps"),
        "reached": failing is not None,
        "first_failing_rps": failing["offered_rps"] if failing else None,
        "generator_behind_at_failure": bool(failing and failing["generator_behind"]),
    }


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
            for target in (t for t in targets if t.streams or not kind.stream):
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
            loosest = max(BOUNDS_MS)
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


async def measure(args: argparse.Namespace, servers: dict[str, Server]) -> dict[str, Any]:
    client = make_client(args.cap, timeout_s=120.0)
    try:
        backend, paced = servers["backend"], servers["paced"]
        for server in list(servers.values()):
            try:
                await wait_ready(client, server)
            except RuntimeError as exc:
                if server.name not in args.peers:
                    raise
                log(f"{server.name} left out: {exc}")
                del servers[server.name]
        path = wire.path("openai")
        targets = [Target("direct", backend.url + path, backend.tree, frames_url=paced.url + path)]
        for name, server in servers.items():
            url = server.url + path
            if name in ("gateway", "baseline"):
                label = "llmbridge" if name == "gateway" else name
                targets.append(Target(label, url, server.tree, frames_url=url))
            elif name in args.peers:
                headers = peers.portkey_headers(backend.port) if name == "portkey" else None
                targets.append(Target(name, url, server.tree, name != "portkey", headers=headers))
        bench, every = Bench(client, args), kinds(args)
        plan = [every[k] for k in ("nonstream", "stream") if args.kind in ("all", k)]
        log("warming up: " + ", ".join(t.name for t in targets))
        await bench.warm_up(targets, plan)
        out: dict[str, Any] = {"targets": [t.name for t in targets], "kinds": {}}
        for kind in plan:
            log(f"{kind.key}: ladder {', '.join(f'{r:g}' for r in ladder(args))}/s")
            steps = await bench.ladder(targets, kind)
            fronts = {
                name: {f"{b:g}": frontier(found, b, args.min_share) for b in BOUNDS_MS}
                for name, found in steps.items()
            }
            out["kinds"][kind.key] = {"pieces": kind.pieces, "steps": steps, "frontier": fronts}
        if args.frame_seconds > 0:
            framed, kind = [t for t in targets if t.frames_url], every["frames"]
            await bench.warm_up(framed, [kind])
            out["frames"] = {}
            for target in framed:
                log(f"frame timing: {target.name}, {args.frame_rate:g} streams/s")
                found = await bench.measured(target, kind, args.frame_rate, args.frame_seconds)
                out["frames"][target.name] = found
                log(f"frames {target.name:<10} {_step_line(found)}")
        return out
    finally:
        await client.aclose()


# -- the report -------------------------------------------------------------------------------


def _rate(cell: dict[str, Any], first_rate: float) -> str:
    if cell["rps"] is None:
        return f"< {first_rate:g}"
    text = ("" if cell["reached"] else ">= ") + f"{cell['rps']:,.0f}"
    return text + (" *" if cell["generator_behind_at_failure"] else "")


def _share(mine: dict[str, Any], base: dict[str, Any]) -> str:
    if mine["rps"] is None or base["rps"] is None:
        return "-"
    return f"{mine['rps'] / base['rps']:.0%}" + ("" if base["reached"] and mine["reached"] else "?")


def steps_table(kind: dict[str, Any], stream: bool) -> str:
    head = ["target", "offered/s", "achieved/s (of scheduled)", "errors", "p50 ms", "p99 ms"]
    rows = [[*head, "p99.9 ms", "max ms", "first byte p99 ms", "gen lag p99 ms", "gen CPU"]]
    rows[0].append("server CPU")
    for name, steps in kind["steps"].items():
        for s in steps:
            lat, lag = s["latency_ms"], s["generator_lag_ms"]
            server = s["server_cpu_share"]
            rows.append(
                [
                    name,
                    f"{s['offered_rps']:g}",
                    f"{s['achieved_rps']:.0f} ({s['achieved_share']:.0%})",
                    str(s["errors"]),
                    figure(lat["p50"]),
                    figure(lat["p99"]),
                    figure(lat["p99.9"]),
                    figure(lat["max"], ".1f"),
                    figure((s.get("first_byte_ms") or {}).get("p99")),
                    figure(lag["p99"]) + (" *" if s["generator_behind"] else ""),
                    f"{s['generator_cpu_share']:.0%}",
                    "-" if server is None else f"{server:.0%}",
                ]
            )
    return table(rows if stream else [row[:8] + row[9:] for row in rows])


def frames_table(frames: dict[str, Any]) -> str:
    rows = [["target", "streams ok / errors", "content frames per stream"]]
    rows[0] += ["first content frame p50 / p99 ms", "gap p50 / p99 / max ms"]
    rows[0] += ["added to direct: first frame p50, gap p99 ms"]
    d_first = (frames.get("direct") or {}).get("first_frame_ms") or {}
    d_gap = (frames.get("direct") or {}).get("frame_gap_ms") or {}
    for name, s in frames.items():
        first, gap = s.get("first_frame_ms") or {}, s.get("frame_gap_ms") or {}
        added = "-"
        if name != "direct" and None not in (
            first.get("p50"),
            gap.get("p99"),
            d_first.get("p50"),
            d_gap.get("p99"),
        ):
            added = f"{first['p50'] - d_first['p50']:+.2f}, {gap['p99'] - d_gap['p99']:+.2f}"
        rows.append(
            [
                name,
                f"{s['ok']} / {s['errors']}",
                figure(s.get("frames_per_stream"), ".1f"),
                f"{figure(first.get('p50'))} / {figure(first.get('p99'))}",
                f"{figure(gap.get('p50'))} / {figure(gap.get('p99'))} / {figure(gap.get('max'))}",
                added,
            ]
        )
    return table(rows)


def report(document: dict[str, Any]) -> str:
    """The frontier per target and bound (and this tree over the baseline's), every step
    of the ladder, and the frame timing; from the results document alone, so a saved run
    renders again: ``report(orjson.loads(path.read_bytes()))``."""
    args, first_rate, out = document["settings"], document["ladder"][0], []
    results = document["results"]
    titles = {
        "nonstream": f"non-streamed ({args['nonstream_chunks']} pieces per reply)",
        "stream": f"streamed ({args['chunks']} chunks per stream, p99 of the whole stream)",
    }
    bounds = [f"{b:g}" for b in BOUNDS_MS]
    for key, kind in results["kinds"].items():
        front, direct = kind["frontier"], kind["frontier"].get("direct")
        rows = [["target", *(f"req/s at p99 <= {b} ms" for b in bounds)]]
        rows[0].append(f"share of direct ({' / '.join(bounds)} ms)")
        for name, cells in front.items():
            share = " / ".join(_share(cells[b], direct[b]) for b in bounds) if direct else "-"
            rows.append([name, *(_rate(cells[b], first_rate) for b in bounds), share])
        out += [f"## Throughput frontier, {titles[key]}", "", table(rows), ""]
        if "baseline" in front:
            versus = [
                [f"p99 <= {b} ms", _share(front["llmbridge"][b], front["baseline"][b])]
                for b in bounds
            ]
            out += [table([["bound", "llmbridge / baseline"], *versus]), ""]
        out += [f"### Steps, {key}", "", steps_table(kind, key == "stream"), ""]
    frames = results.get("frames") or {}
    if frames:
        out += [
            f"## Streaming frame timing: {args['frame_rate']:g} streams/s for "
            f"{args['frame_seconds']:g} s, {args['frame_chunks']} chunks "
            f"{args['frame_interval_ms']:g} ms apart",
            "",
            frames_table(frames),
            "",
        ]
    stepped = [
        (f"{k} {s['target']} at {s['offered_rps']:g}/s", s)
        for k, kind in results["kinds"].items()
        for steps in kind["steps"].values()
        for s in steps
    ]
    stepped += [(f"frame timing {name}", s) for name, s in frames.items()]
    failures = [
        f"- {where}: {s['errors']} failed, e.g. " + "; ".join(s["error_examples"])
        for where, s in stepped
        if s["errors"]
    ]
    if failures:
        out += ["Failures (the step fails every bound):", *failures, ""]
    out.append(
        "'>=': the ladder ended before the target failed that bound (a lower bound); "
        "'<': even the first rate failed; '*': the load generator was itself behind its "
        "schedule (lag p99 > 1 ms) at the first failing step, so that limit may be the "
        "generator's; '?' on a share: one side is a lower bound."
    )
    return "\n".join(out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = arguments(
        __doc__,
        quick="a smoke run of about a minute",
        baseline="also serve another checkout's src/ DIR as target 'baseline'",
    )
    add = parser.add_argument
    add("--kind", choices=("all", "nonstream", "stream"), default="all", help="which ladders")
    add("--seconds-per-step", type=float, help="per target (10; 2 with --quick)")
    add("--rates", type=float, nargs="+", help="the ladder's rates, req/s")
    add("--start-rate", type=float, help="(25; 100 with --quick)")
    add("--max-rate", type=float, help="(6400; 3200 with --quick)")
    add("--factor", type=float, help="(1.41; 2 with --quick)")
    add("--arrivals", choices=ARRIVALS, default="poisson", help="(default poisson)")
    add("--min-share", type=float, default=0.97, help="achieved / offered rate of a pass")
    add("--chunks", type=int, default=16, help="pieces per streamed reply")
    add("--nonstream-chunks", type=int, default=16, help="pieces per non-streamed reply")
    add("--workers", type=int, default=1, help="the gateway's --workers")
    add("--peers", nargs="*", choices=("litellm", "portkey"), help="also these (none: both)")
    add("--frame-rate", type=float, default=20.0, help="paced streams per s")
    add("--frame-chunks", type=int, default=50, help="chunks per paced stream")
    add("--frame-interval-ms", type=float, default=10.0, help="between chunks")
    add("--frame-seconds", type=float, help="per target (10; 4 with --quick; 0: none)")
    add("--warmup-seconds", type=float, help="per target and kind (3; 1)")
    add("--cap", type=int, default=1000, help="most requests in flight")
    add("--pause", type=float, default=0.5, help="seconds between two steps")
    add("--max-seconds", type=float, help="ladder cap (3600; 240)")
    args = quick_defaults(
        parser.parse_args(argv),
        seconds_per_step=(10.0, 2.0),
        start_rate=(25.0, 100.0),
        max_rate=(6400.0, 3200.0),
        factor=(1.41, 2.0),
        frame_seconds=(10.0, 4.0),
        warmup_seconds=(3.0, 1.0),
        max_seconds=(3600.0, 240.0),
    )
    if args.factor <= 1 or args.start_rate <= 0 or args.seconds_per_step <= 0:
        parser.error("--factor must be > 1, --start-rate and --seconds-per-step positive")
    if args.workers < 1 or args.cap < 1:
        parser.error("--workers and --cap must be positive")
    args.peers = ["litellm", "portkey"] if args.peers == [] else (args.peers or [])
    args.warm_rate = (args.rates and min(args.rates)) or args.start_rate
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = start_run("frontier", argv)
    baseline = prepare_baseline(args.baseline_src)
    with workspace("frontier") as (workdir, started):
        backend = started.add(start_fast_backend(workdir, "--chunks", str(args.chunks)))
        interval = ("--interval-ms", str(args.frame_interval_ms))
        options = ("--chunks", str(args.frame_chunks), *interval)
        paced = started.add(start_fast_backend(workdir, *options, name="paced"))
        config = gateway_config(backend.port, more={"paced": ("openai", paced.port)})
        workers = ("--workers", str(args.workers))
        servers = {"backend": backend, "paced": paced}
        servers["gateway"] = started.add(start_gateway(workdir, config, extra_args=workers))
        if baseline is not None:
            server = start_gateway(
                workdir, config, name="baseline", baseline=baseline, extra_args=workers
            )
            servers["baseline"] = started.add(server)
        for name in args.peers:
            try:  # a peer that cannot be installed or started is left out
                servers[name] = started.add(start_peer(name, workdir, backend.port, args.workers))
            except (RuntimeError, OSError) as exc:
                log(f"{name} left out: {exc}")
        log(f"gateway --workers {args.workers}; {CPUS} CPUs shared by all and the load generator")
        results = run_async(measure(args, servers), args.max_seconds + 600)
        versions = {name: peers.version(name) for name in args.peers if name in servers}
    document: dict[str, Any] = results_header(run, args) | {
        "ladder": ladder(args),
        "bounds_ms": list(BOUNDS_MS),
        "peer_versions": versions,
        "baseline": baseline.describe() if baseline else None,
        "results": results,
    }
    print(
        f"\nllmbridge throughput frontier (open loop, {args.arrivals} arrivals, "
        f"{args.seconds_per_step:g} s per step, gateway --workers {args.workers}); "
        f"{CPUS} CPUs shared by the load generator, the backends and the gateways, so "
        f"every figure is the whole system's; load average at start {run.load_at_start}\n"
    )
    if baseline is not None:
        print(f"baseline: {baseline.label()}\n")
    if versions:
        print("peers: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + "\n")
    print(report(document))
    save_results("frontier", document, run.started, args)
    return 0


if __name__ == "__main__":
    entry_point(main)

"""The ``compare`` scenario: llmbridge beside the LiteLLM proxy and the Portkey gateway,
and the stub backend called directly, in the same run, by the same load generator.

It starts the stub backend, ``llmbridge serve`` (one OpenAI-compatible backend), the
LiteLLM proxy (``litellm_proxy.py``: its own virtualenv, made on the first run) and
Portkey (``portkey_gateway.py``: npm, non-streamed only on Node 20), and drives six
targets: ``direct``, llmbridge's OpenAI, Ollama and Anthropic routes, ``litellm`` and
``portkey`` (byte-identical OpenAI bodies). Each cell (streamed or not, at each
concurrency) warms every target up, then measures each in ``--rounds`` closed-loop
rounds, the order reversed every round; every reply is checked after its timing
(``compare_routes.py``), and a failure makes the cell INVALID. Reported per target:
requests/s, p50/p99, time to first byte, CPU per 1,000 requests and peak RSS over each
server's process tree; then llmbridge's added p50 over LiteLLM's (target <= 0.10) and
its requests/s over LiteLLM's (target >= 5), and the same ratios against Portkey.
docs/PERFORMANCE.md has the method and the figures.
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

import http_clients
import litellm_proxy
import portkey_gateway
from compare_routes import ROUTES, Route
from fast_backend import reply_pieces
from harness import (
    CPUS,
    ProcessTree,
    Server,
    entry_point,
    gateway_config,
    load_average,
    log,
    results_header,
    run_async,
    save_results,
    start_fast_backend,
    start_gateway,
    start_peer,
    start_py_spy,
    start_run,
    stop_py_spy,
    stopping,
    system_busy_seconds,
    wait_ready,
)
from http_clients import BenchClient, Outcome, make_client
from overhead_stats import Scenario, Tally, percentile, render_table, summarise

TARGETS = (
    "direct",
    "llmbridge-openai",
    "llmbridge-ollama",
    "llmbridge-anthropic",
    "litellm",
    "portkey",
)
LLMBRIDGE = TARGETS[1:4]
ADDED_P50_TARGET = 0.10
THROUGHPUT_TARGET = 5.0


@dataclass(frozen=True)
class Cell:
    stream: bool
    concurrency: int
    pieces: int

    @property
    def key(self) -> str:
        return f"{'stream' if self.stream else 'nonstream'}-c{self.concurrency}"

    @property
    def title(self) -> str:
        kind = (
            f"streaming, {self.pieces} chunks"
            if self.stream
            else f"non-streaming, {self.pieces} pieces"
        )
        return f"{kind}, {self.concurrency} in flight"


@dataclass
class Target:
    name: str
    url: str
    route: Route
    proxy: ProcessTree | None
    """The server in front of the backend (None: the backend is the target)."""
    headers: dict[str, str] | None = None
    """Sent with every request besides the content type (Portkey's routing headers)."""
    streams: bool = True
    """False: measured in the non-streaming cells only (Portkey on Node 20)."""


@dataclass
class Measure:
    """One target in one cell: the shared ``Tally`` plus the memory peaks."""

    tally: Tally = field(default_factory=Tally)
    peak_proxy_mb: float = 0.0
    peak_backend_mb: float = 0.0


# -- load -----------------------------------------------------------------------------------


class Runner:
    """Closed-loop load of one target at a time, timed, then checked."""

    def __init__(self, client: BenchClient, backend: ProcessTree) -> None:
        self.client, self.backend = client, backend

    def _cpu(self, target: Target) -> dict[str, float]:
        cpu = {"backend": self.backend.cpu_seconds(), "client": time.process_time()}
        if target.proxy is not None:
            cpu["proxy"] = target.proxy.cpu_seconds()
        cpu["system"] = system_busy_seconds()
        return cpu

    async def batch(self, target: Target, cell: Cell, seconds: float, measure: Measure) -> None:
        body = target.route.body(cell.stream, cell.pieces)
        url, stream, fetch, headers = target.url, cell.stream, self.client.fetch, target.headers
        outcomes: list[Outcome] = []
        stop_at = 0.0

        async def worker(slot: int) -> None:
            while time.perf_counter() < stop_at:
                outcomes.append(await fetch(slot, url, body, stream, headers))

        trees = [t for t in (target.proxy, self.backend) if t is not None]
        for tree in trees:
            tree.reset_peak()
        cpu_before = self._cpu(target)
        started = time.perf_counter()
        stop_at = started + seconds
        await asyncio.gather(*(worker(i) for i in range(cell.concurrency)))
        wall = time.perf_counter() - started
        cpu_after = self._cpu(target)
        tally = measure.tally
        tally.wall += wall
        tally.batches += 1
        used = {name: value - cpu_before[name] for name, value in cpu_after.items()}
        ours = sum(v for k, v in used.items() if k != "system")
        used["other"] = max(0.0, used.pop("system") - ours)
        for name, value in used.items():
            tally.cpu[name] = tally.cpu.get(name, 0.0) + value
        if target.proxy is not None:
            measure.peak_proxy_mb = max(measure.peak_proxy_mb, target.proxy.peak_rss_mb())
        measure.peak_backend_mb = max(measure.peak_backend_mb, self.backend.peak_rss_mb())
        expected = reply_pieces(cell.pieces)
        tally.record(outcomes, lambda raw: target.route.check(cell.stream, raw, expected))

    async def warm_up(self, targets: list[Target], args: argparse.Namespace) -> None:
        """Untimed traffic of both kinds to every target before anything is measured or
        profiled: LiteLLM imports parts of the openai SDK on its first stream."""
        for target in targets:
            for stream in (False, True) if target.streams else (False,):
                pieces = args.chunks if stream else args.nonstream_chunks
                cell = Cell(stream, min(4, max(args.concurrency)), pieces)
                await self.batch(target, cell, args.warmup_seconds, Measure())

    async def run_cell(
        self, targets: list[Target], cell: Cell, args: argparse.Namespace
    ) -> dict[str, Measure]:
        targets = [t for t in targets if t.streams or not cell.stream]
        for target in targets:
            warm = Measure()
            await self.batch(target, cell, args.warmup_seconds, warm)
            if warm.tally.failures:
                log(
                    f"{cell.key} warm-up of {target.name}: {warm.tally.failures} failed, "
                    f"e.g. {warm.tally.failure_examples[0]}"
                )
        measures = {t.name: Measure() for t in targets}
        for index in range(args.rounds):
            order = targets if index % 2 == 0 else targets[::-1]
            for target in order:
                await self.batch(target, cell, args.round_seconds, measures[target.name])
            log(f"{cell.key} round {index + 1}/{args.rounds}: " + _round_line(measures))
        return measures


def _round_line(measures: dict[str, Measure]) -> str:
    parts = []
    for name, m in measures.items():
        p50 = m.tally.round_p50s[-1] * 1000 if m.tally.round_p50s else float("nan")
        failed = f", {m.tally.failures} failed" if m.tally.failures else ""
        parts.append(f"{name} p50 {p50:.2f} ms{failed}")
    return "; ".join(parts)


# -- results --------------------------------------------------------------------------------


def summarise_cell(cell: Cell, measures: dict[str, Measure]) -> dict[str, Any]:
    scenario = Scenario(cell.key, cell.title, cell.stream, cell.concurrency, cell.pieces, 0, 0)
    targets: dict[str, Any] = {}
    for name, m in measures.items():
        s = summarise(m.tally, scenario)
        s["first_byte_ms_p99"] = (
            percentile(sorted(m.tally.first_bytes), 0.99) * 1000 if cell.stream else None
        )
        per_k = {k: v / 1000 for k, v in s["cpu_us_per_request"].items()}
        s["cpu_s_per_1000_requests"] = per_k
        s["peak_proxy_mb"] = m.peak_proxy_mb if name != "direct" else None
        s["peak_backend_mb"] = m.peak_backend_mb
        targets[name] = s
    return {
        "key": cell.key,
        "title": cell.title,
        "stream": cell.stream,
        "concurrency": cell.concurrency,
        "pieces": cell.pieces,
        "targets": targets,
        "ratios": ratios(targets),
    }


def _ok(summary: dict[str, Any] | None) -> bool:
    return bool(summary and summary["requests_ok"] and not summary["failures"])


def ratios(targets: dict[str, Any]) -> dict[str, Any]:
    """Per llmbridge route: added p50 over LiteLLM's, requests/s over LiteLLM's (with the
    issue's targets and a verdict); the same two over Portkey's (``portkey_*``, figures
    only) where Portkey was measured."""
    direct, litellm = targets.get("direct"), targets.get("litellm")
    portkey = targets.get("portkey")
    out: dict[str, Any] = {}
    for name in LLMBRIDGE:
        mine = targets.get(name)
        if mine is None:
            continue
        entry: dict[str, Any] = {"added_p50_ms": None, "litellm_added_p50_ms": None}
        if direct is not None and _ok(direct):
            base = direct["latency_ms"]["p50"]
            entry["added_p50_ms"] = mine["latency_ms"]["p50"] - base
            if litellm is not None:
                entry["litellm_added_p50_ms"] = litellm["latency_ms"]["p50"] - base
        added, theirs = entry["added_p50_ms"], entry["litellm_added_p50_ms"]
        entry["added_p50_ratio"] = added / theirs if added is not None and theirs else None
        rps, their_rps = mine["requests_per_s"], (litellm or {}).get("requests_per_s")
        entry["throughput_ratio"] = rps / their_rps if rps and their_rps else None
        if litellm is None:
            entry["verdict"] = "n/a (no LiteLLM)"
        elif not (_ok(mine) and _ok(direct) and _ok(litellm)):
            entry["verdict"] = "INVALID (failures or no data)"
        else:
            lat_ok = entry["added_p50_ratio"] is not None and (
                entry["added_p50_ratio"] <= ADDED_P50_TARGET
            )
            tput_ok = (entry["throughput_ratio"] or 0.0) >= THROUGHPUT_TARGET
            entry["latency_met"], entry["throughput_met"] = lat_ok, tput_ok
            entry["verdict"] = "PASS" if lat_ok and tput_ok else "FAIL"
        if portkey is not None:
            entry.update(_versus(mine, direct, portkey, "portkey"))
        out[name] = entry
    return out


def _versus(
    mine: dict[str, Any], direct: dict[str, Any] | None, other: dict[str, Any], prefix: str
) -> dict[str, Any]:
    """``mine`` against another proxy ``other`` in one cell: its added p50, ours over
    theirs, and our requests/s over theirs (None where either side failed)."""
    valid = _ok(mine) and _ok(direct) and _ok(other)
    entry: dict[str, Any] = {f"{prefix}_valid": valid}
    theirs = mine_added = None
    if valid and direct is not None:
        base = direct["latency_ms"]["p50"]
        theirs = other["latency_ms"]["p50"] - base
        mine_added = mine["latency_ms"]["p50"] - base
    entry[f"{prefix}_added_p50_ms"] = theirs
    entry[f"{prefix}_added_p50_ratio"] = (
        mine_added / theirs if mine_added is not None and theirs else None
    )
    rps, their_rps = mine["requests_per_s"], other["requests_per_s"]
    entry[f"{prefix}_throughput_ratio"] = rps / their_rps if valid and rps and their_rps else None
    return entry


def _f(value: float | None, spec: str) -> str:
    return "n/a" if value is None or value != value else format(value, spec)


def cell_table(cell: dict[str, Any]) -> str:
    head = [
        "target",
        "req/s",
        "p50 ms",
        "p99 ms",
        "TTFT p50 ms",
        "added p50 ms",
        "proxy CPU s/1k req",
        "backend CPU s/1k",
        "proxy peak MB",
        "other load",
        "ok / failed",
    ]
    rows = [head]
    direct = cell["targets"].get("direct")
    base = direct["latency_ms"]["p50"] if direct else None
    for name, s in cell["targets"].items():
        cpu = s["cpu_s_per_1000_requests"]
        p50 = s["latency_ms"]["p50"]
        rows.append(
            [
                name,
                _f(s["requests_per_s"], ",.0f"),
                _f(p50, ".3f"),
                _f(s["latency_ms"]["p99"], ".3f"),
                _f(s.get("first_byte_ms_p50"), ".3f"),
                "-" if name == "direct" or base is None else f"{p50 - base:+.3f}",
                _f(cpu.get("proxy"), ".3f") if name != "direct" else "-",
                _f(cpu.get("backend"), ".3f"),
                _f(s["peak_proxy_mb"], ".0f") if name != "direct" else "-",
                f"{s['other_load']:.0%}",
                f"{s['requests_ok']} / {s['failures']}",
            ]
        )
    return render_table(rows)


def ratio_table(cells: list[dict[str, Any]]) -> str:
    head = [
        "cell",
        "llmbridge route",
        "added p50 ms (llmbridge / litellm)",
        "added p50 ratio (<= 0.10)",
        "req/s ratio (>= 5)",
        "result",
    ]
    rows = [head]
    for cell in cells:
        for name, r in cell["ratios"].items():
            rows.append(
                [
                    cell["key"],
                    name.removeprefix("llmbridge-"),
                    f"{_f(r['added_p50_ms'], '.3f')} / {_f(r['litellm_added_p50_ms'], '.3f')}",
                    _f(r["added_p50_ratio"], ".3f"),
                    "n/a" if r["throughput_ratio"] is None else f"x{r['throughput_ratio']:.1f}",
                    r["verdict"],
                ]
            )
    return render_table(rows)


def portkey_table(cells: list[dict[str, Any]]) -> str:
    head = [
        "cell",
        "llmbridge route",
        "added p50 ms (llmbridge / portkey)",
        "added p50 ratio",
        "req/s ratio",
    ]
    rows = [head]
    for cell in cells:
        for name, r in cell["ratios"].items():
            if "portkey_valid" not in r:
                continue
            invalid = "" if r["portkey_valid"] else " (INVALID: failures or no data)"
            rows.append(
                [
                    cell["key"],
                    name.removeprefix("llmbridge-"),
                    f"{_f(r['added_p50_ms'], '.3f')} / {_f(r['portkey_added_p50_ms'], '.3f')}",
                    _f(r["portkey_added_p50_ratio"], ".3f"),
                    (
                        "n/a"
                        if r["portkey_throughput_ratio"] is None
                        else f"x{r['portkey_throughput_ratio']:.1f}"
                    )
                    + invalid,
                ]
            )
    return render_table(rows) if len(rows) > 1 else "(Portkey not measured)"


def report(document: dict[str, Any]) -> str:
    out = []
    for cell in document["cells"]:
        out += [f"{cell['key']}: {cell['title']}", "", cell_table(cell), ""]
        for name, s in cell["targets"].items():
            out += [f"  failure {name}: {e}" for e in s["failure_examples"]]
    out += [
        "Ratios (llmbridge vs LiteLLM, same cell, same run):",
        "",
        ratio_table(document["cells"]),
        "",
        "Ratios (llmbridge vs Portkey, non-streaming cells, same run):",
        "",
        portkey_table(document["cells"]),
    ]
    verdicts = [r["verdict"] for c in document["cells"] for r in c["ratios"].values()]
    openai = [c["ratios"].get("llmbridge-openai", {}).get("verdict") for c in document["cells"]]
    out += [
        "",
        f"OpenAI route (the like-for-like comparison): {openai.count('PASS')} of {len(openai)} "
        f"cells meet both targets; all routes: {verdicts.count('PASS')} of {len(verdicts)}.",
    ]
    return "\n".join(out)


# -- processes ------------------------------------------------------------------------------


@dataclass
class Servers:
    backend: Server
    gateway: Server
    litellm: Server | None
    portkey: Server | None = None


@contextlib.contextmanager
def servers(args: argparse.Namespace, workdir: Path) -> Iterator[Servers]:
    with stopping() as started:
        backend = start_fast_backend(workdir, "--chunks", str(args.chunks))
        started.append(backend)
        started.append(start_gateway(workdir, gateway_config("openai", backend.port)))
        peers: dict[str, Server | None] = {"litellm": None, "portkey": None}
        for name in peers:
            if not getattr(args, f"no_{name}"):
                peer = start_peer(name, workdir, backend.port, args.litellm_workers)
                started.append(peer)
                peers[name] = peer
        yield Servers(backend, started[1], peers["litellm"], peers["portkey"])


def make_targets(s: Servers) -> list[Target]:
    def at(server: Server, route: str) -> str:
        return f"http://127.0.0.1:{server.port}{ROUTES[route].path}"

    gateway = ProcessTree(s.gateway.pid)
    targets = [
        Target("direct", at(s.backend, "openai"), ROUTES["openai"], None),
        Target("llmbridge-openai", at(s.gateway, "openai"), ROUTES["openai"], gateway),
        Target("llmbridge-ollama", at(s.gateway, "ollama"), ROUTES["ollama"], gateway),
        Target("llmbridge-anthropic", at(s.gateway, "anthropic"), ROUTES["anthropic"], gateway),
    ]
    if s.litellm is not None:
        tree = ProcessTree(s.litellm.pid)
        targets.append(Target("litellm", at(s.litellm, "openai"), ROUTES["openai"], tree))
    if s.portkey is not None:
        headers = portkey_gateway.headers(s.backend.port)
        tree = ProcessTree(s.portkey.pid)
        route = ROUTES["openai"]
        targets.append(Target("portkey", at(s.portkey, "openai"), route, tree, headers, False))
    return targets


async def measure(args: argparse.Namespace, s: Servers) -> list[dict[str, Any]]:
    # A LiteLLM stream at concurrency 256 takes 30 s or more here; http_clients' 60 s
    # cap would turn a slow reply into a failure, and this benchmark measures slowness.
    http_clients._TIMEOUT_S = max(http_clients._TIMEOUT_S, args.max_seconds)
    client = make_client(max_connections=max(args.concurrency))
    sampler: subprocess.Popen[bytes] | None = None
    try:
        await wait_ready(client, s.backend, "/v1/models")
        await wait_ready(client, s.gateway, "/health")
        if s.litellm is not None:
            log("waiting for the LiteLLM proxy (about 10 s to start)")
            await wait_ready(client, s.litellm, "/health/liveliness", patience=180.0)
        if s.portkey is not None:
            await wait_ready(client, s.portkey, portkey_gateway.HEALTH_PATH)
        targets = make_targets(s)
        runner = Runner(client, ProcessTree(s.backend.pid))
        log("warming every target up")
        await runner.warm_up(targets, args)
        if args.py_spy is not None:
            victim = s.litellm if args.py_spy_target == "litellm" else s.gateway
            if victim is None:
                raise RuntimeError("--py-spy-target litellm needs the LiteLLM proxy")
            sampler = start_py_spy(args.py_spy, victim.pid)
        cells = [
            Cell(stream, c, args.chunks if stream else args.nonstream_chunks)
            for stream in (False, True)
            if args.kind in ("all", "stream" if stream else "nonstream")
            for c in args.concurrency
        ]
        results = []
        for cell in cells:
            log(f"{cell.key}: {cell.title}; {args.rounds} rounds of {args.round_seconds:g} s each")
            measures = await runner.run_cell(targets, cell, args)
            results.append(summarise_cell(cell, measures))
        return results
    finally:
        if sampler is not None:
            stop_py_spy(sampler)
        await client.aclose()


# -- main -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="concurrency 1 and 64, short rounds")
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=None,
        help="requests in flight per cell (default 1 64 256; 1 64 with --quick)",
    )
    parser.add_argument(
        "--kind",
        choices=("all", "nonstream", "stream"),
        default="all",
        help="which half of the grid to run (default all)",
    )
    parser.add_argument("--rounds", type=int, default=None, help="per target and cell (3)")
    parser.add_argument("--round-seconds", type=float, default=None, help="(default 3)")
    parser.add_argument("--warmup-seconds", type=float, default=None, help="(default 1)")
    parser.add_argument("--chunks", type=int, default=200, help="pieces per streamed reply")
    parser.add_argument(
        "--nonstream-chunks", type=int, default=16, help="pieces per non-streamed reply"
    )
    parser.add_argument("--json", type=Path, default=None, metavar="OUT", help="write results")
    parser.add_argument(
        "--no-litellm", action="store_true", help="leave LiteLLM out (no ratios; debugging)"
    )
    parser.add_argument("--no-portkey", action="store_true", help="leave the Portkey gateway out")
    parser.add_argument(
        "--litellm-workers", type=int, default=1, help="LiteLLM's --num_workers (default 1)"
    )
    parser.add_argument(
        "--py-spy",
        type=Path,
        default=None,
        metavar="FILE",
        help="sample --py-spy-target with py-spy (PATH or $PY_SPY) while measuring; the "
        "timings of such a run are not comparable",
    )
    parser.add_argument("--py-spy-target", choices=("litellm", "llmbridge"), default="litellm")
    parser.add_argument("--max-seconds", type=float, default=None, help="hard cap (900; 300)")
    parser.add_argument("--no-save", action="store_true", help="no bench/results/ JSON file")
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "concurrency": [1, 64] if quick else [1, 64, 256],
        "rounds": 2 if quick else 3,
        "round_seconds": 1.0 if quick else 3.0,
        "warmup_seconds": 0.5 if quick else 1.0,
        "max_seconds": 300.0 if quick else 900.0,
    }
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if min(args.concurrency) < 1 or args.rounds < 1 or args.round_seconds <= 0:
        parser.error("--concurrency, --rounds and --round-seconds must be positive")
    return args


def _run_measure(args: argparse.Namespace, s: Servers) -> list[dict[str, Any]]:
    return run_async(asyncio.wait_for(measure(args, s), args.max_seconds))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = start_run("compare", argv)
    version = ""
    if not args.no_litellm:
        litellm_proxy.ensure_venv(log)
        version = litellm_proxy.installed_version()
        log(f"LiteLLM {version} from {litellm_proxy.VENV}")
    portkey_version = ""
    if not args.no_portkey:
        portkey_gateway.ensure_installed(log)
        portkey_version = portkey_gateway.installed_version()
        log(f"Portkey gateway {portkey_version} from {portkey_gateway.PACKAGE_DIR}")
    # After the peers' installs, which may take minutes: the run itself starts here.
    run = run._replace(started=time.time(), load_at_start=load_average())
    busy_before = system_busy_seconds()
    with (
        tempfile.TemporaryDirectory(prefix="llmbridge-compare-") as tmp,
        servers(args, Path(tmp)) as s,
    ):
        servers_up = (s.backend, s.gateway, s.litellm, s.portkey)
        trees = [ProcessTree(x.pid) for x in servers_up if x is not None]
        cpu_before = sum(t.cpu_seconds() for t in trees) + time.process_time()
        try:
            cells = _run_measure(args, s)
        except RuntimeError as exc:
            log(str(exc))
            return 2
        except TimeoutError:
            log(f"hard time cap of {args.max_seconds:.0f} s reached; stopping")
            return 3
        ours = sum(t.cpu_seconds() for t in trees) + time.process_time() - cpu_before
    duration = time.time() - run.started
    other = max(0.0, system_busy_seconds() - busy_before - ours)
    document: dict[str, Any] = results_header(run, args)
    document["machine"]["other_load"] = other / (duration * CPUS)
    document |= {
        "litellm_version": version,
        "portkey_version": portkey_version,
        "client": "aiohttp",
        "profiled": args.py_spy is not None,
        "peak_mb": {
            name: max(
                c["targets"][name]["peak_proxy_mb"] or 0.0 for c in cells if name in c["targets"]
            )
            for name in dict.fromkeys(t for c in cells for t in c["targets"])
            if name != "direct"
        },
        "cells": cells,
    }
    print(
        f"\nllmbridge vs LiteLLM {version or '(left out)'} vs Portkey "
        f"{portkey_version or '(left out)'} vs the backend directly; {CPUS} CPUs; "
        f"load average at start {run.load_at_start}; other processes kept "
        f"{document['machine']['other_load']:.0%} of the machine busy\n"
    )
    if document["profiled"]:
        print(
            f"NOTE: {args.py_spy_target} was profiled during this run; its timings are inflated.\n"
        )
    print(report(document))
    if not args.no_save:
        save_results("compare", document, run.started, args.json)
    invalid = any(r["verdict"].startswith("INVALID") for c in cells for r in c["ratios"].values())
    return 1 if invalid else 0


if __name__ == "__main__":
    entry_point(main)

"""The ``compare`` scenario: llmbridge beside the LiteLLM proxy and the Portkey gateway,
and the stub backend called directly, in the same run, by the same load generator.

It starts the stub backend, ``llmbridge serve`` (one OpenAI-compatible backend), the
LiteLLM proxy and Portkey (``peers.py``: LiteLLM in its own virtualenv, made on the
first run; Portkey non-streamed only on Node 20), and drives six targets: ``direct``,
llmbridge's OpenAI, Ollama and Anthropic routes, ``litellm`` and ``portkey``
(byte-identical OpenAI bodies). Each cell (streamed or not, at each concurrency) warms
every target up, then measures each in ``--rounds`` closed-loop rounds of
``--round-seconds`` (``load.py``: the order rotated and reversed every round); every
reply is checked after its timing (``wire.py``), and a failure makes the cell INVALID.
Reported per target: requests/s, p50/p99, time to first byte, CPU per 1,000 requests
and peak RSS over each server's process tree; then llmbridge's added p50 over LiteLLM's
(target <= 0.10) and its requests/s over LiteLLM's (target >= 5), and the same ratios
against Portkey. With ``--floors``, ``floor_proxy.py``'s three floors join them, and
each llmbridge route's ratios to each floor are reported; with ``--baseline-src DIR``,
that checkout's gateway too (its three routes, ``baseline-openai``...), in the same rounds.
docs/PERFORMANCE.md has the method and the figures.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import peers
from harness import (
    CPUS,
    Server,
    arguments,
    entry_point,
    gateway_config,
    load_average,
    log,
    prepare_baseline,
    py_spy,
    quick_defaults,
    results_header,
    run_async,
    save_results,
    start_fast_backend,
    start_gateway,
    start_peer,
    start_run,
    system_busy_seconds,
    wait_ready,
    workspace,
)
from http_clients import make_client
from load import Cell, Runner, Tally, Target, figure, summarise, table

LLMBRIDGE = ("llmbridge-openai", "llmbridge-ollama", "llmbridge-anthropic")
BASELINE = ("baseline-openai", "baseline-ollama", "baseline-anthropic")
"""``--baseline-src``: that checkout's gateway and the same three routes, in the same
rounds: a change measured by the floors' own harness (the floors' ratios move between
runs on a VM more than a change does within one). All three, so that each gateway
process serves the same mix of traffic."""
PEERS = ("litellm", "portkey")
FLOORS = ("floor", "floor-reencode", "floor-decode")
"""``--floors``: floor_proxy.py forwarding only, decoding and re-encoding each event, and
reading each request as llmbridge does (``FLOOR_DECODE``) before forwarding it."""
ADDED_P50_TARGET = 0.10
THROUGHPUT_TARGET = 5.0


def summarise_cell(cell: Cell, tallies: dict[str, Tally]) -> dict[str, Any]:
    targets: dict[str, Any] = {}
    for name, tally in tallies.items():
        s = targets[name] = summarise(tally, cell.stream)
        s["cpu_s_per_1000_requests"] = {k: v / 1000 for k, v in s["cpu_us_per_request"].items()}
    out = {"key": cell.key, "title": cell.title, "stream": cell.stream, "targets": targets}
    return out | {"concurrency": cell.concurrency, "pieces": cell.pieces, "ratios": ratios(targets)}


def _ok(summary: dict[str, Any] | None) -> bool:
    return bool(summary and summary["requests_ok"] and not summary["failures"])


def ratios(targets: dict[str, Any]) -> dict[str, Any]:
    """Per llmbridge route and peer: both added p50s (over direct's), ours over theirs,
    and our requests/s over theirs (None where either side failed); against LiteLLM, the
    verdict on the targets."""
    direct, out = targets.get("direct"), {}
    for name in (n for n in LLMBRIDGE if n in targets):
        mine, entry = targets[name], dict[str, Any]()
        for peer in (p for p in PEERS if p in targets):
            other = targets[peer]
            valid = _ok(mine) and _ok(direct) and _ok(other)
            base = direct["latency_ms"]["p50"] if valid and direct else 0.0
            ours = mine["latency_ms"]["p50"] - base if valid else None
            theirs = other["latency_ms"]["p50"] - base if valid else None
            rps, their_rps = mine["requests_per_s"], other["requests_per_s"]
            entry[peer] = {
                "valid": valid,
                "added_p50_ms": ours,
                "peer_added_p50_ms": theirs,
                "added_p50_ratio": ours / theirs if ours is not None and theirs else None,
                "throughput_ratio": rps / their_rps if valid and rps and their_rps else None,
            }
        litellm = entry.get("litellm")
        if litellm is None:
            entry["verdict"] = "n/a (no LiteLLM)"
        elif not litellm["valid"]:
            entry["verdict"] = "INVALID (failures or no data)"
        else:
            latency = (litellm["added_p50_ratio"] or 1.0) <= ADDED_P50_TARGET
            throughput = (litellm["throughput_ratio"] or 0.0) >= THROUGHPUT_TARGET
            entry["verdict"] = "PASS" if latency and throughput else "FAIL"
        out[name] = entry
    return out


def floor_table(cells: list[dict[str, Any]]) -> str:
    """Each llmbridge route against each floor in the same cell: requests/s over the
    floor's, added p50 over the floor's added p50, proxy CPU per request over the
    floor's (the pass-through path's targets: >= 0.80, <= 1.25, <= 1.25)."""
    rows = [["cell", "llmbridge route", "floor", "req/s ratio", "added p50 ratio", "CPU ratio"]]
    for cell in cells:
        targets = cell["targets"]
        direct = targets.get("direct")
        for floor in (f for f in FLOORS if f in targets):
            base, low = targets[floor], direct["latency_ms"]["p50"] if direct else 0.0
            for name in (n for n in (*LLMBRIDGE, *BASELINE) if n in targets):
                mine = targets[name]
                if not (_ok(mine) and _ok(base) and _ok(direct)):
                    rows.append([cell["key"], name, floor, "INVALID", "", ""])
                    continue
                added = (mine["latency_ms"]["p50"] - low) / (
                    base["latency_ms"]["p50"] - low or 1e-9
                )
                cpu = mine["cpu_s_per_1000_requests"].get("proxy") or 0.0
                floor_cpu = base["cpu_s_per_1000_requests"].get("proxy") or 1e-9
                rows.append(
                    [
                        cell["key"],
                        name.removeprefix("llmbridge-"),
                        floor,
                        f"x{mine['requests_per_s'] / (base['requests_per_s'] or 1e-9):.2f}",
                        f"x{added:.2f}",
                        f"x{cpu / floor_cpu:.2f}",
                    ]
                )
    return table(rows) if len(rows) > 1 else "(no floor measured)"


def cell_table(cell: dict[str, Any]) -> str:
    head = ["target", "req/s", "p50 ms", "p99 ms", "TTFT p50 ms", "added p50 ms"]
    rows = [[*head, "proxy CPU s/1k req", "backend CPU s/1k", "proxy peak MB", "other load"]]
    rows[0].append("ok / failed")
    direct = cell["targets"].get("direct")
    base = direct["latency_ms"]["p50"] if direct else None
    for name, s in cell["targets"].items():
        cpu, p50, own = s["cpu_s_per_1000_requests"], s["latency_ms"]["p50"], name != "direct"
        rows.append(
            [
                name,
                figure(s["requests_per_s"], ",.0f"),
                figure(p50, ".3f"),
                figure(s["latency_ms"]["p99"], ".3f"),
                figure(s.get("first_byte_ms", {}).get("p50"), ".3f"),
                f"{p50 - base:+.3f}" if own and base is not None and p50 is not None else "-",
                figure(cpu.get("proxy"), ".3f") if own else "-",
                figure(cpu.get("backend"), ".3f"),
                figure(s["peak_mb"].get("proxy"), ".0f") if own else "-",
                f"{s['other_load']:.0%}",
                f"{s['requests_ok']} / {s['failures']}",
            ]
        )
    return table(rows)


def versus_table(cells: list[dict[str, Any]], peer: str) -> str:
    goals = ("(<= 0.10)", "(>= 5)") if peer == "litellm" else ("", "")
    rows = [["cell", "llmbridge route", f"added p50 ms (llmbridge / {peer})"]]
    rows[0] += [f"added p50 ratio {goals[0]}", f"req/s ratio {goals[1]}", "result"]
    for cell in cells:
        for name, r in cell["ratios"].items():
            if (v := r.get(peer)) is None:
                continue
            added = f"{figure(v['added_p50_ms'], '.3f')} / {figure(v['peer_added_p50_ms'], '.3f')}"
            result = r["verdict"] if peer == "litellm" else ("" if v["valid"] else "INVALID")
            throughput = v["throughput_ratio"]
            ratio = "-" if throughput is None else f"x{throughput:.1f}"
            route = name.removeprefix("llmbridge-")
            rows.append(
                [cell["key"], route, added, figure(v["added_p50_ratio"], ".3f"), ratio, result]
            )
    return table(rows) if len(rows) > 1 else f"({peer} not measured)"


def report(cells: list[dict[str, Any]]) -> str:
    out = []
    for cell in cells:
        out += [f"{cell['key']}: {cell['title']}", "", cell_table(cell), ""]
        for name, s in cell["targets"].items():
            out += [f"  failure {name}: {e}" for e in s["failure_examples"]]
    out += [
        "Ratios (llmbridge vs LiteLLM, same cell, same run):",
        "",
        versus_table(cells, "litellm"),
    ]
    out += ["", "Ratios (llmbridge vs Portkey, same run):", "", versus_table(cells, "portkey")]
    if any(floor in c["targets"] for c in cells for floor in FLOORS):
        out += ["", "Ratios (llmbridge vs the floors, same run):", "", floor_table(cells)]
    verdicts = [r["verdict"] for c in cells for r in c["ratios"].values()]
    openai = [c["ratios"].get("llmbridge-openai", {}).get("verdict") for c in cells]
    out += [
        "",
        f"OpenAI route (the like-for-like comparison): {openai.count('PASS')} of {len(openai)} "
        f"cells meet both targets; all routes: {verdicts.count('PASS')} of {len(verdicts)}.",
    ]
    return "\n".join(out)


async def measure(
    args: argparse.Namespace, backend: Server, gateway: Server, others: dict[str, Server]
) -> list[dict[str, Any]]:
    # A LiteLLM stream at concurrency 256 takes 30 s or more here: a 60 s cap would turn
    # a slow reply into a failure, and this benchmark measures slowness.
    client = make_client(max(args.concurrency), timeout_s=max(60.0, args.max_seconds))
    try:
        if "litellm" in others:
            log("waiting for the LiteLLM proxy (about 10 s to start)")
        await wait_ready(client, backend, gateway, *others.values())
        targets = [Target("direct", backend.url)]
        targets += [Target(n, gateway.url, n.split("-")[1], gateway.tree) for n in LLMBRIDGE]
        for name, peer in others.items():
            if name == "baseline":
                targets += [Target(n, peer.url, n.split("-")[1], peer.tree) for n in BASELINE]
                continue
            if name in FLOORS:
                targets.append(Target(name, peer.url, "openai", peer.tree))
                continue
            headers = peers.portkey_headers(backend.port) if name == "portkey" else None
            targets.append(
                Target(name, peer.url, proxy=peer.tree, headers=headers, streams=name != "portkey")
            )
        runner = Runner(client, backend.tree)
        log("warming every target up")
        pieces = {False: args.nonstream_chunks, True: args.chunks}
        for stream in (False, True):  # LiteLLM imports parts of the openai SDK on its first stream
            cell = Cell(stream, min(4, max(args.concurrency)), pieces[stream])
            await runner.warm_up(targets, cell, seconds=args.warmup_seconds)
        victim = others.get("litellm") if args.py_spy_target == "litellm" else gateway
        if args.py_spy and victim is None:
            raise RuntimeError("--py-spy-target litellm needs the LiteLLM proxy")
        results = []
        with py_spy(args.py_spy, victim.pid if victim else 0):
            for stream in (False, True):
                if args.kind not in ("all", "stream" if stream else "nonstream"):
                    continue
                for concurrency in args.concurrency:
                    cell = Cell(stream, concurrency, pieces[stream])
                    log(f"{cell.key}: {cell.title}; {args.rounds} rounds of {args.round_seconds} s")
                    await runner.warm_up(targets, cell, seconds=args.warmup_seconds)
                    tallies = await runner.rounds(
                        targets, cell, args.rounds, seconds=args.round_seconds
                    )
                    results.append(summarise_cell(cell, tallies))
        return results
    finally:
        await client.aclose()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = arguments(
        __doc__,
        quick="concurrency 1 and 64, short rounds",
        baseline="serve that checkout's gateway beside this one (its three routes, "
        "baseline-openai...), in the same rounds",
    )
    add = parser.add_argument
    add("--concurrency", type=int, nargs="+", help="in flight per cell (1 64 256; 1 64)")
    add("--kind", choices=("all", "nonstream", "stream"), default="all", help="half the grid")
    add("--rounds", type=int, help="per target and cell (3; 2)")
    add("--round-seconds", type=float, help="(3; 1)")
    add("--warmup-seconds", type=float, help="(1; 0.5)")
    add("--chunks", type=int, default=200, help="pieces per streamed reply")
    add("--nonstream-chunks", type=int, default=16, help="pieces per non-streamed reply")
    add("--no-litellm", action="store_true", help="leave LiteLLM out (no ratios; debugging)")
    add("--no-portkey", action="store_true", help="leave the Portkey gateway out")
    add("--floors", action="store_true", help="add floor_proxy.py: forward, re-encode, decode")
    add("--litellm-workers", type=int, default=1, help="LiteLLM's --num_workers (default 1)")
    add("--py-spy", type=Path, metavar="FILE", help="sample --py-spy-target with py-spy")
    add("--py-spy-target", choices=("litellm", "llmbridge"), default="litellm")
    add("--max-seconds", type=float, help="hard cap (900; 300)")
    args = quick_defaults(
        parser.parse_args(argv),
        concurrency=([1, 64, 256], [1, 64]),
        rounds=(3, 2),
        round_seconds=(3.0, 1.0),
        warmup_seconds=(1.0, 0.5),
        max_seconds=(900.0, 300.0),
    )
    if min(args.concurrency) < 1 or args.rounds < 1 or args.round_seconds <= 0:
        parser.error("--concurrency, --rounds and --round-seconds must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = start_run("compare", argv)
    chosen = [name for name in PEERS if not getattr(args, f"no_{name}")]
    for name in chosen:
        (peers.ensure_litellm if name == "litellm" else peers.ensure_portkey)(log)
    versions = {name: peers.version(name) for name in chosen}
    log(f"peers: {versions}")
    # After the peers' installs, which may take minutes: the run itself starts here.
    run = run._replace(started=time.time(), load_at_start=load_average())
    busy_before = system_busy_seconds()
    baseline = prepare_baseline(args.baseline_src)
    with workspace("compare") as (workdir, started):
        backend = started.add(start_fast_backend(workdir, "--chunks", str(args.chunks)))
        gateway = started.add(start_gateway(workdir, gateway_config(backend.port)))
        others = {
            n: started.add(start_peer(n, workdir, backend.port, args.litellm_workers))
            for n in chosen
        }
        if baseline is not None:
            config = gateway_config(backend.port)
            others["baseline"] = started.add(
                start_gateway(workdir, config, name="baseline", baseline=baseline)
            )
        if args.floors:
            launcher = Path(__file__).with_name("floor_proxy.py")
            for name in FLOORS:
                env = {
                    "FLOOR_REENCODE": "1" if name == "floor-reencode" else "0",
                    "FLOOR_DECODE": "1" if name == "floor-decode" else "0",
                }
                config = gateway_config(backend.port)
                floor = start_gateway(workdir, config, name=name, launcher=launcher, env=env)
                others[name] = started.add(floor)
        trees = [server.tree for server in started]
        cpu_before = sum(t.cpu_seconds() for t in trees) + time.process_time()
        cells = run_async(measure(args, backend, gateway, others), args.max_seconds)
        ours = sum(t.cpu_seconds() for t in trees) + time.process_time() - cpu_before
    other = max(0.0, system_busy_seconds() - busy_before - ours) / (
        (time.time() - run.started) * CPUS
    )
    document: dict[str, Any] = results_header(run, args)
    document["machine"]["other_load"] = other
    document |= {
        "peer_versions": versions,
        "client": "aiohttp",
        "profiled": args.py_spy is not None,
    }
    document["cells"] = cells
    document["baseline"] = baseline.describe() if baseline is not None else None
    print(
        f"\nllmbridge vs {', '.join(f'{k} {v}' for k, v in versions.items()) or 'no peers'} vs "
        f"the backend directly; {CPUS} CPUs; load average at start {run.load_at_start}; other "
        f"processes kept {other:.0%} of the machine busy\n"
    )
    if document["profiled"]:
        print(
            f"NOTE: {args.py_spy_target} was profiled during this run; its timings are inflated.\n"
        )
    print(report(cells))
    save_results("compare", document, run.started, args)
    return (
        1
        if any(r["verdict"].startswith("INVALID") for c in cells for r in c["ratios"].values())
        else 0
    )


if __name__ == "__main__":
    entry_point(main)

"""The ``scale`` scenario: what ``--workers 2`` adds, and what keys, limits and the usage
ledger cost, against the stub backend called directly in the same run.

Targets, each ``llmbridge serve`` in front of ``fast_backend.py``: ``plain-w1`` and
``plain-w2`` (no keys, no ledger; one process and ``--workers 2``); ``accounts-w1`` and
``accounts-w2`` (a master key, a database key with generous limits and budget, so every
check runs and none refuses, the ledger on SQLite and a price: each request is
authenticated, admitted, counted, priced and recorded); with ``--redis``,
``accounts-redis-w1`` (limits in a loopback ``redis-server``); with ``--baseline-src
DIR``, ``accounts-base-w1`` (and ``accounts-redis-base-w1``) running DIR's code.

Closed-loop rounds (``load.py``: the order rotated and reversed every round; a warm-up
per cell), every reply checked. Two cells, non-streamed OpenAI chat: ``nonstream-c1``
(each gateway's added p50 over direct; the verdict: the accounts path's added latency
within 10% of the plain path's, the median of per-round ratios deciding) and
``nonstream-c64`` (requests/s; ``--workers 2`` over 1, accounts over plain). CPU per
request is read over each server's process tree. docs/PERFORMANCE.md ("Keys, limits,
the ledger, Redis") has the method and the figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from fast_backend import DEFAULT_MODEL
from harness import (
    CPUS,
    Baseline,
    Server,
    Started,
    arguments,
    entry_point,
    gateway_config,
    log,
    prepare_baseline,
    py_spy,
    quick_defaults,
    results_header,
    run_async,
    save_results,
    start_fast_backend,
    start_gateway,
    start_redis,
    start_run,
    system_busy_seconds,
    wait_ready,
    workspace,
)
from http_clients import make_client
from load import Cell, Runner, Target, figure, table

ADDED_LATENCY_TARGET = 1.10
"""Keys + limits + ledger within 10% of the plain path's added latency."""
MASTER_KEY = "sk-bench-master"
# Generous: every check runs, none refuses (the figures are the checks' cost).
KEY_LIMITS = ("--rpm", "100000000", "--tpm", "2000000000", "--max-parallel", "100000")
KEY_BUDGET = ("--budget-usd", "1000000")
C1_TARGETS = (
    "direct",
    "plain-w1",
    "accounts-w1",
    "accounts-redis-w1",
    "accounts-base-w1",
    "accounts-redis-base-w1",
)
"""Measured one in flight too; the ``-base`` ones run ``--baseline-src``'s code."""


def accounts_config(backend_port: int, database: Path, redis_url: str | None) -> str:
    """The plain config plus a master key, the ledger, a database and a price."""
    text = gateway_config(backend_port)
    text = text.replace("  log_level: warning\n", "  log_level: warning\n  ledger: true\n")
    text += f"agent: {{database: '{database}'}}\n"
    text += f"prices: {{'{DEFAULT_MODEL}': {{input: 0.1, output: 0.4}}}}\n"
    return text + (f"state: {{redis_url: '{redis_url}'}}\n" if redis_url else "")


def create_key(workdir: Path, name: str, port: int, env: dict[str, str] | None = None) -> str:
    """``llmbridge keys create`` on ``NAME.db``, its ``Authorization`` value. ``env``:
    another checkout's code (``--baseline-src``), which creates and migrates a database
    of its own: one the newer code migrated has revisions an older one cannot open."""
    config, database = workdir / f"{name}-keys.yaml", workdir / f"{name}.db"
    config.write_text(accounts_config(port, database, None))
    script = Path(sys.executable).parent / "llmbridge"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "llmbridge"]
    argv = [*command, "keys", "create", "bench", *KEY_LIMITS, *KEY_BUDGET, "--models", "*"]
    argv += ["--config", str(config), "--db", str(database)]
    run_env = None if env is None else {**os.environ, **env}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=run_env)
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"llmbridge keys create failed:\n{done.stdout}{done.stderr}")
    return f"Bearer {done.stdout.strip()}"


def start_gateways(
    args: argparse.Namespace, workdir: Path, started: Started, port: int
) -> list[tuple[Server, dict[str, str] | None]]:
    """Every gateway, with the headers its requests carry; see the module docstring."""
    out: list[tuple[Server, dict[str, str] | None]] = []
    master = {"LLMBRIDGE_MASTER_KEY": MASTER_KEY}

    def add(
        name: str, config: str, auth: str | None, workers: int = 1, base: Baseline | None = None
    ) -> None:
        extra = ("--workers", str(workers))
        env = master if auth else None
        server = start_gateway(workdir, config, name=name, env=env, extra_args=extra, baseline=base)
        out.append((started.add(server), {"authorization": auth} if auth else None))

    auth = create_key(workdir, "accounts", port)
    for workers in (1, 2):
        add(f"plain-w{workers}", gateway_config(port), None, workers)
    for workers in (1, 2):
        add(
            f"accounts-w{workers}",
            accounts_config(port, workdir / "accounts.db", None),
            auth,
            workers,
        )
    # --baseline-src: the accounts gateway running another checkout's code, for a
    # before/after in one run, on a database of its own made by its own code.
    base = prepare_baseline(args.baseline_src)
    if base is not None:
        base_auth = create_key(workdir, "accounts-base", port, base.env)
        config = accounts_config(port, workdir / "accounts-base.db", None)
        add("accounts-base-w1", config, base_auth, base=base)
    if args.redis:
        url = f"redis://127.0.0.1:{started.add(start_redis(workdir)).port}/0"
        add("accounts-redis-w1", accounts_config(port, workdir / "accounts.db", url), auth)
        if base is not None:
            config = accounts_config(port, workdir / "accounts-base.db", url)
            add("accounts-redis-base-w1", config, base_auth, base=base)
    return out


async def measure(
    args: argparse.Namespace, backend: Server, gateways: list[tuple[Server, dict[str, str] | None]]
) -> list[dict[str, Any]]:
    client = make_client(max_connections=64 * (len(gateways) + 1))
    try:
        await wait_ready(client, backend, *(server for server, _ in gateways))
        targets = [Target("direct", backend.url)]
        targets += [Target(s.name, s.url, proxy=s.tree, headers=h) for s, h in gateways]
        runner = Runner(client, backend.tree)
        log("warming every target up")
        await runner.warm_up(targets, Cell(False, 4, args.nonstream_chunks), seconds=1.0)
        cells = []
        for concurrency in (1, 64):
            cell = Cell(False, concurrency, args.nonstream_chunks)
            chosen = [t for t in targets if concurrency > 1 or t.name in C1_TARGETS]
            seconds, warmup = args.round_seconds, args.warmup_seconds
            cells.append(
                await runner.cell(chosen, cell, args.rounds, seconds=seconds, warmup_seconds=warmup)
            )
        return cells
    finally:
        await client.aclose()


def _valid(cell: dict[str, Any], name: str) -> dict[str, Any] | None:
    target = cell["targets"].get(name)
    return target if target and target["requests_ok"] and not target["failures"] else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def round_ratios(cell: dict[str, Any], name: str, base: str) -> list[float]:
    """``name``'s added p50 over ``base``'s, round by round (each against the direct
    backend's p50 of the same round). The rounds interleave the targets, so a ratio
    within one round pairs measurements taken seconds apart: the VM's speed, which
    drifts by tens of percent over minutes here, cancels out of it, where it does not
    out of p50s pooled over the whole run."""
    if any(_valid(cell, t) is None for t in ("direct", name, base)):
        return []
    targets = cell["targets"]
    rows = zip(*(targets[t]["round_p50s_ms"] for t in ("direct", name, base)), strict=True)
    return [(mine - direct) / (theirs - direct) for direct, mine, theirs in rows if theirs > direct]


def verdicts(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """The headline figures: the accounts path's added latency over the plain path's
    (one in flight), the throughput ratios (64 in flight), and this tree over the
    baseline's code where it ran."""
    c1, c64 = cells
    direct = (_valid(c1, "direct") or {}).get("latency_ms", {}).get("p50")
    added = {}
    for name in C1_TARGETS[1:]:
        target = _valid(c1, name)
        added[name] = target["latency_ms"]["p50"] - direct if target and direct else None
    rps = {name: (_valid(c64, name) or {}).get("requests_per_s") for name in c64["targets"]}
    plain, accounts = added["plain-w1"], added["accounts-w1"]
    per_round = round_ratios(c1, "accounts-w1", "plain-w1")
    paired = statistics.median(per_round) if per_round else None
    out: dict[str, Any] = {
        "added_p50_ms": added,
        "rps": rps,
        "accounts_round_ratios": per_round,
        "accounts_round_ratio_median": paired,
        "accounts_within_10_percent": None if paired is None else paired <= ADDED_LATENCY_TARGET,
        "accounts_added_ratio": _ratio(accounts, plain) if plain and plain > 0 else None,
        "accounts_cost_ms": accounts - plain
        if accounts is not None and plain is not None
        else None,
        "added accounts-redis-w1 / plain-w1": _ratio(added["accounts-redis-w1"], plain),
    }
    for a, b in (
        ("plain-w2", "plain-w1"),
        ("accounts-w2", "accounts-w1"),
        ("accounts-w1", "plain-w1"),
    ):
        out[f"rps {a} / {b}"] = _ratio(rps.get(a), rps.get(b))
    for a, b in (("accounts-w2", "plain-w2"), ("accounts-redis-w1", "plain-w1")):
        out[f"rps {a} / {b}"] = _ratio(rps.get(a), rps.get(b))
    for name in ("accounts", "accounts-redis"):
        now, before = f"{name}-w1", f"{name}-base-w1"
        out[f"added {before} / plain-w1"] = _ratio(added[before], plain)
        cpu = [
            (_valid(c1, n) or {}).get("cpu_us_per_request", {}).get("proxy") for n in (now, before)
        ]
        out[f"cpu {now} / {before}"] = _ratio(*cpu)
        out[f"rps {now} / {before}"] = _ratio(rps.get(now), rps.get(before))
    return out


def cell_table(cell: dict[str, Any]) -> str:
    rows = [["target", "req/s", "p50 ms", "p99 ms", "added p50 ms", "server CPU us/req"]]
    rows[0] += ["server cores busy", "other load", "ok / failed"]
    direct = cell["targets"]["direct"]["latency_ms"]["p50"]
    for name, s in cell["targets"].items():
        p50, server = s["latency_ms"]["p50"], "backend" if name == "direct" else "proxy"
        own = name != "direct" and direct is not None and p50 is not None
        rows.append(
            [
                name,
                figure(s["requests_per_s"], ",.0f"),
                figure(p50, ".3f"),
                figure(s["latency_ms"]["p99"], ".3f"),
                f"{p50 - direct:+.3f}" if own else "-",
                figure(s["cpu_us_per_request"].get(server), ",.0f"),
                figure(s["cores_busy"].get(server), ".2f"),
                f"{s['other_load']:.0%}",
                f"{s['requests_ok']} / {s['failures']}",
            ]
        )
    return table(rows)


def report(cells: list[dict[str, Any]], v: dict[str, Any]) -> str:
    out = []
    for cell in cells:
        out += [f"{cell['key']}: {cell['title']}", "", cell_table(cell), ""]
        for name, s in cell["targets"].items():
            out += [f"  failure {name}: {e}" for e in s["failure_examples"]]
    met = v["accounts_within_10_percent"]
    per_round = ", ".join(f"{r:.2f}" for r in v["accounts_round_ratios"]) or "n/a"
    added = v["added_p50_ms"]
    rows = [
        ["figure", "value", "target", "result"],
        [
            "keys + limits + ledger: added p50, accounts-w1 / plain-w1, median of the rounds",
            f"x{figure(v['accounts_round_ratio_median'], '.3f')} (rounds: {per_round})",
            f"<= x{ADDED_LATENCY_TARGET:.2f}",
            "n/a" if met is None else ("PASS" if met else "FAIL"),
        ],
        [
            "  the same over the whole run's p50s",
            f"{figure(added['accounts-w1'], '.3f')} / {figure(added['plain-w1'], '.3f')} ms = "
            f"x{figure(v['accounts_added_ratio'], '.3f')}",
            "-",
            "info",
        ],
        [
            "  the same as a cost per request",
            f"{figure(v['accounts_cost_ms'], '+.3f')} ms",
            "-",
            "info",
        ],
    ]
    # added: p50 over direct's (1 in flight); rps: requests/s (64); cpu: per request (1)
    ratios = [(k, x) for k, x in v.items() if " / " in k and x is not None]
    rows += [[key, f"x{value:.3f}", "-", "info"] for key, value in ratios]
    return "\n".join([*out, "Verdicts (same run):", "", table(rows)])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = arguments(
        __doc__,
        quick="short rounds (about a minute)",
        baseline="also the accounts gateways from this src/, as accounts-base-w1 (and redis)",
    )
    add = parser.add_argument
    add("--rounds", type=int, help="per target and cell (6; 2)")
    add("--round-seconds", type=float, help="(2; 1)")
    add("--warmup-seconds", type=float, help="(1; 0.5)")
    add("--nonstream-chunks", type=int, default=16, help="pieces per reply (default 16)")
    add("--redis", action="store_true", help="also the accounts path with Redis state")
    add("--max-seconds", type=float, help="hard cap (600; 240)")
    add("--py-spy", type=Path, metavar="FILE", help="sample accounts-w1 with py-spy meanwhile")
    args = quick_defaults(
        parser.parse_args(argv),
        rounds=(6, 2),
        round_seconds=(2.0, 1.0),
        warmup_seconds=(1.0, 0.5),
        max_seconds=(600.0, 240.0),
    )
    if args.rounds < 1 or args.round_seconds <= 0 or args.nonstream_chunks < 1:
        parser.error("--rounds, --round-seconds and --nonstream-chunks must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = start_run("scale", argv)
    busy_before = system_busy_seconds()
    with workspace("scale") as (workdir, started):
        backend = started.add(start_fast_backend(workdir, "--chunks", str(args.nonstream_chunks)))
        gateways = start_gateways(args, workdir, started, backend.port)
        sampled = next(server.pid for server, _ in gateways if server.name == "accounts-w1")
        with py_spy(args.py_spy, sampled):
            cells = run_async(measure(args, backend, gateways), args.max_seconds)
    v = verdicts(cells)
    baseline = prepare_baseline(args.baseline_src)
    document = results_header(run, args) | {
        "baseline": baseline.describe() if baseline else None,
        "cells": cells,
        "verdicts": v,
        "profiled": args.py_spy is not None,
    }
    document["machine"]["busy_cpu_s"] = system_busy_seconds() - busy_before
    print(
        f"\nllmbridge scale-out: --workers 1 and 2, keys + limits + ledger off and on; "
        f"{CPUS} CPUs; load average at start {run.load_at_start}; "
        f"{args.nonstream_chunks}-piece non-streamed replies\n"
    )
    if args.py_spy is not None:
        print("NOTE: accounts-w1 was profiled during this run; its timings are inflated.\n")
    print(report(cells, v))
    save_results("scale", document, run.started, args)
    return 1 if any(s["failures"] for c in cells for s in c["targets"].values()) else 0


if __name__ == "__main__":
    entry_point(main)

"""The ``scale`` scenario: what ``--workers 2`` adds, and what keys, limits and the usage
ledger cost, against the stub backend called directly in the same run.

Targets, each ``llmbridge serve`` in front of ``fast_backend.py``: ``plain-w1`` and
``plain-w2`` (no keys, no ledger; one process and ``--workers 2``); ``accounts-w1`` and
``accounts-w2`` (a master key, a database key with generous limits and budget, so every
check runs and none refuses, the ledger on SQLite and a price: each request is
authenticated, admitted, counted, priced and recorded); with ``--redis``,
``accounts-redis-w1`` (limits in a loopback ``redis-server``); with ``--baseline-src
DIR``, ``accounts-base-w1`` (and ``accounts-redis-base-w1``) running DIR's code.

It reuses ``compare.py``'s closed-loop rounds (the order reversed every round; a
warm-up per cell), every reply checked. Two cells, non-streamed OpenAI chat:
``nonstream-c1`` (each gateway's added p50 over direct; the verdict: the accounts path's
added latency within 10% of the plain path's, the median of per-round ratios deciding)
and ``nonstream-c64`` (requests/s; ``--workers 2`` over 1, accounts over plain). CPU per
request is read over each server's process tree. docs/PERFORMANCE.md ("Scale out") has
the method and the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness
from compare import Cell, Measure, Runner, Target, summarise_cell
from compare_routes import ROUTES
from fast_backend import DEFAULT_MODEL
from harness import (
    CPUS,
    BaselineError,
    ProcessTree,
    RunStart,
    Server,
    check_process_env,
    entry_point,
    gateway_config,
    log,
    prepare_baseline,
    results_header,
    run_async,
    save_results,
    start_fast_backend,
    start_redis,
    start_run,
    stopping,
    system_busy_seconds,
    wait_ready,
)
from http_clients import make_client
from overhead_stats import render_table

ADDED_LATENCY_TARGET = 1.10
"""The issue: keys + limits + ledger within 10% of the plain path's added latency."""
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


# -- servers --------------------------------------------------------------------------------


@dataclass
class Gateway:
    name: str
    server: Server
    headers: dict[str, str] | None


def accounts_config(backend_port: int, database: Path, redis_url: str | None) -> str:
    """The plain config plus a master key, the ledger, a database and a price."""
    text = gateway_config("openai", backend_port)
    text = text.replace("  log_level: warning\n", "  log_level: warning\n  ledger: true\n")
    text += (
        f"agent: {{database: '{database}'}}\n"
        f"prices: {{'{DEFAULT_MODEL}': {{input: 0.1, output: 0.4}}}}\n"
    )
    if redis_url:
        text += f"state: {{redis_url: '{redis_url}'}}\n"
    return text


def create_key(config: Path, database: Path, env: dict[str, str] | None = None) -> str:
    """``llmbridge keys create``: the key, printed alone on stdout. ``env``: run another
    checkout's code (``--baseline-src``), which creates and migrates its own database:
    a database the newer code migrated has revisions an older one cannot open."""
    script = Path(sys.executable).parent / "llmbridge"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "llmbridge"]
    argv = [*command, "keys", "create", "bench", *KEY_LIMITS, *KEY_BUDGET]
    argv += ["--models", "*", "--config", str(config), "--db", str(database)]
    run_env = None if env is None else {**os.environ, **env}
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=120, check=False, env=run_env
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"llmbridge keys create failed:\n{done.stdout}{done.stderr}")
    return done.stdout.strip()


def start_gateway(
    workdir: Path, name: str, config_text: str, workers: int, env: dict[str, str] | None = None
) -> Server:
    extra = ("--workers", str(workers))
    return harness.start_gateway(workdir, config_text, name=name, env=env, extra_args=extra)


@contextlib.contextmanager
def servers(args: argparse.Namespace, workdir: Path) -> Iterator[tuple[Server, list[Gateway]]]:
    with stopping() as started:
        backend = start_fast_backend(workdir, "--chunks", str(args.nonstream_chunks))
        started.append(backend)
        plain = gateway_config("openai", backend.port)
        gateways: list[Gateway] = []
        for workers in (1, 2):
            server = start_gateway(workdir, f"plain-w{workers}", plain, workers)
            started.append(server)
            gateways.append(Gateway(server.name, server, None))
        database = workdir / "accounts.db"
        config_text = accounts_config(backend.port, database, None)
        (workdir / "keys.yaml").write_text(config_text)
        key = create_key(workdir / "keys.yaml", database)
        auth = {"authorization": f"Bearer {key}"}
        env = {"LLMBRIDGE_MASTER_KEY": MASTER_KEY}
        for workers in (1, 2):
            server = start_gateway(workdir, f"accounts-w{workers}", config_text, workers, env)
            started.append(server)
            gateways.append(Gateway(server.name, server, auth))
        # --baseline-src: the same accounts gateways running another checkout's code
        # (PYTHONPATH, checked by the harness), for a before/after in one run.
        base = prepare_baseline(Path(args.baseline_src)) if args.baseline_src else None
        base_auth = auth
        if base is not None:
            # Its own database, made by its own code (create_key).
            base_db = workdir / "accounts-base.db"
            base_text = accounts_config(backend.port, base_db, None)
            (workdir / "keys-base.yaml").write_text(base_text)
            base_key = create_key(workdir / "keys-base.yaml", base_db, base.env)
            base_auth = {"authorization": f"Bearer {base_key}"}
            server = start_gateway(workdir, "accounts-base-w1", base_text, 1, env | base.env)
            check_process_env(server.pid, base.env)
            started.append(server)
            gateways.append(Gateway(server.name, server, base_auth))
        if args.redis:
            redis = start_redis(workdir)
            started.append(redis)
            url = f"redis://127.0.0.1:{redis.port}/0"
            text = accounts_config(backend.port, database, url)
            server = start_gateway(workdir, "accounts-redis-w1", text, 1, env)
            started.append(server)
            gateways.append(Gateway(server.name, server, auth))
            if base is not None:
                name = "accounts-redis-base-w1"
                base_text = accounts_config(backend.port, workdir / "accounts-base.db", url)
                server = start_gateway(workdir, name, base_text, 1, env | base.env)
                check_process_env(server.pid, base.env)
                started.append(server)
                gateways.append(Gateway(server.name, server, base_auth))
        yield backend, gateways


# -- measurement ----------------------------------------------------------------------------


async def measure(
    args: argparse.Namespace, backend: Server, gateways: list[Gateway]
) -> list[dict[str, Any]]:
    client = make_client(max_connections=64 * (len(gateways) + 1))
    try:
        await wait_ready(client, backend, "/v1/models")
        for gateway in gateways:
            await wait_ready(client, gateway.server, "/health")
        route = ROUTES["openai"]
        path = route.path
        targets = [Target("direct", f"http://127.0.0.1:{backend.port}{path}", route, None)]
        for g in gateways:
            url = f"http://127.0.0.1:{g.server.port}{path}"
            targets.append(Target(g.name, url, route, ProcessTree(g.server.pid), g.headers))
        runner = Runner(client, ProcessTree(backend.pid))
        log("warming every target up")
        for target in targets:
            await runner.batch(target, Cell(False, 4, args.nonstream_chunks), 1.0, Measure())
        results = []
        for concurrency in (1, 64):
            cell = Cell(False, concurrency, args.nonstream_chunks)
            chosen = [t for t in targets if concurrency > 1 or t.name in C1_TARGETS]
            log(f"{cell.key}: {args.rounds} rounds of {args.round_seconds:g} s per target")
            measures = await runner.run_cell(chosen, cell, args)
            summary = summarise_cell(cell, measures)
            summary.pop("ratios")  # compare.py's LiteLLM ratios; ours follow
            results.append(summary)
        return results
    finally:
        await client.aclose()


def _p50(cell: dict[str, Any], name: str) -> float | None:
    target = cell["targets"].get(name)
    if not target or not target["requests_ok"] or target["failures"]:
        return None
    return float(target["latency_ms"]["p50"])


def _rps(cell: dict[str, Any], name: str) -> float | None:
    target = cell["targets"].get(name)
    if not target or not target["requests_ok"] or target["failures"]:
        return None
    return float(target["requests_per_s"])


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def verdicts(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """The headline figures: the accounts path's added latency over the plain path's
    (one in flight), and the throughput ratios (64 in flight)."""
    c1, c64 = cells
    direct = _p50(c1, "direct")
    added = {
        name: (p50 - direct if (p50 := _p50(c1, name)) is not None and direct else None)
        for name in C1_TARGETS[1:]
        if name in c1["targets"]
    }
    plain, accounts = added.get("plain-w1"), added.get("accounts-w1")
    ratio = _ratio(accounts, plain) if plain and plain > 0 else None
    per_round = round_ratios(c1, "accounts-w1", "plain-w1")
    paired = statistics.median(per_round) if per_round else None
    out: dict[str, Any] = {
        "added_p50_ms": added,
        "accounts_cost_ms": accounts - plain
        if accounts is not None and plain is not None
        else None,
        "accounts_added_ratio": ratio,
        "accounts_round_ratios": per_round,
        "accounts_round_ratio_median": paired,
        "accounts_within_10_percent": None if paired is None else paired <= ADDED_LATENCY_TARGET,
        "rps": {name: _rps(c64, name) for name in c64["targets"]},
    }
    rps = out["rps"]
    out["workers_2_over_1_plain"] = _ratio(rps.get("plain-w2"), rps.get("plain-w1"))
    out["workers_2_over_1_accounts"] = _ratio(rps.get("accounts-w2"), rps.get("accounts-w1"))
    out["accounts_over_plain_w1"] = _ratio(rps.get("accounts-w1"), rps.get("plain-w1"))
    out["accounts_over_plain_w2"] = _ratio(rps.get("accounts-w2"), rps.get("plain-w2"))
    if "accounts-redis-w1" in added and added["accounts-redis-w1"] is not None and plain:
        out["accounts_redis_added_ratio"] = added["accounts-redis-w1"] / plain
        out["accounts_redis_over_plain_w1"] = _ratio(
            rps.get("accounts-redis-w1"), rps.get("plain-w1")
        )
    for name in ("accounts", "accounts-redis"):
        now, before = added.get(f"{name}-w1"), added.get(f"{name}-base-w1")
        if now is not None and before is not None and plain:
            out[f"{name}_base_added_ratio"] = before / plain
            out[f"{name}_cpu_over_base"] = _ratio(
                _cpu(c1, f"{name}-w1"), _cpu(c1, f"{name}-base-w1")
            )
            out[f"{name}_rps_over_base"] = _ratio(rps.get(f"{name}-w1"), rps.get(f"{name}-base-w1"))
    return out


def round_ratios(cell: dict[str, Any], name: str, base: str) -> list[float]:
    """``name``'s added p50 over ``base``'s, round by round (each against the direct
    backend's p50 of the same round). The rounds interleave the targets, so a ratio
    within one round pairs measurements taken seconds apart: the VM's speed, which
    drifts by tens of percent over minutes here, cancels out of it, where it does not
    out of p50s pooled over the whole run."""
    targets = cell["targets"]
    if any(t not in targets or targets[t]["failures"] for t in ("direct", name, base)):
        return []
    rows = zip(
        targets["direct"]["round_p50s_ms"],
        targets[name]["round_p50s_ms"],
        targets[base]["round_p50s_ms"],
        strict=True,
    )
    return [(mine - direct) / (theirs - direct) for direct, mine, theirs in rows if theirs > direct]


def _cpu(cell: dict[str, Any], name: str) -> float | None:
    target = cell["targets"].get(name)
    value = target["cpu_us_per_request"].get("proxy") if target else None
    return float(value) if value else None


def _f(value: float | None, spec: str) -> str:
    return "n/a" if value is None or value != value else format(value, spec)


def cell_table(cell: dict[str, Any]) -> str:
    head = ["target", "req/s", "p50 ms", "p99 ms", "added p50 ms", "server CPU us/req"]
    head += ["server cores busy", "other load", "ok / failed"]
    rows = [head]
    direct = _p50(cell, "direct")
    for name, s in cell["targets"].items():
        p50 = s["latency_ms"]["p50"]
        server = "backend" if name == "direct" else "proxy"
        rows.append(
            [
                name,
                _f(s["requests_per_s"], ",.0f"),
                _f(p50, ".3f"),
                _f(s["latency_ms"]["p99"], ".3f"),
                "-" if name == "direct" or direct is None else f"{p50 - direct:+.3f}",
                _f(s["cpu_us_per_request"].get(server), ",.0f"),
                _f(s["cores_busy"].get(server), ".2f"),
                f"{s['other_load']:.0%}",
                f"{s['requests_ok']} / {s['failures']}",
            ]
        )
    return render_table(rows)


def report(cells: list[dict[str, Any]], v: dict[str, Any]) -> str:
    out = []
    for cell in cells:
        out += [f"{cell['key']}: {cell['title']}", "", cell_table(cell), ""]
        for name, s in cell["targets"].items():
            out += [f"  failure {name}: {e}" for e in s["failure_examples"]]
    ratio = v["accounts_added_ratio"]
    met = v["accounts_within_10_percent"]
    verdict = "n/a" if met is None else ("PASS" if met else "FAIL")
    per_round = ", ".join(f"{r:.2f}" for r in v["accounts_round_ratios"]) or "n/a"
    rows = [
        ["figure", "value", "target", "result"],
        [
            "keys + limits + ledger: added p50, accounts-w1 / plain-w1 (1 in flight), "
            "median of the rounds",
            f"{_x(v['accounts_round_ratio_median'])} (rounds: {per_round})",
            f"<= x{ADDED_LATENCY_TARGET:.2f}",
            verdict,
        ],
        [
            "  the same over the whole run's p50s",
            f"{_f(v['added_p50_ms'].get('accounts-w1'), '.3f')} / "
            f"{_f(v['added_p50_ms'].get('plain-w1'), '.3f')} ms = x{_f(ratio, '.3f')}",
            "-",
            "info",
        ],
        [
            "  the same as a cost per request",
            f"{_f(v['accounts_cost_ms'], '+.3f')} ms",
            "-",
            "info",
        ],
        [
            "--workers 2 / 1, plain, req/s (64 in flight)",
            _x(v["workers_2_over_1_plain"]),
            "-",
            "info",
        ],
        [
            "--workers 2 / 1, accounts, req/s (64 in flight)",
            _x(v["workers_2_over_1_accounts"]),
            "-",
            "info",
        ],
        ["accounts / plain, 1 worker, req/s", _x(v["accounts_over_plain_w1"]), "-", "info"],
        ["accounts / plain, 2 workers, req/s", _x(v["accounts_over_plain_w2"]), "-", "info"],
    ]
    if "accounts_redis_added_ratio" in v:
        rows += [
            [
                "limits in Redis: added p50, accounts-redis-w1 / plain-w1",
                _x(v["accounts_redis_added_ratio"]),
                "-",
                "info",
            ],
            [
                "accounts in Redis / plain, 1 worker, req/s",
                _x(v["accounts_redis_over_plain_w1"]),
                "-",
                "info",
            ],
        ]
    for name in ("accounts", "accounts-redis"):
        if f"{name}_base_added_ratio" in v:
            rows += [
                [
                    f"--baseline-src: added p50, {name}-base-w1 / plain-w1",
                    _x(v[f"{name}_base_added_ratio"]),
                    "-",
                    "info",
                ],
                [
                    f"{name}-w1 / {name}-base-w1, CPU per request (1 in flight)",
                    _x(v[f"{name}_cpu_over_base"]),
                    "-",
                    "info",
                ],
                [
                    f"{name}-w1 / {name}-base-w1, req/s (64 in flight)",
                    _x(v[f"{name}_rps_over_base"]),
                    "-",
                    "info",
                ],
            ]
    out += ["Verdicts (same run):", "", render_table(rows)]
    return "\n".join(out)


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"x{value:.3f}"


# -- main -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short rounds (about a minute)")
    parser.add_argument("--rounds", type=int, default=None, help="per target and cell (6; 2)")
    parser.add_argument("--round-seconds", type=float, default=None, help="(default 2; 1)")
    parser.add_argument("--warmup-seconds", type=float, default=None, help="(default 1; 0.5)")
    parser.add_argument(
        "--nonstream-chunks", type=int, default=16, help="pieces per reply (default 16)"
    )
    parser.add_argument(
        "--redis", action="store_true", help="also measure the accounts path with Redis state"
    )
    parser.add_argument("--max-seconds", type=float, default=None, help="hard cap (600; 240)")
    parser.add_argument(
        "--baseline-src",
        default=None,
        help="also run the accounts gateways from this src/ (e.g. a git worktree of the "
        "commit before a change), as accounts-base-w1 (and accounts-redis-base-w1)",
    )
    parser.add_argument("--no-save", action="store_true", help="no bench/results/ JSON file")
    args = parser.parse_args(argv)
    defaults = {
        "rounds": 2 if args.quick else 6,
        "round_seconds": 1.0 if args.quick else 2.0,
        "warmup_seconds": 0.5 if args.quick else 1.0,
        "max_seconds": 240.0 if args.quick else 600.0,
    }
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.rounds < 1 or args.round_seconds <= 0 or args.nonstream_chunks < 1:
        parser.error("--rounds, --round-seconds and --nonstream-chunks must be positive")
    return args


def _run(args: argparse.Namespace, backend: Server, gateways: list[Gateway]) -> Any:
    return run_async(asyncio.wait_for(measure(args, backend, gateways), args.max_seconds))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command, started, load_at_start = start_run("scale", argv)
    busy_before = system_busy_seconds()
    try:
        with (
            tempfile.TemporaryDirectory(prefix="llmbridge-scale-") as tmp,
            servers(args, Path(tmp)) as (backend, gateways),
        ):
            cells = _run(args, backend, gateways)
    except (RuntimeError, BaselineError) as exc:
        log(str(exc))
        return 2
    except TimeoutError:
        log(f"hard time cap of {args.max_seconds:.0f} s reached; stopping")
        return 3
    v = verdicts(cells)
    document = results_header(RunStart(command, started, load_at_start), args) | {
        "baseline": prepare_baseline(Path(args.baseline_src)).describe()
        if args.baseline_src
        else None,
        "cells": cells,
        "verdicts": v,
    }
    document["machine"]["busy_cpu_s"] = system_busy_seconds() - busy_before
    print(
        f"\nllmbridge scale-out: --workers 1 and 2, keys + limits + ledger off and on; "
        f"{CPUS} CPUs; load average at start {load_at_start}; "
        f"{args.nonstream_chunks}-piece non-streamed replies\n"
    )
    print(report(cells, v))
    if not args.no_save:
        save_results("scale", document, started)
    failed = any(s["failures"] for c in cells for s in c["targets"].values())
    return 1 if failed else 0


if __name__ == "__main__":
    entry_point(main)

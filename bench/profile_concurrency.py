"""The ``profile_concurrency`` scenario: wall time of one ``llmbridge profile run`` at
``--concurrency`` 1, 2 and 4, and a run killed half-way and resumed.

A gateway over the stub backend pacing its chunks like a remote model (``--backend
paced``) or on its embedded model (``--backend embedded``: one generation at a time) runs
the scenarios file (default ``examples/profile/scenarios.yaml``) with the agent service
provider, each run a child process (``python -m llmbridge profile run ... --quiet``), as
a user runs it:

1. at each ``--concurrency`` value, ``--rounds`` times, the order reversed every round:
   each run's wall time, pass count, and whether its iterations and per-group pass
   rates are the first run's;
2. with ``--kill-resume``: a run at the largest concurrency SIGKILLed once half its
   iterations are written, then ``--resume``d: both parts' wall time, and that every
   iteration is in ``traces.jsonl`` exactly once.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fast_backend import DEFAULT_MODEL
from harness import (
    RunStart,
    Server,
    entry_point,
    gateway_config,
    log,
    results_header,
    run_async,
    save_results,
    start_fast_backend,
    start_gateway,
    start_run,
    wait_ready,
)
from http_clients import AiohttpClient

ROOT = Path(__file__).resolve().parent.parent
EMBEDDED_MODEL = "smollm2"


def _profile_command(args: argparse.Namespace, url: str, model: str) -> list[str]:
    return [
        *(sys.executable, "-m", "llmbridge", "profile", "run", str(args.scenarios), "--quiet"),
        *("--provider", "agent", "--gateway-url", url, "--model", model),
        *("--iterations", str(args.iterations)),
    ]


def _records(out: Path) -> list[dict[str, Any]]:
    lines = (out / "traces.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _keys(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(
        (r["provider"], r["scenario"], r["model"], r["mode"], r["iteration"]) for r in records
    )


def _rates(out: Path) -> list[tuple[Any, ...]]:
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    return [(s["scenario"], s["iterations"], s["passed"]) for s in summary]


def one_run(command: list[str], out: Path) -> dict[str, Any]:
    started = time.monotonic()
    done = subprocess.run([*command, "--out", str(out)], capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"profile run failed ({done.returncode}): {done.stderr[-2000:]}")
    records = _records(out)
    return {
        "wall_s": round(wall, 2),
        "iterations": len(records),
        "passed": sum(r["passed"] for r in records),
        "keys": _keys(records),
        "rates": _rates(out),
    }


def kill_and_resume(command: list[str], out: Path, total: int) -> dict[str, Any]:
    """The run killed (SIGKILL, its whole process group) once half its iterations are
    on disk, then resumed; wall times of both parts and the iterations' count."""
    traces = out / "traces.jsonl"
    started = time.monotonic()
    run = subprocess.Popen(
        [*command, "--out", str(out)],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while run.poll() is None:
            if traces.exists() and traces.read_text(encoding="utf-8").count("\n") >= total // 2:
                break
            time.sleep(0.05)
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    killed_at = time.monotonic() - started
    written = traces.read_text(encoding="utf-8").count("\n")
    started = time.monotonic()
    done = subprocess.run([*command, "--resume", str(out)], capture_output=True, text=True)
    resumed = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"the resume failed ({done.returncode}): {done.stderr[-2000:]}")
    keys = _keys(_records(out))
    return {
        "killed_after_s": round(killed_at, 2),
        "iterations_written_before_kill": written,
        "resume_wall_s": round(resumed, 2),
        "iterations": len(keys),
        "distinct_iterations": len(set(keys)),
        "rates": _rates(out),
    }


def _gateway(args: argparse.Namespace, workdir: Path) -> tuple[list[Server], str]:
    """The servers to stop afterwards, and the model name to profile."""
    if args.backend == "embedded":
        config = "server:\n  host: 127.0.0.1\n  log_level: warning\n"
        return [start_gateway(workdir, config)], EMBEDDED_MODEL
    backend = start_fast_backend(
        workdir, "--chunks", str(args.chunks), "--interval-ms", str(args.interval_ms)
    )
    return [backend, start_gateway(workdir, gateway_config("openai", backend.port))], DEFAULT_MODEL


async def _ready(servers: list[Server]) -> None:
    client = AiohttpClient(max_connections=4)
    try:
        for server in servers:
            path = "/health" if server.name == "gateway" else "/v1/models"
            await wait_ready(client, server, path, patience=600)
    finally:
        await client.aclose()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scenarios", type=Path, default=ROOT / "examples" / "profile" / "scenarios.yaml"
    )
    parser.add_argument("--backend", choices=("paced", "embedded"), default="paced")
    parser.add_argument("--chunks", type=int, default=16, help="paced: pieces per reply")
    parser.add_argument("--interval-ms", type=float, default=50.0, help="paced: between pieces")
    parser.add_argument("--iterations", type=int, default=4, help="per scenario")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--kill-resume", action="store_true", help="also kill a run and resume")
    parser.add_argument("--json", type=Path, default=None, help="results file (default: results/)")
    return parser.parse_args(argv)


def report(document: dict[str, Any]) -> str:
    runs = document["runs"]
    lines = ["| concurrency | wall s (each round) | iterations | passed | same as N = first |"]
    lines.append("|---|---|---|---|---|")
    first = runs[0]
    for n in document["settings"]["concurrency"]:
        mine = [r for r in runs if r["concurrency"] == n]
        same = all(r["keys"] == first["keys"] and r["rates"] == first["rates"] for r in mine)
        walls = " / ".join(f"{r['wall_s']:.1f}" for r in mine)
        lines.append(
            f"| {n} | {walls} | {mine[0]['iterations']} | {mine[0]['passed']} | "
            f"{'yes' if same else 'NO'} |"
        )
    if resumed := document.get("kill_resume"):
        lines.append("")
        lines.append(
            f"killed after {resumed['killed_after_s']:.1f} s with "
            f"{resumed['iterations_written_before_kill']} iterations written; the resume took "
            f"{resumed['resume_wall_s']:.1f} s; {resumed['iterations']} records, "
            f"{resumed['distinct_iterations']} distinct; pass rates {resumed['rates']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command, started, load_at_start = start_run("profile_concurrency", argv)
    runs: list[dict[str, Any]] = []
    resumed: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="llmbridge-profile-concurrency-") as tmp:
        workdir = Path(tmp)
        servers, model = _gateway(args, workdir)
        try:
            run_async(_ready(servers))
            gateway = next(s for s in servers if s.name == "gateway")
            profile = _profile_command(args, f"http://127.0.0.1:{gateway.port}", model)
            for round_number in range(args.rounds):
                order = args.concurrency if round_number % 2 == 0 else args.concurrency[::-1]
                for n in order:
                    out = workdir / f"run-{round_number}-{n}"
                    result = one_run([*profile, "--concurrency", str(n)], out)
                    runs.append({"concurrency": n, "round": round_number, **result})
                    log(f"concurrency {n}: {result['wall_s']:.1f} s, {result['passed']} passed")
            if args.kill_resume:
                total = runs[0]["iterations"]
                top = max(args.concurrency)
                resumed = kill_and_resume(
                    [*profile, "--concurrency", str(top)], workdir / "killed", total
                )
                log(f"kill and resume: {resumed}")
        finally:
            for server in servers:
                server.stop()
    document = results_header(RunStart(command, started, load_at_start), args) | {
        "runs": runs,
        "kill_resume": resumed,
    }
    print(report(document))
    save_results("profile_concurrency", document, started, args.json)
    return 0


if __name__ == "__main__":
    entry_point(main)

"""Wall time, CPU time and peak memory of ``llmbridge profile import`` on generated Claude
Code transcripts of growing length.

This file owns that measurement. For each ``--lines`` count (default 8,000, 16,000,
32,000 and 100,000) it writes a transcript in the shape Claude Code 2.1.330 writes
(tests/profiler/long_sessions.py: a prompt every 20 model steps, each step a text
line, a ``tool_use`` line and a ``tool_result`` line), then imports it as a user does,
in a child process (``python -m llmbridge profile import FILE --out DIR --quiet``),
and reports the child's wall time, its CPU time (user + system: on a shared machine the
steadier of the two) and its peak resident memory. A child that runs past ``--timeout``
seconds is killed and reported as unfinished.

    .venv/bin/python bench/profile_import.py
    .venv/bin/python bench/profile_import.py --lines 8000 16000 --timeout 120

Results JSON in bench/results/ (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.profiler.long_sessions import write_claude_code_session  # noqa: E402


def _import(path: Path, out: Path, timeout: float) -> dict[str, Any]:
    """One child import of ``path``: its times and peak memory, or that it timed out."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    command = [sys.executable, "-m", "llmbridge", "profile", "import", str(path)]
    child = subprocess.Popen([*command, "--out", str(out), "--quiet"], cwd=ROOT)
    try:
        code = child.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        return {"finished": False, "wall_s": round(time.perf_counter() - started, 1)}
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "finished": code == 0,
        "exit_code": code,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        # ru_maxrss of the children is the largest one's so far: sizes run in
        # increasing order, so each row's is its own.
        "peak_rss_mb": round(after.ru_maxrss / 1024),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, nargs="+", default=[8000, 16000, 32000, 100000])
    parser.add_argument("--timeout", type=float, default=300.0)
    options = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="profile-import-") as folder:
        for count in sorted(options.lines):
            path = write_claude_code_session(Path(folder) / f"session-{count}.jsonl", count)
            row = {"lines": count, "bytes": path.stat().st_size}
            row |= _import(path, Path(folder) / f"out-{count}", options.timeout)
            rows.append(row)
            print(json.dumps(row), flush=True)
    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    load = os.getloadavg()[0]
    report = {"rows": rows, "load_average_1m": load, "python": sys.version.split()[0]}
    (results / f"profile_import-{stamp}.json").write_text(json.dumps(report, indent=2))
    print(f"load average {load:.2f}; results in bench/results/profile_import-{stamp}.json")


if __name__ == "__main__":
    main()

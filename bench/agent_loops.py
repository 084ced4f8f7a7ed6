"""How long the embedded agent-loop tests take, against an older checkout, same run.

Issue 25, section 2: with emulated decisions that end with their JSON (and prompts
whose prefix stays in llama.cpp's cache), the agent loops of
``tests/gateway/test_agent_loop_embedded.py`` (the official ollama, openai and
anthropic clients, each looping until the model answers) should take at most a third
of the time they took before. This runs that test module in each checkout, in
alternating rounds so that a busy machine slows both alike, and prints each round's
seconds and the ratio of the medians.

    .venv/bin/python bench/agent_loops.py --baseline-tree /tmp/base25 [--rounds 2]

``--baseline-tree``: a checkout of the older commit (``git worktree add --detach
/tmp/base25 8cf73df``); its own tests run against its own ``src``. The current tree
is this file's checkout. Everything runs on loopback, in the test's own gateway.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

MODULE = "tests/gateway/test_agent_loop_embedded.py"
HERE = Path(__file__).resolve().parent.parent


def run_module(tree: Path) -> float:
    """Seconds for one run of the module in ``tree``, which must pass."""
    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", MODULE],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{MODULE} failed in {tree}:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-tree", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"baseline": [], "current": []}
    for number in range(1, args.rounds + 1):
        # Alternate who goes first: the first run of a round also warms the disk cache.
        order = ["baseline", "current"] if number % 2 else ["current", "baseline"]
        for side in order:
            tree = args.baseline_tree if side == "baseline" else HERE
            seconds = run_module(tree)
            times[side].append(seconds)
            print(f"round {number} {side:8} {seconds:7.1f} s", flush=True)
    base, current = (statistics.median(times[side]) for side in ("baseline", "current"))
    print(
        f"median: baseline {base:.1f} s, current {current:.1f} s: current/baseline "
        f"x{current / base:.2f}"
    )


if __name__ == "__main__":
    main()

"""The benchmark harness's command line: ``python -m bench SCENARIO [args]`` runs one named
scenario, ``python -m bench --list`` lists them, ``python -m bench SCENARIO --help`` gives
a scenario's own options.

This file owns the scenario table and ``--baseline-src DIR`` (another checkout's ``src/``
measured in the same run). A scenario marked ``interleaved`` serves DIR's code as a second
gateway measured in the same rounds as this tree's (``harness.prepare_baseline``); one
marked ``in-run`` serves it after this tree's, in the same run and report. One
marked ``sequential`` is run twice, each run a child process: this tree, then DIR with
``PYTHONPATH=DIR`` (checked first), which every process it starts inherits, so its
gateways and any llmbridge code it runs in-process are DIR's; a busy machine's drift
between the two runs is not cancelled, so compare their figures with that in mind. A
scenario marked ``-`` measures no llmbridge code of its own (a tool, or the test suite,
which is a checkout's own: run it there).

Each scenario is a module of ``bench/``, run as ``python bench/MODULE.py`` runs it (so
the old command lines keep working).
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

BENCH_DIR = Path(__file__).resolve().parent


class Scenario(NamedTuple):
    baseline: str
    """``interleaved``, ``in-run``, ``sequential`` or ``-`` (see the module docstring)."""
    summary: str


S = Scenario
SCENARIOS = {
    "overhead": S("interleaved", "the gateway against the stub backend called directly"),
    "compare": S("interleaved", "llmbridge beside the LiteLLM proxy, Portkey and the floors"),
    "scale": S("interleaved", "--workers 1 and 2; keys, limits and the ledger; Redis"),
    "workers": S("sequential", "--workers 1 to 16 on CPUs of their own (a many-core machine)"),
    "frontier": S("interleaved", "the highest rate within a p99 bound (open loop); frames"),
    "dialect_paths": S(
        "interleaved", "every client dialect's path, tools or not, against OpenAI's"
    ),
    "memory_plateau": S("sequential", "RSS over minutes of mixed load must level off"),
    "soak": S("sequential", "many streams held open for a minute: errors and leaks"),
    "health_under_load": S("sequential", "/health latency while the largest legal bodies are read"),
    "opencode": S("sequential", "the opencode backend over a bare OpenCode prompt"),
    "completion": S("sequential", "how soon the profiler knows an OpenCode turn is over"),
    "embedded_worker": S("sequential", "the embedded model's worker pipe per token; generation"),
    "prefix_cache": S("in-run", "llama.cpp prefix-cache hits per agent turn (embedded model)"),
    "decision_validity": S("sequential", "emulated tool decisions on the embedded model: usable?"),
    "agent_memory": S("sequential", "does a 200-turn agent session keep 20 stated facts"),
    "busy_suite": S("-", "the test suite beside one CPU burner per core"),
    "floor_proxy": S("-", "tool: the forwarding-only proxy, served by overhead --gateway-launcher"),
    "otlp_sink": S("-", "tool: an OTLP/HTTP trace receiver for runs with tracing on"),
    "fast_backend": S("-", "tool: the stub backend every scenario measures against"),
}


def listing() -> str:
    width = max(map(len, SCENARIOS))
    lines = [f"{'scenario':<{width}}  {'baseline':<11}  what it measures"]
    for name, scenario in SCENARIOS.items():
        lines.append(f"{name:<{width}}  {scenario.baseline:<11}  {scenario.summary}")
    lines += [
        "",
        "--baseline-src DIR (another checkout's src/): 'interleaved' measures DIR's gateway in",
        "the same rounds as this tree's; 'in-run' after it, in the same report; 'sequential'",
        "runs the scenario for this tree, then again with PYTHONPATH=DIR; '-' takes none.",
    ]
    return "\n".join(lines)


def split_baseline(args: list[str]) -> tuple[str | None, list[str]]:
    """``--baseline-src DIR`` (or ``=DIR``) taken out of ``args``, and the rest."""
    rest: list[str] = []
    found: str | None = None
    words = iter(args)
    for word in words:
        if word == "--":
            rest += [word, *words]
            break
        if word == "--baseline-src":
            found = next(words, None)
            if found is None:
                raise SystemExit("--baseline-src needs a directory")
        elif word.startswith("--baseline-src="):
            found = word.split("=", 1)[1]
        else:
            rest.append(word)
    return found, rest


def run_sequential(name: str, src: str, args: list[str]) -> int:
    """The scenario for this tree, then for the checkout at ``src``, each in a child."""
    sys.path.insert(0, str(BENCH_DIR))
    from harness import BaselineError, prepare_baseline

    try:
        baseline = prepare_baseline(Path(src))
    except BaselineError as exc:
        print(exc, file=sys.stderr)
        return 2
    assert baseline is not None  # a directory was given
    codes = []
    for label, env in (("this tree", {}), (f"baseline {baseline.label()}", baseline.env)):
        print(f"\n== {name}: {label}\n", flush=True)
        command = [sys.executable, "-m", "bench", name, *args]
        done = subprocess.run(command, cwd=BENCH_DIR.parent, env={**os.environ, **env})
        codes.append(done.returncode)
    return max(codes, key=abs)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.split("\n\n")[0] + "\n\n" + listing())
        return 0 if argv else 2
    if argv[0] == "--list":
        print(listing())
        return 0
    name, args = argv[0], argv[1:]
    scenario = SCENARIOS.get(name)
    if scenario is None:
        print(f"no scenario {name!r}; python -m bench --list shows them", file=sys.stderr)
        return 2
    src, rest = split_baseline(args)
    if src is not None and scenario.baseline == "-":
        print(f"{name} takes no --baseline-src (python -m bench --list)", file=sys.stderr)
        return 2
    if src is not None and scenario.baseline == "sequential":
        return run_sequential(name, src, rest)
    sys.path.insert(0, str(BENCH_DIR))
    sys.argv = [str(BENCH_DIR / f"{name}.py"), *args]
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as stop:
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

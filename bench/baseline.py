"""The baseline of ``bench/overhead.py --baseline-src DIR``: another llmbridge checkout's
``src/`` directory, served by a second gateway in the same run as this tree's.

This file owns what makes that second gateway trustworthy and comparable:

- its environment: ``PYTHONPATH=DIR`` (ahead of any inherited entries), so ``import
  llmbridge`` finds DIR's package before this tree's editable install (a path entry
  in a site-packages ``.pth`` file, which PYTHONPATH entries precede);
- the proof that it does: before anything starts, the benchmark's interpreter with
  that environment and ``-P`` (no directory prepended to ``sys.path``: the console
  script's own, ``.venv/bin``, holds no package) must import ``llmbridge`` from under
  DIR; once the process runs, ``/proc/PID/environ`` must hold that PYTHONPATH;
- what the result records about it: DIR, its commit (``git -C DIR rev-parse HEAD``),
  whether DIR had uncommitted changes, and the module file found;
- the figures comparing the two: this tree's added cost over the baseline's (one in
  flight), its throughput over the baseline's (64 in flight), and the gateway CPU
  time per unit of each.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class BaselineError(Exception):
    """A ``--baseline-src`` that cannot be served, or is not what gets imported."""


@dataclass(frozen=True)
class Baseline:
    src: Path
    module: str
    """``llmbridge.__file__`` as the baseline gateway's interpreter resolves it."""
    commit: str
    src_dirty: bool | None

    @property
    def env(self) -> dict[str, str]:
        """The variables the baseline gateway gets on top of the benchmark's own."""
        return python_path_env(self.src)

    def label(self) -> str:
        commit = self.commit[:9] if self.commit else "not a git checkout"
        return f"{self.src} @ {commit}" + (" (uncommitted changes)" if self.src_dirty else "")

    def describe(self) -> dict[str, object]:
        """What the JSON result records about the baseline."""
        return {
            "src": str(self.src),
            "commit": self.commit,
            "src_dirty": self.src_dirty,
            "module": self.module,
            "pythonpath": self.env["PYTHONPATH"],
        }


def python_path_env(src: Path) -> dict[str, str]:
    inherited = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": str(src) + (os.pathsep + inherited if inherited else "")}


def prepare_baseline(src: Path) -> Baseline:
    """Check that ``src`` holds an llmbridge package that really gets imported."""
    src = src.resolve()
    if not (src / "llmbridge" / "__init__.py").is_file():
        raise BaselineError(
            f"--baseline-src {src}: no llmbridge/__init__.py there "
            "(give the src/ directory of a checkout, e.g. made by git worktree add)"
        )
    module = imported_module(python_path_env(src))
    if not Path(module).resolve().is_relative_to(src):
        raise BaselineError(
            f"--baseline-src {src}: with PYTHONPATH set, llmbridge is still imported from {module}"
        )
    commit, dirty = _git_version(src)
    return Baseline(src, module, commit, dirty)


def imported_module(env: dict[str, str]) -> str:
    """``llmbridge.__file__`` in this interpreter with ``env`` added to the environment."""
    probe = [sys.executable, "-P", "-c", "import llmbridge; print(llmbridge.__file__)"]
    try:
        done = subprocess.run(
            probe, env={**os.environ, **env}, capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise BaselineError(f"cannot run {sys.executable}: {exc}") from exc
    if done.returncode != 0:
        raise BaselineError(f"import llmbridge failed with {env}:\n{done.stderr[-800:]}")
    return done.stdout.strip()


def check_process_env(pid: int, env: dict[str, str]) -> None:
    """Raise unless the running process ``pid`` got ``env`` (Linux; elsewhere a no-op)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return
    found = dict(
        entry.decode(errors="replace").split("=", 1) for entry in raw.split(b"\0") if b"=" in entry
    )
    for name, value in env.items():
        if found.get(name) != value:
            raise BaselineError(f"process {pid} has {name}={found.get(name)!r}, not {value!r}")


def _git_version(src: Path) -> tuple[str, bool | None]:
    """The commit checked out at ``src`` and whether its files differ ("", None: no git)."""

    def git(*argv: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(src), *argv], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return "", None
    return commit, bool(git("status", "--porcelain", "."))


def versus_baseline(
    concurrency: int,
    gateway: dict[str, Any],
    baseline: dict[str, Any],
    gateway_added: float | None,
    baseline_added: float | None,
) -> dict[str, Any]:
    """This tree against the baseline in one scenario. One in flight: the difference and
    ratio of the added cost (``*_added``: ms p50, or µs per chunk when streaming, over
    direct). 64 in flight: the ratio of throughput, this tree / baseline. Both: gateway
    CPU time per request or chunk, this tree / baseline."""
    stream = "chunks" in gateway
    unit = "cpu_us_per_chunk" if stream else "cpu_us_per_request"
    cpu_this, cpu_base = gateway[unit]["gateway"], baseline[unit]["baseline"]
    out: dict[str, Any] = {
        "gateway_cpu_us": cpu_this,
        "baseline_cpu_us": cpu_base,
        "cpu_ratio": cpu_this / cpu_base if cpu_base else None,
    }
    if concurrency == 1:
        unit_text = "us/chunk" if stream else "ms p50"
        if gateway_added is None or baseline_added is None:
            out["text"] = "n/a"
            return out
        difference = gateway_added - baseline_added
        # A ratio of added costs only means something when the baseline adds some.
        ratio = gateway_added / baseline_added if baseline_added > 0 else None
        out.update(added_difference=difference, added_ratio=ratio)
        spec = ".1f" if stream else ".3f"
        out["text"] = f"{difference:+{spec}} {unit_text}" + (
            f" (x{ratio:.2f})" if ratio is not None else ""
        )
        return out
    key = "chunks_per_s" if stream else "requests_per_s"
    ratio = (gateway[key] or 0.0) / baseline[key] if baseline[key] else None
    out["throughput_ratio"] = ratio
    out["text"] = "n/a" if ratio is None else f"x{ratio:.3f} {key.split('_')[0]}/s"
    return out

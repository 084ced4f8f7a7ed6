"""CPU time and peak memory of a process and everything it forked, read from /proc.

This file owns the per-process accounting of ``bench/compare.py``: a proxy may fork
workers (the LiteLLM proxy does with ``--num_workers`` > 1), so a server's cost is
the sum over its whole tree, not its first process alone:

- CPU: user + system time of every live process in the tree, plus what the root has
  collected from children it already reaped (``cutime`` + ``cstime``);
- peak memory: the sum of each process's ``VmHWM`` (peak resident set size). Writing
  ``5`` to ``/proc/PID/clear_refs`` resets that peak (Linux >= 4.0, our own processes
  only), so a peak can be taken per measured batch instead of since start-up.

Linux only; where /proc is missing or a process has gone, the figures are 0.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["ProcessTree"]

CLK_TCK = os.sysconf("SC_CLK_TCK")
_PROC = Path("/proc")


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` from field 3 (state) on; the command name may hold spaces."""
    try:
        return (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


class ProcessTree:
    """A root process id and, on every reading, its descendants at that moment."""

    def __init__(self, root: int) -> None:
        self.root = root

    def pids(self) -> list[int]:
        """The root and all its descendants (a scan of /proc: a few ms, never timed)."""
        children: dict[int, list[int]] = {}
        for entry in _PROC.iterdir():
            if not entry.name.isdigit():
                continue
            fields = _stat_fields(int(entry.name))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
        found, todo = [], [self.root]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(children.get(pid, ()))
        return found

    def cpu_seconds(self) -> float:
        """User + system CPU time of the tree so far."""
        ticks = 0
        for pid in self.pids():
            fields = _stat_fields(pid)
            if fields is None:
                continue
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
            if pid == self.root:
                ticks += int(fields[13]) + int(fields[14])  # reaped children
        return ticks / CLK_TCK

    def peak_rss_mb(self) -> float:
        """Sum of the tree's peak resident set sizes (VmHWM), in MB (10^6 bytes)."""
        kib = 0
        for pid in self.pids():
            with contextlib.suppress(OSError, ValueError):
                for line in (_PROC / str(pid) / "status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        kib += int(line.split()[1])
                        break
        return kib * 1024 / 1e6

    def reset_peak(self) -> bool:
        """Start a new peak-RSS window for every process of the tree; False if refused."""
        ok = True
        for pid in self.pids():
            try:
                (_PROC / str(pid) / "clear_refs").write_text("5")
            except OSError:
                ok = False
        return ok

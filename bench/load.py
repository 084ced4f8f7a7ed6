"""Closed-loop load, as the overhead, compare, scale and dialect_paths scenarios drive it:
N requests in flight, each slot sending its next as soon as its last is answered, to one
target at a time, in rounds whose order changes so that the machine's drift cancels.

- ``Cell``: what one measurement sends (streamed or not, how many in flight, pieces);
- ``Target``: where it goes (a base URL and a client dialect, the server in front of
  the backend, whose CPU and memory are its cost, and headers);
- ``Runner.batch``: one target for a count of requests or a number of seconds, timed;
  over it the CPU of the backend, of the target's server, of the load generator and of
  everything else on the machine ("other load": repeat a run where it is more than a
  few percent), and the servers' peak RSS; every reply checked afterwards
  (``wire.check``) into a ``Tally``, whose batch p50 is a round's;
- ``Runner.rounds``: every target once a round, in ``round_order``;
- ``summarise``: a tally's figures; ``percentile``, ``table`` and ``figure`` for reports.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import wire
from fast_backend import reply_pieces
from harness import CPUS, ProcessTree, log, system_busy_seconds
from http_clients import BenchClient, Outcome

T = TypeVar("T")


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
        kind = f"streaming, {self.pieces} chunks" if self.stream else "non-streaming"
        return f"{kind}, {self.concurrency} in flight"


@dataclass
class Target:
    name: str
    base: str
    """``http://127.0.0.1:PORT``; the dialect's path follows."""
    dialect: str = "openai"
    proxy: ProcessTree | None = None
    """The server in front of the backend (None: the backend is the target)."""
    headers: dict[str, str] | None = None
    """Sent with every request besides the content type (Portkey's routing headers)."""
    streams: bool = True
    """False: measured in the non-streaming cells only (Portkey on Node 20)."""
    tools: bool = False
    """Offer tools: the reply must be one tool call."""


@dataclass
class Tally:
    """Everything measured for one target in one cell, over all its rounds."""

    latencies: list[float] = field(default_factory=list)
    first_bytes: list[float] = field(default_factory=list)
    round_p50s: list[float] = field(default_factory=list)
    wall: float = 0.0
    ok: int = 0
    chunks: int = 0
    batches: int = 0
    failures: int = 0
    failure_examples: list[str] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds used during the timed batches, per process, and by everything else."""
    peak_mb: dict[str, float] = field(default_factory=dict)

    def fail(self, message: str) -> None:
        self.failures += 1
        if len(self.failure_examples) < 5:
            self.failure_examples.append(message)

    def record(self, outcomes: list[Outcome], check: Callable[[bytes], int]) -> None:
        """One batch: each reply checked (``check`` returns its chunk count or raises
        ``CheckError``), failures kept, and the batch's p50 as a round."""
        latencies = []
        for outcome in outcomes:
            if outcome.error is not None or outcome.status != 200:
                self.fail(outcome.error or f"HTTP {outcome.status}: {outcome.raw[:200]!r}")
                continue
            try:
                self.chunks += check(outcome.raw)
            except wire.CheckError as exc:
                self.fail(str(exc))
                continue
            self.ok += 1
            latencies.append(outcome.total)
            if outcome.first_byte is not None:
                self.first_bytes.append(outcome.first_byte)
        self.add_latencies(latencies)

    def add_latencies(self, latencies: list[float]) -> None:
        """One batch's checked replies' latencies, and their p50 as a round's."""
        self.latencies.extend(latencies)
        if latencies:
            self.round_p50s.append(percentile(sorted(latencies), 0.5) or 0.0)

    def add_cost(self, wall: float, used: dict[str, float], trees: dict[str, ProcessTree]) -> None:
        """One batch's time, the CPU seconds each part ``used``, and the peak RSS of
        each server's process tree."""
        self.wall += wall
        self.batches += 1
        for name, value in used.items():
            self.cpu[name] = self.cpu.get(name, 0.0) + value
        for name, tree in trees.items():
            self.peak_mb[name] = max(self.peak_mb.get(name, 0.0), tree.peak_rss_mb())


def round_order(targets: Sequence[T], index: int) -> list[T]:
    """The targets' order in round ``index``. Two: D G, G D, D G, ... (ABBA). More: each
    rotation, then its reverse (D G B, B G D, G B D, D B G, ...): a steady drift cancels
    within each pair of rounds, and every target follows every other equally often."""
    shift = (index // 2) % len(targets) if len(targets) > 2 else 0
    order = [*targets[shift:], *targets[:shift]]
    return order if index % 2 == 0 else order[::-1]


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

    async def batch(
        self,
        target: Target,
        cell: Cell,
        tally: Tally,
        *,
        count: int = 0,
        seconds: float | None = None,
    ) -> None:
        """``count`` requests, or as many as ``seconds`` take, ``cell.concurrency`` at a
        time; checked after the timing."""
        url = target.base + wire.path(target.dialect, cell.stream)
        data = wire.body(target.dialect, cell.stream, cell.pieces, tools=target.tools)
        fetch, stream, headers = self.client.fetch, cell.stream, target.headers
        outcomes: list[Outcome] = []
        remaining, stop_at = count, 0.0

        async def worker(slot: int) -> None:
            nonlocal remaining
            while remaining > 0 if seconds is None else time.perf_counter() < stop_at:
                remaining -= 1
                outcomes.append(await fetch(slot, url, data, stream, headers))

        trees = {"backend": self.backend, **({"proxy": target.proxy} if target.proxy else {})}
        for tree in trees.values():
            tree.reset_peak()
        before = self._cpu(target)
        started = time.perf_counter()
        stop_at = started + (seconds or 0.0)
        slots = cell.concurrency if seconds is not None else min(cell.concurrency, count)
        await asyncio.gather(*(worker(i) for i in range(slots)))
        wall = time.perf_counter() - started
        used = {name: value - before[name] for name, value in self._cpu(target).items()}
        ours = sum(v for k, v in used.items() if k != "system")
        used["other"] = max(0.0, used.pop("system") - ours)  # other people's work meanwhile
        tally.add_cost(wall, used, trees)
        expected = reply_pieces(cell.pieces)
        dialect, tools = target.dialect, target.tools
        tally.record(outcomes, lambda raw: wire.check(dialect, stream, raw, expected, tools))

    async def warm_up(
        self, targets: Sequence[Target], cell: Cell, *, count: int = 0, seconds: float | None = None
    ) -> None:
        """Untimed traffic of the cell's shape: imports, caches, pools and the
        interpreter's specialisation settle before anything is measured."""
        for target in (t for t in targets if t.streams or not cell.stream):
            tally = Tally()
            await self.batch(target, cell, tally, count=count, seconds=seconds)
            if tally.failures:
                log(
                    f"{cell.key} warm-up of {target.name}: {tally.failures} failed, "
                    f"e.g. {tally.failure_examples[0]}"
                )

    async def rounds(
        self,
        targets: Sequence[Target],
        cell: Cell,
        rounds: int,
        *,
        count: int = 0,
        seconds: float | None = None,
        deadline: float | None = None,
        label: str | None = None,
    ) -> dict[str, Tally]:
        """``rounds`` rounds of a batch per target (``count`` requests each, or
        ``seconds``); stops early past the monotonic ``deadline``."""
        chosen = [t for t in targets if t.streams or not cell.stream]
        tallies = {t.name: Tally() for t in chosen}
        for index in range(rounds):
            for target in round_order(chosen, index):
                if deadline is not None and time.monotonic() > deadline:
                    log(f"{label or cell.key}: time budget spent after {index} rounds")
                    return tallies
                tally = tallies[target.name]
                await self.batch(target, cell, tally, count=count, seconds=seconds)
            if len(chosen) < 10:
                line = "; ".join(f"{n} p50 {_last_p50(t)}" for n, t in tallies.items())
                log(f"{label or cell.key} round {index + 1}/{rounds}: {line}")
        return tallies

    async def cell(
        self,
        targets: Sequence[Target],
        cell: Cell,
        rounds: int,
        *,
        seconds: float,
        warmup_seconds: float,
    ) -> dict[str, Any]:
        """One cell measured: a warm-up of ``warmup_seconds`` a target, then ``rounds``
        rounds of ``seconds``; its key, title and each target's ``summarise``."""
        log(f"{cell.key}: {rounds} rounds of {seconds:g} s per target")
        await self.warm_up(targets, cell, seconds=warmup_seconds)
        tallies = await self.rounds(targets, cell, rounds, seconds=seconds)
        runs = {name: summarise(tally, cell.stream) for name, tally in tallies.items()}
        return {"key": cell.key, "title": cell.title, "targets": runs}


def _last_p50(tally: Tally) -> str:
    p50 = f"{tally.round_p50s[-1] * 1000:.3f} ms" if tally.round_p50s else "-"
    return p50 + (f" ({tally.failures} failed)" if tally.failures else "")


# -- figures --------------------------------------------------------------------------------


def percentile(ordered: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks of an ascending sequence (None when
    empty)."""
    if not ordered:
        return None
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def ms(values: Sequence[float], *qs: float) -> dict[str, float | None]:
    """Percentiles (``p50``, ``p99.9``...) and the maximum of seconds, in ms."""
    ordered = sorted(values)
    out: dict[str, float | None] = {}
    for q in qs:
        found = percentile(ordered, q)
        out[f"p{q * 100:g}"] = None if found is None else found * 1000
    out["max"] = ordered[-1] * 1000 if ordered else None
    return out


def summarise(tally: Tally, stream: bool) -> dict[str, Any]:
    per, wall = max(tally.ok, 1), tally.wall
    out: dict[str, Any] = {
        "requests_ok": tally.ok,
        "failures": tally.failures,
        "failure_examples": tally.failure_examples,
        "latency_ms": ms(tally.latencies, 0.5, 0.9, 0.99),
        "round_p50s_ms": [p * 1000 for p in tally.round_p50s],
        "wall_s": wall,
        "requests_per_s": tally.ok / wall if wall else None,
        "cpu_us_per_request": {k: v / per * 1e6 for k, v in tally.cpu.items()},
        # Cores kept busy, per process: 1.0 is a saturated single-threaded server.
        "cores_busy": {k: v / wall if wall else 0.0 for k, v in tally.cpu.items()},
        "other_load": tally.cpu.get("other", 0.0) / (wall * CPUS) if wall else 0.0,
        "peak_mb": tally.peak_mb,
        "requests_sent": tally.ok + tally.failures,
        "rounds_completed": tally.batches,
    }
    if stream:
        out["first_byte_ms"] = ms(tally.first_bytes, 0.5, 0.99)
        out["chunks"] = tally.chunks
        out["chunks_per_s"] = tally.chunks / wall if wall else None
        out["cpu_us_per_chunk"] = {k: v / max(tally.chunks, 1) * 1e6 for k, v in tally.cpu.items()}
    return out


def figure(value: float | None, spec: str = ".2f") -> str:
    """``value`` formatted, or ``-`` when there is none (or NaN)."""
    return "-" if value is None or value != value else format(value, spec)


def table(rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table, the first row its head."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)

"""bench/overhead.py's numbers: what one scenario measured (``Scenario``, ``Tally``),
its summary and percentiles, the verdict against the issue's targets, and the report
tables (this tree against direct, and against a ``--baseline-src`` gateway)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from harness import Baseline
from http_clients import Outcome
from replies import CheckError

CPUS = os.cpu_count() or 1


@dataclass
class Scenario:
    key: str
    title: str
    stream: bool
    concurrency: int
    pieces: int
    requests: int
    """Per target, over all rounds."""
    rounds: int


@dataclass
class Tally:
    """Everything measured for one target in one scenario, over all its rounds."""

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

    def fail(self, message: str) -> None:
        self.failures += 1
        if len(self.failure_examples) < 5:
            self.failure_examples.append(message)

    def record(self, outcomes: list[Outcome], check: Callable[[bytes], int]) -> None:
        """One batch: each reply checked (``check`` returns its chunk count or raises
        ``CheckError``), failures kept, and the batch's p50 as a round."""
        latencies = []
        for outcome in outcomes:
            if outcome.error is not None:
                self.fail(outcome.error)
                continue
            if outcome.status != 200:
                self.fail(f"HTTP {outcome.status}: {outcome.raw[:200]!r}")
                continue
            try:
                self.chunks += check(outcome.raw)
            except CheckError as exc:
                self.fail(str(exc))
                continue
            self.ok += 1
            latencies.append(outcome.total)
            if outcome.first_byte is not None:
                self.first_bytes.append(outcome.first_byte)
        self.latencies.extend(latencies)
        if latencies:
            self.round_p50s.append(percentile(sorted(latencies), 0.5))


# -- statistics and report ----------------------------------------------------------------


def percentile(ordered: list[float], q: float) -> float:
    """Linear interpolation between closest ranks; ``ordered`` must be sorted."""
    if not ordered:
        return float("nan")
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarise(tally: Tally, scenario: Scenario) -> dict[str, Any]:
    ordered = sorted(tally.latencies)
    first = sorted(tally.first_bytes)
    requests = tally.ok + tally.failures
    per = max(tally.ok, 1)
    out: dict[str, Any] = {
        "requests_ok": tally.ok,
        "failures": tally.failures,
        "failure_examples": tally.failure_examples,
        "latency_ms": {
            name: percentile(ordered, q) * 1000
            for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
        },
        "latency_ms_mean": sum(ordered) / len(ordered) * 1000 if ordered else None,
        "round_p50s_ms": [p * 1000 for p in tally.round_p50s],
        "wall_s": tally.wall,
        "requests_per_s": tally.ok / tally.wall if tally.wall else None,
        "cpu_us_per_request": {k: v / per * 1e6 for k, v in tally.cpu.items()},
        # Cores kept busy, per process: 1.0 is a saturated single-threaded server.
        "cores_busy": {k: v / tally.wall if tally.wall else 0.0 for k, v in tally.cpu.items()},
        "other_load": tally.cpu.get("other", 0.0) / (tally.wall * CPUS) if tally.wall else 0.0,
        "requests_sent": requests,
        "rounds_completed": tally.batches,
    }
    if scenario.stream:
        out["first_byte_ms_p50"] = percentile(first, 0.5) * 1000
        out["chunks"] = tally.chunks
        out["chunks_per_s"] = tally.chunks / tally.wall if tally.wall else None
        out["cpu_us_per_chunk"] = {k: v / max(tally.chunks, 1) * 1e6 for k, v in tally.cpu.items()}
    return out


@dataclass
class Verdict:
    metric: str
    direct: str
    gateway: str
    added: str
    target: str
    result: str
    value: float | None = None


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None or value != value else format(value, spec)


def judge(scenario: Scenario, d: dict[str, Any], g: dict[str, Any]) -> Verdict:
    """The scenario's headline figure and whether it meets the issue's target."""
    invalid = d["failures"] or g["failures"] or not d["requests_ok"] or not g["requests_ok"]
    truncated = min(d["rounds_completed"], g["rounds_completed"]) < scenario.rounds

    def result(met: bool | None) -> str:
        if invalid:
            return "INVALID (failures)"
        verdict = "info" if met is None else ("PASS" if met else "FAIL")
        return verdict + (" (time cap: fewer rounds)" if truncated else "")

    if scenario.concurrency == 1:
        dl, gl = d["latency_ms"], g["latency_ms"]
        direct_cell, gateway_cell = (
            " / ".join(_fmt(x[p], ".3f") for p in ("p50", "p90", "p99")) for x in (dl, gl)
        )
        added_ms = gl["p50"] - dl["p50"]
        if not scenario.stream:
            return Verdict(
                "latency p50/p90/p99 ms",
                direct_cell,
                gateway_cell,
                f"+{added_ms:.3f} ms p50",
                "<= 1 ms",
                result(added_ms <= 1.0),
                added_ms,
            )
        per_chunk_us = added_ms * 1000 / scenario.pieces
        return Verdict(
            f"whole stream p50/p90/p99 ms ({scenario.pieces} chunks)",
            direct_cell,
            gateway_cell,
            f"+{per_chunk_us:.1f} us/chunk",
            "<= 25 us/chunk",
            result(per_chunk_us <= 25.0),
            per_chunk_us,
        )
    key = "chunks_per_s" if scenario.stream else "requests_per_s"
    ratio = (g[key] or 0.0) / d[key] if d[key] else None
    met = None if not scenario.stream else (ratio is not None and ratio >= 0.5)
    return Verdict(
        "chunks/s" if scenario.stream else "requests/s",
        _fmt(d[key], ",.0f"),
        _fmt(g[key], ",.0f"),
        f"x{_fmt(ratio, '.3f')}",
        ">= 0.50x" if scenario.stream else "-",
        result(met),
        ratio,
    )


def render_table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def report(results: list[dict[str, Any]], baseline: Baseline | None = None) -> str:
    head = ["scenario", "metric", "direct", "gateway", "added / ratio", "target", "result"]
    rows = [head]
    for r in results:
        v = r["verdict"]
        rows.append(
            [r["key"], v["metric"], v["direct"], v["gateway"], v["added"], v["target"], v["result"]]
        )
    names = ("direct", "gateway") if baseline is None else ("direct", "gateway", "baseline")
    tag = "/".join(name[0] for name in names)
    servers = "gateway" if baseline is None else "gateway / baseline"
    cpu_head = [
        "scenario",
        "per",
        f"backend {tag}",
        servers,
        f"client {tag}",
        f"other load {tag}",
        f"failures {tag}",
    ]
    cpu_rows = [cpu_head]
    for r in results:
        runs = [r[name] for name in names]
        unit = "cpu_us_per_chunk" if r["stream"] else "cpu_us_per_request"
        served = [r[name][unit][name] for name in names[1:]]
        cpu_rows.append(
            [
                r["key"],
                "chunk" if r["stream"] else "request",
                _joined((run[unit]["backend"] for run in runs), ".1f") + " us",
                _joined(served, ".1f") + " us",
                _joined((run[unit]["client"] for run in runs), ".1f") + " us",
                _joined((run["other_load"] for run in runs), ".0%"),
                _joined((run["failures"] for run in runs), ""),
            ]
        )
    out = [render_table(rows), ""]
    if baseline is not None:
        out += [f"Baseline {baseline.label()}, measured in the same rounds:", ""]
        out += [render_table(baseline_rows(results)), ""]
    legend = "d = direct run, g = gateway run" + ("" if baseline is None else ", b = baseline run")
    out += [f"CPU time per unit ({legend}):", "", render_table(cpu_rows)]
    for r in results:
        for name in names:
            for example in r[name]["failure_examples"]:
                out.append(f"failure {r['key']} {name}: {example}")
    return "\n".join(out)


def _joined(values: Iterable[float], spec: str) -> str:
    return " / ".join(format(value, spec) for value in values)


def baseline_rows(results: list[dict[str, Any]]) -> list[list[str]]:
    """The baseline against direct, beside this tree's figure and the two compared."""
    head = ["scenario", "baseline", "added / ratio", "result", "this tree", "this vs baseline"]
    rows = [[*head, "gateway CPU this / baseline"]]
    for r in results:
        v, b, versus = r["verdict"], r["baseline_verdict"], r["gateway_vs_baseline"]
        cpu = f"{versus['gateway_cpu_us']:.1f} / {versus['baseline_cpu_us']:.1f} us"
        if versus["cpu_ratio"] is not None:
            cpu += f" (x{versus['cpu_ratio']:.3f})"
        rows.append(
            [r["key"], b["gateway"], b["added"], b["result"], v["added"], versus["text"], cpu]
        )
    return rows


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

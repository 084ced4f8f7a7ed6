"""The ``agent_documents`` scenario: what indexing a document costs the event loop, as the
document grows.

A document of 500,000 distinct words once took 20 s to index and stopped every other
request for 12 s; ``DocumentStore.add`` now splits and counts in a worker thread and
writes the rows in awaited batches. For each size (a contract whose every clause brings
its own words: one index row per word, the worst case), a fresh SQLite store indexes one
document while a ticker on the same loop sleeps 2 ms at a time and records each gap.
Reported: the time to index, and the worst and 99th-percentile gap, as ratios against
the smallest document of the same run. The remaining worst gap is usually one CPython
full garbage collection, which stops every thread whatever the indexer does.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import time
from pathlib import Path

from llmbridge.agent.documents import DocumentStore
from llmbridge.agent.store import AgentStore


def contract(size: int) -> str:
    """About ``size`` bytes of clauses, eleven distinct words each."""
    clauses: list[str] = []
    used, n = 0, 0
    while used < size:
        clause = (
            f"Section {n}. The indemnitor{n} shall hold harmless the indemnitee{n}, its "
            f"lessor{n} and assignee{n}, against claims{n}, damages{n} and liabilities{n} "
            f"under subsection{n} of lease{n}, save for the negligence{n} of licensee{n}."
        )
        clauses.append(clause)
        used += len(clause) + 2
        n += 1
    return "\n\n".join(clauses)


async def measure(size: int, folder: Path) -> dict[str, float]:
    store = await AgentStore.open(folder / f"docs-{size}.db")
    documents = DocumentStore(store, max_bytes=size * 2)
    text = contract(size)
    gaps: list[float] = []
    pauses: list[float] = []
    started = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        elif info["generation"] == 2:
            pauses.append(time.perf_counter() - started[0])

    running = True

    async def ticker() -> None:
        last = time.perf_counter()
        while running:
            await asyncio.sleep(0.002)
            now = time.perf_counter()
            gaps.append(now - last - 0.002)
            last = now

    gc.callbacks.append(on_gc)
    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    begin = time.perf_counter()
    await documents.add("Master lease", text)
    took = time.perf_counter() - begin
    running = False
    await task
    gc.callbacks.remove(on_gc)
    await store.close()
    gaps.sort()
    return {
        "bytes": len(text.encode()),
        "index_s": took,
        "worst_gap_ms": gaps[-1] * 1000,
        "p99_gap_ms": gaps[int(len(gaps) * 0.99)] * 1000 if gaps else 0.0,
        "median_gap_ms": statistics.median(gaps) * 1000 if gaps else 0.0,
        "full_gc_ms": max(pauses, default=0.0) * 1000,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,500000,2000000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as folder:
        rows = [await measure(size, Path(folder)) for size in sizes]
    base = rows[0]
    print(
        f"{'bytes':>10} {'index s':>8} {'x':>6} {'worst gap ms':>13} {'x':>6} "
        f"{'p99 gap ms':>11} {'full GC ms':>11}"
    )
    for row in rows:
        slower = row["index_s"] / base["index_s"]
        stalled = row["worst_gap_ms"] / max(base["worst_gap_ms"], 1e-3)
        print(
            f"{row['bytes']:>10,} {row['index_s']:>8.2f} {slower:>6.1f} "
            f"{row['worst_gap_ms']:>13.1f} {stalled:>6.1f} "
            f"{row['p99_gap_ms']:>11.1f} {row['full_gc_ms']:>11.1f}"
        )


if __name__ == "__main__":
    asyncio.run(main())

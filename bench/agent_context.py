"""What assembling an agent's history context costs as the session grows.

This file owns the measurement of ``agent.memory.MemoryBuilder.build`` (the hybrid
memory: pins, summaries, condensed older messages, recent messages, within the token
budget) on a SQLite store, for sessions of 10, 1,000 and 100,000 stored messages.
The issue's target: the cost grows with the budget, not with the history, and stays
at or under 10 ms at 100,000 messages.

Each size gets its own database file, filled fast with ``executemany`` inserts:
one session of N messages (alternating user / assistant, 20 to 60 words each), a
dozen pins, and two variants of the same history:

- ``summarised``: what the background summariser leaves behind, a summary per run of
  20 messages, with the newest 10 to 29 messages unsummarised;
- ``unsummarised``: no summaries at all (no summariser configured), the worst case
  for the condensed block's window.

Five other sessions of the same size share the file, so the session's index range
is a part of the table, as in a real store. Timing: after a warm-up, ``--repeats``
builds of the context for the newest message (the current input), reported as p50,
p95 and mean in milliseconds. Memory: the peak traced by ``tracemalloc`` during one
build (a separate pass, because tracing slows the code down). Both are shown as
ratios against the 10-message session measured in the same run; nothing is
asserted. Results go to stdout and to ``bench/results/agent_context-<time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
import tracemalloc
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import insert

from llmbridge.agent.memory import MemoryBuilder, MemoryConfig
from llmbridge.agent.store import AgentStore
from llmbridge.features.token_count import count_text_tokens
from llmbridge.store.tables import MessageRow, Pin, SessionRow, Summary

SIZES = (10, 1_000, 100_000)
OTHER_SESSIONS = 5
SUMMARY_RUN = 20
TARGET_MS = 10.0
RESULTS = Path(__file__).with_name("results")


@dataclass
class Result:
    messages: int
    variant: str
    p50_ms: float
    p95_ms: float
    mean_ms: float
    peak_kib: float
    context_tokens: int
    summaries_used: int
    older_used: int
    fill_seconds: float


def _text(n: int) -> str:
    words = 20 + (n * 7919) % 41
    return f"message {n}: " + " ".join(f"w{(n * 31 + i) % 997}" for i in range(words))


async def _fill(store: AgentStore, session: str, size: int, summarised: bool) -> int:
    """Insert ``size`` messages (and summaries) for ``session``; returns the newest
    message's id."""
    start = datetime(2025, 1, 1, tzinfo=UTC)
    async with store.engine.begin() as conn:
        await conn.execute(
            insert(SessionRow),
            [{"id": session, "name": session, "created_at": start, "updated_at": start}],
        )
        batch = 20_000
        for offset in range(0, size, batch):
            rows: list[dict[str, Any]] = []
            for n in range(offset, min(size, offset + batch)):
                text = _text(n)
                rows.append(
                    {
                        "session_id": session,
                        "role": "user" if n % 2 == 0 else "assistant",
                        "content": text,
                        "created_at": start + timedelta(seconds=n),
                        "token_count": count_text_tokens(text),
                        "status": "complete",
                    }
                )
            await conn.execute(insert(MessageRow), rows)
        ids = [
            int(i)
            for i in (
                await conn.exec_driver_sql(
                    "SELECT id FROM messages WHERE session_id = ? ORDER BY id", (session,)
                )
            ).scalars()
        ]
        await conn.execute(
            insert(Pin),
            [
                {
                    "session_id": session,
                    "content": f"pinned fact {k}: the patient's code word is {k * 17}",
                    "token_count": 9,
                    "created_at": start,
                }
                for k in range(12)
            ],
        )
        if summarised:
            # The summariser keeps 10 recent messages and summarises runs of 20 once
            # 30 are pending, so 10 to 29 messages stay unsummarised.
            summaries = []
            pending = len(ids)
            position = 0
            while pending >= SUMMARY_RUN + 10:
                run = ids[position : position + SUMMARY_RUN]
                content = f"Summary of messages {run[0]}-{run[-1]}: " + "detail " * 40
                summaries.append(
                    {
                        "session_id": session,
                        "content": content,
                        "message_ids": run,
                        "first_message_id": run[0],
                        "last_message_id": run[-1],
                        "token_count": count_text_tokens(content),
                        "created_at": start,
                    }
                )
                position += SUMMARY_RUN
                pending -= SUMMARY_RUN
            if summaries:
                await conn.execute(insert(Summary), summaries)
    return ids[-1]


async def _measure(size: int, variant: str, repeats: int, budget: int, root: Path) -> Result:
    store = await AgentStore.open(root / f"agent-{size}-{variant}.db")
    try:
        began = time.perf_counter()
        for other in range(OTHER_SESSIONS):
            await _fill(store, f"other-{other}", size, variant == "summarised")
        newest = await _fill(store, "target", size, variant == "summarised")
        async with store.engine.connect() as conn:
            await conn.exec_driver_sql("ANALYZE")
            await conn.commit()
        fill = time.perf_counter() - began
        builder = MemoryBuilder(store, MemoryConfig(budget=budget))
        for _ in range(max(5, repeats // 10)):
            context = await builder.build("target", before_id=newest)
        assert not context.fallback and context.tokens <= budget
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            await builder.build("target", before_id=newest)
            samples.append((time.perf_counter() - t0) * 1000)
        tracemalloc.start()
        tracemalloc.reset_peak()
        await builder.build("target", before_id=newest)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        samples.sort()
        return Result(
            messages=size,
            variant=variant,
            p50_ms=statistics.median(samples),
            p95_ms=samples[int(len(samples) * 0.95) - 1],
            mean_ms=statistics.fmean(samples),
            peak_kib=peak / 1024,
            context_tokens=context.tokens,
            summaries_used=len(context.summary_ids),
            older_used=len(context.older_ids),
            fill_seconds=fill,
        )
    finally:
        await store.close()


def _report(results: list[Result]) -> None:
    print(
        f"{'messages':>9} {'variant':<13} {'p50 ms':>8} {'p95 ms':>8} {'x10':>6} "
        f"{'peak KiB':>9} {'x10':>6} {'tokens':>6} {'sums':>4} {'older':>5}"
    )
    for result in results:
        base = next(r for r in results if r.variant == result.variant and r.messages == SIZES[0])
        print(
            f"{result.messages:>9,} {result.variant:<13} {result.p50_ms:>8.2f} "
            f"{result.p95_ms:>8.2f} {result.p50_ms / base.p50_ms:>6.2f} "
            f"{result.peak_kib:>9.1f} {result.peak_kib / base.peak_kib:>6.2f} "
            f"{result.context_tokens:>6} {result.summaries_used:>4} {result.older_used:>5}"
        )
    largest = [r for r in results if r.messages == max(r.messages for r in results)]
    for result in largest:
        verdict = "met" if result.p50_ms <= TARGET_MS else "MISSED"
        print(
            f"target <= {TARGET_MS:g} ms at {result.messages:,} messages ({result.variant}): "
            f"{verdict} (p50 {result.p50_ms:.2f} ms)"
        )


async def _main(args: argparse.Namespace) -> None:
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="llmbridge-bench-") as tmp:
        for variant in ("summarised", "unsummarised"):
            for size in args.sizes:
                print(f"measuring {size:,} messages ({variant})...", file=sys.stderr)
                results.append(await _measure(size, variant, args.repeats, args.budget, Path(tmp)))
    _report(results)
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    out = RESULTS / f"agent_context-{stamp}.json"
    out.write_text(
        json.dumps(
            {
                "python": platform.python_version(),
                "machine": platform.machine(),
                "budget": args.budget,
                "repeats": args.repeats,
                "results": [asdict(r) for r in results],
            },
            indent=2,
        )
    )
    print(f"results: {out}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--budget", type=int, default=3000)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    args = parser.parse_args()
    if args.sizes[0] != SIZES[0]:
        args.sizes = [SIZES[0], *args.sizes]  # the baseline is always measured
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()

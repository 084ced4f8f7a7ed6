"""A load generator of several processes, for load one Python process cannot send: the
``workers`` scenario drives ``--workers 16`` with it, where a single aiohttp client (about
80 us of CPU a request) would be the bottleneck long before the gateway is.

``LoadPool.start(cpus, connections)`` starts one process per entry of ``cpus``, each
pinned to its CPUs, each keeping one ``http_clients`` session (and so its pooled
connections) for its whole life. ``LoadPool.batch`` sends every process the same
command, with the in-flight count shared out among them, and a start time on the
machine-wide monotonic clock so that all begin together; each runs its share closed
loop until the batch's end, checks every reply afterwards (``wire.check``, outside the
timed window, as ``load.Runner`` does), and answers with its counts, its latencies and
the CPU it used while timed.

A process is ``python bench/load_pool.py --connections N``: one JSON command a line on
standard input, one JSON answer a line on standard output.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_LINE_LIMIT = 1 << 27
"""An answer's line carries every latency of the batch: up to a few MB."""
_SCRIPT = str(Path(__file__).resolve())
_START_SLACK_S = 0.2
"""The start time is this far ahead of the command, so every process has it in time."""


@dataclass(frozen=True)
class Share:
    """What one process's answer says about its part of a batch."""

    ok: int
    failures: int
    examples: list[str]
    latencies: list[float]
    first_bytes: list[float]
    chunks: int
    wall: float
    cpu: float


class LoadPool:
    """The parent's side: the processes, and batches sent to all of them at once."""

    def __init__(self, processes: list[asyncio.subprocess.Process]) -> None:
        self._processes = processes

    @classmethod
    async def start(cls, cpus: Sequence[Sequence[int] | None], connections: int) -> LoadPool:
        """One process per entry of ``cpus`` (None: not pinned), each allowed
        ``connections`` pooled connections."""
        from harness import child_setup

        processes = []
        for chosen in cpus:
            processes.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    _SCRIPT,
                    "--connections",
                    str(connections),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    preexec_fn=child_setup(chosen),
                    limit=_LINE_LIMIT,
                )
            )
        return cls(processes)

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self._processes]

    @property
    def size(self) -> int:
        return len(self._processes)

    async def batch(
        self,
        url: str,
        dialect: str,
        stream: bool,
        pieces: int,
        in_flight: int,
        seconds: float,
        headers: dict[str, str] | None = None,
    ) -> list[Share]:
        """``in_flight`` requests at a time, shared out over the processes, for
        ``seconds``; every process's answer."""
        count = len(self._processes)
        shares = [in_flight // count + (i < in_flight % count) for i in range(count)]
        start_at = time.monotonic() + _START_SLACK_S
        for process, share in zip(self._processes, shares, strict=True):
            command = {
                "url": url,
                "dialect": dialect,
                "stream": stream,
                "pieces": pieces,
                "in_flight": share,
                "seconds": seconds,
                "start_at": start_at,
                "headers": headers,
            }
            assert process.stdin is not None
            process.stdin.write(json.dumps(command).encode() + b"\n")
        await asyncio.gather(*(p.stdin.drain() for p in self._processes if p.stdin))
        return list(await asyncio.gather(*(self._answer(p) for p in self._processes)))

    @staticmethod
    async def _answer(process: asyncio.subprocess.Process) -> Share:
        assert process.stdout is not None
        line = await process.stdout.readline()
        if not line:
            raise RuntimeError(f"load process {process.pid} exited ({process.returncode})")
        return Share(**json.loads(line))

    async def aclose(self) -> None:
        for process in self._processes:
            if process.stdin is not None:
                process.stdin.close()
        for process in self._processes:
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()


# -- one load process --------------------------------------------------------------------


async def _run_share(client: Any, command: dict[str, Any]) -> dict[str, Any]:
    import wire
    from fast_backend import reply_pieces

    dialect, stream, pieces = command["dialect"], command["stream"], command["pieces"]
    url, headers = command["url"] + wire.path(dialect, stream), command["headers"]
    data = wire.body(dialect, stream, pieces)
    start_at = command["start_at"]
    stop_at = start_at + command["seconds"]
    outcomes: list[Any] = []

    async def slot(index: int) -> None:
        while time.monotonic() < stop_at:
            outcomes.append(await client.fetch(index, url, data, stream, headers))

    await asyncio.sleep(max(0.0, start_at - time.monotonic()))
    cpu_before = time.process_time()
    await asyncio.gather(*(slot(i) for i in range(command["in_flight"])))
    wall = time.monotonic() - start_at
    cpu = time.process_time() - cpu_before
    expected = reply_pieces(pieces)
    ok = failures = chunks = 0
    examples: list[str] = []
    latencies: list[float] = []
    first_bytes: list[float] = []
    for outcome in outcomes:
        problem = outcome.error
        if problem is None and outcome.status != 200:
            problem = f"HTTP {outcome.status}: {outcome.raw[:200]!r}"
        if problem is None:
            try:
                chunks += wire.check(dialect, stream, outcome.raw, expected, False)
            except wire.CheckError as exc:
                problem = str(exc)
        if problem is not None:
            failures += 1
            if len(examples) < 5:
                examples.append(problem)
            continue
        ok += 1
        latencies.append(outcome.total)
        if outcome.first_byte is not None:
            first_bytes.append(outcome.first_byte)
    return {
        "ok": ok,
        "failures": failures,
        "examples": examples,
        "latencies": latencies,
        "first_bytes": first_bytes,
        "chunks": chunks,
        "wall": wall,
        "cpu": cpu,
    }


async def _serve_commands(connections: int) -> None:
    from http_clients import AiohttpClient

    # Idle connections kept longer than the pause between two rounds of one target, so
    # a round measures requests, not a new connection per slot (the servers measured
    # keep theirs 120 s or more).
    client = AiohttpClient(connections, 60.0, keepalive_s=100.0)
    loop = asyncio.get_running_loop()
    try:
        while line := await loop.run_in_executor(None, sys.stdin.buffer.readline):
            answer = await _run_share(client, json.loads(line))
            sys.stdout.buffer.write(json.dumps(answer).encode() + b"\n")
            sys.stdout.buffer.flush()
    finally:
        await client.aclose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, required=True, help="pooled, at most")
    args = parser.parse_args(argv)
    from harness import run_async

    run_async(_serve_commands(args.connections))


if __name__ == "__main__":
    main()

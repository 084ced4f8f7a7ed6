"""Open-loop load for the ``frontier`` and ``memory_plateau`` scenarios: requests sent on a
schedule fixed in advance, whatever the replies do, and timed from that schedule.

- ``schedule``: one step's arrival times, evenly spaced or Poisson (seeded, so two
  targets get the same arrivals at the same rate);
- ``OpenLoop.run``: one task per request, started at its scheduled time by one pacing
  loop. A closed loop sends less when the server slows down and so hides the slowness;
  here a request's latency runs from its *scheduled* time. Timers wake in whole
  milliseconds, so the loop starts every request due within ``EARLY_S`` at once; one
  sent early is timed from its send, so the timer is never charged to the server;
- ``Shot``: one request as sent and answered; ``lag`` is how late the generator sent it
  (a step whose lag p99 exceeds ``LAG_LIMIT_S`` says its figures may be the generator's);
- ``summarise``: a step's figures (rates, errors, latency percentiles, generator lag and
  CPU, time to first frame and the gaps between frames).

At most ``cap`` requests in flight: one due beyond that is shed and counts as an error,
so an overloaded server cannot make the generator buffer without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import resource
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from http_clients import AiohttpClient
from load import ms, percentile
from wire import CheckError

ARRIVALS = ("even", "poisson")
EARLY_S = 0.001
"""A request due within this many seconds is sent now (timer granularity, see above)."""
_MIN_SLEEP_S = 0.001
LAG_LIMIT_S = 0.001
"""A step whose generator sent its requests later than this at p99 is flagged."""


def schedule(rate: float, seconds: float, arrivals: str, seed: int = 26) -> list[float]:
    """Offsets in seconds from the step's start: ``rate`` per second for ``seconds``."""
    if arrivals == "even":
        return [i / rate for i in range(max(1, round(rate * seconds)))]
    rng = random.Random(f"{seed}:{rate}")
    offsets: list[float] = []
    at = rng.expovariate(rate)
    while at < seconds:
        offsets.append(at)
        at += rng.expovariate(rate)
    return offsets or [0.0]


@dataclass(frozen=True, slots=True)
class Request:
    """What one scheduled request sends."""

    url: str
    body: bytes
    stream: bool
    label: str
    """The kind of request (a target, a dialect, ...), for tallies and checks."""
    headers: Mapping[str, str] | None = None
    separator: bytes | None = None
    """For a stream: the bytes that end a frame, to time each frame as it arrives."""


@dataclass(slots=True)
class Shot:
    """One request: when it was due, sent and done (``time.perf_counter()``)."""

    request: Request
    scheduled: float
    sent: float = 0.0
    done: float = 0.0
    status: int = 0
    raw: bytes = b""
    error: str | None = None
    first_byte: float | None = None
    """Absolute time of the first body bytes (streams)."""
    frames: list[float] | None = None
    """Absolute arrival times of each frame (streams with a separator)."""

    @property
    def start(self) -> float:
        """Where its latency starts: the schedule, or its send if that was earlier."""
        return max(self.scheduled, self.sent)

    @property
    def latency(self) -> float:
        return self.done - self.start

    @property
    def lag(self) -> float:
        """How late the generator sent it (<= 0: on time or up to ``EARLY_S`` early)."""
        return self.sent - self.scheduled


@dataclass
class StepRun:
    """Everything one ``OpenLoop.run`` recorded."""

    shots: list[Shot]
    offered_rate: float
    seconds: float
    started: float
    schedule_end: float
    finished: float
    generator_cpu_s: float
    failures: list[str] = field(default_factory=list)
    """Per failed shot, why (transport error, status, or a failed check)."""
    ok: list[Shot] = field(default_factory=list)


class OpenLoop:
    """Sends scheduled requests through one ``AiohttpClient``."""

    def __init__(self, client: AiohttpClient, cap: int) -> None:
        self.client = client
        self.cap = cap
        _raise_open_file_limit(cap + 256)

    async def _send(self, shot: Shot, check: Callable[[Shot], None] | None) -> None:
        request = shot.request
        shot.sent = time.perf_counter()
        outcome = await self.client.fetch(
            0, request.url, request.body, request.stream, request.headers, request.separator
        )
        shot.frames = outcome.frames
        shot.done = shot.sent + outcome.total
        shot.status, shot.raw, shot.error = outcome.status, outcome.raw, outcome.error
        if outcome.first_byte is not None:
            shot.first_byte = shot.sent + outcome.first_byte
        if check is not None:
            _check(shot, check)

    async def run(
        self,
        offsets: Sequence[float],
        request_for: Callable[[int], Request],
        *,
        rate: float,
        seconds: float,
        check: Callable[[Shot], None],
        check_inline: bool = False,
        drain_s: float = 30.0,
    ) -> StepRun:
        """Send request ``i`` (``request_for(i)``) at ``offsets[i]`` after the start;
        wait up to ``drain_s`` for the last replies. ``check`` raises ``CheckError`` for
        a wrong reply: after the step (its CPU stays out of the pacing), or as each reply
        arrives with ``check_inline`` (long runs: bodies are not kept)."""
        loop = asyncio.get_running_loop()
        active: set[asyncio.Task[None]] = set()
        shots: list[Shot] = []
        inline = check if check_inline else None
        cpu_before = time.process_time()
        start = time.perf_counter() + 0.005
        index, count = 0, len(offsets)
        while index < count:
            now = time.perf_counter()
            while index < count and start + offsets[index] <= now + EARLY_S:
                shot = Shot(request_for(index), start + offsets[index])
                shots.append(shot)
                index += 1
                if len(active) >= self.cap:
                    shot.sent = shot.done = now
                    shot.error = f"shed: {self.cap} requests already in flight"
                    continue
                task = loop.create_task(self._send(shot, inline))
                active.add(task)
                task.add_done_callback(active.discard)
            if index < count:
                wait = start + offsets[index] - EARLY_S - time.perf_counter()
                await asyncio.sleep(max(_MIN_SLEEP_S, wait))
        schedule_end = time.perf_counter()
        if active:
            _, pending = await asyncio.wait(set(active), timeout=drain_s)
            for task in pending:
                task.cancel()
            for task in pending:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            for shot in shots:
                if shot.done == 0.0:
                    shot.done = time.perf_counter()
                    shot.error = shot.error or f"no reply within {drain_s:.0f} s of the step's end"
        finished = time.perf_counter()
        run = StepRun(
            shots, rate, seconds, start, schedule_end, finished, time.process_time() - cpu_before
        )
        for shot in shots:
            if not check_inline and shot.error is None:
                _check(shot, check)
            if shot.error is None:
                run.ok.append(shot)
            else:
                run.failures.append(shot.error)
            shot.raw = b""
        return run


def _raise_open_file_limit(wanted: int) -> None:
    """Each request in flight holds a socket: lift a soft open-file limit below ``wanted``
    (often 1,024) toward the hard one, so a full ``cap`` never fails with EMFILE."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def _check(shot: Shot, check: Callable[[Shot], None]) -> None:
    if shot.error is not None:
        return
    if shot.status != 200:
        shot.error = f"HTTP {shot.status}: {shot.raw[:200]!r}"
    else:
        try:
            check(shot)
        except CheckError as exc:
            shot.error = f"{shot.request.label}: {exc}"
    shot.raw = b""


# -- figures --------------------------------------------------------------------------------


def summarise(run: StepRun, server_cpu_s: float | None = None) -> dict[str, Any]:
    """A step's figures; ``server_cpu_s``: CPU the measured server used meanwhile."""
    ok = run.ok
    latencies = [shot.latency for shot in ok]
    median = percentile(sorted(latencies), 0.5) or 0.0
    last_done = max((shot.done for shot in ok), default=run.started)
    # Completions per second of the step: from its start to its last reply, the time
    # one reply takes netted out (else a 2 s step loses a reply's time to it), and
    # never over the schedule's own length (so never above the offered rate).
    span = max(run.seconds, last_done - run.started - median)
    wall = max(run.finished - run.started, 1e-9)
    lags = [max(0.0, shot.lag) for shot in run.shots if shot.sent]
    out: dict[str, Any] = {
        "offered_rps": run.offered_rate,
        "sent": len(run.shots),
        "ok": len(ok),
        "errors": len(run.failures),
        "error_examples": sorted(set(run.failures))[:3],
        "achieved_rps": len(ok) / span,
        "latency_ms": ms(latencies, 0.5, 0.9, 0.99, 0.999),
        "generator_lag_ms": ms(lags, 0.5, 0.99),
        "generator_cpu_share": run.generator_cpu_s / wall,
        "server_cpu_share": None if server_cpu_s is None else server_cpu_s / wall,
    }
    # Poisson arrivals send a random count: the share is of what the schedule held.
    out["scheduled_rps"] = len(run.shots) / run.seconds
    out["achieved_share"] = out["achieved_rps"] / out["scheduled_rps"]
    lag_p99 = out["generator_lag_ms"]["p99"]
    out["generator_behind"] = lag_p99 is not None and lag_p99 > LAG_LIMIT_S * 1000
    firsts = [shot.first_byte - shot.start for shot in ok if shot.first_byte is not None]
    if firsts:
        out["first_byte_ms"] = ms(firsts, 0.5, 0.99)
    framed = [shot for shot in ok if shot.frames]
    if framed:
        gaps: list[float] = []
        for shot in framed:
            frames = shot.frames or []
            gaps.extend(b - a for a, b in itertools.pairwise(frames))
        firsts = [(shot.frames or [shot.done])[0] - shot.start for shot in framed]
        out["first_frame_ms"] = ms(firsts, 0.5, 0.99)
        out["frame_gap_ms"] = ms(gaps, 0.5, 0.99)
        out["frames_per_stream"] = sum(len(shot.frames or []) for shot in framed) / len(framed)
    return out

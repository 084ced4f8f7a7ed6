"""The ``opencode`` scenario: what the ``opencode`` backend adds over a bare OpenCode
prompt on the same server (``--part backend``), and how soon the profiler's OpenCode
provider knows a turn is over (``--part completion``); both by default.

One OpenCode server (the pinned ``opencode serve``, spawned and isolated exactly as
the gateway or the provider spawns it) answers from the stub backend
(``fast_backend.py``), so the model's own time is a few milliseconds and what is
measured is OpenCode plus whatever sits in front of it. The backend part, sequentially
(concurrency 1, where latency is what a user feels):

- ``bare prompt``: the baseline, ``POST /session/{id}/message`` (OpenCode's
  synchronous prompt) on a fresh session created beforehand, with the very body the
  backend sends (same agent, tools off, system text): OpenCode's own time;
- ``bare + session``: create a session, prompt, delete it: the least a stateless client
  must do per request;
- ``seed-style``: the seed's adapter: create, ``prompt_async``, poll the messages every
  300 ms until the reply is there, delete;
- ``gateway, pool N``: the official route a client uses, Ollama ``POST /api/chat``
  through a gateway whose ``opencode`` backend reaches the same server by URL;
  non-streaming, then streaming (time to first token and to the end), with a warm pool
  of N sessions (N = 2, then 0: the session created on the request's path).

Each row prints p50 / p95 and the p50 difference to the bare prompt; target: at most
50 ms added at p50 with the pool. The completion part: per prompt, the lag from
OpenCode creating the turn's terminal event (its ``evt_`` id carries OpenCode's
millisecond clock) to the client knowing the turn is over, on the same clock: ``events``
(the provider: ``prompt_async``, then the first terminal event on the shared ``/event``
stream), ``idle`` (from the session's idle event, which OpenCode sends in the same
write), ``polling`` (``GET /session/{id}/message`` every 300 ms, as a polling adapter
does); target: at most 20 ms at p50 from the idle. The OpenCode binary defaults to the
one ``make test`` installs in tests/e2e/ (``--opencode PATH``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from fast_backend import DEFAULT_MODEL
from harness import (
    OPENCODE,
    Server,
    Started,
    arguments,
    entry_point,
    log,
    results_header,
    run_async,
    save_results,
    start_fast_backend,
    start_gateway,
    start_run,
    wait_ready,
    workspace,
)
from llmbridge.backends.opencode.event_hub import id_time_ms, session_of
from llmbridge.backends.opencode.prompt import ModelRef, prompt_body
from llmbridge.backends.opencode.server import (
    AGENT_NAME,
    OpenCodeProvider,
    OpenCodeServer,
    SpawnSettings,
)
from llmbridge.core.messages import Message, TextPart
from llmbridge.core.request import ChatRequest
from llmbridge.profiler.providers.opencode import OpenCodeSessionProvider
from llmbridge.profiler.records.types import ProviderConfig

TARGET_MS = 50.0
"""The backend's added p50 over a bare prompt, with the pool."""
COMPLETION_TARGET_MS = 20.0
"""From the session's idle event to the provider knowing, p50."""
POLL_SECONDS = 0.3
QUESTION = "Say hello."
SYSTEM = "You are a terse assistant."

Timed = Callable[[], Awaitable[tuple[float, float | None]]]
"""One request: (seconds to the end, seconds to the first token or None)."""


class BareClient:
    """OpenCode's HTTP API driven directly, with the same body the backend sends."""

    def __init__(self, http: aiohttp.ClientSession, server: OpenCodeServer, model: ModelRef):
        assert server.url is not None
        self.http, self.url, self.headers = http, server.url, server.headers
        system, user = (
            Message("system", (TextPart(SYSTEM),)),
            Message("user", (TextPart(QUESTION),)),
        )
        self.body = prompt_body(
            ChatRequest(model="bench", messages=(system, user)), model, AGENT_NAME
        )

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        url = f"{self.url}/{path}"
        async with self.http.request(method, url, json=body, headers=self.headers) as r:
            r.raise_for_status()
            raw = await r.read()
        return json.loads(raw) if raw else None

    async def session(self) -> str:
        return str((await self.call("POST", "session", {"title": "bench"}))["id"])

    async def prompt(self, sid: str) -> str:
        reply = await self.call("POST", f"session/{sid}/message", self.body)
        return "".join(p.get("text", "") for p in reply["parts"] if p.get("type") == "text")

    async def bare(self, sessions: list[str]) -> tuple[float, float | None]:
        """A prompt on a fresh session made beforehand (not timed): a reused session
        would grow, as OpenCode resends a session's whole history on every prompt."""
        sid = sessions.pop()
        started = time.perf_counter()
        text = await self.prompt(sid)
        assert text, "OpenCode gave an empty reply"
        return time.perf_counter() - started, None

    async def with_session(self) -> tuple[float, float | None]:
        started = time.perf_counter()
        sid = await self.session()
        await self.prompt(sid)
        await self.call("DELETE", f"session/{sid}")
        return time.perf_counter() - started, None

    async def seed_style(self) -> tuple[float, float | None]:
        """The seed's adapter: prompt, then poll the messages every 300 ms."""
        started = time.perf_counter()
        sid = await self.session()
        await self.call("POST", f"session/{sid}/prompt_async", self.body)
        while True:
            await asyncio.sleep(0.3)
            messages = await self.call("GET", f"session/{sid}/message")
            last = messages[-1] if messages else None
            if last and last["info"]["role"] == "assistant" and last["info"].get("finish"):
                break
        elapsed = time.perf_counter() - started
        await self.call("DELETE", f"session/{sid}")
        return elapsed, None


async def gateway_request(
    http: aiohttp.ClientSession, url: str, stream: bool
) -> tuple[float, float | None]:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    started, first = time.perf_counter(), None
    async with http.post(
        f"{url}/api/chat", json={"model": "bench", "stream": stream, "messages": messages}
    ) as r:
        r.raise_for_status()
        if not stream:
            reply = await r.json()
            assert reply["message"]["content"], reply
            return time.perf_counter() - started, None
        async for line in r.content:
            frame = json.loads(line)
            if first is None and frame.get("message", {}).get("content"):
                first = time.perf_counter() - started
            assert "error" not in frame, frame
    return time.perf_counter() - started, first


async def measure(name: str, run: Timed, requests: int, warmup: int) -> dict[str, Any]:
    for _ in range(warmup):
        await run()
    totals, firsts = [], []
    for _ in range(requests):
        total, first = await run()
        totals.append(total * 1000)
        firsts += [] if first is None else [first * 1000]
    log(f"{name}: p50 {statistics.median(totals):.1f} ms")
    return {
        "name": name,
        "p50": statistics.median(totals),
        "p95": statistics.quantiles(totals, n=20)[-1],
        "ttft_p50": statistics.median(firsts) if firsts else None,
    }


# -- the profiler's completion detection ------------------------------------------------------


async def events_lags(
    provider: OpenCodeSessionProvider, prompts: int
) -> tuple[list[float], list[float], list[float]]:
    """Per prompt: (terminal event created -> provider knows, the session's idle
    created -> provider knows, terminal event arrived -> knows)."""
    assert provider._channel is not None
    hub = provider._channel.hub
    arrivals: dict[str, float] = {}
    idles: dict[str, str] = {}
    """Per session, its first idle event's id."""
    sessions: list[str] = []
    dispatch = hub._dispatch

    def stamped(event: dict[str, Any]) -> None:  # when each event reached this process
        arrivals[str(event.get("id"))] = time.time() * 1000
        status = (event.get("properties") or {}).get("status") or {}
        if event.get("type") == "session.status" and status.get("type") == "idle":
            idles.setdefault(str(session_of(event)), str(event.get("id")))
        dispatch(event)

    hub._dispatch = stamped  # type: ignore[method-assign]
    provider.completion_lag_ms.clear()
    provider.terminal_events.clear()
    try:
        for i in range(prompts):
            handle = await provider.create_session(
                system_instructions=None, scenario_id="bench", iteration=i
            )
            await provider.prompt(handle, "Say hello.", 60)
            sessions.append(handle.session_id)
            await asyncio.sleep(0.05)  # the idle, when it comes after the terminal event
            await provider.destroy_session(handle)
    finally:
        hub._dispatch = dispatch  # type: ignore[method-assign]
    handling = [known - arrivals[eid] for eid, known in provider.terminal_events]
    from_idle = []
    for sid, (_, known) in zip(sessions, provider.terminal_events, strict=True):
        created = id_time_ms(idles[sid], known) if sid in idles else None
        if created is not None:
            from_idle.append(known - created)
    return list(provider.completion_lag_ms), from_idle, handling


def _terminal_event(queue: asyncio.Queue[dict[str, Any] | None]) -> str | None:
    """The id of the event that ended the turn, among those received so far."""
    while not queue.empty():
        event = queue.get_nowait()
        if event is None:
            return None
        props = event.get("properties") or {}
        idle = event.get("type") == "session.status" and props["status"]["type"] == "idle"
        if idle or event.get("type") == "session.idle":
            return str(event["id"])
    return None


async def polling_lags(provider: OpenCodeSessionProvider, prompts: int) -> list[float]:
    """Poll like ghx; the turn's terminal event (seen on the side, not used to detect)
    is the reference point, as for the events path."""
    assert provider.server is not None and provider.server.url is not None
    assert provider._channel is not None
    url, headers = provider.server.url, provider.server.headers
    model = {"providerID": "fast", "modelID": DEFAULT_MODEL}
    lags = []
    async with aiohttp.ClientSession(base_url=url + "/", headers=headers) as http:
        for _ in range(prompts):
            async with http.post("session", json={"title": "bench"}) as r:
                sid = (await r.json())["id"]
            body = {"model": model, "parts": [{"type": "text", "text": "Say hello."}]}
            with provider._channel.hub.subscribe(sid) as queue:
                async with http.post(f"session/{sid}/prompt_async", json=body) as r:
                    r.raise_for_status()
                while True:
                    await asyncio.sleep(POLL_SECONDS)
                    async with http.get(f"session/{sid}/message") as r:
                        messages: list[dict[str, Any]] = await r.json()
                    info = messages[-1]["info"] if messages else {}
                    if info.get("role") == "assistant" and info.get("finish"):
                        detected = time.time() * 1000
                        break
                await asyncio.sleep(0.05)  # let the terminal event arrive
                terminal = _terminal_event(queue)
            emitted = id_time_ms(terminal, detected) if terminal else None
            if emitted is not None:
                lags.append(detected - emitted)
            async with http.delete(f"session/{sid}") as r:
                r.raise_for_status()
    return lags


def _row(name: str, lags: list[float]) -> str:
    ordered = sorted(lags)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return (
        f"{name:<10} {len(lags):>4} {statistics.median(lags):>9.1f} {p95:>9.1f} "
        f"{max(lags):>9.1f} {statistics.fmean(lags):>9.1f}"
    )


async def completion_lags(args: argparse.Namespace, model: Server) -> dict[str, list[float]]:
    provider = OpenCodeSessionProvider(command=str(args.opencode))
    try:
        # OpenCode asks for max_tokens = the model's output limit, which sets the
        # reply's length at the fast backend: exactly --chunks pieces.
        endpoint = {"url": f"{model.url}/v1", "limits": {"context": 32768, "output": args.chunks}}
        config = ProviderConfig(model=f"fast/{DEFAULT_MODEL}", options={"endpoint": endpoint})
        await provider.init(config)
        await events_lags(provider, 3)  # warm-up: plugins load on the first prompt
        events, from_idle, handling = await events_lags(provider, args.prompts)
        log(f"events: p50 {statistics.median(events):.1f} ms")
        polling = await polling_lags(provider, max(5, args.prompts // 3))
        log(f"polling: p50 {statistics.median(polling):.1f} ms")
    finally:
        await provider.shutdown()
    return {
        "events_ms": events,
        "idle_ms": from_idle,
        "polling_ms": polling,
        "handling_ms": handling,
    }


# -- the backend's paths -------------------------------------------------------------------------


async def backend_paths(
    args: argparse.Namespace, model_server: Server, workdir: Path, started: Started
) -> list[dict[str, Any]]:
    model = ModelRef("fast", DEFAULT_MODEL)
    # OpenCode asks for max_tokens = this output limit, which the fast backend takes as
    # the reply's length: --chunks pieces.
    limits = {DEFAULT_MODEL: {"context": 32768, "output": args.chunks}}
    provider = OpenCodeProvider(base_url=f"{model_server.url}/v1", models=limits)
    spawn = SpawnSettings(
        command=str(args.opencode), default_model=str(model), providers={"fast": provider}
    )
    server = OpenCodeServer(spawn=spawn)
    await server.start()
    log(f"OpenCode listening on {server.url}")
    try:
        async with aiohttp.ClientSession() as http:
            bare, n, warm = BareClient(http, server, model), args.requests, args.warmup
            fresh = [await bare.session() for _ in range(n + warm)]
            rows = [
                await measure("bare prompt", lambda: bare.bare(fresh), n, warm),
                await measure("bare + session", bare.with_session, n, warm),
                await measure("seed-style (poll 300 ms)", bare.seed_style, max(2, n // 4), 1),
            ]
            for pool in (2, 0):
                config = (
                    "server: {host: 127.0.0.1, log_level: warning}\nbackends:\n"
                    f"  oc: {{type: opencode, url: '{server.url}', password: '{server.password}', "
                    f"model: '{model}', pool_size: {pool}}}\ndefault_backend: oc\n"
                )
                gateway = started.add(start_gateway(workdir, config, name=f"gateway-pool{pool}"))
                await wait_ready(None, gateway)
                for stream in (False, True):
                    name = f"gateway, pool {pool}, {'stream' if stream else 'whole'}"
                    timed = lambda s=stream, u=gateway.url: gateway_request(http, u, s)  # noqa: E731
                    rows.append(await measure(name, timed, n, warm))
                gateway.stop()
            return rows
    finally:
        await server.stop()


async def measure_parts(
    args: argparse.Namespace, workdir: Path, started: Started
) -> dict[str, Any]:
    model = started.add(start_fast_backend(workdir, "--chunks", str(args.chunks), name="model"))
    await wait_ready(None, model)
    out: dict[str, Any] = {}
    if args.part in ("all", "backend"):
        out["backend"] = await backend_paths(args, model, workdir, started)
    if args.part in ("all", "completion"):
        out["completion"] = await completion_lags(args, model)
    return out


def report(parts: dict[str, Any]) -> bool:
    """Print the parts' tables; whether every target was met."""
    met = True
    if rows := parts.get("backend"):
        bare = rows[0]["p50"]
        print(f"{'path':<28} {'p50 ms':>8} {'p95 ms':>8} {'TTFT p50':>9} {'p50 vs bare':>12}")
        for row in rows:
            ttft = "-" if row["ttft_p50"] is None else f"{row['ttft_p50']:.1f}"
            added = row["p50"] - bare
            print(
                f"{row['name']:<28} {row['p50']:>8.1f} {row['p95']:>8.1f} {ttft:>9} {added:>+11.1f}"
            )
        added = next(r for r in rows if r["name"] == "gateway, pool 2, whole")["p50"] - bare
        met = added <= TARGET_MS
        print(f"\nadded p50 with the pool, non-streamed: {added:+.1f} ms (<= {TARGET_MS:g})\n")
    if lags := parts.get("completion"):
        print(
            f"{'detection':<10} {'n':>4} {'p50 ms':>9} {'p95 ms':>9} {'max ms':>9} {'mean ms':>9}"
        )
        for name in ("events", "idle", "polling", "handling"):
            print(_row(name, lags[f"{name}_ms"]))
        print(
            "\nevents/polling: from OpenCode creating the terminal event to knowing; idle: "
            "from OpenCode creating the session's idle to the provider knowing; handling: "
            "from the terminal event reaching this process to the provider knowing."
        )
        p50 = statistics.median(lags["idle_ms"])
        met = met and p50 <= COMPLETION_TARGET_MS
        print(f"idle p50 {p50:.1f} ms (<= {COMPLETION_TARGET_MS:g})")
    return met


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__)
    add = parser.add_argument
    add("--part", choices=("all", "backend", "completion"), default="all", help="(both)")
    add("--requests", type=int, default=40, help="measured requests per path")
    add("--warmup", type=int, default=5, help="unmeasured requests per path")
    add("--prompts", type=int, default=30, help="measured prompts (completion, events)")
    add("--chunks", type=int, default=20, help="pieces in each model reply")
    add("--opencode", type=Path, default=OPENCODE, help="the binary")
    args = parser.parse_args(argv)
    run = start_run("opencode", argv)
    if not args.opencode.exists():
        raise RuntimeError(f"{args.opencode} is missing: `make test` installs the pinned OpenCode")
    with workspace("opencode") as (workdir, started):
        parts = run_async(measure_parts(args, workdir, started))
    met = report(parts)
    print("targets: " + ("met" if met else "MISSED"))
    save_results("opencode", results_header(run, args) | parts, run.started, args)
    return 0 if met else 1


if __name__ == "__main__":
    entry_point(main)

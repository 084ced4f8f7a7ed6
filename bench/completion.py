"""The ``completion`` scenario: how soon the profiler knows an OpenCode turn is over,
from its event stream against polling.

The pinned ``opencode serve`` answers from the stub backend. Per prompt, the lag runs
from OpenCode creating the turn's terminal event (its ``evt_`` id carries OpenCode's
millisecond clock) to the client knowing the turn is over, on the same clock:

- ``events``: the profiler's OpenCode provider (``prompt_async``, then the first
  terminal event on the shared ``/event`` stream), measured from that event, and
  (``idle``) from the session's idle event, which OpenCode sends in the same write;
- ``polling``: ``GET /session/{id}/message`` every 300 ms until the last assistant
  message has finished, as a polling adapter does.

Target: at most 20 ms at p50 from the idle (polling: about 300 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from fast_backend import DEFAULT_MODEL
from harness import log, start_fast_backend, wait_ready
from http_clients import make_client
from llmbridge.backends.opencode.event_hub import id_time_ms, session_of
from llmbridge.profiler.providers.opencode import OpenCodeSessionProvider
from llmbridge.profiler.records.types import ProviderConfig

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_OPENCODE = BENCH_DIR.parent / "tests" / "e2e" / "node_modules" / ".bin" / "opencode"
TARGET_MS = 20.0
POLL_SECONDS = 0.3


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


async def main_async(args: argparse.Namespace) -> int:
    if not args.opencode.exists():
        log(f"{args.opencode} is missing: run `make test` (it installs the pinned OpenCode)")
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-completion-") as tmp:
        model = start_fast_backend(Path(tmp), "--chunks", str(args.chunks), name="model")
        port = model.port
        provider = OpenCodeSessionProvider(command=str(args.opencode))
        try:
            probe = make_client()
            try:
                await wait_ready(probe, model, "/v1/models")
            finally:
                await probe.aclose()
            # OpenCode asks for max_tokens = the model's output limit, which sets the
            # reply's length at the fast backend: exactly --chunks pieces.
            limits = {"context": 32768, "output": args.chunks}
            endpoint = {"url": f"http://127.0.0.1:{port}/v1", "limits": limits}
            await provider.init(
                ProviderConfig(model=f"fast/{DEFAULT_MODEL}", options={"endpoint": endpoint})
            )
            await events_lags(provider, 3)  # warm-up: plugins load on the first prompt
            events, from_idle, handling = await events_lags(provider, args.prompts)
            log(f"events: p50 {statistics.median(events):.1f} ms")
            polling = await polling_lags(provider, max(5, args.prompts // 3))
            log(f"polling: p50 {statistics.median(polling):.1f} ms")
        finally:
            await provider.shutdown()
            model.stop()
    print(f"{'detection':<10} {'n':>4} {'p50 ms':>9} {'p95 ms':>9} {'max ms':>9} {'mean ms':>9}")
    print(_row("events", events))
    print(_row("idle", from_idle))
    print(_row("polling", polling))
    print(_row("handling", handling))
    print(
        "\nevents/polling: from OpenCode creating the terminal event to knowing; idle: from "
        "OpenCode creating the session's idle to the provider knowing; handling: from the "
        "terminal event reaching this process to the provider knowing."
    )
    p50 = statistics.median(from_idle)
    verdict = "met" if p50 <= TARGET_MS else "MISSED"
    print(f"idle p50 {p50:.1f} ms; target <= {TARGET_MS:g} ms: {verdict}")
    if args.json:
        results = {
            "events_ms": events,
            "idle_ms": from_idle,
            "polling_ms": polling,
            "handling_ms": handling,
        }
        args.json.write_text(json.dumps(results, indent=2))
    return 0 if p50 <= TARGET_MS else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--prompts", type=int, default=30, help="measured prompts (events)")
    parser.add_argument(
        "--chunks", type=int, default=20, help="pieces per model reply (OpenCode writes each)"
    )
    parser.add_argument("--opencode", type=Path, default=DEFAULT_OPENCODE, help="the binary")
    parser.add_argument("--json", type=Path, help="also write the lags here")
    return asyncio.run(main_async(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())

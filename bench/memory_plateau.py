"""The ``memory_plateau`` scenario: the gateway's resident memory over minutes of steady
mixed load must stop growing.

``llmbridge serve`` in front of ``fast_backend.py`` with two backends on it (types
``openai`` and ``ollama``, native tools), driven open loop (``open_loop.py``, Poisson
arrivals) at ``--rate`` requests a second for ``--warmup-seconds`` and then
``--minutes``, cycling through 24 kinds of request: the OpenAI, Anthropic and Ollama
dialects, streamed or not, with tools or not, to each backend; every reply checked
(``replies.py``, ``compare_routes.py``). Every ``--sample-seconds`` it reads the
gateway's RSS over its process tree. Reported: the RSS at the start and end of the
measured window, its least-squares slope over the window's second half, and the
verdict: ``plateau`` when that slope is at most ``--tolerance-kb-per-min`` (100 KB/min:
at 100 requests/s a leak of one small object per request fails it), else ``growing``;
the run is INVALID unless no request failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

import http_clients
from compare_routes import check_anthropic
from fast_backend import DEFAULT_MODEL, reply_pieces
from harness import (
    CPUS,
    ProcessTree,
    RunStart,
    Server,
    entry_point,
    log,
    results_header,
    run_async,
    save_results,
    start_fast_backend,
    start_gateway,
    start_run,
    stopping,
    wait_ready,
)
from http_clients import AiohttpClient
from open_loop import OpenLoop, Request, Shot, StepRun, percentile, schedule, tree_rss_kb
from replies import check_reply

OLLAMA_MODEL = "bench-ollama"
MODELS = (DEFAULT_MODEL, OLLAMA_MODEL)
DIALECTS = ("openai", "anthropic", "ollama")
PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages", "ollama": "/api/chat"}


def gateway_config(backend_port: int) -> str:
    """The fast backend reached as an OpenAI-compatible server and as an Ollama one."""
    return (
        "server:\n"
        "  host: 127.0.0.1\n"
        "  log_level: warning\n"
        "backends:\n"
        f"  bench: {{type: openai, url: 'http://127.0.0.1:{backend_port}/v1'}}\n"
        f"  bench-ollama: {{type: ollama, url: 'http://127.0.0.1:{backend_port}'}}\n"
        "models:\n"
        f"  - {{name: {DEFAULT_MODEL}, backend: bench, tools: true}}\n"
        f"  - {{name: {OLLAMA_MODEL}, backend: bench-ollama, model: {DEFAULT_MODEL}, "
        "tools: true}\n"
        "default_backend: bench\n"
    )


# -- the mixed requests -----------------------------------------------------------------------

_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "City name"}},
    "required": ["city"],
}
_TOOLS = (("get_weather", "The weather in a city"), ("get_time", "The local time in a city"))
_ASK = "What is the weather in Paris?"
_RESULT = '{"temperature_c": 18, "sky": "clear"}'


def _openai(model: str, stream: bool, tools: bool, pieces: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": _ASK}]
    body: dict[str, Any] = {"model": model, "stream": stream, "max_tokens": pieces}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if tools:
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": _RESULT},
        ]
        body["tools"] = [
            {"type": "function", "function": {"name": n, "description": d, "parameters": _SCHEMA}}
            for n, d in _TOOLS
        ]
    body["messages"] = messages
    return body


def _anthropic(model: str, stream: bool, tools: bool, pieces: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": _ASK}]
    body: dict[str, Any] = {"model": model, "stream": stream, "max_tokens": pieces}
    if tools:
        use = {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "get_weather",
            "input": {"city": "Paris"},
        }
        result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": _RESULT}
        messages += [
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [result]},
        ]
        body["tools"] = [{"name": n, "description": d, "input_schema": _SCHEMA} for n, d in _TOOLS]
    body["messages"] = messages
    return body


def _ollama(model: str, stream: bool, tools: bool, pieces: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": _ASK}]
    body: dict[str, Any] = {"model": model, "stream": stream, "options": {"num_predict": pieces}}
    if tools:
        call = {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": _RESULT, "tool_name": "get_weather"},
        ]
        body["tools"] = [
            {"type": "function", "function": {"name": n, "description": d, "parameters": _SCHEMA}}
            for n, d in _TOOLS
        ]
    body["messages"] = messages
    return body


_BODIES: dict[str, Callable[[str, bool, bool, int], dict[str, Any]]] = {
    "openai": _openai,
    "anthropic": _anthropic,
    "ollama": _ollama,
}


@dataclass(frozen=True)
class Variant:
    """One of the 24 kinds of request: dialect, streamed or not, tools or not, model."""

    dialect: str
    stream: bool
    tools: bool
    model: str
    pieces: int

    @property
    def label(self) -> str:
        return (
            f"{self.dialect} {'stream' if self.stream else 'whole'} "
            f"{'tools' if self.tools else 'plain'} {self.model}"
        )

    def request(self, base: str) -> Request:
        body = orjson.dumps(_BODIES[self.dialect](self.model, self.stream, self.tools, self.pieces))
        return Request(base + PATHS[self.dialect], body, self.stream, self.label)

    def check(self, raw: bytes) -> None:
        expected = reply_pieces(self.pieces)
        if self.dialect == "anthropic":
            check_anthropic(self.stream, raw, expected)
        else:
            check_reply(self.dialect, self.stream, raw, expected)


def variants(pieces: int) -> list[Variant]:
    return [
        Variant(dialect, stream, tools, model, pieces)
        for dialect in DIALECTS
        for stream in (False, True)
        for tools in (False, True)
        for model in MODELS
    ]


# -- the run ----------------------------------------------------------------------------------


def slope_per_minute(samples: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, KiB) samples, in KiB per minute."""
    if len(samples) < 2:
        return None
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_v = sum(v for _, v in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    if var == 0:
        return None
    cov = sum((t - mean_t) * (v - mean_v) for t, v in samples)
    return cov / var * 60


async def sample_rss(
    tree: ProcessTree, every: float, started: float, out: list[tuple[float, float]]
) -> None:
    """(seconds since ``started``, KiB) every ``every`` seconds until cancelled."""
    while True:
        pids = await asyncio.to_thread(tree.pids)
        out.append((time.perf_counter() - started, float(tree_rss_kb(pids))))
        await asyncio.sleep(every)


async def measure(args: argparse.Namespace, backend: Server, gateway: Server) -> dict[str, Any]:
    http_clients._TIMEOUT_S = max(http_clients._TIMEOUT_S, 120.0)
    client = AiohttpClient(args.cap)
    try:
        await wait_ready(client, backend, "/v1/models")
        await wait_ready(client, gateway, "/health")
        base = f"http://127.0.0.1:{gateway.port}"
        kinds = variants(args.chunks)
        requests = [v.request(base) for v in kinds]
        by_label = {v.label: v for v in kinds}
        tally: dict[str, list[int]] = {v.label: [0, 0] for v in kinds}

        def check(shot: Shot) -> None:
            by_label[shot.request.label].check(shot.raw)

        seconds = args.warmup_seconds + args.minutes * 60
        offsets = schedule(args.rate, seconds, "poisson")
        tree = ProcessTree(gateway.pid)
        samples: list[tuple[float, float]] = []
        started = time.perf_counter()
        sampler = asyncio.create_task(sample_rss(tree, args.sample_seconds, started, samples))
        progress = asyncio.create_task(_progress(samples, args))
        log(
            f"{len(offsets)} requests over {seconds:.0f} s ({args.rate:g}/s, the first "
            f"{args.warmup_seconds:g} s a warm-up), {len(kinds)} kinds in turn"
        )
        try:
            run = await OpenLoop(client, args.cap).run(
                offsets,
                lambda i: requests[i % len(requests)],
                rate=args.rate,
                seconds=seconds,
                check=check,
                check_inline=True,
            )
        finally:
            for task in (sampler, progress):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for shot in run.shots:
            tally[shot.request.label][0 if shot.error is None else 1] += 1
        return summarise_run(args, run, samples, tally)
    finally:
        await client.aclose()


async def _progress(samples: list[tuple[float, float]], args: argparse.Namespace) -> None:
    while True:
        await asyncio.sleep(30 if not args.quick else 10)
        if samples:
            at, kib = samples[-1]
            phase = "warm-up" if at < args.warmup_seconds else "measuring"
            log(f"t={at:6.0f} s  rss {kib / 1024:7.1f} MiB  ({phase})")


def summarise_run(
    args: argparse.Namespace,
    run: StepRun,
    samples: list[tuple[float, float]],
    tally: dict[str, list[int]],
) -> dict[str, Any]:
    window = [(t, v) for t, v in samples if t >= args.warmup_seconds]
    half = [(t, v) for t, v in window if t >= args.warmup_seconds + args.minutes * 30]
    slope = slope_per_minute(half)
    whole = slope_per_minute(window)
    latencies = sorted(shot.latency * 1000 for shot in run.ok)
    lags = sorted(max(0.0, shot.lag) * 1000 for shot in run.shots if shot.sent)
    per_request = None
    if slope is not None:
        per_request = slope * 1024 / 60 / args.rate
    verdict = "INVALID (failures)" if run.failures else "no samples"
    if not run.failures and slope is not None:
        verdict = "plateau" if slope <= args.tolerance_kb_per_min else "growing"
    return {
        "requests": len(run.shots),
        "failures": len(run.failures),
        "failure_examples": sorted(set(run.failures))[:5],
        "by_kind": {k: {"ok": v[0], "failed": v[1]} for k, v in tally.items()},
        "achieved_rps": len(run.ok) / max(run.seconds, 1e-9),
        "scheduled_rps": len(run.shots) / max(run.seconds, 1e-9),
        "latency_ms": {"p50": percentile(latencies, 0.5), "p99": percentile(latencies, 0.99)},
        "generator_lag_ms": {"p50": percentile(lags, 0.5), "p99": percentile(lags, 0.99)},
        "generator_cpu_share": run.generator_cpu_s / max(run.finished - run.started, 1e-9),
        "rss_mib": {
            "before_load": samples[0][1] / 1024 if samples else None,
            "start": window[0][1] / 1024 if window else None,
            "end": window[-1][1] / 1024 if window else None,
            "min": min(v for _, v in window) / 1024 if window else None,
            "max": max(v for _, v in window) / 1024 if window else None,
        },
        "slope_second_half_kb_per_min": slope,
        "slope_second_half_mb_per_hour": None if slope is None else slope * 60 / 1024,
        "slope_window_kb_per_min": whole,
        "bytes_per_request": per_request,
        "tolerance_kb_per_min": args.tolerance_kb_per_min,
        "verdict": verdict,
        "samples": [[round(t, 2), v] for t, v in samples],
    }


def _f(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def report(r: dict[str, Any], args: argparse.Namespace) -> str:
    rss = r["rss_mib"]
    rows = [
        ("requests / failures", f"{r['requests']:,} / {r['failures']}"),
        (
            "achieved rate",
            f"{r['achieved_rps']:.1f}/s of {r['scheduled_rps']:.1f}/s scheduled "
            f"(Poisson arrivals at {args.rate:g}/s)",
        ),
        ("RSS before load", f"{_f(rss['before_load'], '.2f')} MiB"),
        (
            "RSS at start / end of the window",
            f"{_f(rss['start'], '.2f')} / {_f(rss['end'], '.2f')} MiB",
        ),
        ("RSS min / max in the window", f"{_f(rss['min'], '.2f')} / {_f(rss['max'], '.2f')} MiB"),
        (
            "slope, second half",
            f"{_f(r['slope_second_half_kb_per_min'], '+.1f')} KB/min "
            f"({_f(r['slope_second_half_mb_per_hour'], '+.2f')} MB/hour, "
            f"{_f(r['bytes_per_request'], '+.1f')} bytes/request)",
        ),
        ("slope, whole window", f"{_f(r['slope_window_kb_per_min'], '+.1f')} KB/min"),
        ("verdict", f"{r['verdict']} (tolerance {args.tolerance_kb_per_min:g} KB/min)"),
        (
            "latency p50 / p99 (info)",
            f"{_f(r['latency_ms']['p50'], '.2f')} / {_f(r['latency_ms']['p99'], '.2f')} ms",
        ),
        (
            "generator lag p99 / CPU",
            f"{_f(r['generator_lag_ms']['p99'], '.2f')} ms / {r['generator_cpu_share']:.0%}",
        ),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"| {'check'.ljust(width)} | result |", f"|{'-' * (width + 2)}|--------|"]
    lines += [f"| {k.ljust(width)} | {v} |" for k, v in rows]
    if args.minutes < 5:
        lines += [
            "",
            f"NOTE: a {args.minutes:g}-minute window is a smoke test; a few pages of RSS "
            "make its slope, so its verdict means little (default: 10 minutes).",
        ]
    if r["failures"]:
        lines += ["", "failures, e.g.:", *(f"  {e}" for e in r["failure_examples"])]
    return "\n".join(lines)


# -- main -------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of about a minute")
    parser.add_argument("--minutes", type=float, default=None, help="measured (10; 0.75 quick)")
    parser.add_argument("--warmup-seconds", type=float, default=None, help="(60; 10 quick)")
    parser.add_argument("--rate", type=float, default=100.0, help="requests/s (default 100)")
    parser.add_argument("--sample-seconds", type=float, default=None, help="(5; 2 quick)")
    parser.add_argument("--chunks", type=int, default=16, help="pieces per reply (16)")
    parser.add_argument("--workers", type=int, default=1, help="the gateway's --workers")
    parser.add_argument(
        "--tolerance-kb-per-min",
        type=float,
        default=100.0,
        help="the largest second-half slope called a plateau (default 100 KB/min)",
    )
    parser.add_argument("--cap", type=int, default=1000, help="most requests in flight")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT", help="write results")
    parser.add_argument("--no-save", action="store_true", help="no bench/results/ JSON file")
    args = parser.parse_args(argv)
    defaults = {
        "minutes": 0.75 if args.quick else 10.0,
        "warmup_seconds": 10.0 if args.quick else 60.0,
        "sample_seconds": 2.0 if args.quick else 5.0,
    }
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.minutes <= 0 or args.rate <= 0 or args.sample_seconds <= 0 or args.workers < 1:
        parser.error("--minutes, --rate, --sample-seconds and --workers must be positive")
    return args


@contextlib.contextmanager
def servers(args: argparse.Namespace, workdir: Path) -> Iterator[tuple[Server, Server]]:
    with stopping() as started:
        backend = start_fast_backend(workdir, "--chunks", str(args.chunks))
        started.append(backend)
        gateway = start_gateway(
            workdir, gateway_config(backend.port), extra_args=("--workers", str(args.workers))
        )
        started.append(gateway)
        yield backend, gateway


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command, started, load_at_start = start_run("memory_plateau", argv)
    cap = args.warmup_seconds + args.minutes * 60 + 300
    try:
        with (
            tempfile.TemporaryDirectory(prefix="llmbridge-memory-") as tmp,
            servers(args, Path(tmp)) as (backend, gateway),
        ):
            log(f"backend :{backend.port}, gateway :{gateway.port} (--workers {args.workers})")
            result = run_async(asyncio.wait_for(measure(args, backend, gateway), cap))
    except RuntimeError as exc:
        log(str(exc))
        return 2
    except TimeoutError:
        log("hard time cap reached; stopping")
        return 3
    document = results_header(RunStart(command, started, load_at_start), args) | {
        "result": result,
    }
    print(
        f"\nllmbridge memory plateau: {args.minutes:g} min of mixed load at {args.rate:g}/s "
        f"after a {args.warmup_seconds:g} s warm-up (OpenAI, Anthropic, Ollama; whole and "
        f"streamed; with and without tools; openai and ollama backends), gateway --workers "
        f"{args.workers}, RSS summed over its process tree; {CPUS} CPUs\n"
    )
    print(report(result, args))
    if not args.no_save:
        save_results("memory_plateau", document, started, args.json)
    return 0 if result["verdict"] == "plateau" else 1


if __name__ == "__main__":
    entry_point(main)

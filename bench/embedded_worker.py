"""The ``embedded_worker`` scenario: what running the embedded model in a worker process
costs per token, against an in-process hand-off measured in the same run.

- ``transport``: fake tokens, so the model's own time is out of the picture. Worker: the
  worker writes ``--tokens`` text frames on its pipe (its ``spew`` command, one
  ``os.write`` per token) and the gateway side reads them through ``Call.batch``, as
  ``EmbeddedBackend.chat`` does. In-process: a thread hands each token to the event loop
  with ``call_soon_threadsafe(queue.put_nowait, ...)``. Cost per token = wall / tokens;
- ``paced``: the same, one token every 200 us, so every token wakes the loop on its own:
  CPU time per token, the gateway's and the worker's;
- ``generation``: the same greedy request to SmolLM2-135M in-process and through
  ``EmbeddedBackend``: wall time per output token, and the two replies must match.

Each alternates the two paths for ``--rounds`` rounds and reports medians, on uvloop as
``llmbridge serve`` runs (``--asyncio`` for the standard loop).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import statistics
import threading
import time
from typing import Any

from harness import (
    ProcessTree,
    arguments,
    entry_point,
    log,
    results_header,
    run_async,
    save_results,
    start_run,
)
from llmbridge.backends.embedded.backend import EmbeddedBackend, default_model_path
from llmbridge.backends.embedded.prompt import llama_chat_options, to_llama_messages
from llmbridge.core.events import PartDelta, ResponseEnd, TextDelta
from llmbridge.core.messages import Message, TextPart
from llmbridge.core.request import ChatRequest, GenerationParams
from load import table

PROMPT = "Write a long story about a dragon who learns to read."
PAUSE_S = 0.0002
"""Between paced tokens: 5,000 tokens/s, far faster than any CPU model, yet slow
enough that every token is a wake-up of its own."""


# -- fake tokens ---------------------------------------------------------------------------


async def in_process(tokens: int, pause: float = 0.0) -> tuple[float, float]:
    """Wall and CPU seconds per token through the thread -> event loop hand-off the
    worker replaced, one token per ``pause`` seconds (the producer thread's CPU
    included: it is the same process)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue()

    def produce() -> None:
        for _ in range(tokens):
            loop.call_soon_threadsafe(queue.put_nowait, " token")
            if pause:
                time.sleep(pause)
        loop.call_soon_threadsafe(queue.put_nowait, None)

    started, cpu = time.perf_counter(), time.process_time()
    thread = threading.Thread(target=produce)
    thread.start()
    received = 0
    while await queue.get() is not None:
        received += 1
    elapsed, used = time.perf_counter() - started, time.process_time() - cpu
    thread.join()
    assert received == tokens
    return elapsed / tokens, used / tokens


async def through_worker(
    backend: EmbeddedBackend, tokens: int, pause: float = 0.0
) -> tuple[float, float, float, float]:
    """Through the worker's pipe, one token per ``pause`` seconds: wall seconds per
    token, tokens per wake-up, and CPU seconds per token, gateway side and worker side."""
    process, _ = await backend.workers.ready()
    assert process.pid is not None
    tree = ProcessTree(process.pid)
    worker_cpu = tree.cpu_seconds()
    started, cpu = time.perf_counter(), time.process_time()
    call = process.open({"op": "spew", "count": tokens, "text": " token", "pause_s": pause})
    received = batches = 0
    while True:
        items = await call.batch()
        batches += 1
        received += sum(1 for item in items if isinstance(item, tuple))
        if any(isinstance(item, dict) and item.get("op") == "done" for item in items):
            break
    elapsed, used = time.perf_counter() - started, time.process_time() - cpu
    assert received == tokens, received
    worker_used = tree.cpu_seconds() - worker_cpu
    return elapsed / tokens, tokens / batches, used / tokens, worker_used / tokens


# -- real generations -------------------------------------------------------------------


def request(max_tokens: int) -> ChatRequest:
    return ChatRequest(
        model="smollm2",
        messages=(Message("user", (TextPart(PROMPT),)),),
        params=GenerationParams(max_tokens=max_tokens, temperature=0.0, seed=42),
    )


async def in_process_generation(llama: Any, max_tokens: int) -> tuple[float, int, str]:
    """(seconds, text chunks, text): the pre-issue-13 path, llama.cpp in a thread."""
    chat = request(max_tokens)
    messages = to_llama_messages(chat.messages)
    options = llama_chat_options(chat)
    options["max_tokens"] = max_tokens
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue()

    def generate() -> None:
        stream = llama.create_chat_completion(messages=messages, stream=True, **options)
        for chunk in stream:
            if text := chunk["choices"][0]["delta"].get("content"):
                loop.call_soon_threadsafe(queue.put_nowait, text)
        loop.call_soon_threadsafe(queue.put_nowait, None)

    started = time.perf_counter()
    worker = loop.run_in_executor(None, generate)
    pieces: list[str] = []
    while (text := await queue.get()) is not None:
        pieces.append(text)
    elapsed = time.perf_counter() - started
    await worker
    return elapsed, len(pieces), "".join(pieces)


async def worker_generation(backend: EmbeddedBackend, max_tokens: int) -> tuple[float, int, str]:
    started = time.perf_counter()
    pieces: list[str] = []
    output_tokens = 0
    async for event in backend.chat(request(max_tokens)):
        if isinstance(event, PartDelta) and isinstance(event.delta, TextDelta):
            pieces.append(event.delta.text)
        elif isinstance(event, ResponseEnd):
            output_tokens = event.usage.output_tokens or 0
    return time.perf_counter() - started, output_tokens, "".join(pieces)


def median_us(values: list[float]) -> float:
    return statistics.median(values) * 1e6


async def measure(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Per measurement, the in-process and the worker figure (medians of the rounds)."""
    started = time.perf_counter()
    backend = EmbeddedBackend(max_output_tokens=args.max_tokens)
    await backend.start()
    log(f"worker started and loaded the model in {time.perf_counter() - started:.2f} s")
    out: dict[str, dict[str, float]] = {}
    try:
        local, remote, wakeups = [], [], []
        for _ in range(args.rounds):
            local.append((await in_process(args.tokens))[0])
            cost, tokens_per_wakeup, _, _ = await through_worker(backend, args.tokens)
            remote.append(cost)
            wakeups.append(tokens_per_wakeup)
        out[f"{args.tokens} fake tokens: wall us a token"] = {
            "in_process": median_us(local),
            "worker": median_us(remote),
            "tokens_a_wakeup": statistics.median(wakeups),
        }
        local, gateway, worker = [], [], []
        for _ in range(args.rounds):
            local.append((await in_process(args.paced_tokens, PAUSE_S))[1])
            *_, gateway_cpu, worker_cpu = await through_worker(backend, args.paced_tokens, PAUSE_S)
            gateway.append(gateway_cpu)
            worker.append(worker_cpu)
        out[f"{args.paced_tokens} paced {PAUSE_S * 1e6:.0f} us apart: CPU us a token"] = {
            "in_process": median_us(local),
            "worker": median_us(gateway) + median_us(worker),
            "in_the_worker": median_us(worker),
        }
        llama_cpp = importlib.import_module("llama_cpp")
        llama = llama_cpp.Llama(model_path=str(default_model_path()), n_ctx=8192, verbose=False)
        local, remote = [], []
        for _ in range(args.rounds):
            local_s, _, local_text = await in_process_generation(llama, args.max_tokens)
            remote_s, count, remote_text = await worker_generation(backend, args.max_tokens)
            assert local_text == remote_text, "the two paths generated different text"
            # The same text is the same tokens: the worker's count serves both.
            local.append(local_s / count * 1000)
            remote.append(remote_s / count * 1000)
        llama.close()
        out[f"generation of {args.max_tokens} tokens, the same text: ms a token"] = {
            "in_process": statistics.median(local),
            "worker": statistics.median(remote),
        }
        return out
    finally:
        await backend.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--tokens", type=int, default=100_000, help="fake tokens per round")
    parser.add_argument("--max-tokens", type=int, default=256, help="tokens per generation")
    parser.add_argument("--paced-tokens", type=int, default=20_000, help="paced fake tokens")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--asyncio", action="store_true", help="the standard loop, not uvloop")
    args = parser.parse_args(argv)
    run = start_run("embedded_worker", argv)
    results = asyncio.run(measure(args)) if args.asyncio else run_async(measure(args))
    rows = [[f"median of {args.rounds} rounds", "in process", "worker", "ratio", "of which"]]
    for label, r in results.items():
        more = ", ".join(f"{k.replace('_', ' ')} {v:.2f}" for k, v in list(r.items())[2:])
        ratio = f"{r['worker'] / r['in_process']:.3f}"
        rows.append([label, f"{r['in_process']:.3f}", f"{r['worker']:.3f}", ratio, more])
    print(table(rows))
    save_results("embedded_worker", results_header(run, args) | results, run.started, args)
    return 0


if __name__ == "__main__":
    entry_point(main)

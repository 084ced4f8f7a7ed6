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
import os
import statistics
import threading
import time
from typing import Any

from llmbridge.backends.embedded.backend import EmbeddedBackend, default_model_path
from llmbridge.backends.embedded.prompt import llama_chat_options, to_llama_messages
from llmbridge.core.events import PartDelta, ResponseEnd, TextDelta
from llmbridge.core.messages import Message, TextPart
from llmbridge.core.request import ChatRequest, GenerationParams

PROMPT = "Write a long story about a dragon who learns to read."
PAUSE_S = 0.0002
"""Between paced tokens: 5,000 tokens/s, far faster than any CPU model, yet slow
enough that every token is a wake-up of its own."""


# -- transport only ---------------------------------------------------------------------


async def in_process_transport(tokens: int) -> float:
    """Seconds per token through today's thread -> event loop hand-off."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue()

    def produce() -> None:
        for _ in range(tokens):
            loop.call_soon_threadsafe(queue.put_nowait, " token")
        loop.call_soon_threadsafe(queue.put_nowait, None)

    started = time.perf_counter()
    thread = threading.Thread(target=produce)
    thread.start()
    received = 0
    while await queue.get() is not None:
        received += 1
    elapsed = time.perf_counter() - started
    thread.join()
    assert received == tokens
    return elapsed / tokens


async def worker_transport(backend: EmbeddedBackend, tokens: int) -> tuple[float, float]:
    """Seconds per token through the worker's pipe, and tokens per wake-up."""
    process, _ = await backend.workers.ready()
    started = time.perf_counter()
    call = process.open({"op": "spew", "count": tokens, "text": " token"})
    received = batches = 0
    while True:
        items = await call.batch()
        batches += 1
        received += sum(1 for item in items if isinstance(item, tuple))
        if any(isinstance(item, dict) and item.get("op") == "done" for item in items):
            break
    elapsed = time.perf_counter() - started
    assert received == tokens, received
    return elapsed / tokens, tokens / batches


# -- paced tokens: CPU per token when every token is its own wake-up ----------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (Linux ``/proc``; 10 ms ticks)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def in_process_paced(tokens: int, pause: float) -> float:
    """CPU seconds per token of today's hand-off, one token per ``pause`` seconds
    (the producer thread's CPU included: it is the same process)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue()

    def produce() -> None:
        for _ in range(tokens):
            loop.call_soon_threadsafe(queue.put_nowait, " token")
            time.sleep(pause)
        loop.call_soon_threadsafe(queue.put_nowait, None)

    cpu = time.process_time()
    thread = threading.Thread(target=produce)
    thread.start()
    while await queue.get() is not None:
        pass
    used = time.process_time() - cpu
    thread.join()
    return used / tokens


async def worker_paced(backend: EmbeddedBackend, tokens: int, pause: float) -> tuple[float, float]:
    """CPU seconds per token, gateway side and worker side, one token per ``pause``."""
    process, _ = await backend.workers.ready()
    assert process.pid is not None
    cpu, worker_cpu = time.process_time(), cpu_seconds(process.pid)
    call = process.open({"op": "spew", "count": tokens, "text": " token", "pause_s": pause})
    while not any(
        isinstance(item, dict) and item.get("op") == "done" for item in await call.batch()
    ):
        pass
    used = time.process_time() - cpu
    return used / tokens, (cpu_seconds(process.pid) - worker_cpu) / tokens


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


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=100_000, help="fake tokens per round")
    parser.add_argument("--max-tokens", type=int, default=256, help="tokens per generation")
    parser.add_argument("--paced-tokens", type=int, default=20_000, help="paced fake tokens")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    started = time.perf_counter()
    backend = EmbeddedBackend(max_output_tokens=args.max_tokens)
    await backend.start()
    print(f"worker started and loaded the model in {time.perf_counter() - started:.2f} s")
    try:
        local, remote, per_wakeup = [], [], []
        for _ in range(args.rounds):
            local.append(await in_process_transport(args.tokens))
            cost, tokens_per_wakeup = await worker_transport(backend, args.tokens)
            remote.append(cost)
            per_wakeup.append(tokens_per_wakeup)
        local_us = statistics.median(local) * 1e6
        remote_us = statistics.median(remote) * 1e6
        print(f"\ntransport, {args.tokens} fake tokens x {args.rounds} rounds (median):")
        print(f"  in-process hand-off  {local_us:6.2f} us/token")
        print(
            f"  worker pipe          {remote_us:6.2f} us/token  (ratio {remote_us / local_us:.2f})"
        )
        print(f"  tokens per event-loop wake-up on the pipe: {statistics.median(per_wakeup):.1f}")

        paced_local, paced_gateway, paced_worker = [], [], []
        for _ in range(args.rounds):
            paced_local.append(await in_process_paced(args.paced_tokens, PAUSE_S))
            gateway_cpu, worker_cpu = await worker_paced(backend, args.paced_tokens, PAUSE_S)
            paced_gateway.append(gateway_cpu)
            paced_worker.append(worker_cpu)
        local_cpu = statistics.median(paced_local) * 1e6
        gateway_cpu = statistics.median(paced_gateway) * 1e6
        worker_cpu = statistics.median(paced_worker) * 1e6
        print(
            f"\npaced, {args.paced_tokens} fake tokens {PAUSE_S * 1e6:.0f} us apart x "
            f"{args.rounds} rounds (median CPU per token):"
        )
        print(f"  in-process hand-off  {local_cpu:6.2f} us/token")
        print(
            f"  worker pipe          {gateway_cpu:6.2f} us/token in the gateway + "
            f"{worker_cpu:.2f} in the worker (ratio {(gateway_cpu + worker_cpu) / local_cpu:.2f})"
        )

        llama_cpp = importlib.import_module("llama_cpp")
        llama = llama_cpp.Llama(model_path=str(default_model_path()), n_ctx=8192, verbose=False)
        local_ms, remote_ms = [], []
        for _ in range(args.rounds):
            local_s, _, local_text = await in_process_generation(llama, args.max_tokens)
            remote_s, count, remote_text = await worker_generation(backend, args.max_tokens)
            assert local_text == remote_text, "the two paths generated different text"
            # The same text is the same tokens: the worker's count serves both.
            local_ms.append(local_s / count * 1000)
            remote_ms.append(remote_s / count * 1000)
        local_gen = statistics.median(local_ms)
        remote_gen = statistics.median(remote_ms)
        print(f"\ngeneration, {args.max_tokens} tokens x {args.rounds} rounds (median, same text):")
        print(f"  in-process   {local_gen:6.3f} ms/token")
        print(
            f"  worker       {remote_gen:6.3f} ms/token  (ratio {remote_gen / local_gen:.3f}, "
            f"{(remote_gen - local_gen) * 1000:+.1f} us/token)"
        )
        llama.close()
    finally:
        await backend.aclose()


if __name__ == "__main__":
    import sys

    if "--asyncio" in sys.argv:  # default: uvloop, as `llmbridge serve` runs
        sys.argv.remove("--asyncio")
        asyncio.run(main())
    else:
        import uvloop

        uvloop.run(main())

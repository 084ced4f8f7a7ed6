"""The embedded model's worker process, its waiting line and its limits.

Fault tests with real faults: the worker really dies of SIGSEGV (a NULL read inside a
C call, or the signal sent to its pid) while it generates, the gateway-side backend
survives, the request in flight gets a 503-class error, and the next request is served
by a new worker. The line's limits are exercised with real generations holding the
model. The gateway-level versions, through the official clients, are in
``tests/gateway/test_embedded_faults.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import pytest_asyncio

from llmbridge.backends.embedded.backend import EmbeddedBackend
from llmbridge.core.accumulate import accumulate
from llmbridge.core.errors import (
    BackendBusyError,
    BackendUnavailableError,
    InvalidRequestError,
)
from llmbridge.core.events import PartDelta, StreamEvent
from llmbridge.core.messages import Message, TextPart
from llmbridge.core.request import ChatRequest, EmbedRequest, GenerationParams
from tests.waiting import until as wait_for_event

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.embedded]

LONG_REPLY = "Write a long story about a dragon who learns to read."


def chat_request(text: str, *, max_tokens: int = 8) -> ChatRequest:
    return ChatRequest(
        model="smollm2",
        messages=(Message("user", (TextPart(text),)),),
        params=GenerationParams(max_tokens=max_tokens, temperature=0.0, seed=42),
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def backend() -> AsyncIterator[EmbeddedBackend]:
    instance = EmbeddedBackend(max_embed_inputs=300)
    await instance.start()
    yield instance
    await instance.aclose()


async def first_delta(stream: AsyncIterator[StreamEvent]) -> None:
    """Read ``stream`` until generation is under way (its first text delta)."""
    async for event in stream:
        if isinstance(event, PartDelta):
            return
    raise AssertionError("the reply ended before any text")


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait for ``condition()`` (a bound on a hang, scaled in tests/waiting.py)."""
    await wait_for_event(condition, what)


def process_is_gone(pid: int) -> bool:
    """Exited (a zombie counts: it runs no code and holds no model)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


# -- crashes ---------------------------------------------------------------------------


async def test_a_segfault_in_native_code_fails_only_the_request_in_flight(
    backend: EmbeddedBackend,
) -> None:
    before = backend.worker_state()
    stream = backend.chat(chat_request(LONG_REPLY, max_tokens=400))
    queued: asyncio.Task[object] | None = None
    with pytest.raises(BackendUnavailableError) as info:
        async with contextlib.aclosing(stream):
            await first_delta(stream)
            # A request waiting its turn when the worker dies is served by the next one.
            queued = asyncio.create_task(accumulate(backend.chat(chat_request("Say hi."))))
            await until(lambda: backend.chat_queue.waiting == 1, "the second request waits")
            assert backend.workers.process is not None
            backend.workers.process.crash_for_test()  # reads address 0 inside a C call
            async for _ in stream:
                pass
    assert info.value.status_code == 503
    assert "SIGSEGV" in info.value.message
    assert info.value.retry_after == 1.0

    assert queued is not None
    response = await queued
    assert response.message.text  # type: ignore[attr-defined]
    after = backend.worker_state()
    assert after["restarts"] == before["restarts"] + 1
    assert after["last_exit"] == "was killed by SIGSEGV"
    assert after["pid"] != before["pid"]
    assert process_is_gone(before["pid"])
    health = await backend.health()
    assert health.ok
    assert f"worker pid {after['pid']}" in health.detail
    assert "last exit: was killed by SIGSEGV" in health.detail


async def test_a_worker_killed_between_requests_is_replaced(backend: EmbeddedBackend) -> None:
    before = backend.worker_state()
    os.kill(before["pid"], signal.SIGKILL)
    await until(lambda: backend.worker_state()["pid"] != before["pid"], "a new worker")
    response = await accumulate(backend.chat(chat_request("Say hi.")))
    assert response.message.text
    assert backend.worker_state()["restarts"] == before["restarts"] + 1
    assert backend.worker_state()["last_exit"] == "was killed by SIGKILL"


async def test_the_worker_exits_when_the_gateway_dies(tmp_path: Path) -> None:
    """SIGKILL the gateway process: its worker sees end of file and exits."""
    script = textwrap.dedent(
        """
        import asyncio
        from llmbridge.backends.embedded.backend import EmbeddedBackend

        async def main():
            backend = EmbeddedBackend()
            await backend.start()
            print(backend.worker_state()["pid"], flush=True)
            await asyncio.sleep(120)

        asyncio.run(main())
        """
    )
    gateway = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE, cwd=tmp_path
    )
    try:
        assert gateway.stdout is not None
        worker_pid = int(await asyncio.wait_for(gateway.stdout.readline(), 60))
        assert not process_is_gone(worker_pid)
    finally:
        gateway.kill()
        await gateway.wait()
    await until(lambda: process_is_gone(worker_pid), "the orphaned worker exits")


# -- the worker's protocol ---------------------------------------------------------------


async def test_cancel_stops_generation_within_a_few_tokens(backend: EmbeddedBackend) -> None:
    process, _ = await backend.workers.ready()
    messages = [{"role": "user", "content": LONG_REPLY}]
    call = process.open({"op": "chat", "messages": messages, "options": {"max_tokens": 400}})
    while not any(isinstance(item, tuple) for item in await call.batch()):
        pass
    process.cancel(call)
    outcome = await call.result()
    assert outcome["op"] == "done"
    assert outcome["cancelled"] is True
    assert 0 < outcome["output_tokens"] < 10


async def test_a_grammar_llama_cpp_refuses_is_a_400_not_a_crash(backend: EmbeddedBackend) -> None:
    """The worker's own check (llama.cpp's parser, its NULL checked): what would have
    been a SIGSEGV in the worker, for a grammar the gateway-side check let through."""
    process, _ = await backend.workers.ready()
    pid = process.pid
    call = process.open(
        {
            "op": "chat",
            "messages": [{"role": "user", "content": "hi"}],
            "options": {"max_tokens": 4},
            "grammar": "root ::= undefined-rule",
            "param": "format",
        }
    )
    with pytest.raises(InvalidRequestError) as info:
        await call.result()
    assert info.value.param == "format"
    assert "refused" in info.value.message
    assert backend.worker_state()["pid"] == pid  # still the same worker


# -- the line in front of the model -------------------------------------------------------


async def test_a_full_line_is_refused_at_once_with_retry_after(
    backend: EmbeddedBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backend.chat_queue, "max_waiting", 1)
    refused_before = backend.worker_state()["refused_busy"]
    running = backend.chat(chat_request(LONG_REPLY, max_tokens=400))
    async with contextlib.aclosing(running):
        await first_delta(running)
        waiting = asyncio.create_task(accumulate(backend.chat(chat_request("Say hi."))))
        await until(lambda: backend.chat_queue.waiting == 1, "the second request waits")
        with pytest.raises(BackendBusyError) as info:
            await accumulate(backend.chat(chat_request("Say hi.")))
    assert info.value.status_code == 503
    assert info.value.retry_after is not None and info.value.retry_after >= 1
    assert "1 requests are already waiting" in info.value.message
    assert backend.worker_state()["refused_busy"] == refused_before + 1
    # Closing the running stream passed the model on to the one that waited.
    assert (await waiting).message.text


async def test_a_request_that_waits_past_the_deadline_is_refused(
    backend: EmbeddedBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backend.chat_queue, "timeout", 0.2)
    running = backend.chat(chat_request(LONG_REPLY, max_tokens=400))
    async with contextlib.aclosing(running):
        await first_delta(running)
        with pytest.raises(BackendBusyError) as info:
            await accumulate(backend.chat(chat_request("Say hi.")))
    assert info.value.status_code == 503
    assert "waited 0.2 s" in info.value.message
    assert info.value.retry_after is not None and info.value.retry_after >= 1
    assert backend.chat_queue.waiting == 0


# -- embeddings ----------------------------------------------------------------------------


async def test_too_many_embedding_inputs_is_a_400_naming_input(backend: EmbeddedBackend) -> None:
    with pytest.raises(InvalidRequestError) as info:
        await backend.embed(EmbedRequest(model="smollm2", inputs=("x",) * 301))
    assert info.value.status_code == 400
    assert info.value.param == "input"
    assert "at most 300" in info.value.message


async def test_an_abandoned_embedding_batch_is_cancelled(backend: EmbeddedBackend) -> None:
    cancelled_before = backend.cancelled
    text = "The quick brown fox jumps over the lazy dog. " * 40  # about 400 tokens
    task = asyncio.create_task(backend.embed(EmbedRequest(model="smollm2", inputs=(text,) * 300)))
    await until(lambda: backend.embed_queue.busy, "the batch is in the worker")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The worker stops between groups of inputs and says so; then the line moves on.
    await until(lambda: not backend.embed_queue.busy, "the worker let the batch go")
    assert backend.cancelled == cancelled_before + 1
    small = await backend.embed(EmbedRequest(model="smollm2", inputs=("still works",)))
    assert len(small.embeddings) == 1


async def test_the_worker_is_supervised_under_uvloop_too(tmp_path: Path) -> None:
    """``llmbridge serve`` runs uvloop, whose subprocess transports are not asyncio's
    classes: the same crash and recovery, in a process of its own on uvloop."""
    script = textwrap.dedent(
        """
        import json
        import uvloop
        from llmbridge.backends.embedded.backend import EmbeddedBackend
        from llmbridge.core.accumulate import accumulate
        from llmbridge.core.errors import BackendUnavailableError
        from llmbridge.core.events import PartDelta
        from llmbridge.core.messages import Message, TextPart
        from llmbridge.core.request import ChatRequest, GenerationParams

        def request(text, max_tokens):
            params = GenerationParams(max_tokens=max_tokens, temperature=0.0, seed=42)
            return ChatRequest("smollm2", (Message("user", (TextPart(text),)),), params=params)

        async def main():
            backend = EmbeddedBackend()
            await backend.start()
            error = None
            try:
                async for event in backend.chat(request("Write a long story.", 400)):
                    if isinstance(event, PartDelta):
                        backend.workers.process.crash_for_test()
            except BackendUnavailableError as exc:
                error = exc.message
            reply = await accumulate(backend.chat(request("Say hi.", 8)))
            await backend.aclose()
            state = backend.worker_state()
            print(json.dumps({"error": error, "reply": reply.message.text, **state}))

        uvloop.run(main())
        """
    )
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE, cwd=tmp_path
    )
    out, _ = await asyncio.wait_for(child.communicate(), 120)
    assert child.returncode == 0
    result = json.loads(out)
    assert "killed by SIGSEGV" in result["error"]
    assert result["reply"]
    assert result["restarts"] == 1
    assert result["state"] == "stopped"  # closed, and nothing left running

"""The gateway's side of the embedded model's worker process: spawn, talk, supervise.

``WorkerSupervisor`` owns at most one live worker (``worker.py``), started as
``python -m llmbridge.backends.embedded.worker`` with ``loop.subprocess_exec``: a new
interpreter, not a fork, so the gateway's threads, sockets and event loop are not
copied into it, and a new session, so a terminal's Ctrl-C reaches the gateway only
(the gateway then finishes its requests and closes the worker's stdin).

Requests. ``WorkerProcess.open`` sends a command under a new id and returns its
``Call``, into which the pipe protocol pushes every message for that id as it arrives:
``data_received`` splits one read into frames (``wire.py``), so a burst of
tokens is one wake-up of the event loop, and the consumer takes all pending items at
once (``Call.batch``). A terminal message (``done``, ``failed``, ``embedded``,
``counted``) resolves ``Call.finished``.

Supervision. When the worker dies (SIGSEGV in llama.cpp, killed, out of memory), the
protocol's ``connection_lost`` fires once its pipes are closed and its exit status is
known; every call still open is failed with ``BackendUnavailableError`` (503 in the
caller's dialect, ``Retry-After: 1``), naming the signal or status, and a new worker
is spawned at once so the next request finds the model loaded. A worker that dies
before it finished loading is not respawned eagerly (a broken model file would loop):
the next request tries again, and ``/health`` says why the last one failed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import orjson

from llmbridge.backends.embedded.wire import FrameReader, Message, pack_json
from llmbridge.core.errors import (
    BackendError,
    BackendTimeoutError,
    BackendUnavailableError,
    ContextLengthError,
    InvalidRequestError,
    LLMBridgeError,
    UnsupportedFeatureError,
)

__all__ = ["Call", "WorkerInfo", "WorkerProcess", "WorkerSupervisor"]

log = logging.getLogger(__name__)

_CLOSE_GRACE_S = 5.0
"""How long a closing worker may take to exit after its stdin closed, before SIGKILL."""
_TERMINAL_OPS = frozenset({"done", "failed", "embedded", "counted"})
_ERRORS: dict[str, type[LLMBridgeError]] = {
    cls.__name__: cls
    for cls in (
        InvalidRequestError,
        ContextLengthError,
        UnsupportedFeatureError,
        BackendError,
        BackendUnavailableError,
    )
}


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """What a worker reports once its model is loaded."""

    pid: int
    n_ctx: int
    n_embd: int
    metadata: dict[str, str]
    load_ns: int
    fim: bool = False
    """The model's vocabulary has fill-in-the-middle tokens."""


class Call:
    """One request in the worker: its messages as they arrive (module docstring)."""

    __slots__ = ("_items", "_waiter", "finished", "id", "outcome")

    def __init__(self, request_id: int) -> None:
        self.id = request_id
        self.outcome: dict[str, Any] | None = None
        """The terminal message, once it came (None after a death)."""
        self._items: collections.deque[Message | LLMBridgeError] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        """Resolved when the worker is done with this request (or died)."""

    def push(self, item: Message | LLMBridgeError) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def end(self) -> None:
        if not self.finished.done():
            self.finished.set_result(None)

    async def batch(self) -> list[Message | LLMBridgeError]:
        """Everything that arrived since the last call (waits for at least one item)."""
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        items = list(self._items)
        self._items.clear()
        return items

    async def result(self) -> dict[str, Any]:
        """The terminal message; a ``failed`` one, or the worker's death, is raised."""
        while True:
            for item in await self.batch():
                message = raise_failure(item)
                if isinstance(message, dict) and message.get("op") in _TERMINAL_OPS:
                    return message


def raise_failure(item: Message | LLMBridgeError) -> Message:
    """``item``, unless it is an error (raised) or a ``failed`` message (raised as the
    ``core.errors`` class the worker named)."""
    if isinstance(item, LLMBridgeError):
        raise item
    if isinstance(item, dict) and item.get("op") == "failed":
        error = item.get("error") or {}
        cls = _ERRORS.get(str(error.get("type")), BackendError)
        message = str(error.get("message") or "the embedded model failed")
        if issubclass(cls, BackendError):
            raise cls(message)
        if cls is ContextLengthError:
            raise ContextLengthError(message, param=error.get("param") or "messages")
        raise cls(message, param=error.get("param"))
    return item


class _PipeProtocol(asyncio.SubprocessProtocol):
    def __init__(self, process: WorkerProcess) -> None:
        self._process = process
        self._reader = FrameReader()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd != 1:
            return
        try:
            messages = self._reader.feed(data)
        except ValueError:
            log.exception("the embedded worker's output is corrupted: stopping it")
            self._process.kill()
            return
        self._process.deliver(messages)

    def connection_lost(self, exc: Exception | None) -> None:
        self._process.exited()


class WorkerProcess:
    """One spawned worker and its open calls."""

    def __init__(self, backend: str, on_exit: Callable[[WorkerProcess], None]) -> None:
        self.backend = backend
        self.transport: asyncio.SubprocessTransport | None = None
        self.pid: int | None = None
        loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[WorkerInfo] = loop.create_future()
        self.gone: asyncio.Future[None] = loop.create_future()
        self.closing = False
        self.exit_reason: str | None = None
        self._calls: dict[int, Call] = {}
        self._next_id = 1
        self._on_exit = on_exit

    async def spawn(self, settings: dict[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.subprocess_exec(
            lambda: _PipeProtocol(self),
            sys.executable,
            "-m",
            "llmbridge.backends.embedded.worker",
            orjson.dumps(settings).decode(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=None,  # the worker's log lines join the gateway's
            start_new_session=True,
        )
        self.transport = transport
        self.pid = transport.get_pid()

    @property
    def alive(self) -> bool:
        return not self.gone.done() and not self.closing

    # -- requests --------------------------------------------------------------------

    def open(self, command: dict[str, Any]) -> Call:
        """Send ``command`` under a new request id; its replies go to the returned call."""
        if not self.alive or self.transport is None:
            raise self._death_error()
        call = Call(self._next_id)
        self._next_id += 1
        self._calls[call.id] = call
        self._send({**command, "id": call.id})
        return call

    def cancel(self, call: Call) -> None:
        if not call.finished.done() and self.alive:
            self._send({"op": "cancel", "id": call.id})

    def crash_for_test(self) -> None:
        """Make the worker read address 0 inside a C call (a real SIGSEGV)."""
        self._send({"op": "crash", "id": 0})

    def _send(self, command: dict[str, Any]) -> None:
        assert self.transport is not None
        # Not an isinstance check: uvloop's pipe transports are not asyncio's classes.
        pipe = cast(asyncio.WriteTransport | None, self.transport.get_pipe_transport(0))
        if pipe is None or pipe.is_closing():
            raise self._death_error()
        pipe.write(pack_json(command))

    # -- what the pipe protocol calls ------------------------------------------------

    def deliver(self, messages: list[Message]) -> None:
        calls = self._calls
        for message in messages:
            if isinstance(message, tuple):  # a token: the hot path
                if (call := calls.get(message[0])) is not None:
                    call.push(message)
                continue
            op, request_id = message.get("op"), message.get("id", 0)
            if op == "ready":
                self._ready(message)
            elif op == "load_failed":
                if not self.ready.done():
                    self.ready.set_exception(
                        BackendUnavailableError(
                            f"could not load the embedded model: {message.get('message')}",
                            backend=self.backend,
                        )
                    )
            elif (call := calls.get(request_id)) is not None:
                call.push(message)
                if op in _TERMINAL_OPS:
                    del calls[request_id]
                    call.outcome = message
                    call.end()

    def _ready(self, message: dict[str, Any]) -> None:
        info = WorkerInfo(
            pid=int(message["pid"]),
            n_ctx=int(message["n_ctx"]),
            n_embd=int(message["n_embd"]),
            metadata=dict(message["metadata"]),
            load_ns=int(message["load_ns"]),
            fim=message.get("fim") is True,
        )
        # DEBUG: a start prints the banner and the database line only; a death is an error.
        log.debug("embedded model loaded in worker pid %d in %.2f s", info.pid, info.load_ns / 1e9)
        if not self.ready.done():
            self.ready.set_result(info)

    def exited(self) -> None:
        if self.gone.done():
            return
        code = self.transport.get_returncode() if self.transport is not None else None
        self.exit_reason = _describe_exit(code)
        error = self._death_error()
        if not self.ready.done():
            self.ready.set_exception(error)
        self.ready.exception()  # retrieved: nobody may be waiting for it any more
        calls, self._calls = self._calls, {}
        for call in calls.values():
            call.push(error)
            call.end()
        self.gone.set_result(None)
        if self.transport is not None:
            self.transport.close()
        self._on_exit(self)

    def _death_error(self) -> BackendUnavailableError:
        reason = self.exit_reason or "is shutting down"
        return BackendUnavailableError(
            f"the embedded model's worker process (pid {self.pid}) {reason}; "
            "a new one is being started",
            backend=self.backend,
            retry_after=1.0,
        )

    # -- stopping --------------------------------------------------------------------

    def kill(self) -> None:
        if self.transport is not None and not self.gone.done():
            with contextlib.suppress(ProcessLookupError):
                self.transport.kill()

    async def close(self) -> None:
        """End of file on its stdin (the worker exits), SIGKILL after a grace period."""
        self.closing = True
        if self.transport is None or self.gone.done():
            return
        pipe = self.transport.get_pipe_transport(0)
        if pipe is not None:
            pipe.close()
        try:
            await asyncio.wait_for(asyncio.shield(self.gone), _CLOSE_GRACE_S)
        except TimeoutError:
            log.warning("embedded worker pid %s did not exit: killing it", self.pid)
            self.kill()
            await self.gone


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "closed its pipe"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with status {code}"


class WorkerSupervisor:
    """At most one live worker; a new one after a death (module docstring)."""

    def __init__(self, backend: str, settings: dict[str, Any], load_timeout: float | None) -> None:
        self.backend = backend
        self.settings = settings
        self.load_timeout = load_timeout
        self.restarts = 0
        """Workers started to replace one that died."""
        self.last_exit: str | None = None
        self.load_error: str | None = None
        self.process: WorkerProcess | None = None
        self._starting: asyncio.Task[WorkerProcess] | None = None
        self._closed = False

    @property
    def info(self) -> WorkerInfo | None:
        process = self.process
        if process is None or not process.alive or not process.ready.done():
            return None
        if process.ready.cancelled() or process.ready.exception() is not None:
            return None
        return process.ready.result()

    async def ready(self) -> tuple[WorkerProcess, int]:
        """A live worker with its model loaded, and how long this call waited (ns)."""
        if self._closed:
            raise BackendUnavailableError(
                "the embedded backend was shut down", backend=self.backend
            )
        process = self.process
        if process is not None and process.alive and self.info is not None:
            return process, 0
        started = time.perf_counter_ns()
        task = self._start()
        try:
            # shield: a caller that gives up must not cancel the start others await.
            process = await asyncio.wait_for(asyncio.shield(task), self.load_timeout)
        except TimeoutError as exc:
            raise BackendTimeoutError(
                f"the embedded model did not load within {self.load_timeout} s",
                backend=self.backend,
            ) from exc
        return process, time.perf_counter_ns() - started

    def _start(self) -> asyncio.Task[WorkerProcess]:
        task = self._starting
        if (
            task is None
            or (task.done() and (task.cancelled() or task.exception() is not None))
            or (task.done() and not task.result().alive)
        ):
            task = self._starting = asyncio.ensure_future(self._spawn())
            task.add_done_callback(_log_failed_start)
        return task

    async def _spawn(self) -> WorkerProcess:
        process = WorkerProcess(self.backend, self._exited)
        self.process = process
        try:
            await process.spawn(self.settings)
            await process.ready
        except BaseException as exc:
            self.load_error = exc.message if isinstance(exc, LLMBridgeError) else str(exc)
            if process.transport is not None and not process.gone.done():
                process.kill()
            if isinstance(exc, OSError):  # could not even start the interpreter
                raise BackendUnavailableError(
                    f"could not start the embedded model's worker process: {exc}",
                    backend=self.backend,
                ) from exc
            raise
        self.load_error = None
        return process

    def _exited(self, process: WorkerProcess) -> None:
        if process.closing or self._closed:
            return
        self.last_exit = process.exit_reason
        if not process.ready.done() or process.ready.exception() is not None:
            return  # died while loading: the next request tries again (module docstring)
        self.restarts += 1
        log.error(
            "the embedded model's worker (pid %s) %s: starting a new one",
            process.pid,
            process.exit_reason,
        )
        self._start()

    async def stop(self) -> bool:
        """Stop the worker (its model and KV cache freed); the next ``ready`` starts a
        new one. Whether one was running. The caller holds every turn, so no request is
        using it."""
        process = self.process
        if process is None or not process.alive:
            return False
        await process.close()  # ``closing``: its exit is not a death to restart after
        return True

    async def aclose(self) -> None:
        self._closed = True
        task = self._starting
        if task is not None and not task.done():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(task), _CLOSE_GRACE_S)
        if self.process is not None:
            if not self.process.ready.done():
                self.process.kill()
            await self.process.close()
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    def state(self) -> dict[str, Any]:
        """For ``/health``: the worker's pid and state, restarts, the last exit."""
        process = self.process
        if process is None:
            status = "not started"
        elif not process.alive:
            status = "stopped"
        else:
            status = "ready" if self.info is not None else "loading"
        return {
            "pid": process.pid if process is not None and process.alive else None,
            "state": status,
            "restarts": self.restarts,
            "last_exit": self.last_exit,
        }


def _log_failed_start(task: asyncio.Task[WorkerProcess]) -> None:
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("could not start a new embedded worker: %s", exc)

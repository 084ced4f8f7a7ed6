"""The workers of one ``llmbridge serve --workers N``, as ``/health`` shows them.

Each worker is its own process (gateway/server/asgi.py), so none of them knows the others'
state in memory. Instead each one writes a small status file, ``<pid>.json`` in the
run's ``workers/`` directory, at start and then every ``STATUS_INTERVAL_S``: its pid,
when it started, the requests it completed and has in flight, and the circuit of each
of its backends (every worker has its own backends, and their breakers, unless the
state is shared through Redis). ``/health`` reads every file, whichever worker
answers, and marks its own.

A worker that died (killed, out of memory) leaves its file behind until uvicorn's
supervisor has replaced it: a file whose pid is gone, or that has not been refreshed
for ``STALE_AFTER_S``, is not listed; the surviving workers delete it, with the dead
worker's live gauges (prometheus_client's ``mark_process_dead``), so a request that
was in flight when it died is not counted in flight for ever.

Files are replaced whole (written aside, then ``os.replace``): a reader sees the old
status or the new one, never half of one.

A worker whose supervisor is gone (``kill -9`` of ``llmbridge serve``, which uvicorn's
workers do not notice: they would keep serving the port, unsupervised) stops itself as
after a SIGTERM, at its next status tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson
from prometheus_client.multiprocess import mark_process_dead

from llmbridge.core.tasks import stop_task
from llmbridge.gateway.metrics import GatewayMetrics
from llmbridge.serving.models import Models

__all__ = ["STALE_AFTER_S", "STATUS_INTERVAL_S", "StatusSource", "WorkerBoard"]

log = logging.getLogger("llmbridge.gateway")

STATUS_INTERVAL_S = 1.0
"""How often a worker rewrites its status file."""
STALE_AFTER_S = 5.0
"""A status older than this is a worker that no longer runs its event loop."""


class StatusSource(Protocol):
    """What a worker's status is read from: the gateway's state (gateway/state.py), which
    holds this worker's ``WorkerBoard``. A protocol, so that this module needs only the
    two parts it reads, not the state that imports it (no import circle)."""

    @property
    def metrics(self) -> GatewayMetrics: ...

    @property
    def models(self) -> Models: ...


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: is there such a process (and may we signal it)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process reusing the pid: not our worker
        return False
    return True


@dataclass(slots=True)
class WorkerBoard:
    """One worker's view of the run: ``status_dir`` holds every worker's status file,
    ``metrics_dir`` their Prometheus files."""

    status_dir: Path
    metrics_dir: Path | None = None
    pid: int = field(default_factory=os.getpid)
    parent_pid: int = field(default_factory=os.getppid)
    """The supervisor (uvicorn's ``Multiprocess``, in ``llmbridge serve``)."""
    started_at: float = field(default_factory=time.time)
    _publishing: asyncio.Task[None] | None = None

    @property
    def status_file(self) -> Path:
        return self.status_dir / f"{self.pid}.json"

    def publish(self, status: dict[str, Any]) -> None:
        """Replace this worker's status file with ``status``."""
        aside = self.status_dir / f".{self.pid}.json.tmp"
        aside.write_bytes(orjson.dumps(status))
        os.replace(aside, self.status_file)

    def statuses(self) -> list[dict[str, Any]]:
        """The live workers' statuses, oldest worker first, this one marked ``self``."""
        now = time.time()
        found: list[dict[str, Any]] = []
        for path in self.status_dir.glob("*.json"):
            try:
                status = orjson.loads(path.read_bytes())
            except (OSError, orjson.JSONDecodeError):
                continue  # removed meanwhile (a worker stopped)
            if not isinstance(status, dict):
                continue
            pid = status.get("pid")
            fresh = now - float(status.get("updated_at", 0)) < STALE_AFTER_S
            if pid == self.pid or (isinstance(pid, int) and fresh and _alive(pid)):
                status["self"] = pid == self.pid
                found.append(status)
        found.sort(key=lambda s: (float(s.get("started_at", 0)), int(s.get("pid", 0))))
        return found

    def forget_dead(self) -> None:
        """Delete the status files and live gauges of workers that are gone."""
        pids: set[int] = set()
        for path in self.status_dir.glob("*.json"):
            if path.stem.isdigit():
                pids.add(int(path.stem))
        if self.metrics_dir is not None:
            for path in self.metrics_dir.glob("gauge_live*_*.db"):
                tail = path.stem.rsplit("_", 1)[-1]
                if tail.isdigit():
                    pids.add(int(tail))
        for pid in pids - {self.pid}:
            if not _alive(pid):
                self._forget(pid)

    def _forget(self, pid: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.status_dir / f"{pid}.json").unlink()
        if self.metrics_dir is not None:
            mark_process_dead(pid, str(self.metrics_dir))  # type: ignore[no-untyped-call]

    def leave(self) -> None:
        """At this worker's shutdown: its file and its live gauges go with it."""
        self._forget(self.pid)

    def start(self, state: StatusSource) -> None:
        """Publish this worker's status now, then every ``STATUS_INTERVAL_S``."""
        self._tick(state)
        self._publishing = asyncio.create_task(self._run(state), name="worker status")

    async def stop(self) -> None:
        """At shutdown, before the backends close: stop publishing, and ``leave``."""
        task, self._publishing = self._publishing, None
        await stop_task(task)
        self.leave()

    async def _run(self, state: StatusSource) -> None:
        while True:
            await asyncio.sleep(STATUS_INTERVAL_S)
            self._tick(state)

    def _tick(self, state: StatusSource) -> None:
        if os.getppid() != self.parent_pid:  # re-parented: the supervisor died
            log.warning("worker %d: its supervisor %d is gone, stopping", self.pid, self.parent_pid)
            self.parent_pid = os.getppid()  # once
            signal.raise_signal(signal.SIGTERM)  # uvicorn's graceful shutdown
            return
        try:
            state.metrics.refresh()
            self.publish(snapshot(self, state))
            self.forget_dead()
        except OSError as exc:  # the run directory removed under us: keep serving
            log.warning("could not publish worker %d's status: %s", self.pid, exc)


def snapshot(board: WorkerBoard, state: StatusSource) -> dict[str, Any]:
    """What one worker tells the others about itself."""
    requests, in_flight = state.metrics.own_totals()
    breakers = state.models.router.breakers
    return {
        "pid": board.pid,
        "started_at": board.started_at,
        "updated_at": time.time(),
        "requests": requests,
        "in_flight": in_flight,
        "backends": {name: {"circuit": breaker.state} for name, breaker in breakers.items()},
    }

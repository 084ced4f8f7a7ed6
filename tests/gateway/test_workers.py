"""``llmbridge serve --workers N``: N processes on one port (gateway/server/asgi.py), one
Prometheus scrape for all of them (gateway/metrics.py), each listed in ``/health``
(gateway/server/workers.py), a dead one replaced, all stopped by one SIGTERM.

The gateway runs as users run it, a real ``llmbridge serve`` subprocess, over a
scripted backend from its configuration file; requests come from the official
``openai`` client, each on a new connection so that the kernel hands them to either
worker (a kept-alive connection stays with the worker that accepted it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from uvicorn.config import STARTUP_FAILURE

from llmbridge.gateway.config import ConfigError, GatewayConfig, load_config
from llmbridge.gateway.server.asgi import (
    METRICS_DIR_ENV,
    RUN_DIR_ENV,
    RunDirectory,
    create_app_from_env,
)
from tests.conftest import RunningServer
from tests.waiting import scaled, value_until, wait_until

REQUESTS = 40
DEADLINE_S = scaled(60.0)
"""The longest any wait here lasts (a loaded machine starts two interpreters slowly)."""


@dataclass
class Served:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def health(self) -> dict[str, Any]:
        reply = httpx.get(self.url + "/health", timeout=10)
        assert reply.status_code == 200, reply.text
        body: dict[str, Any] = reply.json()
        return body

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def _wait_for(what: str, served: Served, check: Callable[[], Any]) -> Any:
    """``check()``'s first truthy result, tried until ``DEADLINE_S``."""

    def found() -> Any:
        if served.process.poll() is not None:
            raise AssertionError(f"llmbridge serve exited while waiting for {what}")
        try:
            return check()
        except httpx.TransportError:
            return None

    try:
        return value_until(found, what, 60.0, step=0.2)  # DEADLINE_S, before its scaling
    except AssertionError as failed:
        raise AssertionError(f"{failed}:\n{served.output()}") from None


@contextmanager
def serving_workers(tmp_path: Path, workers: int = 2) -> Iterator[Served]:
    config = tmp_path / "llmbridge.yaml"
    config.write_text(
        "backends: {scripted: {type: scripted}}\n"
        "default_backend: scripted\n"
        f"agent: {{database: '{tmp_path / 'agent.db'}'}}\n"
        # The supervisor's own deadline on a worker's first answer, scaled like the
        # waits here: a loaded machine imports a new worker slowly.
        f"server: {{worker_healthcheck_s: {round(scaled(30))}}}\n"
    )
    sock = RunningServer.reserve()
    port = sock.getsockname()[1]
    sock.close()
    log = tmp_path / "serve.log"
    command = [sys.executable, "-m", "llmbridge", "serve", "--config", str(config)]
    command += ["--port", str(port), "--workers", str(workers)]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    served = Served(process, f"http://127.0.0.1:{port}", log)
    try:
        _wait_for(
            f"{workers} workers in /health",
            served,
            lambda: len(served.health().get("workers", ())) == workers,
        )
        yield served
    finally:
        if process.poll() is None:
            process.terminate()  # the workers with it, and the run directory
            try:
                process.wait(timeout=DEADLINE_S)
            except subprocess.TimeoutExpired:
                process.kill()  # the workers then stop themselves (gateway/server/workers.py)
                process.wait(timeout=DEADLINE_S)


def _chat(served: Served) -> None:
    # No kept-alive connections: each request is accepted by whichever worker is free.
    with httpx.Client(limits=httpx.Limits(max_keepalive_connections=0)) as http:
        client = openai.OpenAI(
            base_url=served.url + "/v1", api_key="unused", http_client=http, max_retries=0
        )
        reply = client.chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": "hi"}]
        )
    assert reply.choices[0].message.content == "Hello from llmbridge."


def _requests_total(served: Served) -> float:
    """``llmbridge_requests`` summed over its series, from one scrape."""
    text = httpx.get(served.url + "/metrics", timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "llmbridge_requests"
        for sample in family.samples
    )


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.add(child)
            todo.append(child)
    return found


def _run_dir(worker: int) -> Path:
    """The run directory, as ``worker`` was told it (workers inherit it)."""
    environ = Path(f"/proc/{worker}/environ").read_bytes().split(b"\0")
    named = next(v for v in environ if v.startswith(RUN_DIR_ENV.encode() + b"="))
    return Path(named.split(b"=", 1)[1].decode())


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_two_workers_answer_one_scrape_counts_both_and_a_dead_one_is_replaced(
    tmp_path: Path,
) -> None:
    with serving_workers(tmp_path) as served:
        for _ in range(REQUESTS):
            _chat(served)

        def counted() -> list[dict[str, Any]] | None:
            workers: list[dict[str, Any]] = served.health()["workers"]
            return workers if sum(w["requests"] for w in workers) == REQUESTS else None

        # Each worker's count reaches /health within a second (its status file).
        workers = _wait_for(f"{REQUESTS} requests in /health", served, counted)
        assert len(workers) == 2
        assert all(w["requests"] > 0 for w in workers), workers  # both answered
        assert len({w["pid"] for w in workers}) == 2
        assert [w["self"] for w in workers].count(True) == 1  # the one that answered
        assert all(w["in_flight"] == 0 for w in workers)
        assert all(w["backends"] == {"scripted": {"circuit": "closed"}} for w in workers)
        assert _requests_total(served) == REQUESTS  # one scrape, both workers' counts

        # uvicorn's supervisor replaces a worker that dies; what it counted stays.
        killed = workers[0]["pid"]
        os.kill(killed, signal.SIGKILL)

        def replaced() -> bool:
            pids = {w["pid"] for w in served.health()["workers"]}
            return len(pids) == 2 and killed not in pids

        _wait_for("a replacement worker", served, replaced)
        _chat(served)
        assert _requests_total(served) == REQUESTS + 1


UVICORN_HEALTHCHECK_S = 5
"""uvicorn's own deadline on a worker's answer to the supervisor's ping, which killed
every new worker of a loaded machine (server.worker_healthcheck_s replaces it)."""


def test_a_worker_slower_than_uvicorns_five_seconds_is_kept(tmp_path: Path) -> None:
    with serving_workers(tmp_path) as served:
        pids = {w["pid"] for w in served.health()["workers"]}
        slow = min(pids)
        # A worker that cannot answer for longer than uvicorn's deadline, as a loaded
        # machine's worker importing itself could not: stopped, then let go on.
        os.kill(slow, signal.SIGSTOP)
        try:
            time.sleep(UVICORN_HEALTHCHECK_S + 2)  # the fault's length, not a wait
        finally:
            with contextlib.suppress(ProcessLookupError):  # killed: the check below says
                os.kill(slow, signal.SIGCONT)
        assert slow in _descendants(served.process.pid), "a worker slow to answer was killed"

        def both_back() -> bool:
            return {w["pid"] for w in served.health()["workers"]} == pids

        _wait_for("the same two workers in /health", served, both_back)
        assert "died" not in served.output(), served.output()
        _chat(served)


def test_sigterm_stops_every_worker_and_removes_the_run_directory(tmp_path: Path) -> None:
    with serving_workers(tmp_path) as served:
        _chat(served)
        tree = _descendants(served.process.pid)
        workers = {w["pid"] for w in served.health()["workers"]}
        assert workers <= tree
        run_dir = _run_dir(min(workers))
        assert (run_dir / "config.json").is_file()

        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(timeout=DEADLINE_S) == 0, served.output()
        wait_until(lambda: not any(_running(pid) for pid in tree), "every worker gone")
        assert not [pid for pid in tree if _running(pid)], "orphans left running"
        assert not run_dir.exists()
        output = served.output()
        assert output.count("Finished server process") == 2, output


def test_workers_stop_when_their_supervisor_is_killed(tmp_path: Path) -> None:
    """uvicorn's workers would serve on, unsupervised, after a ``kill -9`` of the
    parent; ours notice within a status tick and shut down (gateway/server/workers.py)."""
    with serving_workers(tmp_path) as served:
        tree = _descendants(served.process.pid)
        run_dir = _run_dir(served.health()["workers"][0]["pid"])
        served.process.kill()
        served.process.wait(timeout=DEADLINE_S)
        wait_until(lambda: not any(_running(pid) for pid in tree), "every worker gone")
        assert not [pid for pid in tree if _running(pid)], served.output()
        with pytest.raises(httpx.TransportError):
            httpx.get(served.url + "/health", timeout=5)
    shutil.rmtree(run_dir)  # its owner was killed before it could (docs/DEPLOY.md)


def test_workers_come_from_the_flag_the_file_or_the_environment(tmp_path: Path) -> None:
    assert load_config(None, environ={}).server.workers == 1
    assert load_config(None, environ={"LLMBRIDGE_WORKERS": "3"}).server.workers == 3
    config = tmp_path / "llmbridge.yaml"
    config.write_text("server: {workers: 2}\n")
    assert load_config(config, environ={"LLMBRIDGE_WORKERS": "3"}).server.workers == 2
    flagged = load_config(config, {"workers": 4}, environ={"LLMBRIDGE_WORKERS": "3"})
    assert flagged.server.workers == 4
    for wrong in ("0", "two"):
        with pytest.raises(ConfigError, match=r"server\.workers"):
            load_config(None, environ={"LLMBRIDGE_WORKERS": wrong})


def test_the_run_directory_holds_the_configuration_for_its_owner_only(tmp_path: Path) -> None:
    config = load_config(None, {"api_keys": ["sk-1"], "port": 1234}, environ={})
    before = {name: os.environ.get(name) for name in (RUN_DIR_ENV, METRICS_DIR_ENV)}
    with RunDirectory(config) as run:
        assert os.environ[RUN_DIR_ENV] == str(run.path)
        assert os.environ[METRICS_DIR_ENV] == str(run.metrics_dir)
        assert stat.S_IMODE(run.config_file.stat().st_mode) == 0o600
        assert GatewayConfig.model_validate_json(run.config_file.read_bytes()) == config
    assert not run.path.exists()
    assert {name: os.environ.get(name) for name in before} == before


def test_a_worker_that_cannot_build_the_gateway_stops_the_supervisor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """uvicorn restarts a worker that exits, except with ``STARTUP_FAILURE``: a worker
    that would fail again on every start exits with it (gateway/server/asgi.py)."""
    (tmp_path / "config.json").write_text('{"server": {"workers": "many"}}')
    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path))
    with pytest.raises(SystemExit) as exited:
        create_app_from_env()
    assert exited.value.code == STARTUP_FAILURE

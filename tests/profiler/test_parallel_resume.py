"""``profile run --concurrency N`` and ``--resume DIR``.

The agent service profiles sessions against a real gateway whose scripted backend
shows what the runs did: how many requests were in flight together (a gate that holds
each request until ``together`` of them have arrived: concurrent iterations pass it at
once, sequential ones never could), and where a run was killed (a hold on every request
after the first ``free`` ones). A run killed with SIGKILL in the middle of an iteration
is resumed: the finished iterations are kept as they were, the rest run once.

Two faults of parallel iterations: the real OpenCode server killed under N iterations
(they share one restart, seed 004's "restart and retry once", and then run together on
the new server), and one iteration whose session cannot be created (a fault scripted
into the agent service's provider while the other iterations' requests are held at the
backend): it fails alone, the others finish, and ``--resume`` runs only it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.cli import cli
from llmbridge.core.events import StreamEvent
from llmbridge.core.request import ChatRequest
from llmbridge.profiler.providers.agent import AgentSessionProvider
from llmbridge.profiler.providers.opencode import OpenCodeSessionProvider
from llmbridge.profiler.providers.provider import ProviderError
from llmbridge.profiler.records.records import IterationRecord
from llmbridge.profiler.records.scenarios import ScenarioFile, load_scenarios
from llmbridge.profiler.records.types import ProviderConfig, SessionHandle
from llmbridge.profiler.report.report import html_report, markdown_report
from llmbridge.profiler.run.runner import ProviderPlan, RunDirError, load_finished, run_plans
from llmbridge.profiler.run.setup import groups_for, plan_for
from tests.conftest import RunningServer, running_gateway
from tests.e2e.opencode import opencode_binary
from tests.waiting import HANG_S, scaled, until, wait_until


class GatedBackend(ScriptedBackend):
    """A scripted backend that counts its requests in flight and can hold them."""

    def __init__(self) -> None:
        super().__init__("model", models=("scripted",), default=Script(text=["Done."]))
        self.in_flight = 0
        self.most_in_flight = 0
        self.together = 1
        """Each request waits until this many are in flight at once (then all pass)."""
        self.free: int | None = None
        """When set, requests after this many are held until ``release`` is set."""
        self.release = threading.Event()
        self.held = 0
        self._met = False

    def reset(self, *, together: int = 1, free: int | None = None) -> None:
        self.requests.clear()
        self.most_in_flight, self.together, self.free = 0, together, free
        self.held, self._met = 0, False
        self.release.clear()

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.free is not None and len(self.requests) >= self.free:
                self.held += 1
                await _until(self.release.is_set)
            self._met = self._met or self.in_flight >= self.together
            await _until(lambda: self._met)
            async for event in super().chat(request):
                yield event
        finally:
            self.in_flight -= 1


async def _until(condition: Any) -> None:
    """Wait for ``condition()``, bounded: a request never hangs the gateway for good."""
    for _ in range(int(scaled(HANG_S) / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)


@pytest.fixture(scope="module")
def backend() -> GatedBackend:
    return GatedBackend()


@pytest.fixture(scope="module")
def gateway(backend: GatedBackend) -> Iterator[RunningServer]:
    with running_gateway(
        {"model": backend}, models=[{"name": "scripted", "backend": "model"}]
    ) as server:
        yield server


def _scenarios(tmp_path: Path, iterations: int, scenarios: int = 1, **extra: Any) -> Path:
    spec = {
        "models": ["scripted"],
        "iterations": iterations,
        "timeout": 300,
        "prices": {"scripted": {"input": 1.0, "output": 2.0}},
        "scenarios": [
            {"id": f"task-{n}", "prompt": f"Do task {n}.", "checks": [{"completes": True}]}
            for n in range(scenarios)
        ],
        **extra,
    }
    path = tmp_path / "scenarios.yaml"
    path.write_text(json.dumps(spec))
    return path


def _profile(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, ["profile", "run", "--quiet", *args])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.output.strip().splitlines()[-1]))


def _lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]


def _keys(records: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return sorted((r["scenario"], r["iteration"]) for r in records)


def _shape(out: Path) -> list[tuple[Any, ...]]:
    """What a run's summary says, without its timings and token counts."""
    summary = json.loads((out / "summary.json").read_text())
    return [
        (s["provider"], s["scenario"], s["model"], s["mode"], s["iterations"], s["passed"])
        for s in summary
    ]


def test_iterations_run_together_up_to_the_concurrency_and_report_as_one_at_a_time(
    gateway: RunningServer, backend: GatedBackend, tmp_path: Path
) -> None:
    scenarios = _scenarios(tmp_path, iterations=3, scenarios=2)
    common = ["--provider", "agent", "--gateway-url", gateway.url]

    backend.reset(together=3)
    parallel = tmp_path / "parallel"
    result = _profile(str(scenarios), *common, "--out", str(parallel), "--concurrency", "3")
    # Three sessions' requests were in the backend at once, never more: the gate let
    # none through before the third arrived.
    assert backend.most_in_flight == 3
    assert result == {"out": str(parallel), "iterations": 6, "passed": 6}

    backend.reset()
    sequential = tmp_path / "sequential"
    _profile(str(scenarios), *common, "--out", str(sequential))
    assert backend.most_in_flight == 1

    expected = [(f"task-{s}", i) for s in range(2) for i in range(3)]
    assert _keys(_lines(parallel)) == _keys(_lines(sequential)) == expected
    assert (
        _shape(parallel)
        == _shape(sequential)
        == [("agent", f"task-{s}", "scripted", "default", 3, 3) for s in range(2)]
    )
    for name in ("report.md", "report.html"):
        assert (parallel / name).stat().st_size > 0


def test_a_run_killed_mid_iteration_resumes_without_running_anything_twice(
    gateway: RunningServer, backend: GatedBackend, tmp_path: Path
) -> None:
    scenarios = _scenarios(tmp_path, iterations=4)
    out = tmp_path / "run"
    backend.reset(free=2)
    command = [sys.executable, "-m", "llmbridge", "profile", "run", str(scenarios), "--quiet"]
    command += ["--provider", "agent", "--gateway-url", gateway.url, "--out", str(out)]
    traces = out / "traces.jsonl"
    with (tmp_path / "stderr.txt").open("wb") as stderr:
        run = subprocess.Popen(
            command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=stderr
        )
        try:
            wait_until(
                # Whole lines only: a line being written is not yet a record.
                lambda: (
                    backend.held >= 1 and traces.exists() and traces.read_text().count("\n") == 2
                ),
                "two iterations written and the third one's request held",
            )
        finally:
            # The whole process group, as a killed machine would: no clean-up runs.
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    # The gateway sees its client gone and drops the held request (it never reached
    # the script), so every request the backend counts from here is the resumed run's.
    wait_until(lambda: backend.in_flight == 0, "the killed run's request dropped")
    backend.reset()
    before = _lines(out)
    assert _keys(before) == [("task-0", 0), ("task-0", 1)]
    # A write the kill cut short: half a record, no newline.
    with traces.open("a") as sink:
        sink.write(json.dumps(before[0])[:40])

    result = _profile(
        str(scenarios), "--provider", "agent", "--gateway-url", gateway.url, "--resume", str(out)
    )
    after = _lines(out)
    assert _keys(after) == [("task-0", i) for i in range(4)]
    # The finished iterations are the first run's, untouched; only two ran again.
    assert after[:2] == before
    assert len(backend.requests) == 2
    assert result == {"out": str(out), "iterations": 4, "passed": 4}
    assert _shape(out) == [("agent", "task-0", "scripted", "default", 4, 4)]


class _KilledOnceUp(OpenCodeSessionProvider):
    """The OpenCode provider whose server is killed (SIGKILL) as soon as ``init`` has
    started it: every iteration of the run then finds it dead. ``restart_with``: a
    command for the restart (one that is not there makes the restart fail)."""

    def __init__(self, command: str, restart_with: str | None = None) -> None:
        super().__init__(command=command)
        self.restart_with = restart_with

    async def init(self, config: ProviderConfig) -> None:
        await super().init(config)
        assert self.server is not None
        process = self.server._process
        assert process is not None
        process.send_signal(signal.SIGKILL)
        await until(lambda: process.returncode is not None, "the killed server reaped")
        self.command = self.restart_with or self.command


def _opencode_spec(tmp_path: Path, gateway: RunningServer) -> ScenarioFile:
    opencode = {
        "endpoint": {"url": gateway.url + "/v1", "limits": {"context": 32768, "output": 1024}}
    }
    return load_scenarios(_scenarios(tmp_path, iterations=3, opencode=opencode))


async def test_iterations_that_find_the_opencode_server_dead_share_one_restart(
    gateway: RunningServer, backend: GatedBackend, tmp_path: Path
) -> None:
    spec = _opencode_spec(tmp_path, gateway)
    provider = _KilledOnceUp(opencode_binary())
    # Each model request waits until all three are in flight: the three iterations
    # prompt together, on one server.
    backend.reset(together=3)
    result = await run_plans(
        spec,
        [ProviderPlan(provider, groups_for("opencode", spec))],
        tmp_path / "out",
        concurrency=3,
    )
    assert [r.passed for r in result.records] == [True] * 3, [r.error for r in result.records]
    # The server init started, and one restart: the iterations that waited for the
    # first one's restart found the new server healthy.
    assert provider.spawns == 2
    assert backend.most_in_flight == 3
    assert len({r.session_id for r in result.records}) == 3


async def test_iterations_that_waited_through_a_failed_restart_share_its_failure(
    gateway: RunningServer, backend: GatedBackend, tmp_path: Path
) -> None:
    spec = _opencode_spec(tmp_path, gateway)
    provider = _KilledOnceUp(opencode_binary(), restart_with=str(tmp_path / "no-opencode"))
    backend.reset()
    result = await run_plans(
        spec,
        [ProviderPlan(provider, groups_for("opencode", spec))],
        tmp_path / "out",
        concurrency=3,
    )
    # One restart was tried (init's server and it: two spawns), and failed; the two
    # iterations that waited for it got its failure instead of a restart each. The
    # run finished with all three recorded, to be run again by --resume.
    assert provider.spawns == 2
    errors = {r.error for r in result.records}
    assert len(errors) == 1
    (error,) = errors
    assert error is not None and error.startswith("could not create the session: OpenCode")
    assert "no-opencode" in error
    assert [(r.passed, r.started) for r in result.records] == [(False, False)] * 3
    assert backend.requests == []


class _OneSessionRefused(AgentSessionProvider):
    """The agent service's provider, except that iteration ``refused`` cannot have its
    session: refused once the other iterations' requests are held at the backend, so
    they are in the middle of their prompts when it fails."""

    def __init__(self, spec: ScenarioFile, gateway: RunningServer, backend: GatedBackend) -> None:
        super().__init__(spec.agent, gateway_url=gateway.url)
        self.backend = backend
        self.refused = 1

    async def create_session(
        self,
        *,
        system_instructions: str | None,
        scenario_id: str,
        iteration: int,
        workspace: Path | None = None,
    ) -> SessionHandle:
        if iteration == self.refused:
            await until(lambda: self.backend.held == 2, "the other iterations' requests held")
            raise ProviderError("the session store is full")
        return await super().create_session(
            system_instructions=system_instructions,
            scenario_id=scenario_id,
            iteration=iteration,
            workspace=workspace,
        )


async def test_a_session_that_cannot_be_created_fails_its_iteration_alone(
    gateway: RunningServer, backend: GatedBackend, tmp_path: Path
) -> None:
    scenarios = _scenarios(tmp_path, iterations=3)
    spec = load_scenarios(scenarios)
    out = tmp_path / "run"
    finished: list[IterationRecord] = []

    def progress(record: IterationRecord) -> None:
        finished.append(record)
        backend.release.set()  # the others go on once the failure is recorded

    backend.reset(free=0)
    provider = _OneSessionRefused(spec, gateway, backend)
    plan = ProviderPlan(provider, groups_for("agent", spec))
    result = await run_plans(spec, [plan], out, progress, concurrency=3)

    assert finished[0].iteration == 1  # recorded while the others were held
    refused = result.records[1]
    assert not refused.passed and not refused.started
    assert refused.error == "could not create the session: the session store is full"
    assert [p.completion_reason for p in refused.prompts] == ["error"]
    assert [r.passed for r in result.records] == [True, False, True]
    assert len(backend.requests) == 2  # the other two finished their prompts
    summary = json.loads((out / "summary.json").read_text())
    assert summary[0]["completion_reasons"] == {"stop": 2, "error": 1}
    for report in (markdown_report, html_report):
        assert "could not create the session: the session store is full" in report(
            result.summary, result.records
        )

    backend.reset()
    resumed = await run_plans(
        spec, [plan_for("agent", spec, gateway_url=gateway.url)], out, resume=True
    )
    assert len(backend.requests) == 1  # only the refused iteration ran again
    assert [r.passed for r in resumed.records] == [True] * 3
    assert _keys(_lines(out)) == [("task-0", i) for i in range(3)]
    # The finished iterations are the first run's, untouched.
    kept = [r.session_id for r in result.records if r.passed]
    assert [r.session_id for r in resumed.records if r.iteration != 1] == kept


def _record(iteration: int, **changes: Any) -> dict[str, Any]:
    record = IterationRecord(
        scenario="s",
        model="m",
        mode="default",
        iteration=iteration,
        session_id=f"session-{iteration}",
        prompts=[],
        checks=[],
        passed=True,
        provider="agent",
    )
    return {**record.to_json(), **changes}


def test_the_finished_iterations_of_a_run_directory(tmp_path: Path) -> None:
    traces = tmp_path / "traces.jsonl"
    lines = [
        _record(0),
        _record(1, started=False, passed=False, error="agent did not start: no"),
        _record(2, session_id="first try"),
        _record(2, session_id="second try"),
    ]
    traces.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"scenario": "s", "mo')
    finished = load_finished(traces)
    assert sorted(key.iteration for key in finished) == [0, 2]
    assert {r.iteration: r.session_id for r in finished.values()} == {
        0: "session-0",
        2: "second try",
    }
    # Rewritten to what was kept: read again, it is the same, and nothing is there twice.
    assert [json.loads(line)["iteration"] for line in traces.read_text().splitlines()] == [0, 2]
    assert load_finished(traces).keys() == finished.keys()
    assert load_finished(tmp_path / "nothing.jsonl") == {}


def test_a_damaged_run_directory_is_a_clear_error(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "traces.jsonl").write_text(json.dumps(_record(0)) + "\nnot json\n")
    with pytest.raises(RunDirError, match="line 2"):
        load_finished(out / "traces.jsonl")
    scenarios = _scenarios(tmp_path, iterations=1)
    result = CliRunner().invoke(
        cli, ["profile", "run", str(scenarios), "--provider", "agent", "--resume", str(out)]
    )
    assert result.exit_code == 1
    assert "line 2 is not an iteration record" in result.output
    assert "Traceback" not in result.output

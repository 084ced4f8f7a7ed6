"""The eval runner: scenarios x iterations x modes x models x providers, recorded and
summarised.

A run is one or more providers (``ProviderPlan``: OpenCode, Claude Code, Codex, the
agent service...), one after another, each over its (model, mode) groups; a group
carries the model's name as the scenarios file gives it (a gateway model name) and
the provider's configuration, whose model is the provider's own form of it
(OpenCode's ``PROVIDER/MODEL``), so every provider's records name the model alike.
For each (model, mode) group the provider is initialised once (a provider that cannot
start fails that group's iterations, with its error, and the run goes on); each iteration of each
scenario gets a fresh session (and, when the scenario declares one or checks one, a
fresh workspace: workspace.py; a session that cannot be created fails that iteration
alone, recorded as not started, so the iterations beside it go on and ``--resume``
runs it again), its prompts in order (a timeout or a provider failure
ends the iteration, recorded as such), the session's exported trace, and is
destroyed; then its checks run, and the workspace is removed unless it is kept.
Every iteration is one line of ``traces.jsonl`` (the prompt results, the checks,
the trace and its OpenTelemetry spans), written as it finishes, so an interrupted
run keeps what it measured. ``summary.json`` holds, per provider, scenario,
model and mode: the pass rate, mean +- standard error and p50 / p95 of the duration and the
tokens, time to first token, cost, and the completion reasons.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from llmbridge.profiler.providers.provider import PromptTimeoutError, ProviderError, SessionProvider
from llmbridge.profiler.records.atif import to_atif
from llmbridge.profiler.records.findings import scan
from llmbridge.profiler.records.input_files import InputLimits
from llmbridge.profiler.records.otel import trace_spans
from llmbridge.profiler.records.records import IterationKey, IterationRecord, summarise
from llmbridge.profiler.records.scenarios import Scenario, ScenarioFile
from llmbridge.profiler.records.trace import check_invariants
from llmbridge.profiler.records.types import (
    CostMetrics,
    PromptMetrics,
    PromptResult,
    ProviderConfig,
    TimingMetrics,
    TokenMetrics,
)
from llmbridge.profiler.run.graded import Grader
from llmbridge.profiler.run.run_dir import RunDirError, load_finished
from llmbridge.profiler.run.workspace import (
    WorkspaceError,
    evaluate_all,
    prepare_workspace,
    remove_workspace,
)

__all__ = [
    "ProviderPlan",
    "RunDirError",
    "RunResult",
    "load_finished",
    "run_plans",
    "run_scenarios",
    "write_trajectories",
]


@dataclass
class RunResult:
    records: list[IterationRecord]
    summary: list[dict[str, Any]]


@dataclass(frozen=True)
class ProviderPlan:
    """One provider of a run and its groups: (the file's model name, its config)."""

    provider: SessionProvider
    groups: Sequence[tuple[str, ProviderConfig]]


Progress = Callable[[IterationRecord], None]
"""Called with each iteration's record as it finishes (the progress display)."""


async def _run_iteration(
    provider: SessionProvider,
    scenario: Scenario,
    config: ProviderConfig,
    iteration: int,
    default_timeout: float,
    keep_workspace: bool = False,
    model: str | None = None,
) -> IterationRecord:
    """``model``: the name to record (the file's), ``config.model`` by default."""
    model = model or config.model
    workspace: Path | None = None
    if scenario.needs_workspace:
        label = f"{scenario.id}-{iteration}"
        try:
            workspace = await prepare_workspace(scenario.workspace, label=label)
        except WorkspaceError as exc:
            if not keep_workspace:
                await remove_workspace(exc.path)
            return IterationRecord(
                scenario=scenario.id,
                model=model,
                mode=config.mode,
                iteration=iteration,
                session_id="",
                prompts=[],
                checks=[],
                passed=False,
                error=f"workspace setup failed: {exc}",
                workspace=str(exc.path) if keep_workspace else None,
                provider=provider.id,
            )
    try:
        record = await _run_session(
            provider, scenario, config, iteration, default_timeout, workspace
        )
        record.model = model
    finally:
        if workspace is not None and not keep_workspace:
            await remove_workspace(workspace)
    if workspace is not None and keep_workspace:
        record.workspace = str(workspace)
    return record


async def _run_session(
    provider: SessionProvider,
    scenario: Scenario,
    config: ProviderConfig,
    iteration: int,
    default_timeout: float,
    workspace: Path | None,
) -> IterationRecord:
    results: list[PromptResult] = []
    error: str | None = None
    try:
        handle = await provider.create_session(
            system_instructions=scenario.system,
            scenario_id=scenario.id,
            iteration=iteration,
            workspace=workspace,
        )
    except ProviderError as exc:
        # This iteration's failure, not the run's: raised here it would cancel every
        # iteration running beside it.
        return _no_session(provider, scenario, config, iteration, str(exc))
    try:
        for text in scenario.turns:
            try:
                results.append(
                    await provider.prompt(handle, text, scenario.timeout or default_timeout)
                )
            except PromptTimeoutError as exc:
                results.append(exc.result)
                error = str(exc)
                break
        trace = await provider.export_session(handle)
    except ProviderError as exc:
        error = error or str(exc)
        trace = None
    finally:
        try:
            await provider.destroy_session(handle)
        except ProviderError as exc:
            error = error or f"could not destroy the session: {exc}"
    # After destroy_session: the agent can no longer change the workspace under a check.
    checks = await evaluate_all(scenario.checks, results, workspace)
    completed = bool(results) and all(r.completion_reason in ("stop", "length") for r in results)
    record = IterationRecord(
        scenario=scenario.id,
        model=config.model,
        mode=config.mode,
        iteration=iteration,
        session_id=handle.session_id,
        prompts=results,
        checks=checks,
        passed=error is None and completed and all(c.passed for c in checks),
        error=error or next((r.error for r in results if r.error), None),
        trace=trace.to_dict() if trace is not None else None,
        spans=trace_spans(trace, config, provider.id) if trace is not None else [],
        invariant_problems=check_invariants(trace) if trace is not None else [],
        provider=provider.id,
    )
    record.inputs = list(scenario.turns[: len(results)])
    record.findings = [finding.to_json() for finding in scan(record, scenario.turns)]
    return record


def _no_session(
    provider: SessionProvider,
    scenario: Scenario,
    config: ProviderConfig,
    iteration: int,
    error: str,
) -> IterationRecord:
    """The record of an iteration whose session could not be created: failed, with
    the error as its first prompt's (completion reason ``error``, seed 004's for an
    error; ``inputs`` holds that prompt, which was never sent), and not started, so
    ``--resume`` runs it again."""
    message = f"could not create the session: {error}"
    failed = PromptResult(
        text="",
        metrics=PromptMetrics(TokenMetrics(), TimingMetrics(None, 0.0), (), CostMetrics()),
        completion_reason="error",
        error=message,
    )
    return IterationRecord(
        scenario=scenario.id,
        model=config.model,
        mode=config.mode,
        iteration=iteration,
        session_id="",
        prompts=[failed],
        checks=[],
        passed=False,
        error=message,
        provider=provider.id,
        started=False,
        inputs=list(scenario.turns[:1]),
    )


async def run_scenarios(
    spec: ScenarioFile,
    provider: SessionProvider,
    configs: Sequence[ProviderConfig],
    out: Path,
    progress: Progress | None = None,
    *,
    keep_workspaces: bool = False,
) -> RunResult:
    """Run every scenario for each config (one per model and mode) of one provider;
    see ``run_plans``."""
    plan = ProviderPlan(provider, [(config.model, config) for config in configs])
    return await run_plans(spec, [plan], out, progress, keep_workspaces=keep_workspaces)


def _not_started(
    plan: ProviderPlan,
    model: str,
    config: ProviderConfig,
    todo: Sequence[tuple[Scenario, int]],
    error: str,
) -> list[IterationRecord]:
    return [
        IterationRecord(
            scenario=scenario.id,
            model=model,
            mode=config.mode,
            iteration=iteration,
            session_id="",
            prompts=[],
            checks=[],
            passed=False,
            error=error,
            provider=plan.provider.id,
            started=False,
        )
        for scenario, iteration in todo
    ]


async def run_plans(
    spec: ScenarioFile,
    plans: Sequence[ProviderPlan],
    out: Path,
    progress: Progress | None = None,
    *,
    keep_workspaces: bool = False,
    concurrency: int = 1,
    resume: bool = False,
    grader: Grader | None = None,
    input_limits: InputLimits | None = None,
) -> RunResult:
    """Run every scenario for each provider and each of its groups, writing
    ``out/traces.jsonl`` as it goes and ``out/summary.json`` at the end.

    ``keep_workspaces`` leaves each iteration's workspace in place (its path is in
    the record) instead of removing it. ``concurrency``: at most this many iterations
    of a group at once, each in its own session, workspace and (for the command-line
    agents) HOME; the lines of ``traces.jsonl`` come in the order the iterations
    finish, and the records returned and summarised are in a sequential run's order.
    ``resume``: ``out`` holds an interrupted run (``load_finished``); its finished
    iterations are kept and not run again, and a group with nothing left to run does
    not start its provider. ``grader``: the optional model-graded scanner (graded.py),
    whose findings join each record's before it is written. ``input_limits``: how
    much of ``traces.jsonl`` ``resume`` reads (run_dir.py)."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, not {concurrency}")
    await asyncio.to_thread(out.mkdir, parents=True, exist_ok=True)
    traces = out / "traces.jsonl"
    done = await asyncio.to_thread(load_finished, traces, input_limits) if resume else {}
    order = {key: n for n, key in enumerate(_planned(spec, plans))}
    records = list(done.values())

    def keep(record: IterationRecord, sink: IO[str]) -> None:
        records.append(record)
        sink.write(json.dumps(record.to_json(), ensure_ascii=False) + "\n")
        sink.flush()
        # A record on disk survives a killed machine: --resume counts on it.
        os.fsync(sink.fileno())
        if progress is not None:
            progress(record)

    with traces.open("a" if resume else "w", encoding="utf-8") as sink:
        for plan in plans:
            provider = plan.provider
            try:
                for model, config in plan.groups:
                    todo = [
                        (scenario, iteration)
                        for scenario in spec.scenarios
                        for iteration in range(spec.iterations)
                        if IterationKey(provider.id, scenario.id, model, config.mode, iteration)
                        not in done
                    ]
                    if not todo:
                        continue
                    try:
                        await provider.init(config)
                    except ProviderError as exc:
                        error = f"{provider.id} did not start: {exc}"
                        for record in _not_started(plan, model, config, todo, error):
                            keep(record, sink)
                        continue
                    await _run_group(
                        provider,
                        model,
                        config,
                        todo,
                        spec.timeout,
                        concurrency=concurrency,
                        keep_workspaces=keep_workspaces,
                        keep=lambda record: keep(record, sink),
                        grader=grader,
                    )
            finally:
                await provider.shutdown()
    records.sort(key=lambda record: order.get(record.key, len(order)))
    summary = summarise(records)
    await asyncio.to_thread(
        (out / "summary.json").write_text, json.dumps(summary, indent=2), encoding="utf-8"
    )
    await asyncio.to_thread(write_trajectories, out, records)
    return RunResult(records, summary)


def write_trajectories(out: Path, records: Sequence[IterationRecord]) -> None:
    """Every iteration as an ATIF trajectory in ``out/trajectories/`` (records/atif.py), one
    file per iteration named after it; files of iterations no longer in the run go."""
    folder = out / "trajectories"
    folder.mkdir(exist_ok=True)
    kept = set()
    for record in records:
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(map(str, record.key))) + ".json"
        kept.add(name)
        # json.dump, not dumps: written as it is encoded, never whole in memory (a long
        # session's trajectory is tens of megabytes, its pieces several times that).
        with (folder / name).open("w", encoding="utf-8") as sink:
            json.dump(to_atif(record), sink, indent=1)
    for stale in folder.glob("*.json"):
        if stale.name not in kept:
            stale.unlink()


async def _run_group(
    provider: SessionProvider,
    model: str,
    config: ProviderConfig,
    todo: Sequence[tuple[Scenario, int]],
    default_timeout: float,
    *,
    concurrency: int,
    keep_workspaces: bool,
    keep: Callable[[IterationRecord], None],
    grader: Grader | None = None,
) -> None:
    """``todo``'s iterations of one group, at most ``concurrency`` at once, each record
    kept as its iteration finishes."""
    gate = asyncio.Semaphore(concurrency)

    async def one(scenario: Scenario, iteration: int) -> None:
        async with gate:
            record = await _run_iteration(
                provider, scenario, config, iteration, default_timeout, keep_workspaces, model
            )
        if grader is not None and record.started:
            record.findings += [finding.to_json() for finding in await grader.grade(record)]
        keep(record)

    async with asyncio.TaskGroup() as group:
        for scenario, iteration in todo:
            group.create_task(one(scenario, iteration))


def _planned(spec: ScenarioFile, plans: Sequence[ProviderPlan]) -> list[IterationKey]:
    """Every iteration of the run, in a sequential run's order."""
    return [
        IterationKey(plan.provider.id, scenario.id, model, config.mode, iteration)
        for plan in plans
        for model, config in plan.groups
        for scenario in spec.scenarios
        for iteration in range(spec.iterations)
    ]

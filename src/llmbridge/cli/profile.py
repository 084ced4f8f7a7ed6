"""``llmbridge profile``: ``run`` a scenarios file and write traces, metrics and reports;
``compare`` run directories with intervals and p-values; ``import`` sessions the
profiler did not run."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from llmbridge.profiler.records.input_files import InputLimits

__all__ = ["profile"]

F = TypeVar("F", bound=Callable[..., Any])

_SIZE = re.compile(r"(\d+)\s*([kmg]?)(i?b)?", re.IGNORECASE)


class ByteSize(click.ParamType[int, Any]):
    """A size in bytes: a number, or one with K, M or G after it (KiB, MiB, GiB)."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return int(value)
        match = _SIZE.fullmatch(str(value).strip())
        if match is None or int(match.group(1)) < 1:
            self.fail(f"{value!r} is not a size (such as 33554432, 32MiB or 1G)", param, ctx)
        power = " kmg".index(match.group(2).lower() or " ")
        return int(match.group(1)) << (10 * power)


def _max_line_bytes(func: F) -> F:
    """``--max-line-bytes``, shared by ``import`` and ``run --resume``."""
    option = click.option(
        "--max-line-bytes",
        type=ByteSize(),
        default="32MiB",
        show_default=True,
        envvar="LLMBRIDGE_PROFILE_MAX_LINE_BYTES",
        help="The longest line read from a .jsonl file (a session's line, a record of "
        "traces.jsonl); a longer one is an error naming its file and line "
        "[env LLMBRIDGE_PROFILE_MAX_LINE_BYTES].",
    )
    return option(func)


@click.group()
def profile() -> None:
    """Profile agent sessions: scenarios in, traces, metrics and reports out."""


@profile.command("run")
@click.argument("scenarios", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--provider",
    "providers",
    type=click.Choice(["opencode", "agent", "claude-code", "codex", "gemini-cli"]),
    multiple=True,
    help="What runs the sessions (repeatable: one run, every provider on the same "
    "scenarios and models, one after another): an OpenCode server, llmbridge's agent "
    "service, or the Claude Code, Codex or Gemini CLI command-line agent (on "
    "--gateway-url's models). [default: opencode]",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("profile-out"),
    show_default=True,
    help="Directory for traces.jsonl, summary.json, report.md and report.html.",
)
@click.option("--iterations", type=click.IntRange(min=1), help="Override the file's iterations.")
@click.option(
    "--model",
    "models",
    multiple=True,
    help="Override the file's models (repeatable): gateway model names (OpenCode gets "
    "gw/NAME), or PROVIDER/MODEL for OpenCode alone.",
)
@click.option("--opencode-command", default="opencode", show_default=True, help="The binary.")
@click.option(
    "--command",
    "commands",
    multiple=True,
    metavar="PROVIDER=PATH",
    help="A provider's binary (repeatable), e.g. codex=tests/e2e/node_modules/.bin/codex; "
    "over the scenarios file's.",
)
@click.option(
    "--gateway-url",
    help="The llmbridge gateway serving the models, for the agent service and the "
    "command-line agents (and OpenCode, when the file sets no opencode.endpoint).",
)
@click.option(
    "--otlp-endpoint",
    help="Also send the spans to this OTLP/HTTP collector (e.g. http://127.0.0.1:4318/v1/traces).",
)
@click.option(
    "--keep-workspaces",
    is_flag=True,
    help="Leave each iteration's workspace in place (its path is in traces.jsonl).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Iterations run at once within each provider's model and mode, each in its own "
    "session, workspace and HOME (the gateway's own limits still apply).",
)
@click.option(
    "--resume",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    metavar="DIR",
    help="Continue the interrupted run in DIR (instead of --out): the iterations it "
    "finished are kept and not run again; the rest run and are added to it.",
)
@click.option(
    "--grade-model",
    metavar="MODEL",
    help="Also have MODEL (through --gateway-url) read each iteration and list what went "
    "wrong, as 'graded' findings beside the deterministic ones. Off by default.",
)
@_max_line_bytes
@click.option("--quiet", is_flag=True, help="No progress bar and no table.")
def run(
    scenarios: Path,
    providers: tuple[str, ...],
    out: Path,
    iterations: int | None,
    models: tuple[str, ...],
    opencode_command: str,
    commands: tuple[str, ...],
    gateway_url: str | None,
    otlp_endpoint: str | None,
    keep_workspaces: bool,
    concurrency: int,
    resume: Path | None,
    grade_model: str | None,
    max_line_bytes: int,
    quiet: bool,
) -> None:
    """Run SCENARIOS (YAML) across its models, modes and iterations, with each
    --provider in turn; every record names its provider."""
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import Progress

    from llmbridge.profiler.records.input_files import InputLimits
    from llmbridge.profiler.records.otel import EXPORTER_MISSING, exporter_installed
    from llmbridge.profiler.records.records import IterationRecord
    from llmbridge.profiler.records.scenarios import ScenarioFileError, load_scenarios
    from llmbridge.profiler.report.report import html_report, markdown_report, print_summary
    from llmbridge.profiler.run.runner import run_plans
    from llmbridge.profiler.run.setup import PROVIDERS, plan_for

    if otlp_endpoint and not exporter_installed():
        # Before the run, not after it: a run may take hours to reach the export.
        raise click.ClickException(EXPORTER_MISSING)
    kinds = list(dict.fromkeys(providers or ("opencode",)))
    binaries = _binaries(commands, PROVIDERS)
    try:
        spec = load_scenarios(scenarios)
    except ScenarioFileError as exc:
        raise click.ClickException(str(exc)) from exc
    if iterations is not None:
        spec = spec.model_copy(update={"iterations": iterations})
    if models:
        spec = spec.model_copy(update={"models": models})
    plans = [
        plan_for(
            kind,
            spec,
            opencode_command=opencode_command,
            gateway_url=gateway_url,
            command=binaries.get(kind),
        )
        for kind in kinds
    ]
    out = resume or out
    grader = None
    if grade_model:
        if not gateway_url:
            raise click.UsageError("--grade-model needs --gateway-url (the grader's gateway)")
        from llmbridge.profiler.run.graded import Grader

        grader = Grader(gateway_url, grade_model)
    limits = InputLimits(max_line_bytes=max_line_bytes)
    finished = _finished(out, limits) if resume is not None else {}
    console = Console(stderr=True, quiet=quiet)
    with Progress(console=console, disable=quiet) as bar:
        # One bar per provider: with --concurrency their iterations finish in any order.
        tasks = {
            plan.provider.id: bar.add_task(
                escape(plan.provider.id),
                total=len(plan.groups) * len(spec.scenarios) * spec.iterations,
                completed=finished.get(plan.provider.id, 0),
            )
            for plan in plans
        }

        def advance(record: IterationRecord) -> None:
            verdict = "pass" if record.passed else "FAIL"
            line = f"{record.provider} {record.scenario} [{record.model} {record.mode}] {verdict}"
            # Escaped: "[model mode]" would otherwise be read as rich markup and vanish.
            bar.update(tasks[record.provider], advance=1, description=escape(line))

        try:
            result = asyncio.run(
                run_plans(
                    spec,
                    plans,
                    out,
                    progress=advance,
                    keep_workspaces=keep_workspaces,
                    concurrency=concurrency,
                    resume=resume is not None,
                    grader=grader,
                    input_limits=limits,
                )
            )
        except Exception as exc:  # the CLI reports failures, never a traceback
            raise click.ClickException(f"the run failed: {exc}") from exc
    (out / "report.md").write_text(markdown_report(result.summary, result.records), "utf-8")
    (out / "report.html").write_text(html_report(result.summary, result.records), "utf-8")
    if otlp_endpoint:
        from llmbridge.profiler.records.otel import export_otlp

        spans = [s for r in result.records for s in r.spans]
        try:
            sent = export_otlp(spans, otlp_endpoint)
        except RuntimeError as exc:
            raise click.ClickException(str(exc)) from exc
        console.print(f"sent {sent} spans to {otlp_endpoint}")
    if not quiet:
        print_summary(result.summary, Console())
    passed = sum(r.passed for r in result.records)
    click.echo(
        json.dumps({"out": str(out), "iterations": len(result.records), "passed": passed}),
        err=quiet,
    )


def _binaries(commands: tuple[str, ...], providers: Any) -> dict[str, str]:
    """``--command PROVIDER=PATH`` values as a mapping, checked."""
    binaries: dict[str, str] = {}
    for entry in commands:
        kind, sep, path = entry.partition("=")
        if not sep or not path or kind not in providers:
            raise click.BadParameter(
                f"{entry!r}: give PROVIDER=PATH, PROVIDER one of {', '.join(providers)}",
                param_hint="--command",
            )
        binaries[kind] = path
    return binaries


def _finished(out: Path, limits: InputLimits) -> dict[str, int]:
    """Per provider, the iterations the interrupted run in ``out`` finished."""
    from llmbridge.profiler.run.run_dir import RunDirError, load_finished

    finished: dict[str, int] = {}
    try:
        for key in load_finished(out / "traces.jsonl", limits):
            finished[key.provider] = finished.get(key.provider, 0) + 1
    except RunDirError as exc:
        raise click.ClickException(str(exc)) from exc
    return finished


@profile.command("compare")
@click.argument("runs", nargs=-1, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for comparison.json, comparison.md and comparison.html [default: "
    "compare-A-vs-B... next to the first run].",
)
def compare(runs: tuple[Path, ...], out: Path | None) -> None:
    """Compare run directories (from `profile run`): each against the first.

    Per scenario and overall: the pass-rate difference with its 95% interval, and the
    duration, token and cost differences with bootstrap 95% intervals and a
    permutation-test p-value.
    """
    from rich.console import Console

    from llmbridge.profiler.report.compare import CompareError, compare_runs, report_dict
    from llmbridge.profiler.report.compare_report import comparison_markdown, print_comparison
    from llmbridge.profiler.report.html_report import html_comparison

    if len(runs) < 2:
        raise click.UsageError("compare needs at least two run directories")
    try:
        comparisons = compare_runs(runs)
    except CompareError as exc:
        raise click.UsageError(str(exc)) from exc
    if out is None:
        names = "-vs-".join(path.resolve().name for path in runs)
        out = runs[0].resolve().parent / f"compare-{names}"
    out.mkdir(parents=True, exist_ok=True)
    report = report_dict(comparisons)
    (out / "comparison.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    (out / "comparison.md").write_text(comparison_markdown(comparisons), encoding="utf-8")
    (out / "comparison.html").write_text(html_comparison(report), encoding="utf-8")
    print_comparison(comparisons, Console())
    click.echo(json.dumps({"out": str(out), "comparisons": len(comparisons)}))


@profile.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("profile-imported"),
    show_default=True,
    help="Directory for traces.jsonl, summary.json, report.md, report.html and trajectories/.",
)
@_max_line_bytes
@click.option(
    "--max-bytes",
    type=ByteSize(),
    default="256MiB",
    show_default=True,
    envvar="LLMBRIDGE_PROFILE_MAX_BYTES",
    help="The most read from all the files together (what the import holds grows with "
    "what it reads); past it the import stops, naming the file and line "
    "[env LLMBRIDGE_PROFILE_MAX_BYTES].",
)
@click.option("--quiet", is_flag=True, help="No table.")
def import_(
    paths: tuple[Path, ...], out: Path, max_line_bytes: int, max_bytes: int, quiet: bool
) -> None:
    """Report sessions the profiler did not run: ATIF trajectory files (or directories of
    them, such as a run's trajectories/), the session files Claude Code, Codex and
    Gemini CLI keep, and the gateway's spans, as a run directory `profile compare`
    reads. Only regular files are read: a FIFO or a device is skipped, with a warning."""
    from rich.console import Console

    from llmbridge.profiler.records.input_files import InputLimits
    from llmbridge.profiler.records.records import summarise
    from llmbridge.profiler.report.report import print_summary
    from llmbridge.profiler.run.importing import TrajectoryImportError, import_paths, write_run

    limits = InputLimits(max_line_bytes=max_line_bytes, max_bytes=max_bytes)
    try:
        records = import_paths(
            paths, limits, skipped=lambda why: click.echo(f"Warning: {why}", err=True)
        )
    except TrajectoryImportError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        write_run(out, records)
    except OSError as exc:
        raise click.ClickException(f"could not write {out}: {exc}") from exc
    if not quiet:
        print_summary(summarise(records), Console())
    passed = sum(r.passed for r in records)
    click.echo(json.dumps({"out": str(out), "iterations": len(records), "passed": passed}))

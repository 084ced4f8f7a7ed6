"""``profile import`` and ``profile run --resume`` on input that is long, large, not a
file at all, or hostile.

- The work grows with the transcript: the lines of the profiler's own code run for a
  generated Claude Code transcript (tests/profiler/long_sessions.py) of 2N lines are
  at most about twice those for N (they were four times: every model step counted the
  turn boundaries before it again). A count of the work, never a time.
- What is read is held a line at a time: tracemalloc's peak while importing a 20 MB
  transcript of lines the import keeps nothing of, and while resuming a 20 MB
  ``traces.jsonl`` of one iteration written again and again, stays a fraction of the
  file (it was a multiple: the whole text, its lines and their objects).
- A line over ``--max-line-bytes`` is an error naming the file and the line, and is not
  read whole; no more than ``--max-bytes`` is read in all. The report draws the first
  and last of a long session's steps, not all.
- Only regular files: a FIFO named ``pipe.jsonl`` and symlinks to ``/dev/zero`` are
  skipped with a warning (the import used to wait on the FIFO for ever, and read
  ``/dev/zero`` until memory ran out: a subprocess with a bound on its time and its
  address space here).
- Each hostile value is an error naming the file and the line, with no traceback and no
  run directory written (nor, on ``--resume``, anything changed in it).
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from click.testing import CliRunner

from llmbridge.cli import cli
from llmbridge.profiler.records.input_files import (
    MAX_DEPTH,
    InputLimits,
    InputValueError,
    parse_json,
)
from llmbridge.profiler.records.records import summarise
from llmbridge.profiler.report.html_report import TIMELINE_ROWS, html_report, timeline_steps
from llmbridge.profiler.run import importing
from llmbridge.profiler.run.importing import TrajectoryImportError, import_paths, write_run
from llmbridge.profiler.run.run_dir import RunDirError, load_finished
from tests.profiler.long_sessions import write_claude_code_session
from tests.waiting import HANG_S, scaled

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "transcripts"
CLAUDE = FIXTURES / "claude_code_session.jsonl"
PROFILER = str(Path(importing.__file__).parents[1])
"""src/llmbridge/profiler/, every layer of it (``importing`` sits in run/)."""
REPO = Path(__file__).resolve().parents[2]


def _work(run: Callable[[], object]) -> int:
    """The lines of the profiler's own code that ``run`` executes."""
    executed = 0

    def lines(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal executed
        if event == "line":
            executed += 1
        return lines

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        return lines if frame.f_code.co_filename.startswith(PROFILER) else None

    before = sys.gettrace()
    sys.settrace(calls)
    try:
        run()
    finally:
        sys.settrace(before)
    return executed


def test_the_work_of_an_import_grows_with_the_transcript_line_by_line(tmp_path: Path) -> None:
    work = {}
    for count in (1500, 3000):
        path = write_claude_code_session(tmp_path / f"session-{count}.jsonl", count)

        def run(path: Path = path, count: int = count) -> None:
            write_run(tmp_path / f"out-{count}", import_paths([path]))

        work[count] = _work(run)
    # Linear work doubles (a little less: some of it is the same for any length); the
    # quadratic count of boundaries made it 3.4 times here.
    assert work[3000] < 2.2 * work[1500], work


def test_a_long_sessions_timeline_draws_its_first_and_last_steps(tmp_path: Path) -> None:
    """Its rows were one per event: 100,000 transcript lines made a 90 MB page."""
    path = write_claude_code_session(tmp_path / "session.jsonl", 3000)
    (record,) = import_paths([path])
    page = html_report(summarise([record]), [record])
    rows = len(timeline_steps(record.trace or {}))
    assert rows > TIMELINE_ROWS
    assert page.count('<details class="tl-row"') == TIMELINE_ROWS
    assert f"{rows - TIMELINE_ROWS:,} of the {rows:,} steps are not drawn here" in page
    # The last step is drawn: where a session fails or answers.
    assert "Looking at step 983: running the tests." in page


def _peak(run: Callable[[], object]) -> int:
    """The most memory Python held at once while ``run`` ran, above what it held before."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        run()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_a_transcript_is_read_a_line_at_a_time(tmp_path: Path) -> None:
    """1,000 lines, a quarter of them 50 KB attachments the import keeps nothing of."""
    path = write_claude_code_session(tmp_path / "session.jsonl", 1000, filler=50_000)
    size = path.stat().st_size
    assert size > 12_000_000
    records: list[Any] = []
    peak = _peak(lambda: records.extend(import_paths([path])))
    (record,) = records
    assert record.inputs[0].startswith("Task 0: ") and len(record.prompts) == len(record.inputs)
    assert peak < size / 4, (peak, size)


def _resumable(iteration: int = 0) -> dict[str, Any]:
    """A finished iteration of the scenarios file ``_scenarios`` writes, as its line of
    ``traces.jsonl``: the Claude Code fixture's record, renamed to be that iteration."""
    (record,) = import_paths([CLAUDE])
    data = record.to_json()
    data.update(provider="agent", scenario="task-0", model="scripted", iteration=iteration)
    return json.loads(json.dumps(data))  # tuples as lists, as the file has them


def test_a_resumed_run_is_read_a_line_at_a_time(tmp_path: Path) -> None:
    """The same iteration 300 times, each time with 60 KB of output: one is kept."""
    record = _resumable()
    traces = tmp_path / "traces.jsonl"
    with traces.open("w") as out:
        for n in range(300):
            record["prompts"][0]["text"] = f"attempt {n} " + "x" * 60_000
            out.write(json.dumps(record) + "\n")
    size = traces.stat().st_size
    finished: dict[Any, Any] = {}
    peak = _peak(lambda: finished.update(load_finished(traces)))
    (kept,) = finished.values()
    assert kept.prompts[0].text.startswith("attempt 299 ")
    assert peak < size / 4, (peak, size)
    assert len(traces.read_text().splitlines()) == 1


def _with_line(path: Path, number: int, line: str) -> Path:
    """The Claude Code fixture with ``line`` put in as line ``number``."""
    lines = CLAUDE.read_text().splitlines()
    lines.insert(number - 1, line)
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_line_over_the_limit_is_an_error_naming_it_and_is_not_read_whole(
    tmp_path: Path,
) -> None:
    long = json.dumps({"type": "attachment", "sessionId": "s", "text": "x" * (8 << 20)})
    path = _with_line(tmp_path / "long.jsonl", 5, long)
    limits = InputLimits(max_line_bytes=1 << 20)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            import_paths([path], limits)
        except TrajectoryImportError as exc:
            failure.append(exc)

    peak = _peak(run)
    (error,) = failure
    assert str(error) == (
        f"{path} line 5: longer than the 1,048,576 bytes a line may have (--max-line-bytes)"
    )
    assert peak < 3 << 20, peak  # the 8 MiB line was never held
    out = tmp_path / "out"
    result = CliRunner().invoke(
        cli, ["profile", "import", str(path), "--out", str(out), "--max-line-bytes", "1MiB"]
    )
    assert result.exit_code == 1
    assert f"{path} line 5: longer than the 1,048,576 bytes" in result.output
    assert "Traceback" not in result.output and not out.exists()
    # Within the default limit (32 MiB) the same file imports.
    assert len(import_paths([path])) == 1


def test_a_resumed_line_over_the_limit_is_an_error_naming_it(tmp_path: Path) -> None:
    traces = tmp_path / "traces.jsonl"
    record = _resumable()
    traces.write_text(json.dumps(record) + "\n" + json.dumps({**record, "x": "y" * 5000}) + "\n")
    with pytest.raises(
        RunDirError, match=r"traces.jsonl line 2 is not an iteration record: longer"
    ):
        load_finished(traces, InputLimits(max_line_bytes=4096))


def test_no_more_than_max_bytes_is_read_in_all(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    for name in ("a.jsonl", "b.jsonl"):
        (folder / name).write_bytes(CLAUDE.read_bytes())
    size = CLAUDE.stat().st_size
    assert len(import_paths([folder], InputLimits(max_bytes=2 * size))) == 2
    with pytest.raises(TrajectoryImportError) as caught:
        import_paths([folder], InputLimits(max_bytes=size + 100))
    message = str(caught.value)
    assert message.startswith(f"{folder / 'b.jsonl'} line ")
    assert f"the import would read more than {size + 100:,} bytes in all (--max-bytes)" in message


def _bounded_memory() -> None:
    """A child that reads /dev/zero dies at 2 GiB of address space, not the machine's."""
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def _import_in_a_child(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llmbridge", "profile", "import", *arguments],
        capture_output=True,
        text=True,
        timeout=scaled(HANG_S),
        preexec_fn=_bounded_memory,
        cwd=REPO,
        check=False,
    )


def test_fifos_and_devices_are_skipped_with_a_warning(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "session.jsonl").write_bytes(CLAUDE.read_bytes())
    os.mkfifo(folder / "pipe.jsonl")
    (folder / "zero.jsonl").symlink_to("/dev/zero")
    (folder / "zero.json").symlink_to("/dev/zero")
    out = tmp_path / "out"
    done = _import_in_a_child(str(folder), "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["iterations"] == 1
    assert f"Warning: {folder / 'pipe.jsonl'}: a named pipe (FIFO), not a regular file" in (
        done.stderr
    )
    for name in ("zero.jsonl", "zero.json"):
        assert (
            f"Warning: {folder / name}: a character device (a symbolic link to /dev/zero), "
            "not a regular file: skipped"
        ) in done.stderr
    # Named on its own, a FIFO is skipped too: nothing is left to import.
    alone = _import_in_a_child(str(folder / "pipe.jsonl"), "--out", str(tmp_path / "o2"))
    assert alone.returncode == 1
    assert "a named pipe (FIFO), not a regular file: skipped" in alone.stderr
    assert "Error: no trajectory files found" in alone.stderr
    assert "Traceback" not in alone.stderr + done.stderr


DEEP = "[" * 200_000 + "]" * 200_000


def _claude_code(tmp_path: Path, change: Callable[[dict[str, Any]], str | None]) -> Path:
    """The Claude Code fixture, its first assistant line (``_ASSISTANT``) changed by
    ``change``, which may return the line's new text outright."""
    lines = CLAUDE.read_text().splitlines()
    line = json.loads(lines[_ASSISTANT - 1])
    lines[_ASSISTANT - 1] = change(line) or json.dumps(line)
    path = tmp_path / "hostile.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


_ASSISTANT = next(
    n for n, line in enumerate(CLAUDE.read_text().splitlines(), 1) if '"type":"assistant"' in line
)


def _foreign_atif(tmp_path: Path, change: Callable[[dict[str, Any]], None], raw: str = "") -> Path:
    """A trajectory another tool wrote (with ``indent=1``, so its values are on lines of
    their own), with ``change`` made and ``"RAW"`` replaced by ``raw`` as it is."""
    trajectory: dict[str, Any] = {
        "schema_version": "ATIF-v1.4",
        "session_id": "other-run",
        "agent": {"name": "some-agent", "version": "1.0", "model_name": "m"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "Fix the build."},
            {
                "step_id": 2,
                "source": "agent",
                "message": "Done.",
                "timestamp": "2026-01-01T00:00:00Z",
                "metrics": {"prompt_tokens": 120, "completion_tokens": 30, "cached_tokens": 100},
                "extra": {"llmbridge": {"duration_ms": 12.0}},
            },
        ],
    }
    change(trajectory)
    path = tmp_path / "hostile.json"
    text = json.dumps(trajectory, indent=1)
    _RAW_LINE[path] = next((n for n, line in enumerate(text.splitlines(), 1) if '"RAW"' in line), 0)
    path.write_text(text.replace('"RAW"', raw))
    return path


_RAW_LINE: dict[Path, int] = {}
"""The line of each ``_foreign_atif`` file where ``raw`` went."""


def _in_llmbridge_extra(**values: Any) -> Callable[[dict[str, Any]], None]:
    return lambda t: t["steps"][1]["extra"]["llmbridge"].update(values)


HOSTILE_IMPORTS: dict[str, tuple[Callable[[Path], Path], str]] = {
    # {line}: where the value is (the assistant line, or where "RAW" was)
    "a timestamp in year 9999": (
        lambda d: _claude_code(d, lambda line: line.update(timestamp="9999-12-31T23:00:00-05:00")),
        " line {line}: the time '9999-12-31T23:00:00-05:00' is not between 1970 and the year 3000",
    ),
    "a NaN duration_ms": (
        lambda d: _foreign_atif(d, _in_llmbridge_extra(duration_ms="RAW"), "NaN"),
        " line {line}: NaN is not a finite number",
    ),
    "a token count of 10**400": (
        lambda d: _foreign_atif(
            d, lambda t: t["steps"][1]["metrics"].update(prompt_tokens="RAW"), "1" + "0" * 400
        ),
        " line {line}: 10000000000000000000... (401 digits) is out of range (beyond 64 bits)",
    ),
    "a usage count of 10**400 in a transcript": (
        lambda d: _claude_code(
            d,
            lambda line: json.dumps(line).replace(
                '"output_tokens":', '"output_tokens": 1' + "0" * 400 + ', "x":', 1
            ),
        ),
        " line {line}: 10000000000000000000... (401 digits) is out of range (beyond 64 bits)",
    ),
    "200k-deep JSON in a transcript": (
        lambda d: _claude_code(
            d, lambda line: json.dumps(line).replace('"content":', f'"deep": {DEEP}, "content":', 1)
        ),
        f" line {{line}}: nested deeper than {MAX_DEPTH} levels",
    ),
    "200k-deep JSON in a trajectory": (
        lambda d: _foreign_atif(
            d,
            lambda t: t["steps"][1].update(
                tool_calls=[{"tool_call_id": "a", "function_name": "f", "arguments": {"x": "RAW"}}]
            ),
            DEEP,
        ),
        f" line {{line}}: nested deeper than {MAX_DEPTH} levels",
    ),
    "a timestamp in year 9999 in a trajectory": (
        lambda d: _foreign_atif(
            d, lambda t: t["steps"][1].update(timestamp="9999-12-31T23:59:59Z")
        ),
        ": at steps/1/timestamp: the time '9999-12-31T23:59:59Z' is not between 1970",
    ),
    "a layout whose lengths are not numbers": (
        lambda d: _foreign_atif(d, _in_llmbridge_extra(layout=[["text", "x"]])),
        ": not a trajectory llmbridge can read: a field of an unexpected shape",
    ),
}


@pytest.mark.parametrize("case", HOSTILE_IMPORTS)
def test_a_hostile_value_is_an_error_naming_the_file_and_line(tmp_path: Path, case: str) -> None:
    make, said = HOSTILE_IMPORTS[case]
    path = make(tmp_path)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["profile", "import", str(path), "--out", str(out)])
    assert result.exit_code == 1, result.output
    line = _RAW_LINE.get(path) or _ASSISTANT
    assert f"Error: {path}{said.format(line=line)}" in result.output
    assert "Traceback" not in result.output
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_a_failed_import_leaves_an_earlier_run_directory_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert (
        CliRunner().invoke(cli, ["profile", "import", str(CLAUDE), "--out", str(out)]).exit_code
        == 0
    )
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    make, _ = HOSTILE_IMPORTS["a NaN duration_ms"]
    result = CliRunner().invoke(cli, ["profile", "import", str(make(tmp_path)), "--out", str(out)])
    assert result.exit_code == 1
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def _scenarios(tmp_path: Path) -> Path:
    spec = {
        "models": ["scripted"],
        "iterations": 2,
        "scenarios": [{"id": "task-0", "prompt": "Do task 0."}],
    }
    path = tmp_path / "scenarios.yaml"
    path.write_text(json.dumps(spec))
    return path


def _trace_event(key: str, value: str) -> Callable[[dict[str, Any]], str]:
    def change(record: dict[str, Any]) -> str:
        record["trace"]["events"][0][key] = "RAW"
        return json.dumps(record).replace('"RAW"', value)

    return change


HOSTILE_RECORDS: dict[str, tuple[Callable[[dict[str, Any]], str | bytes], str]] = {
    '"iteration": 1e400': (
        lambda r: json.dumps({**r, "iteration": "RAW"}).replace('"RAW"', "1e400"),
        "1e400 is not a finite number",
    ),
    "invalid UTF-8": (
        lambda r: (
            json.dumps(r, ensure_ascii=False).encode().replace(b"Write hi", b"Write \xff hi", 1)
        ),
        "not UTF-8 text (byte ",
    ),
    "trace.events a string": (
        lambda r: json.dumps({**r, "trace": {**r["trace"], "events": "abc"}}),
        "trace.events: 'abc' is not a list",
    ),
    "a NaN duration_ms": (_trace_event("duration_ms", "NaN"), "NaN is not a finite number"),
    "a token count of 10**400": (
        lambda r: re.sub(r'"input": \d+', '"input": 1' + "0" * 400, json.dumps(r), count=1),
        "(401 digits) is out of range (beyond 64 bits)",
    ),
    "200k-deep JSON": (
        lambda r: json.dumps({**r, "spans": ["RAW"]}).replace('"RAW"', DEEP),
        f"nested deeper than {MAX_DEPTH} levels",
    ),
    "a timestamp in year 9999": (
        _trace_event("timestamp_ms", "253402300799999.0"),
        "trace.events[0].timestamp_ms: the time 253402300799999.0 ms is not between 1970",
    ),
    "a turn that is not a number": (
        _trace_event("turn", '"second"'),
        "trace.events[0].turn: 'second' is not an integer",
    ),
}


@pytest.mark.parametrize("case", HOSTILE_RECORDS)
def test_a_hostile_record_stops_the_resume_naming_its_line(tmp_path: Path, case: str) -> None:
    make, said = HOSTILE_RECORDS[case]
    run = tmp_path / "run"
    run.mkdir()
    good, bad = _resumable(0), make(_resumable(1))
    content = json.dumps(good).encode() + b"\n" + (bad if isinstance(bad, bytes) else bad.encode())
    (run / "traces.jsonl").write_bytes(content + b"\n")
    result = CliRunner().invoke(
        cli,
        [
            "profile", "run", str(_scenarios(tmp_path)), "--provider", "agent",
            "--gateway-url", "http://127.0.0.1:9", "--resume", str(run), "--quiet",
        ],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert f"{run / 'traces.jsonl'} line 2 is not an iteration record: " in result.output
    assert said in result.output
    assert "Traceback" not in result.output
    # Nothing written: the run directory is as it was.
    assert sorted(p.name for p in run.iterdir()) == ["traces.jsonl"]
    assert (run / "traces.jsonl").read_bytes() == content + b"\n"


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ('{"a": NaN}', "NaN is not a finite number"),
        ('{"a": -Infinity}', "-Infinity is not a finite number"),
        ('{"a": 1e400}', "1e400 is not a finite number"),
        ('{"a": 18446744073709551616}', "18446744073709551616 is out of range (beyond 64 bits)"),
        ('{"a": -9223372036854775809}', "-9223372036854775809 is out of range (beyond 64 bits)"),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH} levels"),
        (DEEP, f"nested deeper than {MAX_DEPTH} levels"),
    ],
)
def test_json_no_report_can_use_is_refused(text: str, refused: str) -> None:
    with pytest.raises(InputValueError) as caught:
        parse_json(text)
    assert caught.value.reason == refused


def test_json_the_reports_can_use_is_read_as_json_reads_it() -> None:
    texts = [
        '{"a": 18446744073709551615, "b": -9223372036854775808, "c": 1e308, "d": "NaN [["}',
        "[" * MAX_DEPTH + "]" * MAX_DEPTH,
        '{"text": "' + "[" * 1000 + '"}',
    ]
    for text in texts:
        assert parse_json(text) == json.loads(text)

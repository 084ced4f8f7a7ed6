"""``profile import`` of the sessions people actually had: the
transcript Claude Code keeps, the rollout Codex keeps and Gemini CLI's session file, as
the pinned CLIs wrote them
(tests/profiler/capture_transcripts.py: one session each, a shell call that writes a
file, then the session resumed for a second prompt), reported as a profiled run is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
from click.testing import CliRunner

from llmbridge.cli import cli
from llmbridge.profiler.records.atif import ATIF_SCHEMA
from llmbridge.profiler.records.transcripts import (
    claude_code_to_atif,
    codex_rollout_to_atif,
    gemini_session_to_atif,
)
from llmbridge.profiler.run.importing import import_paths

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "transcripts"
CLAUDE = FIXTURES / "claude_code_session.jsonl"
CODEX = FIXTURES / "codex_rollout.jsonl"
GEMINI = FIXTURES / "gemini_cli_session.jsonl"
PROMPTS = ["Write hi to out.txt", "Say it again"]


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _valid(trajectory: dict[str, Any]) -> None:
    validator = jsonschema.Draft202012Validator(ATIF_SCHEMA)
    assert [e.message for e in validator.iter_errors(trajectory)] == []


def test_a_claude_code_transcript() -> None:
    _valid(claude_code_to_atif(CLAUDE.read_text().splitlines()))
    (record,) = import_paths([CLAUDE])
    assert (record.provider, record.model, record.passed) == ("claude-code", "scripted", True)
    assert record.inputs == PROMPTS
    assert [p.text for p in record.prompts] == ["Wrote out.txt.", "Hi again."]
    (call,) = record.prompts[0].metrics.tool_calls
    assert (call.name, call.status) == ("Bash", "completed")
    # Every API message's usage once (the transcript repeats it on each content block).
    usages = {
        line["message"]["id"]: line["message"]["usage"]
        for line in _lines(CLAUDE)
        if line.get("type") == "assistant"
    }
    assert sum(p.metrics.tokens.input for p in record.prompts) == sum(
        u["input_tokens"] for u in usages.values()
    )
    assert sum(p.metrics.tokens.output for p in record.prompts) == sum(
        u["output_tokens"] for u in usages.values()
    )
    assert record.prompts[0].metrics.timing.total_ms > 0
    assert record.findings == []


def test_a_codex_rollout() -> None:
    _valid(codex_rollout_to_atif(CODEX.read_text().splitlines()))
    (record,) = import_paths([CODEX])
    assert (record.provider, record.passed) == ("codex", True)
    # The context Codex injects as user messages is not a prompt.
    assert record.inputs == PROMPTS
    assert [p.text for p in record.prompts] == ["Wrote out.txt.", "Hi again."]
    (call,) = record.prompts[0].metrics.tool_calls
    assert (call.name, call.status) == ("exec_command", "completed")
    events = record.trace["events"] if record.trace else []
    (arguments,) = [e["arguments"] for e in events if e["type"] == "tool_call"]
    assert arguments == {"cmd": "echo hi > out.txt"}
    # The thread's own running total, from its last token_count event.
    (*_, last) = [
        line["payload"]["info"]["total_token_usage"]
        for line in _lines(CODEX)
        if line["type"] == "event_msg" and line["payload"].get("type") == "token_count"
    ]
    tokens = [p.metrics.tokens for p in record.prompts]
    assert sum(t.input + t.cache_read for t in tokens) == last["input_tokens"]
    assert sum(t.output + t.reasoning for t in tokens) == last["output_tokens"]


def test_a_gemini_cli_session() -> None:
    _valid(gemini_session_to_atif(GEMINI.read_text().splitlines()))
    (record,) = import_paths([GEMINI])
    assert (record.provider, record.model, record.passed) == ("gemini-cli", "scripted", True)
    # Not the <session_context> message Gemini CLI adds; the resumed session's restated
    # history is not counted twice.
    assert record.inputs == PROMPTS
    assert [p.text for p in record.prompts] == ["Wrote out.txt.", "Hi again."]
    (call,) = record.prompts[0].metrics.tool_calls
    assert (call.name, call.status) == ("run_shell_command", "completed")
    # Each model message's tokens once, though the file writes a message again.
    latest = {line["id"]: line["tokens"] for line in _lines(GEMINI) if line.get("type") == "gemini"}
    assert sum(p.metrics.tokens.input for p in record.prompts) == sum(
        t["input"] - t["cached"] for t in latest.values()
    )


def test_a_failed_call_in_a_transcript_is_a_tool_error_and_a_finding(tmp_path: Path) -> None:
    """The same transcript, its Bash result marked failed as Claude Code marks one."""
    lines = []
    for line in _lines(CLAUDE):
        content = (line.get("message") or {}).get("content")
        if isinstance(content, list):
            for block in content:
                if block.get("type") == "tool_result":
                    block.update(is_error=True, content="Exit code 1\nno such file")
        lines.append(json.dumps(line))
    failed = tmp_path / "failed.jsonl"
    failed.write_text("\n".join(lines) + "\n")
    (record,) = import_paths([failed])
    (call,) = record.prompts[0].metrics.tool_calls
    assert call.status == "error"
    assert [f["kind"] for f in record.findings] == ["ends_failing"]
    assert not record.passed


def test_the_cli_imports_a_folder_of_sessions_as_a_run(tmp_path: Path) -> None:
    out = tmp_path / "imported"
    result = CliRunner().invoke(cli, ["profile", "import", str(FIXTURES), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.strip().splitlines()[-1])["iterations"] == 3
    records = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    assert sorted(r["provider"] for r in records) == ["claude-code", "codex", "gemini-cli"]
    assert "claude-code" in (out / "report.html").read_text()
    assert len(list((out / "trajectories").glob("*.json"))) == 3


def test_a_jsonl_file_of_another_kind_is_named(tmp_path: Path) -> None:
    other = tmp_path / "events.jsonl"
    other.write_text('{"hello": "world"}\n')
    result = CliRunner().invoke(cli, ["profile", "import", str(other)])
    assert result.exit_code == 1
    assert "not a Claude Code transcript, a Codex rollout, a Gemini CLI session" in result.output
    assert "Traceback" not in result.output

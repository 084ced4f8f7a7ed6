"""Long Claude Code transcripts made to measure, in the shape Claude Code 2.1.330 writes
(tests/profiler/fixtures/transcripts/claude_code_session.jsonl): a prompt, then model
steps of a text block and a ``tool_use`` block (two lines of one API message, its
``usage`` on each), each answered by a ``tool_result`` line, a new prompt every
``STEPS_PER_PROMPT`` steps; ``filler`` adds, every few lines, an ``attachment`` line of that
many bytes (Claude Code writes its system prompt and reminders as such lines), which the
import reads and keeps nothing of.

``profile import``'s tests use it (and a benchmark of the import's time once did:
docs/PROFILER.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

STEPS_PER_PROMPT = 20
SESSION = "5a7c2f0e-0d1b-4c8e-9f33-1e2d3c4b5a69"
_START = datetime(2026, 11, 28, 11, 37, 10, tzinfo=UTC)


def _stamp(n: int) -> str:
    return (_START + timedelta(milliseconds=250 * n)).isoformat().replace("+00:00", "Z")


def _line(n: int, kind: str, message: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "parentUuid": None,
        "isSidechain": False,
        "type": kind,
        "message": message,
        "uuid": f"u-{n}",
        "timestamp": _stamp(n),
        "sessionId": SESSION,
        "version": "2.1.330",
        "cwd": "/work/project",
        **more,
    }


def claude_code_lines(count: int, filler: int = 0) -> Iterator[dict[str, Any]]:
    """``count`` transcript lines (module docstring)."""
    made = 0  # content lines so far: a model step is three (text, tool_use, tool_result)
    prompted = -1
    for n in range(count):
        step, phase = divmod(made, 3)
        if phase == 0 and step % STEPS_PER_PROMPT == 0 and prompted < step:
            prompted = step
            text = f"Task {step // STEPS_PER_PROMPT}: fix the failing test in module_{step}.py"
            yield _line(n, "user", {"role": "user", "content": text})
            continue
        if filler and n % 4 == 0:
            yield {
                "type": "attachment",
                "attachment": {"type": "reminder", "text": "x" * filler},
                "timestamp": _stamp(n),
                "sessionId": SESSION,
            }
            continue
        made += 1
        if phase == 2:
            result = {
                "type": "tool_result",
                "tool_use_id": f"toolu_{step:08d}",
                "content": f"{step} passed in 0.{step % 10}s",
                "is_error": False,
            }
            yield _line(n, "user", {"role": "user", "content": [result]})
            continue
        block: dict[str, Any] = (
            {"type": "text", "text": f"Looking at step {step}: running the tests."}
            if phase == 0
            else {
                "type": "tool_use",
                "id": f"toolu_{step:08d}",
                "name": "Bash",
                "input": {"command": f"pytest -q tests/test_{step}.py"},
            }
        )
        usage = {
            "input_tokens": 40 + step % 7,
            "output_tokens": 12,
            "cache_read_input_tokens": 1000 + step,
            "cache_creation_input_tokens": 0,
        }
        message = {
            "id": f"msg_{step:08d}",
            "model": "claude-sonnet",
            "role": "assistant",
            "content": [block],
            "usage": usage,
        }
        yield _line(n, "assistant", message)


def write_claude_code_session(path: Path, count: int, filler: int = 0) -> Path:
    """``claude_code_lines(count, filler)`` written to ``path``, one JSON object a line."""
    with path.open("w", encoding="utf-8") as out:
        for line in claude_code_lines(count, filler):
            out.write(json.dumps(line) + "\n")
    return path

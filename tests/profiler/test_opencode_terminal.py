"""Terminal events (seed 004's ``isTerminalEvent``): what ends a prompt's turn.

``session.idle`` / ``session.status`` idle, ``session.error`` and a ``step-finish``
of this prompt's reply with a reason that ends OpenCode's loop. The event sequences
are OpenCode's own, captured from the pinned server by
``tests/profiler/capture_events.py``, replayed through ``TurnWatch``; synthetic ones
cover what a capture cannot produce on demand; and the real server shows a
``session.error`` recorded as an error with its message, not as a timeout.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.cli import cli
from llmbridge.core.errors import InvalidRequestError
from llmbridge.profiler.providers.opencode import TurnWatch
from tests.conftest import RunningServer, running_gateway
from tests.e2e.opencode import opencode_binary

EVENTS = Path(__file__).resolve().parent.parent / "fixtures" / "opencode-events"


def _fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EVENTS / f"{name}.json").read_text())
    return data


def _replay(events: list[dict[str, Any]]) -> tuple[TurnWatch, str | None, int]:
    """The watch, the first verdict and the index of the event that gave it."""
    watch = TurnWatch(set())
    for index, event in enumerate(events):
        if verdict := watch.observe(event):
            return watch, verdict, index
    return watch, None, len(events)


def _is_idle(event: dict[str, Any]) -> bool:
    status = (event.get("properties") or {}).get("status") or {}
    return event["type"] == "session.idle" or (
        event["type"] == "session.status" and status.get("type") == "idle"
    )


@pytest.mark.parametrize("name", ["text_reply", "tool_then_text"])
def test_a_step_finish_stop_ends_the_turn_before_idle(name: str) -> None:
    events = _fixture(name)["events"]
    watch, verdict, at = _replay(events)
    assert verdict == "step-finish"
    part = events[at]["properties"]["part"]
    assert part["type"] == "step-finish" and part["reason"] == "stop"
    assert part["messageID"] in watch.steps and watch.user_id is not None
    # The idle OpenCode sends afterwards is what ended the turn before.
    assert any(_is_idle(e) for e in events[at + 1 :])
    assert watch.error is None


def test_a_tool_step_does_not_end_the_turn() -> None:
    events = _fixture("tool_then_text")["events"]
    finishes = [
        (i, e["properties"]["part"]["reason"])
        for i, e in enumerate(events)
        if e["type"] == "message.part.updated" and e["properties"]["part"]["type"] == "step-finish"
    ]
    assert [reason for _, reason in finishes] == ["tool-calls", "stop"]
    _, verdict, at = _replay(events)
    assert verdict == "step-finish" and at == finishes[1][0]


def test_a_model_error_ends_the_turn_at_session_error() -> None:
    fixture = _fixture("model_error")
    watch, verdict, at = _replay(fixture["events"])
    assert verdict == "error" and fixture["events"][at]["type"] == "session.error"
    assert watch.error == fixture["error"] == "APIError: the scripted model refuses"


def test_an_unknown_agent_errors_without_any_idle() -> None:
    """The case that was recorded as a timeout: OpenCode never goes idle."""
    fixture = _fixture("unknown_agent")
    events = fixture["events"]
    watch, verdict, _ = _replay(events)
    assert verdict == "error" and watch.user_id is None
    assert watch.error is not None and 'Agent not found: "no-such-agent"' in watch.error
    assert not any(_is_idle(e) for e in events)
    assert fixture["completion_reason"] == "error"


def _message(role: str, mid: str, parent: str | None = None) -> dict[str, Any]:
    info = {"role": role, "id": mid, "sessionID": "s", "parentID": parent}
    return {"type": "message.updated", "properties": {"info": info}}


def _finish(mid: str, reason: str) -> dict[str, Any]:
    part = {"type": "step-finish", "messageID": mid, "sessionID": "s", "reason": reason}
    return {"type": "message.part.updated", "properties": {"part": part}}


def test_step_finishes_of_an_earlier_prompt_are_not_this_turns_end() -> None:
    watch = TurnWatch({"msg_u1"})
    # OpenCode re-sends the earlier prompt's messages; its reply's finish is not ours.
    assert watch.observe(_message("user", "msg_u1")) is None
    assert watch.observe(_message("assistant", "msg_a1", "msg_u1")) is None
    assert watch.observe(_finish("msg_a1", "stop")) is None
    assert watch.observe(_message("user", "msg_u2")) is None
    assert watch.user_id == "msg_u2" and watch.seen_users == {"msg_u1", "msg_u2"}
    assert watch.observe(_message("assistant", "msg_a2", "msg_u2")) is None
    assert watch.observe(_finish("msg_a2", "tool-calls")) is None
    assert watch.observe(_finish("msg_a2", "unknown")) is None
    assert watch.observe(_finish("msg_a2", "length")) == "step-finish"


def test_idle_status_and_the_first_error_message() -> None:
    watch = TurnWatch(set())
    busy = {"type": "session.status", "properties": {"status": {"type": "busy"}}}
    idle = {"type": "session.status", "properties": {"status": {"type": "idle"}}}
    assert watch.observe(busy) is None
    assert watch.observe(idle) == "idle"
    first = {"name": "APIError", "data": {"message": "first"}}
    for error in (first, {"name": "UnknownError", "data": {"message": "second"}}):
        assert watch.observe({"type": "session.error", "properties": {"error": error}}) == "error"
    assert watch.error == "APIError: first"


# -- the real server ---------------------------------------------------------------


@pytest.fixture(scope="module")
def model() -> ScriptedBackend:
    return ScriptedBackend("model", models=("scripted",))


@pytest.fixture(scope="module")
def gateway(model: ScriptedBackend) -> Iterator[RunningServer]:
    with running_gateway({"model": model}, models=[{"name": "scripted", "backend": "model"}]) as gw:
        yield gw


def test_session_errors_are_recorded_as_errors_not_timeouts(
    gateway: RunningServer, model: ScriptedBackend, tmp_path: Path
) -> None:
    model.queue.clear()
    model.enqueue(Script(fail_before=InvalidRequestError("the scripted model refuses")))
    spec = {
        "models": ["gw/scripted"],
        "modes": ["default", {"name": "missing", "agent": "no-such-agent"}],
        "timeout": 60,
        "opencode": {"endpoint": {"url": gateway.url + "/v1"}, "permission": "deny"},
        "scenarios": [{"id": "fails", "prompt": "Go.", "checks": [{"completes": False}]}],
    }
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(spec))
    out, binary = tmp_path / "out", opencode_binary()
    result = CliRunner().invoke(
        cli,
        ["profile", "run", str(path), "--out", str(out), "--quiet", "--opencode-command", binary],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    records = {
        r["mode"]: r for r in map(json.loads, (out / "traces.jsonl").read_text().splitlines())
    }
    refused = records["default"]["prompts"][0]
    assert refused["completion_reason"] == "error"
    assert refused["error"] == "APIError: the scripted model refuses"
    missing = records["missing"]
    (prompt,) = missing["prompts"]
    assert prompt["completion_reason"] == "error"
    assert 'Agent not found: "no-such-agent"' in prompt["error"]
    assert missing["error"] == prompt["error"] and not missing["passed"]
    assert missing["checks"] == [
        {
            "name": "completes: False",
            "passed": True,
            "detail": "completion: ['error']",
            "output": None,
        }
    ]

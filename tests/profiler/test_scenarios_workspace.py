"""Scenario workspaces: made fresh per iteration, set up, checked after the run.

The scenarios file's rules (paths stay inside the workspace), the workspace's
making and its checks run on real files and real ``sh`` commands; then the real
OpenCode server (pinned binary, scripted model through the gateway) works in the
workspace with its bash tool and the checks judge what it left, and the agent
service (no filesystem tools) runs the same kind of scenario.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.profiler.records.scenarios import Check, ScenarioFileError, Workspace, load_scenarios
from llmbridge.profiler.run.runner import run_scenarios
from llmbridge.profiler.run.setup import configs_for, make_provider
from llmbridge.profiler.run.workspace import (
    OUTPUT_TAIL,
    WorkspaceError,
    evaluate_all,
    prepare_workspace,
    remove_workspace,
    run_command,
)
from tests.conftest import RunningServer, running_gateway
from tests.e2e.opencode import opencode_binary


def _write(tmp_path: Path, spec: dict[str, Any]) -> Path:
    path = tmp_path / "scenarios.yaml"
    path.write_text(json.dumps(spec))  # JSON is YAML
    return path


def _resolved(path: str | Path) -> Path:
    return Path(path).resolve()


def _is_dir(path: str) -> bool:
    return Path(path).is_dir()


def _scenario(**fields: Any) -> dict[str, Any]:
    return {"models": ["m"], "scenarios": [{"id": "s", "prompt": "p", **fields}]}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"workspace": {"files": {"../x.py": ""}}}, r"scenarios\.0\.workspace\.files.*leaves"),
        ({"workspace": {"files": {"/etc/x": ""}}}, r"scenarios\.0\.workspace\.files.*absolute"),
        ({"workspace": {"files": {"a/../../x": ""}}}, "leaves the workspace"),
        ({"workspace": {"files": {".": ""}}}, "names the workspace itself"),
        ({"workspace": {"files": {"x": {"from": "nowhere.txt"}}}}, "'from: nowhere.txt' does not"),
        ({"workspace": {"setup_timeout": 0}}, r"setup_timeout: Input should be greater than 0"),
        ({"checks": [{"file_exists": "../secret"}]}, r"checks\.0\.file_exists.*leaves"),
        (
            {"checks": [{"file_contains": {"path": "/tmp/x", "text": "a"}}]},
            r"checks\.0\.file_contains\.path.*absolute",
        ),
        ({"checks": [{"file_matches": {"path": "a", "regex": "("}}]}, "invalid regex"),
        ({"checks": [{"command": {"run": "true", "timeout": -1}}]}, r"command\.timeout"),
        ({"checks": [{"command": {"run": "true", "shell": "zsh"}}]}, "Extra inputs"),
    ],
)
def test_workspace_mistakes_are_scenario_file_errors(
    tmp_path: Path, fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(ScenarioFileError, match=message):
        load_scenarios(_write(tmp_path, _scenario(**fields)))


def test_a_command_check_can_be_a_bare_command_line(tmp_path: Path) -> None:
    spec = load_scenarios(_write(tmp_path, _scenario(checks=[{"command": "pytest -q"}])))
    (check,) = spec.scenarios[0].checks
    assert check.command is not None and (check.command.run, check.command.timeout) == (
        "pytest -q",
        30.0,
    )
    assert check.name == "command: pytest -q" and check.on_workspace
    assert spec.scenarios[0].needs_workspace  # checks on a workspace give it one


async def test_a_workspace_gets_its_files_and_setup(tmp_path: Path) -> None:
    (tmp_path / "fixtures" / "pkg").mkdir(parents=True)
    (tmp_path / "fixtures" / "data.csv").write_text("a,b\n1,2\n")
    (tmp_path / "fixtures" / "pkg" / "mod.py").write_text("X = 1\n")
    spec = load_scenarios(
        _write(
            tmp_path,
            _scenario(
                workspace={
                    "files": {
                        "README.md": "# demo\n",
                        "nested/dir/note.txt": "note",
                        "data.csv": {"from": "fixtures/data.csv"},
                        "lib": {"from": "fixtures/pkg"},
                    },
                    "setup": "ls -R > listing.txt && pwd > where.txt",
                }
            ),
        )
    )
    one = await prepare_workspace(spec.scenarios[0].workspace, label="s/0 x")
    two = await prepare_workspace(spec.scenarios[0].workspace, label="s/0 x")
    try:
        assert one != two and one.name.startswith("llmbridge-ws-s-0-x-")
        assert (one / "README.md").read_text() == "# demo\n"
        assert (one / "nested" / "dir" / "note.txt").read_text() == "note"
        assert (one / "data.csv").read_text() == "a,b\n1,2\n"
        assert (one / "lib" / "mod.py").read_text() == "X = 1\n"
        assert _resolved((one / "where.txt").read_text().strip()) == _resolved(one)
        assert "mod.py" in (one / "listing.txt").read_text()
    finally:
        await remove_workspace(one)
        await remove_workspace(two)
    assert not one.exists()


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("echo broken >&2; exit 3", r"exited with status 3; output: 'broken\\n'"),
        ("echo started; sleep 30", r"did not finish within 0.5 s; output: 'started\\n'"),
    ],
)
async def test_a_failing_setup_is_a_clear_error(setup: str, message: str) -> None:
    with pytest.raises(WorkspaceError, match=message) as caught:
        await prepare_workspace(Workspace(setup=setup, setup_timeout=0.5))
    assert caught.value.path.is_dir()
    await remove_workspace(caught.value.path)


async def test_commands_are_killed_with_their_children_at_the_deadline(tmp_path: Path) -> None:
    outcome = await run_command("echo begun; sleep 30 & sleep 30", tmp_path, 0.5)
    assert outcome.timed_out and outcome.output == "begun\n"
    # A background child holding the output open does not keep a finished command.
    quick = await run_command("(sleep 30 &) ; echo done", tmp_path, 10)
    assert quick.exit_code == 0 and quick.output == "done\n"
    long = await run_command("seq 1 5000", tmp_path, 10)
    assert len(long.output) == OUTPUT_TAIL and long.output.endswith("4999\n5000\n")


async def test_workspace_checks(tmp_path: Path) -> None:
    (tmp_path / "hello.py").write_text('print("hello")\n')
    (tmp_path / "sub").mkdir()
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    outside.write_text("secret")
    os.symlink(outside, tmp_path / "escape.txt")
    checks = (
        Check(file_exists="hello.py"),
        Check(file_exists="missing.py"),
        Check(file_exists="sub"),
        Check(file_contains={"path": "hello.py", "text": 'print("hello")'}),  # type: ignore[arg-type]
        Check(file_contains={"path": "hello.py", "text": "goodbye"}),  # type: ignore[arg-type]
        Check(file_matches={"path": "hello.py", "regex": r"print\(.h\w+o.\)"}),  # type: ignore[arg-type]
        Check(file_contains={"path": "escape.txt", "text": "secret"}),  # type: ignore[arg-type]
        Check(command={"run": "python3 hello.py", "output_contains": "hello"}),  # type: ignore[arg-type]
        Check(command={"run": "python3 hello.py", "output_contains": "bye"}),  # type: ignore[arg-type]
        Check(command={"run": "echo failing; exit 1"}),  # type: ignore[arg-type]
        Check(command={"run": "sleep 30", "timeout": 0.5}),  # type: ignore[arg-type]
    )
    results = await evaluate_all(checks, [], tmp_path)
    verdicts = [(r.passed, r.detail) for r in results]
    assert verdicts == [
        (True, "hello.py exists"),
        (False, "missing.py: missing"),
        (False, "sub: a directory"),
        (True, "hello.py: 'print(\"hello\")\\n'"),
        (False, "hello.py: 'print(\"hello\")\\n'"),
        (True, "hello.py: 'print(\"hello\")\\n'"),
        (False, "escape.txt leaves the workspace"),
        (True, "exit status 0"),
        (False, "exit status 0, output lacks 'bye'"),
        (False, "exit status 1"),
        (False, "killed after 0.5 s"),
    ]
    assert [r.output for r in results[7:]] == ["hello\n", "hello\n", "failing\n", ""]
    assert results[3].name == "file_contains: hello.py has 'print(\"hello\")'"
    # Without a workspace, a workspace check fails, saying so; reply checks still work.
    (none, _) = await evaluate_all((checks[0], Check(completes=False)), [], None)
    assert (none.passed, none.detail) == (False, "no workspace")


# -- running agents in workspaces --------------------------------------------------


@pytest.fixture(scope="module")
def model() -> ScriptedBackend:
    return ScriptedBackend("model", models=("scripted",))


@pytest.fixture(scope="module")
def gateway(model: ScriptedBackend) -> Iterator[RunningServer]:
    with running_gateway({"model": model}, models=[{"name": "scripted", "backend": "model"}]) as gw:
        yield gw


_HELLO = "printf 'print(\"hello\")\\n' > hello.py && cat seed.txt"


def _coding_spec(gateway: RunningServer, **scenario: Any) -> dict[str, Any]:
    return {
        "models": ["gw/scripted"],
        "iterations": 2,
        "opencode": {"endpoint": {"url": gateway.url + "/v1"}, "permission": "allow"},
        "scenarios": [
            {
                "id": "hello",
                "prompt": "Create hello.py that prints hello.",
                "workspace": {
                    "files": {"seed.txt": "seeded"},
                    "setup": "printf ready > setup.txt",
                },
                "checks": [
                    {"file_exists": "hello.py"},
                    {"file_contains": {"path": "setup.txt", "text": "ready"}},
                    {"command": {"run": "python3 hello.py", "output_contains": "hello"}},
                    {"tool_called": "bash"},
                ],
                **scenario,
            }
        ],
    }


async def test_opencode_works_in_a_fresh_workspace_per_iteration(
    gateway: RunningServer, model: ScriptedBackend, tmp_path: Path
) -> None:
    model.queue.clear()
    for _ in range(2):
        model.enqueue(
            Script(text=[], tool_calls=[("bash", {"command": _HELLO, "description": "write"})]),
            Script(text=["Created hello.py."]),
        )
    spec = load_scenarios(_write(tmp_path, _coding_spec(gateway)))
    provider = make_provider("opencode", spec, opencode_command=opencode_binary())
    out = tmp_path / "out"
    result = await run_scenarios(spec, provider, configs_for("opencode", spec), out)
    assert [r.passed for r in result.records] == [True, True], [r.error for r in result.records]
    for record in result.records:
        assert [c.passed for c in record.checks] == [True, True, True, True]
        assert record.checks[2].output == "hello\n"
        assert record.workspace is None  # removed
        (call,) = record.prompts[0].metrics.tool_calls
        assert call.name == "bash" and call.status == "completed"
    # The bash tool ran in the iteration's workspace: it read the file put there.
    outputs = [
        e["text"]
        for r in result.records
        for e in (r.trace or {})["events"]
        if e["type"] == "tool_result"
    ]
    assert outputs == ["seeded", "seeded"]
    lines = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    assert lines[0]["checks"][2]["output"] == "hello\n" and lines[0]["workspace"] is None


async def test_kept_workspaces_and_a_failed_setup(
    gateway: RunningServer, model: ScriptedBackend, tmp_path: Path
) -> None:
    model.queue.clear()
    model.enqueue(
        Script(text=[], tool_calls=[("bash", {"command": _HELLO, "description": "write"})]),
        Script(text=["Created hello.py."]),
    )
    spec_dict = _coding_spec(gateway)
    spec_dict["iterations"] = 1
    spec_dict["scenarios"].append(
        {
            "id": "broken",
            "prompt": "Never sent.",
            "workspace": {"setup": "echo no such tool >&2; exit 127"},
            "checks": [{"file_exists": "x"}],
        }
    )
    spec = load_scenarios(_write(tmp_path, spec_dict))
    provider = make_provider("opencode", spec, opencode_command=opencode_binary())
    result = await run_scenarios(
        spec, provider, configs_for("opencode", spec), tmp_path / "out", keep_workspaces=True
    )
    hello, broken = result.records
    assert hello.passed and hello.workspace is not None
    kept = Path(hello.workspace)
    assert (kept / "hello.py").read_text() == 'print("hello")\n'
    assert not broken.passed and broken.session_id == "" and broken.prompts == []
    assert broken.error is not None and broken.error.startswith(
        "workspace setup failed: the setup command 'echo no such tool >&2; exit 127' "
        "exited with status 127; output: 'no such tool\\n'"
    )
    assert broken.workspace is not None and _is_dir(broken.workspace)
    for path in (kept, Path(broken.workspace)):
        await remove_workspace(path)
    assert result.summary[1]["pass_rate"] == 0.0


async def test_the_agent_service_has_no_filesystem_tools(
    gateway: RunningServer, model: ScriptedBackend, tmp_path: Path
) -> None:
    model.queue.clear()
    model.enqueue(Script(text=["I cannot create files."]))
    spec = _coding_spec(gateway, checks=[{"file_exists": "setup.txt"}, {"file_exists": "hello.py"}])
    spec.update(models=["scripted"], iterations=1)
    loaded = load_scenarios(_write(tmp_path, spec))
    provider = make_provider("agent", loaded, gateway_url=gateway.url)
    result = await run_scenarios(loaded, provider, configs_for("agent", loaded), tmp_path / "out")
    (record,) = result.records
    assert [(c.passed, c.detail) for c in record.checks] == [
        (True, "setup.txt exists"),
        (False, "hello.py: missing"),
    ]
    assert not record.passed and record.error is None

"""Modes (seed 004's ``ModeResolver``): a mode resolves to environment variables,
system instructions and an OpenCode agent; servers are shared across modes with the
same environment.

The resolver and the scenarios file are checked directly; then the real OpenCode
server (the pinned binary, its model the gateway's scripted backend) shows each
mode's instructions and environment reaching the agent, one server serving two
modes, and the agent service getting the mode's instructions too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.profiler.providers.opencode import OpenCodeSessionProvider
from llmbridge.profiler.records.modes import (
    ModeResolver,
    ModeSpec,
    combine_instructions,
    order_groups,
    server_key,
)
from llmbridge.profiler.records.scenarios import ScenarioFileError, load_scenarios
from llmbridge.profiler.run.runner import run_scenarios
from llmbridge.profiler.run.setup import configs_for, make_provider
from llmbridge.profiler.run.workspace import remove_workspace
from tests.conftest import RunningServer, running_gateway
from tests.e2e.opencode import opencode_binary


def _load(tmp_path: Path, spec: dict[str, Any]) -> Any:
    path = tmp_path / "scenarios.yaml"
    path.write_text(json.dumps(spec))
    return load_scenarios(path)


def _read(directory: str | None, name: str) -> str:
    assert directory is not None
    return Path(directory, name).read_text()


def test_a_bare_name_is_that_opencode_agent() -> None:
    resolver = ModeResolver([], {"BASE": "1"})
    plan = resolver.resolve("plan")
    assert (plan.name, plan.agent, plan.system_instructions) == ("plan", "plan", None)
    assert plan.environment == {"BASE": "1"}
    assert resolver.resolve("default").agent is None


def test_a_declared_mode_resolves_environment_instructions_and_agent(tmp_path: Path) -> None:
    spec = _load(
        tmp_path,
        {
            "models": ["gw/m"],
            "modes": [
                "plan",
                {
                    "name": "terse",
                    "agent": "plain",
                    "system": "Answer in one word.",
                    "environment": {"LANG": "C", "BASE": "mode"},
                    "path": ["bin", "/opt/tools"],
                },
            ],
            "opencode": {"environment": {"BASE": "file", "OTHER": "x"}},
            "scenarios": [{"id": "s", "prompt": "p"}],
        },
    )
    assert spec.mode_names == ("plan", "terse")
    resolver = ModeResolver(spec.modes, spec.opencode.environment)
    terse = resolver.resolve("terse")
    assert terse.agent == "plain" and terse.system_instructions == "Answer in one word."
    path = terse.environment.pop("PATH").split(os.pathsep)
    # Relative entries are the scenarios file's neighbours; the inherited PATH follows.
    assert path[:2] == [str((tmp_path / "bin").resolve()), "/opt/tools"]
    assert path[2:] == os.environ["PATH"].split(os.pathsep)
    assert terse.environment == {"BASE": "mode", "OTHER": "x", "LANG": "C"}


@pytest.mark.parametrize(
    ("modes", "message"),
    [
        (["a", "a"], "mode names must be unique"),
        ([{"name": "a", "colour": "red"}], "modes.0.colour: Extra inputs are not permitted"),
        ([{"agent": "plain"}], "modes.0.name: Field required"),
    ],
)
def test_bad_modes_are_scenario_file_errors(tmp_path: Path, modes: list[Any], message: str) -> None:
    with pytest.raises(ScenarioFileError, match=message):
        _load(
            tmp_path, {"models": ["m"], "modes": modes, "scenarios": [{"id": "s", "prompt": "p"}]}
        )


def test_configs_carry_the_mode_and_share_servers_by_environment(tmp_path: Path) -> None:
    spec = _load(
        tmp_path,
        {
            "models": ["gw/a", "gw/b"],
            "modes": [
                {"name": "one", "system": "First."},
                {"name": "env", "environment": {"X": "1"}},
                {"name": "two", "agent": "plan", "system": "Second."},
            ],
            "opencode": {"permission": "allow"},
            "scenarios": [{"id": "s", "prompt": "p"}],
        },
    )
    configs = configs_for("opencode", spec)
    # The modes with the same environment run one after the other, for each model.
    assert [(c.model, c.mode) for c in configs] == [
        ("gw/a", "one"),
        ("gw/a", "two"),
        ("gw/a", "env"),
        ("gw/b", "one"),
        ("gw/b", "two"),
        ("gw/b", "env"),
    ]
    one, two, env = configs[:3]
    assert (one.system_instructions, one.agent) == ("First.", None)
    assert (two.system_instructions, two.agent) == ("Second.", "plan")
    assert env.environment == {"X": "1"} and env.permission == "allow"
    assert server_key(one) == server_key(two) != server_key(env)
    assert server_key(one) != server_key(configs[3])  # another model
    assert order_groups(list(reversed(configs)))[0].mode == "env"


def test_instructions_combine_mode_then_scenario() -> None:
    assert combine_instructions("Mode.", "Scenario.") == "Mode.\n\nScenario."
    assert combine_instructions(None, "Scenario.") == "Scenario."
    assert combine_instructions("Mode.", None) == "Mode."
    assert combine_instructions(None, "") is None
    assert ModeSpec.named("default").agent is None


# -- the real server -------------------------------------------------------------------


@pytest.fixture(scope="module")
def model() -> ScriptedBackend:
    return ScriptedBackend("model", models=("scripted",))


@pytest.fixture(scope="module")
def gateway(model: ScriptedBackend) -> Iterator[RunningServer]:
    with running_gateway({"model": model}, models=[{"name": "scripted", "backend": "model"}]) as gw:
        yield gw


async def test_opencode_modes_reach_the_agent_and_share_a_server(
    gateway: RunningServer, model: ScriptedBackend, tmp_path: Path
) -> None:
    model.queue.clear()
    mark = 'printf "%s" "$PROFILE_MODE_MARK" > mark.txt'
    for _ in range(3):  # one iteration per mode: a shell step, then a text step
        model.enqueue(
            Script(text=[], tool_calls=[("bash", {"command": mark, "description": "mark"})]),
            Script(text=["Marked."]),
        )
    spec = _load(
        tmp_path,
        {
            "models": ["gw/scripted"],
            "modes": [
                {
                    "name": "alpha",
                    "system": "MODE ALPHA.",
                    "environment": {"PROFILE_MODE_MARK": "a"},
                },
                {"name": "gamma", "environment": {"PROFILE_MODE_MARK": "g"}},
                {"name": "beta", "system": "MODE BETA.", "environment": {"PROFILE_MODE_MARK": "a"}},
            ],
            "opencode": {
                "endpoint": {"url": gateway.url + "/v1"},
                "permission": "allow",
            },
            "scenarios": [
                {
                    "id": "mark",
                    "system": "SCENARIO.",
                    "prompt": "Mark the workspace.",
                    "checks": [{"file_exists": "mark.txt"}],
                }
            ],
        },
    )
    provider = make_provider("opencode", spec, opencode_command=opencode_binary())
    assert isinstance(provider, OpenCodeSessionProvider)
    result = await run_scenarios(
        spec, provider, configs_for("opencode", spec), tmp_path / "out", keep_workspaces=True
    )
    records = {r.mode: r for r in result.records}
    assert [r.mode for r in result.records] == ["alpha", "beta", "gamma"]
    assert all(r.passed for r in result.records), [r.error for r in result.records]
    # alpha and beta have one environment: one server for both, another for gamma.
    assert provider.spawns == 2
    marks = {mode: _read(r.workspace, "mark.txt") for mode, r in records.items()}
    for record in result.records:
        assert record.workspace is not None
        await remove_workspace(Path(record.workspace))
    assert marks == {"alpha": "a", "beta": "a", "gamma": "g"}
    # Each session's first model request: the mode's instructions, then the scenario's.
    firsts = [r for r in model.requests[-6:] if len(r.messages) == 2]
    systems = [r.messages[0].text for r in firsts]
    assert len(systems) == 3
    assert systems[0].index("MODE ALPHA.") < systems[0].index("SCENARIO.")
    assert "MODE BETA." in systems[1] and "MODE ALPHA." not in systems[1]
    assert "SCENARIO." in systems[2] and "MODE" not in systems[2]


async def test_the_agent_service_gets_the_mode_instructions(
    gateway: RunningServer, model: ScriptedBackend, tmp_path: Path
) -> None:
    model.queue.clear()
    model.enqueue(Script(text=["Yes."]))
    spec = _load(
        tmp_path,
        {
            "models": ["scripted"],
            "modes": [{"name": "strict", "system": "MODE STRICT."}],
            "scenarios": [{"id": "ask", "system": "SCENARIO.", "prompt": "Ready?"}],
        },
    )
    provider = make_provider("agent", spec, gateway_url=gateway.url)
    result = await run_scenarios(spec, provider, configs_for("agent", spec), tmp_path / "out")
    (record,) = result.records
    assert record.passed and record.mode == "strict"
    system = model.requests[-1].messages[0].text
    assert system.index("MODE STRICT.") < system.index("SCENARIO.")

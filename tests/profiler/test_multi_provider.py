"""One ``profile run`` for several agents, and ``profile compare`` on its results.

The file names gateway models; each provider gets them in its own form (OpenCode
``gw/NAME`` on ``--gateway-url``, the others the name as is) and every record names
the file's model and its provider, so the summary, the reports and the comparison
group by provider. The agents are the real OpenCode server and Codex CLI (both
pinned in tests/e2e) and the agent service, on one scripted gateway.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.cli import cli
from llmbridge.profiler.providers.codex import CodexSessionProvider
from llmbridge.profiler.records.scenarios import ScenarioFile
from llmbridge.profiler.run.setup import configs_for, groups_for, make_provider, provider_model
from tests.conftest import RunningServer, running_gateway
from tests.e2e.opencode import opencode_binary

E2E = Path(__file__).resolve().parents[1] / "e2e" / "node_modules" / ".bin"
PROVIDERS = ("opencode", "codex", "agent")


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningServer]:
    backend = ScriptedBackend("model", models=("scripted",), default=Script(text=["Hi ", "there."]))
    with running_gateway(
        {"model": backend}, models=[{"name": "scripted", "backend": "model"}]
    ) as gw:
        yield gw


def _spec() -> dict[str, Any]:
    return {
        "models": ["scripted"],
        "modes": [{"name": "terse", "system": "Answer in one sentence."}],
        "iterations": 2,
        "timeout": 120,
        "codex": {
            "instructions": "You are a coding agent.",
            "args": ["--disable", "multi_agent", "--disable", "goals", "--disable", "apps"],
        },
        "prices": {"scripted": {"input": 1.0, "output": 2.0}},
        "scenarios": [{"id": "hi", "prompt": "Say hi", "checks": [{"completes": True}]}],
    }


def test_each_provider_gets_the_model_in_its_own_form() -> None:
    spec = ScenarioFile.model_validate(
        {**_spec(), "models": ["scripted", "gw2/other"], "opencode": {}}
    )
    assert provider_model("opencode", "scripted") == "gw/scripted"
    assert provider_model("opencode", "gw2/other") == "gw2/other"
    assert provider_model("codex", "scripted") == "scripted"
    groups = groups_for("opencode", spec, gateway_url="http://127.0.0.1:9/")
    assert [(name, c.model, c.mode) for name, c in groups] == [
        ("scripted", "gw/scripted", "terse"),
        ("gw2/other", "gw2/other", "terse"),
    ]
    # No endpoint in the file: OpenCode's gw provider is the gateway's OpenAI route.
    assert groups[0][1].options["endpoint"] == {"url": "http://127.0.0.1:9/v1"}
    assert [c.model for c in configs_for("agent", spec)] == ["scripted", "gw2/other"]
    assert [c.system_instructions for c in configs_for("codex", spec)] == [
        "Answer in one sentence."
    ] * 2


def _run(scenarios: Path, out: Path, gateway: RunningServer) -> str:
    args = ["profile", "run", str(scenarios), "--gateway-url", gateway.url, "--out", str(out)]
    for kind in PROVIDERS:
        args += ["--provider", kind]
    args += ["--command", f"codex={E2E / 'codex'}", "--command", f"opencode={opencode_binary()}"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_one_command_profiles_every_agent_and_compare_matches_by_provider(
    gateway: RunningServer, tmp_path: Path
) -> None:
    scenarios = tmp_path / "agents.yaml"
    scenarios.write_text(json.dumps(_spec()))
    first, second = tmp_path / "run-1", tmp_path / "run-2"
    table = _run(scenarios, first, gateway)
    # What compare matches on is in the records (scenario, model, mode, provider): a
    # copy of the run has them as a second run would. Comparing two separate runs
    # (their durations differ) is test_compare.py's test_compare_two_real_profile_runs;
    # a second run of all three agents here took as long as the first.
    shutil.copytree(first, second)

    records = [json.loads(line) for line in (first / "traces.jsonl").read_text().splitlines()]
    assert [(r["provider"], r["model"], r["mode"]) for r in records] == [
        (kind, "scripted", "terse") for kind in PROVIDERS for _ in range(2)
    ]
    for record in records:
        assert record["passed"], record
        assert record["invariant_problems"] == []
        (prompt,) = record["prompts"]
        assert prompt["text"] == "Hi there."
        assert prompt["tokens"]["output"] > 0 and prompt["cost"]["source"] != "none"
    summary = json.loads((first / "summary.json").read_text())
    assert [(s["provider"], s["scenario"], s["iterations"], s["passed"]) for s in summary] == [
        (kind, "hi", 2, 2) for kind in PROVIDERS
    ]
    report = (first / "report.md").read_text()
    for kind in PROVIDERS:
        assert f"| {kind} | hi | scripted | terse |" in report
        assert kind in table
    page = (first / "report.html").read_text()
    assert "<th>provider</th>" in page and '<td class="name">codex</td>' in page

    result = CliRunner().invoke(
        cli, ["profile", "compare", str(first), str(second), "--out", str(tmp_path / "cmp")]
    )
    assert result.exit_code == 0, result.output
    report_dict = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    (comparison,) = report_dict["comparisons"]
    assert comparison["matched_on"] == ["scenario", "model", "mode", "provider"]
    assert comparison["differs_in"] == {}
    assert comparison["a"]["providers"] == sorted(PROVIDERS)
    groups = comparison["scenarios"]
    assert [(g["a"]["provider"], g["b"]["provider"]) for g in groups] == [
        (kind, kind) for kind in PROVIDERS
    ]
    for group in groups:
        assert group["pass_rate"]["a"] == {"passed": 2, "iterations": 2, "rate": 1.0}
        assert len(group["duration_ms"]["ci95"]) == 2
    assert comparison["unmatched"] == {"a": [], "b": []}
    assert "codex, scripted, terse" in result.output


def test_a_relative_command_is_made_absolute(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command-line agents run in their workspace, where a path relative to the
    caller's directory would not be found."""
    monkeypatch.chdir(E2E.parents[1])
    spec = ScenarioFile.model_validate(_spec())
    provider = make_provider("codex", spec, command="node_modules/.bin/codex")
    assert isinstance(provider, CodexSessionProvider)
    assert provider.settings.command == str(E2E / "codex")

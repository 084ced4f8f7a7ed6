"""The pure parts of ``make compat`` (tests/compat/): reading pins and installed
versions, reading pytest's JUnit XML, each client's result, the table and the summary;
and where the end-to-end tests look for the Node clients (tests/e2e/clients.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.compat import report
from tests.compat.clients import (
    NODE_CLIENTS,
    SDK_CLIENTS,
    Client,
    npm_pins,
    pip_installed,
    python_pins,
    sdk_modules,
    with_modules,
)
from tests.e2e import clients as e2e_clients

CODEX = Client(
    "Codex CLI", "@openai/codex", "npm", "OpenAI Responses", ("tests/e2e/test_codex.py",)
)

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="2" skipped="1" tests="6">
<testcase classname="tests.e2e.test_codex" name="test_plain_text" time="1.0"/>
<testcase classname="tests.e2e.test_codex" name="test_tool_round[stream]" time="1.0">
  <failure message="AssertionError">boom</failure>
</testcase>
<testcase classname="tests.e2e.test_codex" name="test_teardown" time="1.0">
  <failure message="AssertionError">first</failure>
</testcase>
<testcase classname="tests.e2e.test_codex" name="test_teardown" time="0.1">
  <error message="failed on teardown">second</error>
</testcase>
<testcase classname="tests.gateway.test_openai_api.TestModels" name="test_list" time="0.1">
  <skipped type="pytest.skip" message="no redis">skipped</skipped>
</testcase>
<testcase classname="" name="tests.e2e.test_gemini_cli" time="0.0">
  <error message="collection failure">ImportError</error>
</testcase>
</testsuite></testsuites>
"""


def test_junit_gives_one_outcome_per_test_with_its_node_id() -> None:
    outcomes = {o.test_id: o.status for o in report.parse_junit(JUNIT)}
    assert outcomes == {
        "tests/e2e/test_codex.py::test_plain_text": "passed",
        "tests/e2e/test_codex.py::test_tool_round[stream]": "failed",
        # failed, then errored in teardown: one failed test
        "tests/e2e/test_codex.py::test_teardown": "failed",
        "tests/gateway/test_openai_api.py::TestModels::test_list": "skipped",
        # a module that did not import: its path
        "tests/e2e/test_gemini_cli.py": "failed",
    }


def test_a_client_passes_when_none_of_its_tests_failed() -> None:
    run = report.Run(0, (report.Outcome("tests/e2e/test_codex.py::test_a", "passed"),), "a.log")
    result = report.result_of(CODEX, "0.171.0", "0.172.0", [run])
    assert result.ok and result.cell() == "pass" and result.passed == 1


def test_a_client_fails_with_its_own_failed_tests_only() -> None:
    run = report.Run(1, report.parse_junit(JUNIT), "codex.log")
    result = report.result_of(CODEX, "0.171.0", "0.172.0", [run])
    assert not result.ok
    assert result.failed == (
        "tests/e2e/test_codex.py::test_tool_round[stream]",
        "tests/e2e/test_codex.py::test_teardown",
    )
    assert result.cell() == (
        "FAIL: `tests/e2e/test_codex.py::test_tool_round[stream]`, "
        "`tests/e2e/test_codex.py::test_teardown`"
    )
    assert result.cell(limit=1).endswith("and 1 more")


def test_a_run_that_broke_before_any_result_is_a_failure() -> None:
    result = report.result_of(CODEX, "1", "2", [report.Run(3, (), ".compat/results/x.log")])
    assert not result.ok
    assert result.cell() == "FAIL: pytest exited 3 (see .compat/results/x.log)"


def test_a_client_whose_tests_all_skipped_is_not_a_pass() -> None:
    run = report.Run(0, (report.Outcome("tests/e2e/test_codex.py::test_a", "skipped"),), "a.log")
    result = report.result_of(CODEX, "1", "2", [run])
    assert result.ok and result.cell() == "not run: every test skipped"


def test_the_table_has_one_row_per_client_and_escapes_pipes() -> None:
    failing = report.Result(CODEX, "0.171.0", "0.172.0", failed=("t.py::test_x[a|b]",))
    passing = report.Result(NODE_CLIENTS[0], "2.1.332", "2.1.340", passed=3)
    text = report.table([passing, failing], extra=[["Old", "1", "-", "d", "not run"]])
    assert text.splitlines() == [
        "| client | pinned | newest | dialect | result |",
        "|---|---|---|---|---|",
        "| Claude Code | 2.1.332 | 2.1.340 | Anthropic Messages | pass |",
        "| Codex CLI | 0.171.0 | 0.172.0 | OpenAI Responses | FAIL: `t.py::test_x[a\\|b]` |",
        "| Old | 1 | - | d | not run |",
    ]


def test_the_document_says_when_on_what_and_who_broke() -> None:
    failing = report.Result(CODEX, "0.171.0", "0.172.0", failed=("t.py::test_x",))
    passing = report.Result(NODE_CLIENTS[0], "2.1.332", "2.1.340", passed=3, skipped=1)
    text = report.document(
        [failing, passing],
        date="2026-12-02 14:00 UTC",
        commit="abc1234",
        pytest_args="-n0",
        runtime="Node v20.20.2",
    )
    assert text.startswith("# Compatibility with the newest client releases\n")
    assert "make compat" in text
    assert (
        "Last run: 2026-12-02 14:00 UTC, on commit `abc1234`, Node v20.20.2, "
        "pytest arguments `-n0`. Broke with the newest release: Codex CLI." in text
    )
    assert text.endswith(
        report.table([failing, passing])
        + "\nTests run: Codex CLI 0 passed, 1 failed; Claude Code 3 passed, 1 skipped.\n"
    )


def test_the_summary_names_the_client_that_broke_and_the_test() -> None:
    failing = report.Result(
        CODEX, "0.171.0", "0.172.0", failed=("t.py::test_x",), passed=2, logs=("c.log",)
    )
    lines = report.summary([failing]).splitlines()
    assert lines == [
        "BROKE Codex CLI 0.172.0 (pinned 0.171.0): 2 passed, 1 failed, 0 skipped",
        "        failed: t.py::test_x",
        "        log: c.log",
    ]


def test_pins_come_from_package_json_and_the_dev_extra() -> None:
    package_json = json.dumps(
        {"dependencies": {"ollama": "0.6.4", "old": "npm:@anthropic-ai/claude-code@2.1.197"}}
    )
    assert npm_pins(package_json) == {"ollama": "0.6.4", "old": "2.1.197"}
    pyproject = (
        '[project]\nname = "x"\n[project.optional-dependencies]\n'
        'dev = ["openai==3.51.0", "types-PyYAML", "Anthropic == 2.10.0"]\n'
    )
    assert python_pins(pyproject) == {"openai": "3.51.0", "anthropic": "2.10.0"}


def test_the_pinned_files_name_every_client() -> None:
    root = Path(__file__).resolve().parents[2]
    node = npm_pins((root / "tests" / "e2e" / "package.json").read_text("utf-8"))
    python = python_pins((root / "pyproject.toml").read_text("utf-8"))
    assert {c.package for c in NODE_CLIENTS} <= node.keys()
    assert {c.package for c in SDK_CLIENTS} <= python.keys()
    for client in NODE_CLIENTS:
        assert all((root / module).is_file() for module in client.modules), client


def test_installed_versions_are_read_from_npm_and_pip(tmp_path: Path) -> None:
    package = tmp_path / "@google" / "genai"
    package.mkdir(parents=True)
    (package / "package.json").write_text('{"name": "@google/genai", "version": "3.4.0"}')
    assert e2e_clients.installed_version(tmp_path, "@google/genai") == "3.4.0"
    assert e2e_clients.installed_version(tmp_path, "ollama") is None
    listed = json.dumps([{"name": "Google-GenAI", "version": "3.5.0"}])
    assert pip_installed(listed) == {"google-genai": "3.5.0"}


def test_sdk_modules_are_the_test_modules_that_import_each_sdk() -> None:
    sources = {
        "tests/gateway/test_a.py": "import openai\nfrom google import genai\n",
        "tests/gateway/test_b.py": "from anthropic import Anthropic\nimport ollama\n",
        "tests/gateway/helpers.py": "import openai\n",
        "tests/gateway/test_c.py": "# mentions openai but imports nothing\n",
    }
    found = sdk_modules(sources)
    assert found == {
        "openai": ("tests/gateway/test_a.py",),
        "anthropic": ("tests/gateway/test_b.py",),
        "google-genai": ("tests/gateway/test_a.py",),
        "ollama": ("tests/gateway/test_b.py",),
    }
    sdks = with_modules(SDK_CLIENTS, found)
    assert {c.package: c.modules for c in sdks}["openai"] == ("tests/gateway/test_a.py",)


def test_the_node_clients_are_the_pinned_ones_unless_the_variable_names_others() -> None:
    assert e2e_clients.node_modules_from({}) == e2e_clients.PINNED_NODE_MODULES
    named = {e2e_clients.NODE_MODULES_VARIABLE: "/tmp/compat/node_modules"}
    assert e2e_clients.node_modules_from(named) == Path("/tmp/compat/node_modules").resolve()

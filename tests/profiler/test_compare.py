"""``llmbridge profile compare``: run directories in, intervals and verdicts out.

The run directories are written the way ``profile run`` writes them (the runner's own
``IterationRecord.to_json`` and ``summarise``) with known per-iteration values, so every
figure the comparison reports can be checked against the statistics computed here
directly; one pair of runs comes from real ``profile run`` invocations (the agent
service over a scripted gateway).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.cli import cli
from llmbridge.profiler.records.stats import (
    bootstrap_mean_difference,
    permutation_p_value,
    rate_difference_interval,
)
from llmbridge.profiler.report.compare import CompareError, compare_runs, load_run, report_dict
from llmbridge.profiler.report.compare_report import comparison_markdown
from llmbridge.profiler.report.html_report import html_comparison
from tests.conftest import RunningServer, running_gateway
from tests.profiler.run_dirs import FAST, SLOW, write_run


@pytest.fixture
def two_models(tmp_path: Path) -> tuple[Path, Path]:
    """Run A on model m1, run B on model m2: B is slower on ``build``, fails ``fix``."""
    a = write_run(
        tmp_path / "run-m1",
        {
            ("build", "gw/m1", "default"): FAST,
            ("fix", "gw/m1", "default"): [(True, 50.0, 20, 0.0)] * 3,
            ("only-a", "gw/m1", "default"): [(True, 1.0, 1, 0.0)],
        },
    )
    b = write_run(
        tmp_path / "run-m2",
        {
            ("build", "gw/m2", "default"): SLOW,
            ("fix", "gw/m2", "default"): [
                (False, 55.0, 20, 0.0),
                (True, 45.0, 20, 0.0),
                (False, 52.0, 22, 0.0),
            ],
        },
    )
    return a, b


def test_runs_differing_in_model_are_matched_by_scenario_and_mode(
    two_models: tuple[Path, Path],
) -> None:
    (comparison,) = compare_runs(list(two_models))
    assert comparison.differs_in == {"model": [["gw/m1"], ["gw/m2"]]}
    assert comparison.matched_on == ["scenario", "mode", "provider"]
    assert comparison.description == "run-m1 and run-m2 differ only in model (gw/m1 vs gw/m2)"
    assert [s.scenario for s in comparison.scenarios] == ["build", "fix"]
    assert comparison.unmatched_a == [("only-a", "gw/m1", "default", "opencode")]

    build = comparison.scenarios[0]
    duration = build.means["duration_ms"]
    a_ms, b_ms = [r[1] for r in FAST], [r[1] for r in SLOW]
    assert duration.mean_a == pytest.approx(102.5) and duration.mean_b == pytest.approx(305.0)
    assert duration.difference == pytest.approx(202.5)
    assert duration.ci95 == bootstrap_mean_difference(a_ms, b_ms)
    # 6 vs 6, completely separated: exactly 2 of the 924 splits are as extreme.
    assert duration.p_value == pytest.approx(2 / 924) and duration.exact
    assert duration.distinguishable
    assert duration.verdict == "run-m1 faster than run-m2 (p=0.0022)"
    tokens = build.means["tokens"]
    assert tokens.verdict == "equal in every iteration (n=6 vs 6)" and not tokens.distinguishable
    assert build.pass_rate.verdict == "same pass rate (100%); " + (
        "not distinguishable at this many iterations (n=6 vs 6)"
    )

    fix = comparison.scenarios[1]
    assert fix.pass_rate.difference == pytest.approx(1 / 3 - 1)
    assert fix.pass_rate.ci95 == rate_difference_interval(3, 3, 1, 3)
    assert fix.pass_rate.verdict == "not distinguishable at this many iterations (n=3 vs 3)"
    # 3 vs 3 can never reach p < 0.05: the smallest two-sided p is 2/20.
    assert fix.means["duration_ms"].p_value >= 0.1
    assert not fix.means["duration_ms"].distinguishable


def test_overall_pools_iterations_for_rates_and_averages_scenario_differences(
    two_models: tuple[Path, Path],
) -> None:
    (comparison,) = compare_runs(list(two_models))
    overall = comparison.overall
    assert overall.scenario == "overall"
    rate = overall.pass_rate
    assert (rate.passed_a, rate.n_a, rate.passed_b, rate.n_b) == (9, 9, 7, 9)
    assert rate.ci95 == rate_difference_interval(9, 9, 7, 9)
    duration = overall.means["duration_ms"]
    fix_a, fix_b = [50.0] * 3, [55.0, 45.0, 52.0]
    strata = [([r[1] for r in FAST], [r[1] for r in SLOW]), (fix_a, fix_b)]
    assert duration.difference == pytest.approx((202.5 + (152 / 3 - 50)) / 2)
    assert duration.ci95 == bootstrap_mean_difference(strata=strata)
    assert duration.p_value == permutation_p_value(strata=strata)
    assert (duration.n_a, duration.n_b) == (9, 9)


def test_the_report_dict_is_json_with_the_documented_shape(two_models: tuple[Path, Path]) -> None:
    report = report_dict(compare_runs(list(two_models)))
    assert json.loads(json.dumps(report)) == report
    assert report["baseline"] == "run-m1" and report["settings"]["difference"] == "B - A"
    (c,) = report["comparisons"]
    assert c["a"]["models"] == ["gw/m1"] and c["b"]["providers"] == ["opencode"]
    assert c["unmatched"] == {"a": [["only-a", "gw/m1", "default", "opencode"]], "b": []}
    build = c["scenarios"][0]
    assert set(build) == {
        *("scenario", "status", "a", "b", "pass_rate", "duration_ms", "tokens", "cost_usd")
    }
    assert build["a"] == {"model": "gw/m1", "mode": "default", "provider": "opencode"}
    duration = build["duration_ms"]
    assert duration["unit"] == "ms" and duration["p_method"] == "permutation-exact"
    assert duration["a"] == {"mean": 102.5, "iterations": 6}
    assert len(duration["ci95"]) == 2 and duration["ci_method"] == "percentile-bootstrap"
    assert build["pass_rate"]["a"] == {"passed": 6, "iterations": 6, "rate": 1.0}
    assert build["cost_usd"]["unit"] == "USD" and build["tokens"]["unit"] == "tokens"
    assert c["overall"]["a"] == {"model": "*", "mode": "*", "provider": "*"}


def test_same_models_match_exactly_and_the_provider_is_named(tmp_path: Path) -> None:
    groups = {("s", "gw/m", "plan"): FAST, ("s", "gw/m", "build"): FAST}
    a = write_run(tmp_path / "a", groups, provider="opencode")
    b = write_run(tmp_path / "b", groups, provider="agent")
    c = write_run(tmp_path / "c", groups, provider="opencode")
    ab, ac = compare_runs([a, b, c])
    assert ab.differs_in == {"provider": [["opencode"], ["agent"]]}
    assert ab.matched_on == ["scenario", "model", "mode"] and len(ab.scenarios) == 2
    assert ab.description == "a and b differ only in provider (opencode vs agent)"
    assert ac.differs_in == {} and "does not record" in ac.description
    same = ac.overall.means["duration_ms"]
    assert same.difference == 0 and same.p_value == 1.0 and same.ci95.covers(0)
    assert same.verdict == "not distinguishable at this many iterations (n=12 vs 12)"
    assert ac.overall.means["tokens"].verdict == "equal in every iteration (n=12 vs 12)"


def test_many_iterations_make_a_difference_distinguishable(tmp_path: Path) -> None:
    a = write_run(
        tmp_path / "a", {("s", "m", "x"): [(i % 5 != 0, 200.0 + i, 9, 0.0) for i in range(30)]}
    )
    b = write_run(
        tmp_path / "b", {("s", "m", "x"): [(False, 100.0 + i, 9, 0.0) for i in range(30)]}
    )
    (c,) = compare_runs([a, b])
    s = c.scenarios[0]
    assert not s.means["duration_ms"].exact  # 30 vs 30: Monte Carlo
    assert s.means["duration_ms"].verdict == "b faster than a (p<0.001)"
    assert s.pass_rate.distinguishable and s.pass_rate.verdict.startswith(
        "a passes more often than b (80% more; 95% CI of B-A "
    )


def test_unreadable_or_unrelated_runs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CompareError, match="is not a directory"):
        load_run(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CompareError, match=r"has no summary\.json"):
        load_run(tmp_path / "empty")
    a = write_run(tmp_path / "a", {("one", "m", "x"): FAST})
    b = write_run(tmp_path / "b", {("two", "m", "x"): FAST})
    with pytest.raises(CompareError, match="no scenario in common"):
        compare_runs([a, b])
    with pytest.raises(CompareError, match="at least two"):
        compare_runs([a])
    (a / "traces.jsonl").write_text('{"scenario": "one"}\n')
    with pytest.raises(CompareError, match="line 1"):
        load_run(a)


# -- the CLI --------------------------------------------------------------------------


def _reads_in_order(sentence: str, text: str) -> bool:
    """Whether the words of ``sentence`` appear in ``text`` in order (a table cell wraps
    its text over lines that also hold other cells)."""
    words = iter(text.split())
    return all(any(word == seen for seen in words) for word in sentence.split())


def _compare(*args: str) -> Any:
    return CliRunner().invoke(cli, ["profile", "compare", *args], catch_exceptions=False)


def test_cli_writes_json_and_markdown_and_prints_an_80_column_table(
    two_models: tuple[Path, Path], tmp_path: Path
) -> None:
    out = tmp_path / "cmp"
    result = _compare(*map(str, two_models), "--out", str(out))
    assert result.exit_code == 0, result.output
    report = json.loads((out / "comparison.json").read_text())
    assert report == report_dict(compare_runs(list(two_models)))
    markdown = (out / "comparison.md").read_text()
    build = report["comparisons"][0]["scenarios"][0]
    assert build["duration_ms"]["verdict"] in markdown
    assert "| build | ms | 102 | 305 | +202 | [+200, +206] | 0.0022 |" in markdown
    assert "| fix | pass | 3/3 | 1/3 | -67 pts | [-94, +6] pts |" in markdown
    assert "| overall | USD | 0.0005 | 0.0005 | +0.0000 |" in markdown
    page = (out / "comparison.html").read_text()
    assert page.startswith("<!doctype html>") and "run-m1" in page
    *table, last = result.output.splitlines()
    assert json.loads(last) == {"out": str(out), "comparisons": 1}  # for scripts, like `run`
    assert max(len(line) for line in table) <= 80
    assert "…" not in result.output
    assert _reads_in_order("run-m1 faster than run-m2 (p=0.0022)", result.output)


def test_micro_dollar_costs_keep_three_significant_figures(tmp_path: Path) -> None:
    from llmbridge.profiler.report.compare_report import comparison_markdown

    a = write_run(tmp_path / "a", {("s", "m", "x"): [(True, 1.0, 1, 3.25e-6)] * 4})
    b = write_run(tmp_path / "b", {("s", "m", "x"): [(True, 1.0, 1, 5.5e-6)] * 4})
    markdown = comparison_markdown(compare_runs([a, b]))
    assert (
        "| s | USD | 3.25e-06 | 5.5e-06 | +2.25e-06 | [+2.25e-06, +2.25e-06] | 0.029 |" in markdown
    )


def test_cli_default_out_is_a_sibling_of_the_first_run(two_models: tuple[Path, Path]) -> None:
    a, b = two_models
    result = _compare(str(a), str(b))
    assert result.exit_code == 0, result.output
    assert (a.parent / "compare-run-m1-vs-run-m2" / "comparison.json").is_file()


def test_cli_errors_are_usage_errors(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", {("one", "m", "x"): FAST})
    b = write_run(tmp_path / "b", {("two", "m", "x"): FAST})
    (tmp_path / "bare").mkdir()
    for args, message in [
        ([str(a), str(tmp_path / "missing")], "does not exist"),
        ([str(a), str(tmp_path / "bare")], "has no summary.json"),
        ([str(a), str(b)], "no scenario in common"),
        ([str(a)], "at least two"),
    ]:
        result = _compare(*args)
        assert result.exit_code == 2, result.output
        assert message in result.output


def test_print_comparison_fits_80_columns_with_long_names(tmp_path: Path) -> None:
    from llmbridge.profiler.report.compare_report import print_comparison

    long_scenario = "refactor-the-parser-and-keep-every-test-green-in-the-workspace"
    a = write_run(
        tmp_path / "opencode-with-a-rather-long-directory-name",
        {(long_scenario, "openrouter/qwen/qwen3-coder-480b-a35b-instruct", "build"): SLOW},
    )
    b = write_run(
        tmp_path / "claude-code-with-a-rather-long-directory-name",
        {(long_scenario, "anthropic/claude-sonnet-4-5-20250929-thinking", "build"): FAST},
    )
    console = Console(width=80, record=True, file=io.StringIO())
    print_comparison(compare_runs([a, b]), console)
    text = console.export_text()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    flat = "".join(text.split())
    assert long_scenario in flat and "qwen3-coder-480b-a35b-instruct" in flat


# -- runs made by `profile run` ---------------------------------------------------------


@pytest.fixture(scope="module")
def model() -> ScriptedBackend:
    return ScriptedBackend("model", models=("scripted",))


@pytest.fixture(scope="module")
def gateway(model: ScriptedBackend) -> Iterator[RunningServer]:
    with running_gateway({"model": model}, models=[{"name": "scripted", "backend": "model"}]) as gw:
        yield gw


def test_compare_two_real_profile_runs(
    gateway: RunningServer, model: ScriptedBackend, tmp_path: Path
) -> None:
    spec = {
        "models": ["scripted"],
        "iterations": 2,
        "scenarios": [{"id": "hello", "prompt": "Say hello.", "checks": [{"completes": True}]}],
    }
    scenarios = tmp_path / "s.yaml"
    scenarios.write_text(json.dumps(spec))  # JSON is YAML
    for name in ("first", "second"):
        model.queue.clear()
        model.enqueue(*[Script(text=["Hello", " there."]) for _ in range(2)])
        result = CliRunner().invoke(
            cli,
            [
                *("profile", "run", str(scenarios), "--provider", "agent"),
                *("--gateway-url", gateway.url, "--out", str(tmp_path / name), "--quiet"),
            ],
            catch_exceptions=False,
        )
        assert result.exit_code == 0, result.output
    result = _compare(
        str(tmp_path / "first"), str(tmp_path / "second"), "--out", str(tmp_path / "c")
    )
    assert result.exit_code == 0, result.output
    (c,) = json.loads((tmp_path / "c" / "comparison.json").read_text())["comparisons"]
    assert c["a"]["providers"] == ["agent"] and c["differs_in"] == {}
    (hello,) = c["scenarios"]
    assert hello["pass_rate"]["a"] == {"passed": 2, "iterations": 2, "rate": 1.0}
    assert hello["tokens"]["a"]["iterations"] == 2 and hello["tokens"]["a"]["mean"] > 0
    # 2 vs 2 iterations: never distinguishable (the smallest p is 2/6).
    assert hello["duration_ms"]["p_value"] >= 1 / 3
    assert hello["duration_ms"]["verdict"].startswith(("not distinguishable", "equal"))


def test_each_scenario_is_marked_improved_regressed_or_unchanged(
    two_models: tuple[Path, Path],
) -> None:
    """B is slower on ``build`` beyond doubt (its pass rate the same): regressed; on
    ``fix`` B passed 1 of 3 against 3 of 3, too few to tell, with no real difference of
    the means: unchanged. Swapped, the slower run is the baseline: improved."""
    (forward,) = compare_runs(list(two_models))
    build, fix = forward.scenarios
    assert build.means["duration_ms"].distinguishable and not build.pass_rate.distinguishable
    assert (build.scenario, build.status) == ("build", "regressed")
    assert (fix.scenario, fix.status) == ("fix", "unchanged")
    (backward,) = compare_runs(list(reversed(two_models)))
    assert [g.status for g in backward.scenarios] == ["improved", "unchanged"]
    markdown = comparison_markdown([forward])
    assert "| build | **regressed** |" in markdown and "| fix | **unchanged** |" in markdown
    page = html_comparison(report_dict([forward]))
    assert '<td class="status status-regressed">regressed</td>' in page

"""The suite's own harness under failure: a worker that dies, a test that hangs.

Each test runs a small pytest session in a subprocess, on two pytest-xdist workers with
``tests/parallel.py``'s scheduler and ``tests/hang_guard.py``, over modules written
into a temporary directory, and reads its summary line. What must hold is what
``make test`` needs on a bad day: the run ends by itself, the test that died or hung
is one failure that says where, and every other test still ran.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.waiting import scaled

ROOT = Path(__file__).resolve().parents[2]
_SUMMARY = re.compile(
    r"^=* ?(?P<line>[0-9]+ (?:passed|failed)[^=\n]* in [0-9.]+s[^=\n]*?) ?=*$", re.M
)

_CONFTEST = 'pytest_plugins = ["tests.parallel", "tests.hang_guard"]\n'
# Only the plugins the harness needs: the suite's own entry-point plugins (schemathesis,
# hypothesis, pytest-asyncio...) would double each run's start-up time.
_INI = "[pytest]\naddopts = -p xdist\n"
_QUICK = textwrap.dedent(
    """
    import pytest

    @pytest.mark.parametrize("n", range(4))
    def test_quick(n):
        assert n >= 0
    """
)


def _run(directory: Path, modules: dict[str, str], **env: str) -> tuple[str, str]:
    """pytest on two workers over ``modules``; its summary line and whole output."""
    (directory / "conftest.py").write_text(_CONFTEST, encoding="utf-8")
    (directory / "pytest.ini").write_text(_INI, encoding="utf-8")
    for name, text in modules.items():
        (directory / name).write_text(textwrap.dedent(text), encoding="utf-8")
    environment = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "LLMBRIDGE_TEST_TIMEOUT_SCALE": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        **env,
    }
    environment.pop("PYTEST_XDIST_WORKER", None)
    environment.pop("PYTEST_XDIST_WORKER_COUNT", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:randomly", "-q", str(directory)],
        cwd=directory,
        env=environment,
        capture_output=True,
        text=True,
        timeout=scaled(300),
        check=False,
    )
    output = done.stdout + done.stderr
    found = _SUMMARY.search(output)
    assert found is not None, output
    return found["line"], output


def test_a_worker_that_dies_leaves_every_other_test_to_run(tmp_path: Path) -> None:
    """pytest-xdist alone hands a dead worker's finished modules out again, a live
    worker gets nothing to run and the run waits for ever (tests/parallel.py)."""
    modules = {f"test_quick_{n}.py": _QUICK for n in range(5)}
    modules["test_dies.py"] = """
        import os
        import signal

        def test_before():
            pass

        def test_kills_its_worker():
            os.kill(os.getpid(), signal.SIGKILL)

        def test_after_one():
            pass

        def test_after_two():
            pass
    """
    summary, output = _run(tmp_path, modules)
    assert summary.startswith("1 failed, 23 passed"), output
    assert "crashed while running 'test_dies.py::test_kills_its_worker'" in output


def test_a_hung_coroutine_fails_with_the_tasks_stacks_and_the_module_goes_on(
    tmp_path: Path,
) -> None:
    modules = {
        "test_quick.py": _QUICK,
        "test_hangs.py": """
            import asyncio

            async def wait_for_ever():
                await asyncio.Event().wait()

            def test_hangs():
                asyncio.run(wait_for_ever())

            def test_next():
                pass
        """,
    }
    summary, output = _run(tmp_path, modules, LLMBRIDGE_TEST_HANG_GUARD_S="3")
    assert summary.startswith("1 failed, 5 passed"), output
    assert "HangGuardTimeout" in output
    assert "hang guard" in output
    assert "in wait_for_ever" in output  # the task's own stack, not only the loop's select


def test_a_test_that_ignores_the_guard_ends_its_worker_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    modules = {
        "test_quick.py": _QUICK,
        "test_stubborn.py": """
            import threading

            def block_for_ever():
                while True:
                    try:
                        threading.Event().wait()
                    except BaseException:  # the guard's interruption, swallowed
                        pass

            def test_stubborn():
                block_for_ever()

            def test_next():
                pass
        """,
    }
    summary, output = _run(
        tmp_path, modules, LLMBRIDGE_TEST_HANG_GUARD_S="2", LLMBRIDGE_TEST_HANG_GRACE_S="2"
    )
    assert summary.startswith("1 failed, 5 passed"), output
    assert "crashed while running 'test_stubborn.py::test_stubborn'" in output
    assert "in block_for_ever" in output  # the stacks the worker left behind

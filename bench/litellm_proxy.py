"""The LiteLLM proxy as the compare and frontier scenarios run it: its own virtualenv,
its config, its command line and environment.

LiteLLM is a benchmark-only dependency, never a runtime one, and its pins (openai,
pydantic, httpx, ...) conflict with llmbridge's dev pins, so it lives in its own
virtualenv, ``bench/.venv-litellm`` (git-ignored), installed from the exact pins in
``bench/requirements-litellm.txt``. ``ensure_venv`` creates or updates it when the
requirements file changed since the last install (a hash of the file is kept in the
venv), printing pip's progress to stderr.

Why ``litellm[proxy]==1.106.2`` and not the newest: every later release the registry
here serves (1.106.3 and up, and several 1.103/1.104 patch releases) requires
``certifi>=2026.10.19``, newer than any certifi the registry serves, so pip cannot
resolve them. No 1.107.x is served at all (1.107.0 is the release reported as
compromised).

The proxy runs with its defaults, except what keeps it offline and quiet:

- one uvicorn worker (``--num_workers 1``), as llmbridge serves with one process;
- the bundled model cost map (``LITELLM_LOCAL_MODEL_COST_MAP``; otherwise it fetches
  one from GitHub at start-up), no database, no callbacks, no telemetry;
- no master key (``general_settings.dangerously_permit_weak_or_unset_master_key``,
  which this version demands explicitly): llmbridge runs without API keys too, so
  neither side authenticates;
- ``LITELLM_LOG=ERROR``, which also turns off uvicorn's per-request access log
  (llmbridge's gateway logs at ``warning``);
- ``LITELLM_MODE=PRODUCTION``, so it loads no ``.env`` file;
- keep-alive 300 s (its default is 5 s), so the load generator's pooled connections
  survive the pauses while other targets are measured.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from fast_backend import DEFAULT_MODEL

__all__ = [
    "REQUIREMENTS",
    "VENV",
    "config_yaml",
    "ensure_venv",
    "installed_version",
    "proxy_argv",
    "venv_python",
]

BENCH_DIR = Path(__file__).resolve().parent
REQUIREMENTS = BENCH_DIR / "requirements-litellm.txt"
VENV = BENCH_DIR / ".venv-litellm"
_STAMP = VENV / ".requirements.sha256"

ENVIRONMENT = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOG": "ERROR",
    "LITELLM_MODE": "PRODUCTION",
    "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True",
    "DISABLE_SCHEMA_UPDATE": "True",
}


def venv_python() -> Path:
    return VENV / "bin" / "python"


def _requirements_hash() -> str:
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()


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


def ensure_venv(say: Callable[[str], None]) -> Path:
    """The venv's python, after creating or updating the venv if the pins changed."""
    python = venv_python()
    wanted = _requirements_hash()
    if python.exists() and _STAMP.exists() and _STAMP.read_text().strip() == wanted:
        return python
    if not python.exists():
        say(f"creating the LiteLLM virtualenv in {VENV} (first run only)")
        _stream([sys.executable, "-m", "venv", str(VENV)], "[venv]")
    say(f"installing {REQUIREMENTS.name} into it (a few minutes the first time)")
    _stream(
        [str(python), "-m", "pip", "install", "--progress-bar", "off", "-r", str(REQUIREMENTS)],
        "[pip]",
    )
    _STAMP.write_text(wanted + "\n")
    say("LiteLLM virtualenv ready")
    return python


def installed_version(package: str = "litellm") -> str:
    """The version of ``package`` in the venv ('' if it cannot be read)."""
    try:
        done = subprocess.run(
            [
                str(venv_python()),
                "-c",
                f"import importlib.metadata as m; print(m.version({package!r}))",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def config_yaml(backend_port: int) -> str:
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


def proxy_argv(config: Path, port: int, workers: int = 1) -> list[str]:
    """The command line, with the environment set through ``env`` (which execs, so the
    process id is the proxy's own)."""
    return [
        "env",
        *(f"{k}={v}" for k, v in ENVIRONMENT.items()),
        str(VENV / "bin" / "litellm"),
        "--config",
        str(config),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        str(workers),
        "--keepalive_timeout",
        "300",
    ]

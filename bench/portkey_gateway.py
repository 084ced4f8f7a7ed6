"""The Portkey open-source gateway as ``bench/compare.py`` runs it: its npm folder, its
command line, and the headers that route a request to the benchmark's backend.

Portkey (npm ``@portkey-ai/gateway``, pinned to 1.15.2 in ``bench/portkey/package.json``
with its ``package-lock.json``) is a benchmark-only dependency, never a runtime one. It
lives in its own npm folder, ``bench/portkey``; ``ensure_installed`` runs ``npm ci``
there when ``node_modules`` (git-ignored) is missing or older than the lock file.

How it runs: ``node --require bench/portkey/preload.cjs .../build/start-server.js
--port=N --headless``, one Node process (as llmbridge and LiteLLM each run one). The
preload binds it to 127.0.0.1 (its server listens on every interface otherwise) and
gives it LiteLLM's keep-alive of 300 s. It has no config file: each request names its
provider in headers, ``x-portkey-provider: openai`` with ``x-portkey-custom-host`` set
to the fast backend's ``/v1`` (how Portkey reaches any OpenAI-compatible server), and a
dummy bearer key. The body is byte-identical to llmbridge's and LiteLLM's.

Non-streaming only: on Node 20 (the Node here, v20.20.2) every streamed request fails
with ``{"status":"failure","message":"Something went wrong"}`` and, in its log,
``tryTargetsRecursively error: immutable ... at _Headers.append`` (it appends a header
to the immutable ``Headers`` of the upstream's streamed ``Response``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

__all__ = ["PACKAGE_DIR", "ensure_installed", "gateway_argv", "headers", "installed_version"]

BENCH_DIR = Path(__file__).resolve().parent
PACKAGE_DIR = BENCH_DIR / "portkey"
_MODULE = PACKAGE_DIR / "node_modules" / "@portkey-ai" / "gateway"
_LOCK = PACKAGE_DIR / "package-lock.json"
_INSTALLED = PACKAGE_DIR / "node_modules" / ".package-lock.json"
HEALTH_PATH = "/"
"""``GET /`` answers "AI Gateway says hey!" once it listens."""


def ensure_installed(say: Callable[[str], None]) -> None:
    """``npm ci`` in ``bench/portkey`` unless its node_modules matches the lock file."""
    fresh = _INSTALLED.exists() and _INSTALLED.stat().st_mtime >= _LOCK.stat().st_mtime
    if (_MODULE / "package.json").exists() and fresh:
        return
    say(f"installing the Portkey gateway into {PACKAGE_DIR / 'node_modules'} (npm ci)")
    # --ignore-scripts: its "prepare" script runs husky, a git hook installer.
    argv = ["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"]
    done = subprocess.run(
        argv, cwd=PACKAGE_DIR, capture_output=True, text=True, timeout=600, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"npm ci in {PACKAGE_DIR} failed:\n{done.stdout}{done.stderr}"[-2000:])


def installed_version() -> str:
    """The installed ``@portkey-ai/gateway`` version ('' if it cannot be read)."""
    try:
        return str(json.loads((_MODULE / "package.json").read_text())["version"])
    except (OSError, ValueError, KeyError):
        return ""


def gateway_argv(port: int) -> list[str]:
    return [
        "node",
        "--require",
        str(PACKAGE_DIR / "preload.cjs"),
        str(_MODULE / "build" / "start-server.js"),
        f"--port={port}",
        "--headless",
    ]


def headers(backend_port: int) -> dict[str, str]:
    """What routes one request through Portkey to the fast backend's OpenAI API."""
    return {
        "x-portkey-provider": "openai",
        "x-portkey-custom-host": f"http://127.0.0.1:{backend_port}/v1",
        "authorization": "Bearer sk-bench-dummy",
    }


if __name__ == "__main__":
    ensure_installed(lambda message: print(message, file=sys.stderr))
    print(installed_version())

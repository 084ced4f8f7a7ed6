"""Where the end-to-end tests find the Node clients they drive (Claude Code, Codex, the
Gemini CLI, OpenCode, ollama-js, @google/genai), and which version each should be.

By default that is ``tests/e2e/node_modules``, the versions pinned in
``tests/e2e/package.json`` that ``make test`` installs. ``make compat`` (tests/compat/)
installs the newest published releases in a scratch directory and names its
``node_modules`` in ``LLMBRIDGE_E2E_NODE_MODULES``: the tests then drive those, and
expect whatever version npm installed there instead of the pin. The MCP servers the tests
use as upstreams (tests/mcp/npm_servers.py) stay the pinned ones either way.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

E2E_DIR = Path(__file__).resolve().parent
PINNED_NODE_MODULES = E2E_DIR / "node_modules"
"""Where ``make test`` installs the pinned clients."""
NODE_MODULES_VARIABLE = "LLMBRIDGE_E2E_NODE_MODULES"
"""The environment variable ``make compat`` sets to the newest clients' ``node_modules``."""
PINS: dict[str, str] = json.loads((E2E_DIR / "package.json").read_text(encoding="utf-8"))[
    "dependencies"
]
"""The npm packages ``make test`` installs, by name (or npm alias): their versions."""


def node_modules_from(environ: Mapping[str, str]) -> Path:
    """The ``node_modules`` that ``environ`` names, or the pinned one."""
    named = environ.get(NODE_MODULES_VARIABLE, "")
    return Path(named).resolve() if named else PINNED_NODE_MODULES


NODE_MODULES = node_modules_from(os.environ)
"""The ``node_modules`` the tests drive the clients from."""
COMPAT = NODE_MODULES != PINNED_NODE_MODULES
"""Whether this run drives the newest releases (``make compat``) instead of the pins."""
BIN = NODE_MODULES / ".bin"


def installed_version(node_modules: Path, package: str) -> str | None:
    """The version of ``package`` installed in ``node_modules`` (its package.json), or
    None when it is not there."""
    manifest = node_modules / package / "package.json"
    try:
        version = json.loads(manifest.read_text(encoding="utf-8"))["version"]
    except (OSError, ValueError, KeyError):
        return None
    return str(version)


def expected_version(package: str) -> str:
    """The version the tests expect of ``package``: its pin, or in compat mode whatever
    npm installed (``"(not installed)"`` when nothing was, which the tests' install check
    then reports)."""
    if not COMPAT:
        return PINS[package]
    return installed_version(NODE_MODULES, package) or "(not installed)"


def node_script(script: Path) -> Path:
    """The path to run ``script`` (one of this directory's ``.mjs`` files) from so that
    its imports resolve to the clients under test. Node resolves an ES module's imports
    from the script's own directory (never NODE_PATH, and through a symlink's target),
    so in compat mode the script is copied next to the newest clients' ``node_modules``."""
    if not COMPAT:
        return script
    copy = NODE_MODULES.parent / script.name
    shutil.copyfile(script, copy)
    return copy

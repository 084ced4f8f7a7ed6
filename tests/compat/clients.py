"""The clients ``make compat`` checks: each one's package, the dialect it speaks to the
gateway, where its pin is, how to read the version installed, and which test modules
prove it.

The Node clients are the ones the end-to-end tests drive from tests/e2e/node_modules
(tests/e2e/clients.py); the Python SDKs are the official clients the gateway's tests
use, and the modules that use each are found by what they import, so a new test module
is counted without editing this list.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Client:
    """One client whose newest release is checked."""

    name: str
    """As the table prints it."""
    package: str
    """The npm or PyPI package, as its installer spells it."""
    ecosystem: str
    """``npm`` or ``pypi``."""
    dialect: str
    """What it speaks to the gateway (or, for OpenCode, what the gateway speaks to it)."""
    modules: tuple[str, ...] = ()
    """The test modules that prove it (paths from the repository root); for an SDK,
    filled in by ``sdk_modules``."""


NODE_CLIENTS: tuple[Client, ...] = (
    Client(
        "Claude Code",
        "@anthropic-ai/claude-code",
        "npm",
        "Anthropic Messages",
        ("tests/e2e/test_claude_code.py", "tests/e2e/test_claude_code_discovery.py"),
    ),
    Client("Codex CLI", "@openai/codex", "npm", "OpenAI Responses", ("tests/e2e/test_codex.py",)),
    Client(
        "Gemini CLI",
        "@google/gemini-cli",
        "npm",
        "Gemini generateContent",
        ("tests/e2e/test_gemini_cli.py",),
    ),
    Client(
        "OpenCode server",
        "opencode-ai",
        "npm",
        "OpenCode (a backend of the gateway)",
        ("tests/e2e/test_opencode.py", "tests/e2e/test_opencode_embedded.py"),
    ),
    Client(
        "@google/genai (JS)",
        "@google/genai",
        "npm",
        "Google Interactions",
        ("tests/e2e/test_genai_js.py",),
    ),
    Client("ollama-js", "ollama", "npm", "Ollama", ("tests/e2e/test_ollama_js.py",)),
)

PREVIOUS_CLAUDE_ALIAS = "claude-code-previous"
"""The npm alias of the previous Claude Code pin, which ``make test`` also runs and
``make compat`` does not (only the newest release matters there)."""

SDK_CLIENTS: tuple[Client, ...] = (
    Client("openai (Python)", "openai", "pypi", "OpenAI chat, completions, Responses"),
    Client("anthropic (Python)", "anthropic", "pypi", "Anthropic Messages"),
    Client("google-genai (Python)", "google-genai", "pypi", "Gemini generateContent, Interactions"),
    Client("ollama (Python)", "ollama", "pypi", "Ollama"),
)

SDK_IMPORTS: Mapping[str, re.Pattern[str]] = {
    "openai": re.compile(r"^\s*(import openai\b|from openai\b)", re.MULTILINE),
    "anthropic": re.compile(r"^\s*(import anthropic\b|from anthropic\b)", re.MULTILINE),
    "google-genai": re.compile(r"^\s*from google import genai\b|^\s*from google\.genai\b", re.M),
    "ollama": re.compile(r"^\s*(import ollama\b|from ollama\b)", re.MULTILINE),
}
"""How a test module shows it drives an SDK: it imports it."""


def sdk_modules(sources: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """For each SDK package, the test modules (of ``sources``: path to text) whose names
    start with ``test_`` and that import it, sorted."""
    found: dict[str, tuple[str, ...]] = {}
    for package, pattern in SDK_IMPORTS.items():
        found[package] = tuple(
            sorted(
                path
                for path, text in sources.items()
                if Path(path).name.startswith("test_") and pattern.search(text)
            )
        )
    return found


def with_modules(clients: Iterable[Client], modules: Mapping[str, tuple[str, ...]]) -> list[Client]:
    """``clients`` with the test modules ``modules`` names for their packages."""
    return [
        Client(c.name, c.package, c.ecosystem, c.dialect, modules.get(c.package, c.modules))
        for c in clients
    ]


def npm_pins(package_json: str) -> dict[str, str]:
    """tests/e2e/package.json's dependencies: package (or alias) to its pinned version
    (an alias's ``npm:pkg@X`` gives ``X``)."""
    dependencies: dict[str, str] = json.loads(package_json)["dependencies"]
    return {name: spec.rpartition("@")[2] for name, spec in dependencies.items()}


def python_pins(pyproject: str) -> dict[str, str]:
    """The ``name==version`` pins of pyproject.toml's ``dev`` extra, by lower-case name."""
    dev: list[str] = tomllib.loads(pyproject)["project"]["optional-dependencies"]["dev"]
    pins: dict[str, str] = {}
    for requirement in dev:
        name, sep, version = requirement.partition("==")
        if sep:
            pins[name.strip().lower()] = version.strip()
    return pins


def pip_installed(pip_list_json: str) -> dict[str, str]:
    """``pip list --format=json``'s output: lower-case name to version."""
    return {str(row["name"]).lower(): str(row["version"]) for row in json.loads(pip_list_json)}

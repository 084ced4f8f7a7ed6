"""The command-line agents' sections of a scenarios file (``claude_code``, ``codex``,
``gemini_cli``): settings only, so the scenarios schema (scenarios.py) reads them
without importing the providers that run the CLIs."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ClaudeCodeSettings", "CliAgentSettings", "CodexSettings", "GeminiCliSettings"]


class CliAgentSettings(BaseModel):
    """A CLI agent's section of a scenarios file (``claude_code``, ``gemini_cli``,
    ``codex``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str | None = None
    """The binary; by default the CLI's usual name on ``PATH``."""
    endpoint: str | None = None
    """The model endpoint's base URL (an llmbridge gateway); by default
    ``profile run --gateway-url``."""
    api_key: str = "llmbridge"
    """What the CLI sends as its key (a gateway without ``api_keys`` takes any)."""
    permission: Literal["allow", "deny", "ask-reject"] = "deny"
    environment: dict[str, str] = Field(default_factory=dict)
    """Variables added to the CLI's clean environment (before each mode's own)."""
    args: tuple[str, ...] = ()
    """More command-line arguments for every run (``[--tools, Bash]``, say)."""


class ClaudeCodeSettings(CliAgentSettings):
    """The scenarios file's ``claude_code`` section."""

    instructions: str | None = None
    """Replaces Claude Code's own system prompt (``--system-prompt``): its own is
    thousands of tokens, more than a small local model's context holds. The mode's
    and the scenario's instructions still follow it (``--append-system-prompt``)."""


class CodexSettings(CliAgentSettings):
    """The scenarios file's ``codex`` section."""

    instructions: str | None = None
    """Replaces Codex's own base instructions (``model_instructions_file``)."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Merged into ``config.toml`` (nested tables as mappings)."""


class GeminiCliSettings(CliAgentSettings):
    """The scenarios file's ``gemini_cli`` section."""

    instructions: str | None = None
    """Replaces Gemini CLI's own system prompt (``GEMINI_SYSTEM_MD``): its own is
    thousands of tokens, more than a small local model's context holds. The mode's
    and the scenario's instructions still follow it (``GEMINI.md``)."""
    settings: dict[str, Any] = Field(default_factory=dict)
    """Merged into ``~/.gemini/settings.json`` (``{tools: {core: [run_shell_command]}}``
    offers only the shell tool)."""

"""Modes (seed 004's ``ModeResolver``): what a mode name means to a provider.

A mode is one way of running the agent under test. It resolves to the environment
variables the agent's process gets (added to the provider's base environment, with
directories put in front of ``PATH``), the system instructions every session of the
mode starts with, and, for OpenCode, the agent (``build``, ``plan`` or one the
configuration defines) its prompts go to. In a scenarios file a mode is either a
bare name, meaning that OpenCode agent (``default``: OpenCode's own default, no
agent named), or a mapping::

    modes:
      - plan                                  # OpenCode's plan agent
      - name: terse
        agent: plain                          # optional
        system: Answer in one sentence.
        environment: {LANG: C}
        path: [tools/bin]                     # relative to the scenarios file

Seed 004 reuses an OpenCode server per (mode, model) group and across modes whose
environment is identical: a server's process environment is all a mode changes on
it (the agent and the instructions travel with each prompt), so ``server_key``
leaves the mode's name, agent and instructions out, and ``order_groups`` puts the
groups sharing a server next to each other.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from llmbridge.profiler.records.types import ProviderConfig

__all__ = [
    "DEFAULT_MODE",
    "ModeResolver",
    "ModeSpec",
    "ResolvedMode",
    "combine_instructions",
    "order_groups",
    "server_key",
]

Permission = Literal["allow", "deny", "ask-reject"]

DEFAULT_MODE = "default"
"""The mode that names no agent: OpenCode's default one."""


class ModeSpec(BaseModel):
    """One mode as the scenarios file declares it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    agent: str | None = None
    """The OpenCode agent the prompts go to; ``None``: OpenCode's default."""
    system: str | None = None
    """System instructions for every session of this mode (before the scenario's)."""
    environment: dict[str, str] = Field(default_factory=dict)
    path: tuple[str, ...] = ()
    """Directories put in front of ``PATH`` (relative ones: to the scenarios file)."""

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        base = Path((info.context or {}).get("base_dir", "."))
        return tuple(str((base / entry).resolve()) for entry in value)

    @classmethod
    def named(cls, name: str) -> ModeSpec:
        """A bare mode name: the OpenCode agent of that name (none for ``default``)."""
        return cls(name=name, agent=None if name == DEFAULT_MODE else name)


@dataclass(frozen=True, slots=True)
class ResolvedMode:
    name: str
    environment: dict[str, str] = field(default_factory=dict)
    system_instructions: str | None = None
    agent: str | None = None


class ModeResolver:
    """Mode names to ``ResolvedMode``s, over a provider's base environment."""

    def __init__(
        self, modes: Sequence[ModeSpec], base_environment: Mapping[str, str] | None = None
    ) -> None:
        self._modes = {mode.name: mode for mode in modes}
        self._base = dict(base_environment or {})

    def resolve(self, name: str) -> ResolvedMode:
        mode = self._modes.get(name) or ModeSpec.named(name)
        environment = {**self._base, **mode.environment}
        if mode.path:
            inherited = environment.get("PATH") or os.environ.get("PATH", "/usr/bin:/bin")
            environment["PATH"] = os.pathsep.join((*mode.path, inherited))
        return ResolvedMode(
            name=mode.name,
            environment=environment,
            system_instructions=mode.system or None,
            agent=mode.agent,
        )

    def config(
        self,
        name: str,
        model: str,
        *,
        permission: Permission = "deny",
        options: Mapping[str, Any] | None = None,
    ) -> ProviderConfig:
        """The provider configuration for the (mode, model) group."""
        mode = self.resolve(name)
        return ProviderConfig(
            model=model,
            mode=mode.name,
            system_instructions=mode.system_instructions,
            environment=mode.environment,
            agent=mode.agent,
            permission=permission,
            options=dict(options or {}),
        )


def combine_instructions(mode: str | None, scenario: str | None) -> str | None:
    """A session's system instructions: the mode's, then the scenario's."""
    parts = [text for text in (mode, scenario) if text]
    return "\n\n".join(parts) if parts else None


def server_key(config: ProviderConfig) -> str:
    """What a spawned server depends on: configs with equal keys can share one."""
    return json.dumps(
        {
            "model": config.model,
            "environment": sorted(config.environment.items()),
            "permission": config.permission,
            "options": config.options,
        },
        sort_keys=True,
        default=str,
    )


def order_groups(configs: Sequence[ProviderConfig]) -> list[ProviderConfig]:
    """``configs`` with the groups that can share a server next to each other (in the
    order each server is first needed, and the file's order within a server)."""
    first: dict[str, int] = {}
    for index, config in enumerate(configs):
        first.setdefault(server_key(config), index)
    return sorted(configs, key=lambda c: first[server_key(c)])

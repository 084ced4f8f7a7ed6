"""From a scenarios file to a provider and its (mode, model) configurations."""

from __future__ import annotations

from llmbridge.profiler.modes import ModeResolver, Permission, order_groups
from llmbridge.profiler.provider import SessionProvider
from llmbridge.profiler.scenarios import ScenarioFile
from llmbridge.profiler.types import ProviderConfig

__all__ = ["configs_for", "make_provider"]


def make_provider(
    kind: str,
    spec: ScenarioFile,
    *,
    opencode_command: str = "opencode",
    gateway_url: str | None = None,
) -> SessionProvider:
    if kind == "opencode":
        from llmbridge.profiler.opencode import OpenCodeSessionProvider

        command = spec.opencode.command or opencode_command
        return OpenCodeSessionProvider(command=command, prices=spec.prices)
    from llmbridge.profiler.agent import AgentSessionProvider

    return AgentSessionProvider(spec.agent, gateway_url=gateway_url, prices=spec.prices)


def configs_for(kind: str, spec: ScenarioFile) -> list[ProviderConfig]:
    """One configuration per (model, mode) group, each mode resolved by the
    ``ModeResolver``: in the file's order, except that the groups which can share an
    OpenCode server (the same model and environment) run one after another."""
    options: dict[str, object] = {}
    permission: Permission = "deny"
    environment: dict[str, str] = {}
    if kind == "opencode":
        settings = spec.opencode
        options = {"endpoint": settings.endpoint, "opencode_config": settings.opencode_config}
        permission, environment = settings.permission, dict(settings.environment)
    resolver = ModeResolver(spec.modes, environment)
    configs = [
        resolver.config(mode, model, permission=permission, options=options)
        for model in spec.models
        for mode in spec.mode_names
    ]
    return order_groups(configs)

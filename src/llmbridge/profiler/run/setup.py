"""From a scenarios file to providers and their (mode, model) configurations.

``profile run`` may name several providers; each gets the file's models in its own
form (``provider_model``): the file names gateway models (``smollm2``), which the
agent service and the command-line agents (Claude Code, Codex, Gemini CLI) take as
they are, and OpenCode as ``PROVIDER/MODEL`` of the provider its configuration
defines (``gw/smollm2``; a name that already has a ``PROVIDER/`` part is kept, as
single-provider files have always written it). With ``--gateway-url`` and no
``opencode.endpoint.url`` in the file, OpenCode's ``gw`` provider is that gateway
(with the file's ``limits``, if it gives them).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from llmbridge.profiler.providers.provider import SessionProvider
from llmbridge.profiler.records.metrics import Price
from llmbridge.profiler.records.modes import ModeResolver, Permission, order_groups
from llmbridge.profiler.records.scenarios import ScenarioFile
from llmbridge.profiler.records.types import ProviderConfig
from llmbridge.profiler.run.runner import ProviderPlan

__all__ = [
    "OPENCODE_PROVIDER",
    "PROVIDERS",
    "configs_for",
    "groups_for",
    "make_provider",
    "plan_for",
    "provider_model",
]

PROVIDERS = ("opencode", "agent", "claude-code", "codex", "gemini-cli")
OPENCODE_PROVIDER = "gw"
"""The OpenCode provider a bare gateway model name is given (``gw/NAME``)."""


def provider_model(kind: str, model: str) -> str:
    """The file's ``model`` as provider ``kind`` names it."""
    if kind == "opencode" and "/" not in model:
        return f"{OPENCODE_PROVIDER}/{model}"
    return model


def _prices(kind: str, spec: ScenarioFile) -> dict[str, Price]:
    """The file's prices, also under each model's name in the provider's form."""
    prices = dict(spec.prices)
    for model in spec.models:
        if model in spec.prices:
            prices.setdefault(provider_model(kind, model), spec.prices[model])
    return prices


def make_provider(
    kind: str,
    spec: ScenarioFile,
    *,
    opencode_command: str = "opencode",
    gateway_url: str | None = None,
    command: str | None = None,
) -> SessionProvider:
    """The provider ``kind`` for ``spec``. ``command``: its binary, over the file's (a
    relative path is made absolute: the command-line agents run in their workspace)."""
    prices = _prices(kind, spec)
    if command and os.sep in command:
        command = str(Path(command).absolute())
    if kind == "opencode":
        from llmbridge.profiler.providers.opencode import OpenCodeSessionProvider

        binary = command or spec.opencode.command or opencode_command
        return OpenCodeSessionProvider(command=binary, prices=prices)
    if kind == "claude-code":
        from llmbridge.profiler.providers.claude_code import ClaudeCodeSessionProvider

        claude = spec.claude_code
        if command:
            claude = claude.model_copy(update={"command": command})
        return ClaudeCodeSessionProvider(claude, gateway_url=gateway_url, prices=prices)
    if kind == "gemini-cli":
        from llmbridge.profiler.providers.gemini_cli import GeminiCliSessionProvider

        gemini = spec.gemini_cli
        if command:
            gemini = gemini.model_copy(update={"command": command})
        return GeminiCliSessionProvider(gemini, gateway_url=gateway_url, prices=prices)
    if kind == "codex":
        from llmbridge.profiler.providers.codex import CodexSessionProvider

        codex = spec.codex
        if command:
            codex = codex.model_copy(update={"command": command})
        return CodexSessionProvider(codex, gateway_url=gateway_url, prices=prices)
    if kind != "agent":
        raise ValueError(f"unknown provider {kind!r} (one of {', '.join(PROVIDERS)})")
    from llmbridge.profiler.providers.agent import AgentSessionProvider

    return AgentSessionProvider(spec.agent, gateway_url=gateway_url, prices=prices)


def _opencode_endpoint(spec: ScenarioFile, gateway_url: str | None) -> Mapping[str, object] | None:
    """The file's ``opencode.endpoint``; its ``url`` (or the whole endpoint, when the
    file has none) is ``--gateway-url``'s OpenAI route when the file gives none."""
    endpoint = spec.opencode.endpoint
    if not gateway_url or (endpoint is not None and endpoint.get("url")):
        return endpoint
    return {**(endpoint or {}), "url": gateway_url.rstrip("/") + "/v1"}


def groups_for(
    kind: str, spec: ScenarioFile, *, gateway_url: str | None = None
) -> list[tuple[str, ProviderConfig]]:
    """One (the file's model name, configuration) per (model, mode) group, each mode
    resolved by the ``ModeResolver``: in the file's order, except that the groups
    which can share an OpenCode server (the same model and environment) run one
    after another."""
    options: dict[str, object] = {}
    permission: Permission = "deny"
    environment: dict[str, str] = {}
    if kind == "opencode":
        settings = spec.opencode
        endpoint = _opencode_endpoint(spec, gateway_url)
        options = {"endpoint": endpoint, "opencode_config": settings.opencode_config}
        permission, environment = settings.permission, dict(settings.environment)
    elif kind in ("claude-code", "gemini-cli", "codex"):
        # The section's environment is the CLI's base (cli_agent.base_environment).
        cli = {"claude-code": spec.claude_code, "gemini-cli": spec.gemini_cli}.get(kind, spec.codex)
        permission = cli.permission
    resolver = ModeResolver(spec.modes, environment)
    names: dict[tuple[str, str], str] = {}
    configs = []
    for model in spec.models:
        for mode in spec.mode_names:
            config = resolver.config(
                mode, provider_model(kind, model), permission=permission, options=options
            )
            names[(config.model, config.mode)] = model
            configs.append(config)
    return [(names[(c.model, c.mode)], c) for c in order_groups(configs)]


def configs_for(
    kind: str, spec: ScenarioFile, *, gateway_url: str | None = None
) -> list[ProviderConfig]:
    """The configurations of ``groups_for``, without the file's model names."""
    return [config for _, config in groups_for(kind, spec, gateway_url=gateway_url)]


def plan_for(
    kind: str,
    spec: ScenarioFile,
    *,
    opencode_command: str = "opencode",
    gateway_url: str | None = None,
    command: str | None = None,
) -> ProviderPlan:
    """The provider ``kind`` and its groups, ready for ``runner.run_plans``."""
    provider = make_provider(
        kind, spec, opencode_command=opencode_command, gateway_url=gateway_url, command=command
    )
    return ProviderPlan(provider, groups_for(kind, spec, gateway_url=gateway_url))

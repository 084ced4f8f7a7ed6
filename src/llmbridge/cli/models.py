"""``llmbridge models``: what the gateway serves, and from where."""

from __future__ import annotations

import asyncio
from typing import Any

import click

from llmbridge.cli.options import config_options, load_from_options
from llmbridge.core.model_info import ModelInfo
from llmbridge.gateway.config import GatewayConfig

__all__ = ["models"]


async def _collect(config: GatewayConfig) -> tuple[list[ModelInfo], list[str]]:
    from llmbridge.serving.models import open_models

    # Not started: listing asks each backend over its own connection, and starting
    # would load the embedded model or spawn OpenCode only to list one name.
    models = open_models(config, host=config.server.serving_host())
    try:
        listed = await models.list_models()
    finally:
        await models.aclose()
    backends = models.backends
    notes = [f"{r.name} -> {r.backend}:{r.model or '<same name>'}" for r in config.models]
    default = config.resolved_default_backend()
    if default and not config.restrict_models:
        target = config.default_model or getattr(backends[default], "public_name", None)
        notes.append(f"any other name -> {default}:{target or '<same name>'}")
    return listed, notes


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@config_options
def models(as_json: bool, config_path: str | None, **shortcuts: Any) -> None:
    """List the models served, with their backend and capabilities."""
    config = load_from_options(config_path, **shortcuts)
    listed, notes = asyncio.run(_collect(config))
    if as_json:
        import orjson

        rows = [
            {
                "name": m.name,
                "backend": m.backend,
                "backend_model": m.backend_model,
                "capabilities": sorted(m.capabilities),
                "context_length": m.context_length,
            }
            for m in listed
        ]
        click.echo(orjson.dumps({"models": rows, "routes": notes}, option=orjson.OPT_INDENT_2))
        return
    header = f"{'NAME':<28} {'BACKEND':<12} {'BACKEND MODEL':<28} {'CONTEXT':>8}  CAPABILITIES"
    click.echo(header)
    for m in listed:
        ctx = str(m.context_length or "-")
        caps = ",".join(sorted(m.capabilities))
        click.echo(f"{m.name:<28} {m.backend:<12} {m.backend_model:<28} {ctx:>8}  {caps}")
    if notes:
        click.echo("\nrouting:")
        for note in notes:
            click.echo(f"  {note}")

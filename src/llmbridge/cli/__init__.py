"""The ``llmbridge`` command: one module per command group, joined here."""

from __future__ import annotations

import click

from llmbridge import __version__
from llmbridge.cli.agent import agent
from llmbridge.cli.keys import keys
from llmbridge.cli.models import models
from llmbridge.cli.profile import profile
from llmbridge.cli.serve import serve
from llmbridge.cli.usage import usage
from llmbridge.core.errors import BackendUnavailableError

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="llmbridge")
def cli() -> None:
    """llmbridge: any LLM client (Ollama, OpenAI, Anthropic APIs), any LLM backend."""


cli.add_command(serve)
cli.add_command(models)
cli.add_command(profile)
cli.add_command(agent)
cli.add_command(keys)
cli.add_command(usage)


def main() -> None:
    try:
        cli(prog_name="llmbridge")
    except BackendUnavailableError as exc:
        # A backend that cannot be built (its package, its model file, its settings) is a
        # setup error: one line, as click says its own, not a traceback.
        click.echo(f"Error: {exc}", err=True)
        raise SystemExit(1) from None

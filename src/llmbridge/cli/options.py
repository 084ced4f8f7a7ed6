"""Options shared by the commands that read the gateway configuration."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from llmbridge.core.request_limits import RequestLimits
from llmbridge.gateway.config import ConfigError, GatewayConfig, load_config

__all__ = ["config_options", "db_option", "limit_options", "load_from_options"]

F = TypeVar("F", bound=Callable[..., Any])


def db_option(func: F) -> F:
    """``--db``: the agent database (``agent.database``), with its env var."""
    option = click.option(
        "--db",
        envvar="LLMBRIDGE_DB",
        metavar="URL",
        help="Agent database: a SQLite path or a postgresql:// URL "
        "[env LLMBRIDGE_DB; default ~/.local/share/llmbridge/agent.db].",
    )
    return option(func)


def config_options(func: F) -> F:
    """``--config``, the backend URL shortcuts, ``--api-key`` and ``--db``, each with its
    env var."""
    options = [
        click.option(
            "--config",
            "config_path",
            type=click.Path(dir_okay=False),
            envvar="LLMBRIDGE_CONFIG",
            help="YAML configuration file [env LLMBRIDGE_CONFIG].",
        ),
        click.option(
            "--ollama-url",
            envvar="LLMBRIDGE_OLLAMA_URL",
            help="Make this Ollama server the default backend [env LLMBRIDGE_OLLAMA_URL].",
        ),
        click.option(
            "--openai-url",
            envvar="LLMBRIDGE_OPENAI_URL",
            help="Make this OpenAI-compatible server the default backend "
            "[env LLMBRIDGE_OPENAI_URL].",
        ),
        click.option(
            "--openai-key",
            envvar="LLMBRIDGE_OPENAI_KEY",
            help="API key for --openai-url [env LLMBRIDGE_OPENAI_KEY].",
        ),
        click.option(
            "--opencode-url",
            envvar="LLMBRIDGE_OPENCODE_URL",
            help="Make this running OpenCode server (`opencode serve`) the default backend "
            "[env LLMBRIDGE_OPENCODE_URL; its password from OPENCODE_SERVER_PASSWORD].",
        ),
        click.option(
            "--opencode",
            is_flag=True,
            default=None,
            envvar="LLMBRIDGE_OPENCODE",
            help="Spawn an isolated OpenCode server (`opencode` on PATH) and make it the "
            "default backend [env LLMBRIDGE_OPENCODE].",
        ),
        click.option(
            "--opencode-model",
            envvar="LLMBRIDGE_OPENCODE_MODEL",
            help="PROVIDER/MODEL that OpenCode serves for names that are not an OpenCode "
            "PROVIDER/MODEL themselves [env LLMBRIDGE_OPENCODE_MODEL].",
        ),
        click.option(
            "--thinking",
            type=click.Choice(["drop", "strict"]),
            envvar="LLMBRIDGE_THINKING",
            help="Thinking asked of a model that cannot think: serve without it (drop, "
            "the default) or answer 400 thinking_not_supported (strict) [env LLMBRIDGE_THINKING].",
        ),
        click.option(
            "--tokenizer",
            type=click.Choice(["words", "backend"]),
            envvar="LLMBRIDGE_TOKENIZER",
            help="count_tokens: seed 001's word estimate (default) or the backend's exact "
            "tokenizer where it has one [env LLMBRIDGE_TOKENIZER].",
        ),
        *(
            click.option(
                f"--{family}-model",
                envvar=f"LLMBRIDGE_{family.upper()}_MODEL",
                help=f"Serve Claude {family} models (claude-*{family}*) with this model of the "
                f"default backend [env LLMBRIDGE_{family.upper()}_MODEL].",
            )
            for family in ("haiku", "sonnet", "opus")
        ),
        click.option(
            "--embedded-max-queue",
            type=click.IntRange(min=0),
            envvar="LLMBRIDGE_EMBEDDED_MAX_QUEUE",
            help="Requests that may wait for the embedded model; one more is a 503 with "
            "Retry-After [env LLMBRIDGE_EMBEDDED_MAX_QUEUE; default 8].",
        ),
        click.option(
            "--embedded-queue-timeout",
            type=click.FloatRange(min=0, min_open=True),
            envvar="LLMBRIDGE_EMBEDDED_QUEUE_TIMEOUT",
            help="Seconds a request may wait for the embedded model, then a 503 with "
            "Retry-After [env LLMBRIDGE_EMBEDDED_QUEUE_TIMEOUT; default 30].",
        ),
        click.option(
            "--embedded-max-embed-inputs",
            type=click.IntRange(min=1),
            envvar="LLMBRIDGE_EMBEDDED_MAX_EMBED_INPUTS",
            help="Inputs per embedding request to the embedded model; more is a 400 "
            "[env LLMBRIDGE_EMBEDDED_MAX_EMBED_INPUTS; default 256].",
        ),
        click.option(
            "--api-key",
            "api_keys",
            multiple=True,
            envvar="LLMBRIDGE_API_KEY",
            help="Require this key from clients (repeatable) [env LLMBRIDGE_API_KEY].",
        ),
    ]
    func = db_option(func)
    for option in reversed(options):
        func = option(func)
    return func


def load_from_options(config_path: str | None, **overrides: Any) -> GatewayConfig:
    try:
        return load_config(config_path, overrides)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc


_LIMIT_FLAGS = (
    ("max_messages", "messages in one conversation", 400),
    ("max_tools", "tool definitions in one request", 400),
    ("max_parts_per_message", "content parts of one message", 400),
    ("max_json_depth", "nesting of a request body's JSON (8 to 238)", 400),
    ("max_json_items", "values, keys and containers in one body", 400),
    ("offload_bytes", "bodies larger than this are parsed in a worker thread", None),
)


def limit_options(func: F) -> F:
    """``--max-messages`` and the other request limits (``server.limits``), each with
    its ``LLMBRIDGE_*`` env var."""
    defaults = RequestLimits()
    for name, what, status in reversed(_LIMIT_FLAGS):
        env = f"LLMBRIDGE_{name.upper()}"
        over = f"; over it, a {status}" if status else ""
        option = click.option(
            f"--{name.replace('_', '-')}",
            name,
            type=click.IntRange(min=0),
            envvar=env,
            help=f"Request limit: {what} [env {env}; default {getattr(defaults, name)}{over}].",
        )
        func = option(func)
    return func

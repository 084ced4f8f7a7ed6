"""``llmbridge serve``: run the gateway."""

from __future__ import annotations

import asyncio
import copy
import gc
import logging
import sys
from typing import Any

import click

from llmbridge import __version__
from llmbridge.cli.options import config_options, limit_options, load_from_options
from llmbridge.core.hosts import is_loopback_host
from llmbridge.core.model_info import ModelInfo
from llmbridge.features.thinking import THINKING_CAPABLE_PREFIXES, can_think
from llmbridge.gateway.config import DEFAULT_PORT, GatewayConfig
from llmbridge.web.auth import redact_query_keys

__all__ = ["serve"]

log = logging.getLogger("llmbridge")


class RedactQueryKeys(logging.Filter):
    """Takes API keys out of uvicorn's access log: Gemini clients may send theirs as
    ``?key=`` (web/auth.py), and uvicorn logs the path with its raw query string. The
    query is read as the auth reads it (``web.auth.redact_query_keys``: names
    percent-decoded), so a key sent as ``?%6Bey=`` is redacted too; a regex on the raw
    text missed it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                redact_query_keys(arg) if isinstance(arg, str) and "?" in arg else arg
                for arg in record.args
            )
        if isinstance(record.msg, str) and "?" in record.msg:
            record.msg = redact_query_keys(record.msg)
        return True


def access_log_config() -> dict[str, Any]:
    """uvicorn's own logging configuration with ``RedactQueryKeys`` on its access log."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["redact_query_keys"] = {"()": RedactQueryKeys}
    config["loggers"]["uvicorn.access"]["filters"] = ["redact_query_keys"]
    return config


def _model_lines(config: GatewayConfig, models: list[ModelInfo]) -> str:
    """Seed 001's startup box: what is served and which models can think and call tools."""
    overrides = {r.name: r for r in config.routes()}
    lines = ["  models:"]
    for info in models:
        route = overrides.get(info.name)
        thinks = can_think(info.backend_model or info.name, info, route.thinking if route else None)
        tools = route.tools if route and route.tools is not None else "tools" in info.capabilities
        flags = ", ".join(f for f, on in (("thinking", thinks), ("tools", tools)) if on) or "-"
        lines.append(f"    {info.name:<28} {info.backend}:{info.backend_model:<24} {flags}")
    if not models:
        lines.append("    (none listed yet; backends may be unreachable)")
    policy = "400 thinking_not_supported" if config.thinking == "strict" else "served without it"
    lines.append(
        f"  thinking: names starting {', '.join(THINKING_CAPABLE_PREFIXES)}; "
        f"asked of other models: {policy} (--thinking)"
    )
    return "\n".join(lines)


CLIENT_APIS: tuple[tuple[str, str, str], ...] = (
    ("Ollama API", "", "OLLAMA_HOST, ollama.Client(host=...)"),
    ("OpenAI chat, completions", "/v1", "OPENAI_BASE_URL, openai.OpenAI(base_url=...)"),
    ("OpenAI Responses", "/v1", "Codex: model_providers base_url, wire_api responses"),
    ("Anthropic API", "", "ANTHROPIC_BASE_URL (Claude Code), anthropic.Anthropic"),
    ("Gemini API", "", "GOOGLE_GEMINI_BASE_URL (Gemini CLI), google-genai base_url"),
)
"""Every client API the gateway serves: its name, the base URL's path a client is given
(the routes are below it: ``/api/chat``, ``/v1/chat/completions``, ``/v1/responses``,
``/v1/messages``, ``/v1beta/models/M:generateContent``) and the setting that points a
client there (README.md has the table per client)."""


def _banner(config: GatewayConfig, host: str, port: int, auth: str) -> str:
    """What ``llmbridge serve`` prints before it serves: where each client API is, the
    console, the backends and routes, auth. Short on purpose: with the database's line
    (store/migrate.py), the model list and uvicorn's own it stays within 20 lines."""
    base = f"http://{host}:{port}"
    lines = [f"llmbridge {__version__} listening on {base}; point clients at:"]
    for name, path, setting in CLIENT_APIS:
        lines.append(f"  {name:<25} {base + path:<28} {setting}")
    if config.server.master_key:
        lines.append(
            f"  console: {base}/ui/ (sign in with the master key); "
            f"admin API: {base}/admin/keys, /admin/usage"
        )
    if config.mcp.servers:
        names = ", ".join(config.mcp.servers)
        lines.append(f"  MCP: {base}/mcp (every server's tools), {base}/mcp/<server> ({names})")
    lines.append("  backends:")
    for name, backend in config.backends.items():
        where = getattr(backend, "url", None) or getattr(backend, "model_path", None) or ""
        default = "  (default)" if name == config.resolved_default_backend() else ""
        lines.append(f"    {name:<12} {backend.type:<9} {where}{default}")
    for route in config.routes():
        servers = ",".join(d.name for d in route.deployments)  # several: its deployments
        lines.append(f"  model {route.name} -> {servers}:{route.model or route.name}")
    if config.server.workers > 1:
        lines.append(f"  workers: {config.server.workers} (each listed in /health)")
    lines.append(f"  auth: {auth}")
    lines.append(f"  health: {base}/health; metrics: {base}/metrics")
    return "\n".join(lines)


def _auth_line(config: GatewayConfig) -> tuple[str, bool]:
    """The banner's auth line and whether auth is on: the keys are counted in the
    database the gateway will use (accounts/service.py decides the same way at start)."""
    from llmbridge.accounts.service import auth_summary, count_database_keys

    server = config.server
    database = config.database_url()
    count: int | None = None
    error: str | None = None
    if server.auth is not False:
        try:
            count = asyncio.run(count_database_keys(database))
        except Exception as exc:  # noqa: BLE001 - the gateway says it again at start
            error = type(exc).__name__
    static = len([k for k in server.api_keys if k])
    line = auth_summary(
        auth=server.auth,
        static_keys=static,
        master_key=server.master_key is not None,
        database_keys=count,
        database=database,
        error=error,
    )
    on = server.auth is True or (server.auth is None and bool(static or server.master_key or count))
    return line, on


@click.command()
@click.option("--host", envvar="LLMBRIDGE_HOST", help="Bind address [default 127.0.0.1].")
@click.option("--port", type=int, envvar="LLMBRIDGE_PORT", help=f"Port [default {DEFAULT_PORT}].")
@click.option(
    "--max-body-bytes",
    type=int,
    envvar="LLMBRIDGE_MAX_BODY_BYTES",
    help="Largest request body accepted [default 32 MB].",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    envvar="LLMBRIDGE_LOG_LEVEL",
)
@click.option("--access-log/--no-access-log", default=False, help="Log every request.")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help="Processes serving the port, each with its own backends (and embedded model); "
    "see docs/DEPLOY.md, Workers [env LLMBRIDGE_WORKERS; default 1].",
)
@click.option(
    "--redis-url",
    help="Share limits, in-flight counts and breakers across workers and replicas in this "
    "Redis, e.g. redis://127.0.0.1:6379/0 [env LLMBRIDGE_REDIS_URL; default: in process].",
)
@click.option(
    "--auth/--no-auth",
    "auth",
    default=None,
    envvar="LLMBRIDGE_AUTH",
    help="Require a key on the model APIs (--auth: even before any key exists) or never "
    "(--no-auth: open on purpose, database keys ignored) [env LLMBRIDGE_AUTH; default: "
    "on when there are --api-key keys, a master key or keys in the database].",
)
@click.option(
    "--master-key",
    help="The admin API's key (/admin/keys, /admin/usage); turns auth on, with the keys of "
    "`llmbridge keys create` [env LLMBRIDGE_MASTER_KEY; default: no admin API].",
)
@limit_options
@config_options
def serve(
    host: str | None,
    port: int | None,
    max_body_bytes: int | None,
    log_level: str | None,
    access_log: bool,
    workers: int | None,
    redis_url: str | None,
    auth: bool | None,
    master_key: str | None,
    config_path: str | None,
    **shortcuts: Any,
) -> None:
    """Run the gateway (default 127.0.0.1:11435, embedded model; auth on when keys exist)."""
    from llmbridge.gateway.server.asgi import configure_logging, tune_interpreter

    config = load_from_options(
        config_path,
        host=host,
        port=port,
        max_body_bytes=max_body_bytes,
        log_level=log_level,
        workers=workers,
        redis_url=redis_url,
        master_key=master_key,
        auth=auth,
        **shortcuts,
    )
    server = config.server
    configure_logging(server.log_level)
    auth_line, auth_on = _auth_line(config)
    if not is_loopback_host(server.host) and not auth_on:
        log.warning(
            "binding %s without keys: anyone who can reach this address can use the backends",
            server.host,
        )
    click.echo(_banner(config, server.host, server.port, auth_line), err=True)
    _raise_open_file_limit()  # before any worker starts: they inherit it
    if server.workers > 1:
        _serve_workers(config, access_log, auth_on)
        return
    import uvicorn

    from llmbridge.gateway.app import create_app, http_protocol

    app = create_app(
        config, on_ready=lambda models: click.echo(_model_lines(config, models), err=True)
    )
    tune_interpreter()  # the collector's thresholds, the GIL switch interval
    gc.freeze()  # what exists at startup stays out of future collections
    uvicorn.run(
        app,
        host=server.host,
        port=server.port,
        log_level=server.log_level,
        access_log=access_log,
        log_config=access_log_config(),
        loop="uvloop" if sys.platform != "win32" else "asyncio",
        # httptools with header size, count and read-time limits (gateway/server/read_limits.py)
        http=http_protocol(app),
        timeout_graceful_shutdown=5,
        # X-Forwarded-For/-Proto from server.trusted_proxies only (none by default), and
        # WebSocket frames as large as a request body (ServerConfig.uvicorn_options).
        **server.uvicorn_options(),
    )


def _serve_workers(config: GatewayConfig, access_log: bool, auth_on: bool) -> None:
    """``server.workers`` processes on one port, under uvicorn's supervisor: it binds
    the socket, starts each worker (``gateway/server/asgi.py`` builds the app in it), restarts
    one that dies, and on SIGTERM or Ctrl-C stops them all, each finishing its requests
    within the grace period. The run directory goes when the last has stopped."""
    import uvicorn

    from llmbridge.gateway.server.asgi import APP_FACTORY, PROTOCOL, RunDirectory

    server = config.server
    if auth_on and config.state.redis_url is None:
        # LiteLLM's defect: limits kept in each process's memory, multiplied by N.
        log.warning(
            "%d workers without --redis-url: each checks per-key limits in its own memory, "
            "so a key gets up to %d times its limits; set --redis-url to share them",
            server.workers,
            server.workers,
        )
    with RunDirectory(config):
        uvicorn.run(
            APP_FACTORY,
            factory=True,
            workers=server.workers,
            host=server.host,
            port=server.port,
            log_level=server.log_level,
            access_log=access_log,
            log_config=access_log_config(),
            loop="uvloop" if sys.platform != "win32" else "asyncio",
            http=PROTOCOL,  # the header limits, as below, in every worker
            timeout_graceful_shutdown=5,
            timeout_worker_healthcheck=server.worker_healthcheck_s,
            **server.uvicorn_options(),
        )


def _raise_open_file_limit(wanted: int = 65_536) -> None:
    """Every stream holds two sockets (client and backend); a 1024 soft limit, common
    by default, would refuse connections at about 500 concurrent streams. Raise the
    soft limit towards the hard one, as far as the system allows."""
    try:
        import resource
    except ImportError:  # not on Windows
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d: %s", soft, exc)

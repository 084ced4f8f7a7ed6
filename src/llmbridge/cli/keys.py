"""``llmbridge keys``: API keys kept in the database (accounts/keys.py).

``create NAME`` prints the new key alone on stdout, once (so ``KEY=$(llmbridge keys
create team-a)`` works), and what it allows on stderr; ``list`` shows every key's name,
prefix, limits, spend and dates, never a key; ``revoke NAME``. They open the database
the gateway uses (``--db`` / ``LLMBRIDGE_DB`` / ``database.url`` in ``--config``,
resolved as the gateway resolves it: ``GatewayConfig.database_url``),
migrated to the newest schema first, exactly as ``llmbridge agent`` does. A gateway on
that database requires keys once it holds one (a gateway started with none turns auth
on within 5 seconds of the first: accounts/service.py, unless started with
``--no-auth``); it accepts a new key and refuses a revoked one within 5 seconds (its
per-process cache and directory: accounts/keys.py). Values are checked before they
reach the database, the same on SQLite and PostgreSQL (accounts/keys.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from llmbridge.cli.options import db_option, load_from_options

if TYPE_CHECKING:
    from llmbridge.accounts.keys import KeyRecord, KeyStore

__all__ = ["keys"]

T = TypeVar("T")

F = TypeVar("F", bound=Callable[..., Any])


def _db_options(func: F) -> F:
    func = db_option(func)
    option = click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False),
        envvar="LLMBRIDGE_CONFIG",
        help="YAML configuration file [env LLMBRIDGE_CONFIG].",
    )
    return option(func)


@click.group()
def keys() -> None:
    """API keys in the database: create, list, revoke (limits per key)."""


def _run(config_path: str | None, db: str | None, work: Callable[[KeyStore], Awaitable[T]]) -> T:
    """Open the key store of the configured database, run ``work`` on it, close it;
    the store's failures (a name in use, the database down) become CLI errors."""
    from llmbridge.accounts.keys import KeyStore
    from llmbridge.core.errors import LLMBridgeError

    config = load_from_options(config_path, db=db)

    async def main() -> T:
        store = await KeyStore.open(config.database_url())
        try:
            return await work(store)
        finally:
            await store.close()

    try:
        return asyncio.run(main())
    except LLMBridgeError as exc:
        raise click.ClickException(exc.message) from exc
    except ValueError as exc:  # an unusable --db
        raise click.ClickException(str(exc)) from exc


def _limits(record: KeyRecord) -> str:
    parts = [
        f"{label} {value}"
        for label, value in (
            ("rpm", record.rpm),
            ("tpm", record.tpm),
            ("parallel", record.max_parallel),
        )
        if value is not None
    ]
    if record.budget_usd is not None:
        parts.append(f"budget ${record.budget_usd:g}")
    if record.models is not None:
        parts.append("models " + ",".join(record.models))
    if record.mcp_tools is not None:
        parts.append("mcp_tools " + ",".join(record.mcp_tools))
    return "; ".join(parts) or "none"


_LIMIT = click.IntRange(min=1, max=2**31 - 1)
"""``accounts.keys.MAX_LIMIT`` (not imported: ``llmbridge --help`` stays light)."""


@keys.command("create")
@click.argument("name")
@click.option("--rpm", type=_LIMIT, help="Requests per minute.")
@click.option("--tpm", type=_LIMIT, help="Tokens (prompt + reply) per minute.")
@click.option("--max-parallel", type=_LIMIT, help="Requests in flight at once.")
@click.option("--budget-usd", type=click.FloatRange(min=0), help="Spending limit in US dollars.")
@click.option(
    "--models",
    multiple=True,
    metavar="GLOB",
    help="A model name or glob the key may use (repeatable; default: every model; an "
    "empty one is refused).",
)
@click.option(
    "--mcp-tools",
    multiple=True,
    metavar="GLOBS",
    help="MCP tools and prompts the key may list and use, named <server>__<name> (and the "
    "servers whose resources it may read): comma-separated globs (repeatable; default: "
    "everything; an empty one is refused).",
)
@_db_options
def create(
    name: str,
    rpm: int | None,
    tpm: int | None,
    max_parallel: int | None,
    budget_usd: float | None,
    models: tuple[str, ...],
    mcp_tools: tuple[str, ...],
    config_path: str | None,
    db: str | None,
) -> None:
    """Create a key named NAME; prints the key alone on stdout (shown only this once)."""
    # Comma-separated: an MCP tool name holds no comma ([A-Za-z0-9_.-], the
    # specification's character set), so "a__*,b__read" is two globs.
    tools = [glob for value in mcp_tools for glob in value.split(",")] if mcp_tools else None

    async def work(store: KeyStore) -> tuple[KeyRecord, str]:
        return await store.create(
            name,
            rpm=rpm,
            tpm=tpm,
            max_parallel=max_parallel,
            budget_usd=budget_usd,
            models=list(models) if models else None,
            mcp_tools=tools,
        )

    record, key = _run(config_path, db, work)
    click.echo(key)
    click.echo(
        f"created key {record.name!r} ({record.id}); limits: {_limits(record)}. "
        "Keep it now: only its hash is stored.",
        err=True,
    )


@keys.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@_db_options
def list_keys(as_json: bool, config_path: str | None, db: str | None) -> None:
    """List the keys (never the keys themselves: their first characters)."""

    async def work(store: KeyStore) -> list[KeyRecord]:
        return await store.list()

    found = _run(config_path, db, work)
    if as_json:
        import orjson

        from llmbridge.accounts.routes import key_view

        click.echo(orjson.dumps([key_view(r) for r in found], option=orjson.OPT_INDENT_2))
        return
    click.echo(f"{'NAME':<20} {'PREFIX':<14} {'LIMITS':<36} {'SPENT':>10} {'CREATED':<20} REVOKED")
    for r in found:
        created = r.created_at.strftime("%Y-%m-%d %H:%M:%S")
        revoked = r.revoked_at.strftime("%Y-%m-%d %H:%M:%S") if r.revoked_at else "-"
        spent = f"${r.spent_usd:.4f}"
        click.echo(
            f"{r.name:<20} {r.prefix:<14} {_limits(r):<36} {spent:>10} {created:<20} {revoked}"
        )


@keys.command("revoke")
@click.argument("name")
@_db_options
def revoke(name: str, config_path: str | None, db: str | None) -> None:
    """Revoke the key named NAME (gateways refuse it within 5 seconds)."""

    async def work(store: KeyStore) -> KeyRecord:
        return await store.revoke(name)

    record = _run(config_path, db, work)
    click.echo(f"revoked key {record.name!r} ({record.prefix}...)")

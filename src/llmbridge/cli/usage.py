"""``llmbridge usage``: the usage ledger summed by key, model, day or client session
(accounts/usage.py); ``--session ID`` sums one session (a Claude Code or Codex run).

It reads the database the gateway records into (``--db`` / ``LLMBRIDGE_DB`` /
``database.url`` in ``--config``: ``GatewayConfig.database_url``), migrated to the
newest schema first as ``llmbridge keys`` does, and prints a table, or with ``--json`` the rows
``GET /admin/usage`` answers. A gateway writes its records within a second
(accounts/ledger.py), and at shutdown what is left. Days past the ledger's retention
(``ledger.retention_days``) are read from their daily rollups (accounts/rollups.py),
so old totals stay as they were after the rows are gone.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

import click

from llmbridge.cli.options import db_option, load_from_options

if TYPE_CHECKING:
    from datetime import datetime

    from llmbridge.accounts.usage import UsageGroup

__all__ = ["usage"]

_COLUMNS = ("requests", "input", "output", "reasoning", "cached", "cost_usd", "errors")
_NONE = {"key": "(no key)", "session": "(no session)", "model": "-", "day": "-"}
"""The line of the requests a group has no value for."""


@click.command()
@click.option(
    "--group-by",
    type=click.Choice(["key", "model", "day", "session"]),
    default="key",
    show_default=True,
    help="What each line sums: a key (its name), a public model name, a UTC day, or a "
    "client session (Claude Code's, Codex's, x-llmbridge-session-id).",
)
@click.option(
    "--session",
    metavar="ID",
    help="Only the requests of this client session (its rows within the ledger's retention).",
)
@click.option("--since", metavar="ISO", help="From this date or time on (2026-11-23, UTC).")
@click.option("--until", metavar="ISO", help="Before this date or time (exclusive).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON rows instead of a table.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    envvar="LLMBRIDGE_CONFIG",
    help="YAML configuration file [env LLMBRIDGE_CONFIG].",
)
@db_option
def usage(
    group_by: str,
    session: str | None,
    since: str | None,
    until: str | None,
    as_json: bool,
    config_path: str | None,
    db: str | None,
) -> None:
    """Requests, tokens, cost and errors from the usage ledger (days past its
    retention from their daily rollups, whole days; those keep no session)."""
    from llmbridge.accounts.usage import parse_when
    from llmbridge.core.errors import LLMBridgeError

    config = load_from_options(config_path, db=db)
    try:
        start = parse_when(since, "since")
        end = parse_when(until, "until")
    except LLMBridgeError as exc:
        raise click.BadParameter(exc.message, param_hint=f"--{exc.param}") from None
    try:
        groups = asyncio.run(_report(config.database_url(), group_by, start, end, session))
    except LLMBridgeError as exc:
        raise click.ClickException(exc.message) from None
    except ValueError as exc:  # an unusable --db
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps([g.to_json() for g in groups], indent=2))
        return
    click.echo(_table(groups, group_by))


async def _report(
    database: str,
    group_by: str,
    since: datetime | None,
    until: datetime | None,
    session: str | None,
) -> list[UsageGroup]:
    from llmbridge.accounts.usage import usage_report
    from llmbridge.store.database import Database
    from llmbridge.store.errors import mapped_errors

    # Its own Database, opened (and migrated) once as the gateway's is.
    opened = await Database.open(database)
    try:
        # The database's failures as core errors (the database down: a 503's message).
        with mapped_errors():
            return await usage_report(opened.engine, group_by, since, until, session)
    finally:
        await opened.close()


def _table(groups: list[UsageGroup], group_by: str) -> str:
    """Aligned columns, a total line; ``-`` for a cost no price covered."""
    header = (group_by, *_COLUMNS)
    lines = [header]
    for g in groups:
        cost = f"{g.cost_usd:.6f}" if g.priced else "-"
        lines.append(
            (
                g.group if g.group is not None else _NONE[group_by],
                str(g.requests),
                str(g.input_tokens),
                str(g.output_tokens),
                str(g.reasoning_tokens),
                str(g.cached_tokens),
                cost,
                str(g.errors),
            )
        )
    if not groups:
        return "no usage recorded"
    priced = any(g.priced for g in groups)
    lines.append(
        (
            "total",
            str(sum(g.requests for g in groups)),
            str(sum(g.input_tokens for g in groups)),
            str(sum(g.output_tokens for g in groups)),
            str(sum(g.reasoning_tokens for g in groups)),
            str(sum(g.cached_tokens for g in groups)),
            f"{sum(g.cost_usd for g in groups):.6f}" if priced else "-",
            str(sum(g.errors for g in groups)),
        )
    )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in lines
    )

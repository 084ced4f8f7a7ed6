"""Whether a gateway keeps a usage ledger, and opening it (accounts/ledger.py).

Each request's row is written by its ``Exchange`` (gateway/exchange/record.py).
"""

from __future__ import annotations

import logging

from llmbridge.accounts.kept_bodies import BodyKeeper
from llmbridge.accounts.ledger import UsageLedger
from llmbridge.gateway.config import GatewayConfig
from llmbridge.gateway.metrics import GatewayMetrics
from llmbridge.state.base import SharedState
from llmbridge.store.database import OpenOnce

__all__ = ["ledger_enabled", "open_ledger"]

log = logging.getLogger("llmbridge.gateway")


def ledger_enabled(config: GatewayConfig, *, auth_on: bool = False) -> bool:
    """``server.ledger``, or when unset whether auth is on: ``auth_on`` (what the
    gateway's ``Accounts`` found, database keys included), or from
    the configuration alone (``api_keys``, ``master_key``, ``server.auth: true``). A
    team's gateway records usage, the zero-configuration one writes nothing per
    request."""
    server = config.server
    if server.ledger is not None:
        return server.ledger
    if server.auth is False:
        return False
    return bool(auth_on or server.auth or server.api_keys or server.master_key)


async def open_ledger(
    config: GatewayConfig,
    spend: SharedState | None,
    metrics: GatewayMetrics | None = None,
    *,
    database: OpenOnce,
    auth_on: bool = False,
) -> UsageLedger | None:
    """The ledger on the gateway's one database (``agent.database``, ``--db``; opened
    and migrated by whichever part of the gateway needed it first), started, its rows
    kept ``ledger.retention_days`` before they are rolled up; ``None`` when it is off.
    A database that cannot be opened is logged and leaves the gateway serving without
    a ledger (as the agent service does). ``metrics`` count the records dropped while
    the database is unreachable, the rows it refused (set aside), the rows waiting
    for the cleanup and the kept bodies dropped."""
    if not ledger_enabled(config, auth_on=auth_on):
        return None
    try:
        return await UsageLedger.open(
            await database.get(),
            spend=spend,
            retention_days=config.ledger.retention_days,
            on_dropped=None if metrics is None else metrics.usage_dropped.inc,
            on_set_aside=None if metrics is None else metrics.usage_set_aside.inc,
            on_cleanup_pending=None if metrics is None else metrics.usage_pending_cleanup.set,
            bodies=_body_keeper(config, metrics),
            body_retention_days=config.ledger.body_retention_days,
        )
    except Exception as exc:  # noqa: BLE001 - serving goes on; the log says why
        log.error(
            "the usage ledger is off: its database cannot be opened: %s: %s",
            type(exc).__name__,
            exc,
        )
        return None


def _body_keeper(config: GatewayConfig, metrics: GatewayMetrics | None) -> BodyKeeper | None:
    """Where kept bodies wait (``ledger.keep_bodies``), with the gateway's own keys to
    redact and the bound on what waits; ``None`` when bodies are not kept (the
    default). ``metrics`` count the requests whose bodies were dropped."""
    ledger = config.ledger
    if not ledger.keep_bodies:
        return None
    server = config.server
    secrets = [*server.api_keys, *([server.master_key] if server.master_key else [])]
    return BodyKeeper(
        max_bytes=ledger.max_body_bytes,
        secrets=secrets,
        max_pending_bytes=ledger.max_pending_body_bytes,
        on_dropped=None if metrics is None else metrics.kept_bodies_dropped.inc,
    )

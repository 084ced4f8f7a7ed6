"""The usage ledger's view of one request: who asked, what served it, what it cost.

``Metered`` follows a request through ``pipeline.serve_chat`` (and the embedding
routes) and hands the ledger one ``UsageRecord`` when it ends, however it ends: a
reply (streamed or not), an error before the first byte (its status), an error in
the stream (the error's status, its tokens if any), or a client that left (499).
``finish`` runs once; nothing here awaits, so the request path never waits for the
database (accounts/ledger.py writes in batches).

Who asked: a database key from the scope's ``ACCOUNT`` (its id and name), a static
key as ``static:<identity prefix>`` (no id: it has no row), no auth as nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from starlette.types import Scope

from llmbridge.accounts.ledger import UsageLedger, UsageRecord
from llmbridge.accounts.prices import PriceTable
from llmbridge.accounts.service import ACCOUNT
from llmbridge.backends.base import Backend
from llmbridge.core.response import Usage
from llmbridge.gateway.config import GatewayConfig, default_agent_database
from llmbridge.state.base import SharedState
from llmbridge.web.auth import KEY_IDENTITY

__all__ = ["Metered", "caller_key", "ledger_enabled", "metered", "open_ledger"]

log = logging.getLogger("llmbridge.gateway")


def caller_key(scope: Scope) -> tuple[str | None, str | None]:
    """The key a request came with, as the ledger names it: ``(id, name)``."""
    account: Any = scope.get(ACCOUNT)
    if account is not None:
        return getattr(account, "id", None), getattr(account, "name", None)
    identity = scope.get(KEY_IDENTITY)
    if isinstance(identity, str):
        return None, f"static:{identity[:12]}"
    return None, None


class Metered:
    """One request on its way to the ledger (module docstring)."""

    __slots__ = (
        "backend",
        "done",
        "endpoint",
        "ledger",
        "model",
        "prices",
        "request_id",
        "scope",
        "started",
        "streamed",
        "ttft_s",
        "usage",
    )

    def __init__(
        self,
        ledger: UsageLedger,
        prices: PriceTable,
        scope: Scope,
        *,
        request_id: str,
        model: str,
        endpoint: str,
        streamed: bool,
        started: float | None = None,
    ) -> None:
        self.ledger, self.prices, self.scope = ledger, prices, scope
        self.request_id, self.model, self.endpoint = request_id, model, endpoint
        self.streamed = streamed
        self.started = time.perf_counter() if started is None else started
        self.backend: Backend | None = None
        """The backend that served (or was to serve) it: set again after a fallback."""
        self.ttft_s: float | None = None
        self.usage: Usage | None = None
        self.done = False

    def first_event(self) -> None:
        self.ttft_s = time.perf_counter() - self.started

    def add_usage(self, usage: Usage) -> None:
        """Counts from the stream; later values win, as ``core.accumulate`` merges them,
        so the ledger holds what the reply's ``usage`` said."""
        self.usage = usage if self.usage is None else self.usage.merged(usage)

    def finish(self, status: int) -> None:
        """Hand the record to the ledger (once)."""
        if self.done:
            return
        self.done = True
        latency_ms = (time.perf_counter() - self.started) * 1000
        key_id, key_name = caller_key(self.scope)
        backend = self.backend
        usage = self.usage
        cost = None
        if usage is not None:
            kind = backend.kind if backend is not None else None
            cost = self.prices.cost(self.model, usage, backend_kind=kind)
        self.ledger.record(
            UsageRecord(
                request_id=self.request_id,
                model=self.model[:200],
                status=status,
                key_id=key_id,
                key_name=key_name,
                backend=backend.kind if backend is not None else None,
                deployment=backend.name if backend is not None else None,
                endpoint=self.endpoint,
                input_tokens=usage.input_tokens if usage else None,
                output_tokens=usage.output_tokens if usage else None,
                reasoning_tokens=usage.reasoning_tokens if usage else None,
                cached_tokens=usage.cache_read_input_tokens if usage else None,
                cost_usd=cost,
                latency_ms=latency_ms,
                ttft_ms=None if self.ttft_s is None else self.ttft_s * 1000,
                streamed=self.streamed,
                replica=self.ledger.replica,
            )
        )


def metered(
    ledger: UsageLedger | None,
    prices: PriceTable,
    scope: Scope,
    *,
    request_id: str,
    model: str,
    endpoint: str,
    streamed: bool,
) -> Metered | None:
    """A ``Metered`` when the ledger is on, else ``None`` (nothing to do per request)."""
    if ledger is None:
        return None
    return Metered(
        ledger,
        prices,
        scope,
        request_id=request_id,
        model=model,
        endpoint=endpoint,
        streamed=streamed,
    )


def ledger_enabled(config: GatewayConfig) -> bool:
    """``server.ledger``, or when unset whether auth is on (``api_keys`` or
    ``master_key``): a team's gateway records usage, the zero-configuration one
    writes nothing per request."""
    server = config.server
    if server.ledger is not None:
        return server.ledger
    return bool(server.api_keys or server.master_key)


async def open_ledger(
    config: GatewayConfig,
    spend: SharedState | None,
    on_dropped: Callable[[int], None] | None = None,
) -> UsageLedger | None:
    """The ledger on the agent's database (``agent.database``, ``--db``), migrated
    and started; ``None`` when it is off. A database that cannot be opened is logged
    and leaves the gateway serving without a ledger (as the agent service does).
    ``on_dropped`` counts records dropped while the database is unreachable."""
    if not ledger_enabled(config):
        return None
    database = config.agent.database or default_agent_database()
    try:
        return await UsageLedger.open(database, spend=spend, on_dropped=on_dropped)
    except Exception as exc:  # noqa: BLE001 - serving goes on; the log says why
        log.error(
            "the usage ledger is off: its database cannot be opened: %s: %s",
            type(exc).__name__,
            exc,
        )
        return None
